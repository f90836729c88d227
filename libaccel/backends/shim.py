"""The shim backend: the vnpu kernel driver's uapi semantics, in-process.

Like Mesa's drm-shim, this plays the kernel's part on top of the real device
model (``device_model.npu.Npu``), so libaccel, the compiler and the
conformance suite run without a VM. It does what vnpu.ko does:

* one :class:`ShimDevice` per process (the "PCI device"): system memory
  (``AnonymousMemory``), BAR2 (a bytearray), the Npu; firmware boot through
  CMD_BOOT when the device is first opened;
* one :class:`ShimBackend` per open "file": GEM handle table, syncobj table,
  a private device address space with its own page tables in system memory,
  BO VAs from DRM_VNPU_VA_START;
* full argument checking with the errnos the header documents, and the
  command-stream check (:mod:`libaccel.backends.stream_check`);
* submission through the SQ ring in BAR2 and a doorbell kick, completion
  through the CQ ring and the Npu's interrupt, a job timeout that resets the
  hung job's core (CMD_RESET) and fails the job with -ETIMEDOUT;
* the scheduling of vnpu.ko's per-core drm_sched schedulers: a job waits for
  its in-syncobjs, for earlier jobs that write a BO it uses (or use a BO it
  writes) and for its file's earlier jobs; a file stays on one core while it
  has a job on the device, and an idle file gets the least loaded core. The
  device's core count is ``VNPU_SHIM_CORES`` (default: the device model's).

Threads mirror the real system: a doorbell thread calls ``Npu.kick`` (as the
ivshmem server's event loop does), and an interrupt thread handles the
Npu's ``raise_irq`` (as the kernel's IRQ handler does) and runs the job
watchdog. Where the shim and the kernel differ, the kernel is right.
"""

from __future__ import annotations

import atexit
import bisect
import errno
import itertools
import os
import queue
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from device_model.memory import AnonymousMemory
from device_model.page_tables import AddressSpace, PageAllocator
from libaccel.backends import Backend
from libaccel.backends.stream_check import BoRange, StreamRejected, check_stream
from libaccel.errors import DeviceClosed, from_errno
from uapi import bindings as b
from uapi import hw_layout as hw
from uapi import isa
from uapi.bindings import ffi, ioctl_name

FIRMWARE_PATH = Path(__file__).resolve().parents[2] / "firmware" / "vnpu" / "vnpu_fw.bin"
ENV_FIRMWARE = "VNPU_SHIM_FIRMWARE"
ENV_JOB_TIMEOUT_MS = "VNPU_SHIM_JOB_TIMEOUT_MS"
ENV_CORES = "VNPU_SHIM_CORES"
# Debug knob, the shim's twin of vnpu.ko's module parameter
# /sys/module/vnpu/parameters/validate_streams: with it off, streams are only
# decoded, not checked against the listed BOs, so the device MMU is what stops
# a stray access (the conformance suite uses it to test MMU-fault reporting).
VALIDATE_STREAMS_PARAM = Path("/sys/module/vnpu/parameters/validate_streams")

DRIVER_NAME = "vnpu"
DRIVER_VERSION = (1, 0, 0)
DEVICE_PEER = 1

# "Physical" memory layout of the shim's system memory (lazily backed).
RAM_SIZE = (1 << 30) + (64 << 20)
FW_PA = 0x10_0000  # firmware image load address (FW_MAX_SIZE bytes)
PT_BASE, PT_LIMIT = 0x20_0000, 0x400_0000  # page-table pages
DATA_BASE = 0x400_0000  # BOs and private command-stream copies, physically contiguous

# Limits the shim reports through GET_PARAM (the kernel reports its own).
MAX_BO_SIZE = 256 << 20
MAX_JOB_SIZE = 1 << 20
MAX_JOB_BOS = 64
# Limits the uapi header fixes for every driver.
MAX_IN_SYNCOBJS = b.DRM_VNPU_MAX_IN_SYNCOBJS
MAX_JOB_STRUCT_SIZE = b.DRM_VNPU_MAX_JOB_STRUCT_SIZE
DEFAULT_JOB_TIMEOUT_MS = 2000
CONTROL_TIMEOUT_S = 10.0
MMAP_OFFSET_START = 0x10_0000 << hw.PAGE_SHIFT  # DRM_FILE_PAGE_OFFSET_START, in bytes
GUARD = hw.PAGE_SIZE  # the unmapped VA page after every BO and stream copy

JOB_V1_SIZE = ffi.sizeof("struct drm_vnpu_job")
SYNCOBJ_WAIT_FLAGS = (
    b.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL
    | b.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT
    | b.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_DEADLINE
)


class Errno(Exception):
    """A negative-errno return from a shim ioctl handler."""

    def __init__(self, err: int, detail: str = "") -> None:
        self.errno = err
        self.detail = detail
        super().__init__(f"{errno.errorcode.get(err, err)}: {detail}")


def _now() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def _page_round(n: int) -> int:
    return (n + hw.PAGE_SIZE - 1) & ~(hw.PAGE_SIZE - 1)


class ExtentAllocator:
    """First-fit allocator of page-aligned extents in [base, limit), coalescing on free."""

    def __init__(self, base: int, limit: int) -> None:
        self._free: list[tuple[int, int]] = [(base, limit - base)]  # sorted (start, size)
        self._lock = threading.Lock()

    def alloc(self, size: int) -> int | None:
        with self._lock:
            for i, (start, avail) in enumerate(self._free):
                if avail >= size:
                    if avail == size:
                        del self._free[i]
                    else:
                        self._free[i] = (start + size, avail - size)
                    return start
        return None

    def free(self, start: int, size: int) -> None:
        with self._lock:
            i = bisect.bisect_left(self._free, (start, 0))
            self._free.insert(i, (start, size))
            # Merge with the neighbours on both sides.
            if i + 1 < len(self._free) and start + size == self._free[i + 1][0]:
                self._free[i] = (start, size + self._free[i + 1][1])
                del self._free[i + 1]
            if i > 0 and self._free[i - 1][0] + self._free[i - 1][1] == start:
                self._free[i - 1] = (self._free[i - 1][0], self._free[i - 1][1] + self._free[i][1])
                del self._free[i]


class Fence:
    """A dma_fence: signals once, with an error (0 or a negative errno)."""

    def __init__(self, signaled: bool = False, error: int = 0) -> None:
        self.signaled = signaled
        self.error = error


@dataclass
class ShimBo:
    """A GEM object: contiguous system memory, a VA in its file's space, references."""

    file: ShimBackend
    size: int
    flags: int
    pa: int
    va: int
    mmap_offset: int
    refs: int = 1  # the handle's reference; each queued job adds one
    pending: set[int] = field(default_factory=set)  # seqnos of unfinished jobs using it
    last_status: int = 0
    last_fault_va: int = 0


@dataclass(eq=False)
class ShimJob:
    seqno: int
    file: ShimBackend
    bos: list[tuple[ShimBo, int]]
    cmd_pa: int
    cmd_va: int
    cmd_alloc: int
    cmd_size: int
    out_fence: Fence
    deps: list[Fence] = field(default_factory=list)  # in-syncobjs and earlier users of its BOs
    core: int = -1  # the core it was pushed to, -1 while in the backlog
    pushed_ns: int = 0


class ShimDevice:
    """The emulated NPU and the driver state shared by all open files."""

    def __init__(
        self, firmware: Path | None = None, job_timeout_ms: int | None = None, num_cores: int | None = None
    ) -> None:
        from device_model.npu import DEFAULT_CORES, Npu  # the device model

        self.memory = AnonymousMemory(RAM_SIZE)
        self.bar2 = bytearray(hw.BAR2_SIZE)
        self.pt_pages = PageAllocator(self.memory, PT_BASE, PT_LIMIT)
        self.data = ExtentAllocator(DATA_BASE, RAM_SIZE)
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.job_timeout_ms = job_timeout_ms or int(
            os.environ.get(ENV_JOB_TIMEOUT_MS, DEFAULT_JOB_TIMEOUT_MS)
        )
        self._seqnos = itertools.count(1)
        self._mmap_next = MMAP_OFFSET_START
        self._file_ids = itertools.count(1)
        self.mmap_table: dict[int, ShimBo] = {}
        if num_cores is None:
            num_cores = int(os.environ.get(ENV_CORES, DEFAULT_CORES))
        self.backlog: deque[ShimJob] = deque()  # not on the device yet, in submission order
        self.jobs: dict[int, ShimJob] = {}
        self.sq_tail = 0
        self.cq_head = 0
        self.resets = 0
        self._doorbells: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._irqs: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._closed = False
        self.broken = ""

        self.npu = Npu(self.bar2, self.memory, self._raise_irq, DEVICE_PEER, num_cores=num_cores)
        self.num_cores = self.r32(hw.REG_NUM_CORES)
        # Per core, as vnpu.ko's schedulers: its jobs on the ring, in ring order; when it last
        # completed one (the watchdog counts from there); the ring entries it may hold.
        self.inflight: list[deque[ShimJob]] = [deque() for _ in range(self.num_cores)]
        self.last_completion_ns = [0] * self.num_cores
        self.credits = min(hw.SQ_ENTRIES, hw.CQ_ENTRIES) // self.num_cores
        self._threads = [
            threading.Thread(target=self._doorbell_loop, name="vnpu-shim-doorbell", daemon=True),
            threading.Thread(target=self._irq_loop, name="vnpu-shim-irq", daemon=True),
        ]
        for t in self._threads:
            t.start()
        try:
            self._boot(firmware or Path(os.environ.get(ENV_FIRMWARE, FIRMWARE_PATH)))
        except BaseException:
            self.close()
            raise

    # --- BAR2 access ----------------------------------------------------------
    def r32(self, off: int) -> int:
        return struct.unpack_from("<I", self.bar2, off)[0]

    def r64(self, off: int) -> int:
        return struct.unpack_from("<Q", self.bar2, off)[0]

    def w32(self, off: int, v: int) -> None:
        struct.pack_into("<I", self.bar2, off, v & 0xFFFFFFFF)

    def w64(self, off: int, v: int) -> None:
        struct.pack_into("<Q", self.bar2, off, v)

    # --- the two "wires" --------------------------------------------------------
    def _raise_irq(self, vector: int) -> None:
        """The Npu's interrupt line (any thread): hand it to the interrupt thread."""
        self._irqs.put(vector)

    def ring(self, vector: int) -> None:
        """The doorbell: one write, served asynchronously as QEMU's eventfd is."""
        self._doorbells.put(vector)

    def _doorbell_loop(self) -> None:
        while (vector := self._doorbells.get()) is not None:
            self.npu.kick(vector)

    def _irq_loop(self) -> None:
        while True:
            timeout = self._watchdog_timeout()
            try:
                vector = self._irqs.get(timeout=timeout)
            except queue.Empty:
                vector = -1
            if vector is None:
                return
            with self.lock:
                try:
                    if vector == hw.IRQ_COMPLETION:
                        self._drain_cq()
                        self._push_backlog()
                    self._check_watchdog()
                except Errno as e:
                    self._broken(e)
                self.cond.notify_all()

    def _broken(self, e: Errno) -> None:
        """A device that does not answer a reset: fail what is queued, keep serving."""
        self.broken = str(e)
        for job in [j for q in self.inflight for j in q] + list(self.backlog):
            self._complete(job, -errno.EIO)

    # --- control commands --------------------------------------------------------
    def control(self, cmd: int, arg0: int = 0, arg1: int = 0) -> int:
        """Run a control command (BOOT, RESET); its status. Polls CMD_ACK: the IRQ thread may call this."""
        seq = (self.r32(hw.REG_CMD_SEQ) + 1) & 0xFFFFFFFF
        self.w64(hw.REG_CMD_ARG0, arg0)
        self.w64(hw.REG_CMD_ARG1, arg1)
        self.w32(hw.REG_CMD, cmd)
        self.w32(hw.REG_CMD_SEQ, seq)
        self.ring(hw.VEC_CONTROL)
        deadline = time.monotonic() + CONTROL_TIMEOUT_S
        while self.r32(hw.REG_CMD_ACK) != seq:
            if time.monotonic() > deadline:
                raise Errno(errno.EIO, f"the device did not acknowledge control command {cmd}")
            time.sleep(0.0005)
        return struct.unpack_from("<i", self.bar2, hw.REG_CMD_STATUS)[0]

    def _boot(self, firmware: Path) -> None:
        if self.r32(hw.REG_MAGIC) != hw.MAGIC:
            raise Errno(errno.ENODEV, f"the device model is not up (BAR2 magic {self.r32(hw.REG_MAGIC):#x})")
        try:
            image = firmware.read_bytes()
        except OSError as e:
            raise Errno(
                errno.ENOENT, f"firmware {firmware}: {e.strerror}; build it with `vnpu-fw build`"
            ) from e
        if not 0 < len(image) <= hw.FW_MAX_SIZE:
            raise Errno(errno.EINVAL, f"firmware {firmware} is {len(image)} bytes, not 1..{hw.FW_MAX_SIZE}")
        self.memory.view(FW_PA, len(image))[:] = image
        status = self.control(hw.CMD_BOOT, FW_PA, len(image))
        if status or not self.r32(hw.REG_STATUS) & hw.STATUS_READY:
            reason = self.r32(hw.REG_FW_REJECT)
            raise Errno(
                -status if status < 0 else errno.EIO,
                f"the device rejected firmware {firmware}: {hw.FW_REJECT_NAMES.get(reason, 'unknown')} "
                f"(reason {reason}); check it with: vnpu-fw verify {firmware}",
            )

    # --- params ---------------------------------------------------------------
    def param(self, p: int) -> int:
        values = {
            b.DRM_VNPU_PARAM_DEVICE_ID: self.r32(hw.REG_DEVICE_ID),
            b.DRM_VNPU_PARAM_DEVICE_REVISION: self.r32(hw.REG_REVISION),
            b.DRM_VNPU_PARAM_ISA_VERSION: self.r32(hw.REG_ISA_VERSION),
            b.DRM_VNPU_PARAM_FW_VERSION: self.r32(hw.REG_FW_VERSION),
            b.DRM_VNPU_PARAM_VA_SIZE: 1 << self.r32(hw.REG_VA_BITS),
            b.DRM_VNPU_PARAM_MAX_JOB_SIZE: MAX_JOB_SIZE,
            b.DRM_VNPU_PARAM_MAX_JOB_BOS: MAX_JOB_BOS,
            b.DRM_VNPU_PARAM_MAX_BO_SIZE: MAX_BO_SIZE,
            b.DRM_VNPU_PARAM_CAPABILITIES: self.r32(hw.REG_CAPS),
            b.DRM_VNPU_PARAM_JOB_TIMEOUT_MS: self.job_timeout_ms,
            b.DRM_VNPU_PARAM_MAX_IN_SYNCOBJS: MAX_IN_SYNCOBJS,
            b.DRM_VNPU_PARAM_FW_BUILD_ID: self.r64(hw.REG_FW_BUILD_ID),
            b.DRM_VNPU_PARAM_NUM_CORES: self.num_cores,
        }
        if p not in values:
            raise Errno(errno.EINVAL, f"unknown parameter {p}")
        return values[p]

    def alloc_mmap_offset(self, bo: ShimBo) -> int:
        with self.lock:
            off = self._mmap_next
            self._mmap_next += bo.size
            self.mmap_table[off] = bo
            return off

    def new_file_id(self) -> int:
        return next(self._file_ids)

    # --- the job queue (call with self.lock held) ------------------------------
    def queue_job(self, job: ShimJob) -> None:
        self.jobs[job.seqno] = job
        self.backlog.append(job)
        self._push_backlog()

    def new_seqno(self) -> int:
        return next(self._seqnos)

    def _file_core(self, file: ShimBackend) -> int | None:
        """The core holding the file's jobs on the ring, None if it has none there."""
        for core, q in enumerate(self.inflight):
            if any(j.file is file for j in q):
                return core
        return None

    def _push_backlog(self) -> None:
        """Put every job that may run on the ring, in submission order per file (drm_sched's part).

        A job goes when its dependencies have signalled and no earlier job of its file is still
        waiting; to the core its file's jobs are on, else to the least loaded core (drm_sched
        moves an entity only when it has nothing unfinished); while that core has credits.
        """
        pushed = False
        waiting: set[int] = set()  # files with an earlier job still in the backlog
        for job in list(self.backlog):
            fid = id(job.file)
            if fid in waiting or not all(f.signaled for f in job.deps):
                waiting.add(fid)
                continue
            core = self._file_core(job.file)
            if core is None:
                core = min(range(self.num_cores), key=lambda c: len(self.inflight[c]))
            if len(self.inflight[core]) >= self.credits:
                waiting.add(fid)
                continue
            self.backlog.remove(job)
            self._write_sqe(job, core)
            pushed = True
        if pushed:
            self.ring(hw.VEC_QUEUE)
            self._irqs.put(-1)  # wake the interrupt thread to arm the watchdog for the new heads

    def _write_sqe(self, job: ShimJob, core: int) -> None:
        slot = hw.SQ_BASE + (self.sq_tail % hw.SQ_ENTRIES) * hw.SQ_ENTRY_SIZE
        self.bar2[slot : slot + hw.SQ_ENTRY_SIZE] = bytes(hw.SQ_ENTRY_SIZE)
        self.w64(slot + hw.SQE_SEQNO, job.seqno)
        self.w64(slot + hw.SQE_PT_ROOT, job.file.aspace.root)
        self.w64(slot + hw.SQE_CMD_VA, job.cmd_va)
        self.w32(slot + hw.SQE_CMD_SIZE, job.cmd_size)
        self.w32(slot + hw.SQE_FLAGS, 0)
        self.w32(slot + hw.SQE_CONTEXT, job.file.file_id)
        self.w32(slot + hw.SQE_CORE, core)
        job.core = core
        job.pushed_ns = _now()
        self.inflight[core].append(job)
        self.sq_tail = (self.sq_tail + 1) & 0xFFFFFFFF
        self.w32(hw.SQ_TAIL, self.sq_tail)  # the entry is written before the tail moves

    def _drain_cq(self) -> None:
        tail = self.r32(hw.CQ_TAIL)
        while self.cq_head != tail:
            e = hw.CQ_BASE + (self.cq_head % hw.CQ_ENTRIES) * hw.CQ_ENTRY_SIZE
            seqno, status, core, fault_va = struct.unpack_from("<QiIQ", self.bar2, e)
            self.cq_head = (self.cq_head + 1) & 0xFFFFFFFF
            job = self.jobs.get(seqno)
            if job is not None and job.core == core:
                self.last_completion_ns[core] = _now()
                # Only the statuses the device contract allows reach userspace (as in vnpu.ko).
                if status not in (0, -errno.EFAULT, -errno.EIO):
                    status = -errno.EIO
                self._complete(job, status, fault_va)
        self.w32(hw.CQ_HEAD, self.cq_head)

    def _complete(self, job: ShimJob, status: int, fault_va: int = 0) -> None:
        del self.jobs[job.seqno]
        if job.core >= 0:
            self.inflight[job.core].remove(job)
        else:
            self.backlog.remove(job)
        for bo, flags in job.bos:
            bo.pending.discard(job.seqno)
            if flags & b.DRM_VNPU_JOB_BO_WRITE:
                bo.last_status = status
                bo.last_fault_va = fault_va if status == -errno.EFAULT else 0
            bo.file.unref_bo(bo)
        job.file.free_cmd_copy(job)
        job.out_fence.error = status
        job.out_fence.signaled = True
        self.cond.notify_all()

    # --- timeout and reset --------------------------------------------------------
    def _deadline_ns(self, core: int) -> int | None:
        """When the job running on ``core`` times out; None if the core is idle."""
        q = self.inflight[core]
        if not q:
            return None
        return max(q[0].pushed_ns, self.last_completion_ns[core]) + self.job_timeout_ms * 1_000_000

    def _watchdog_timeout(self) -> float | None:
        with self.lock:
            deadlines = [d for c in range(self.num_cores) if (d := self._deadline_ns(c)) is not None]
            if not deadlines:
                return None
            return max((min(deadlines) - _now()) / 1e9, 0.0) + 0.001

    def _check_watchdog(self) -> None:
        for core in range(self.num_cores):
            deadline = self._deadline_ns(core)
            if deadline is not None and _now() >= deadline:
                self.reset(1 << core, self.inflight[core][0])

    def reset(self, cores: int, hung: ShimJob | None) -> None:
        """Reset the cores of the mask ``cores``, as vnpu.ko's recovery does.

        The hung job fails with -ETIMEDOUT and jobs of closed files with -ECANCELED. A core
        runs one job at a time in ring order, so every other job on a reset core had not
        started: it goes back to the backlog, in order, and runs once. The other cores' jobs
        are not touched.
        """
        self.control(hw.CMD_RESET, cores)
        self.resets += 1
        self._drain_cq()  # completions that raced with the reset still count
        requeue: list[ShimJob] = []
        for core in range(self.num_cores):
            if not cores >> core & 1:
                continue
            for job in list(self.inflight[core]):
                if job is hung:
                    self._complete(job, -errno.ETIMEDOUT)
                elif job.file.closed:
                    self._complete(job, -errno.ECANCELED)
                else:
                    requeue.append(job)
            self.inflight[core].clear()
            self.last_completion_ns[core] = _now()
        for job in requeue:
            job.core = -1
        requeue.sort(key=lambda j: j.seqno)  # submission order: a file's jobs stay in order
        self.backlog.extendleft(reversed(requeue))
        self._push_backlog()

    def cancel_file_jobs(self, file: ShimBackend) -> None:
        """On close (``file.closed`` already set): cancel the file's jobs, as vnpu.ko does.

        Jobs not yet on the ring end at once; a job of the file that a core is running is
        stopped by a reset of that core (the other files' jobs on it go back on the ring); one
        queued behind another file's job is stopped the same way when it reaches the head, so a
        started job of another file is never aborted. Returns when the device holds none of the
        file's jobs.
        """
        with self.lock:
            for job in [j for j in self.backlog if j.file is file]:
                self._complete(job, -errno.ECANCELED)
            while self._file_core(file) is not None:
                mask = sum(1 << c for c, q in enumerate(self.inflight) if q and q[0].file.closed)
                if mask:
                    try:
                        self.reset(mask, None)
                    except Errno as e:  # a device that does not answer: as the IRQ thread does
                        self._broken(e)
                    self.cond.notify_all()
                    continue
                self.cond.wait(0.05)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._doorbells.put(None)
        self._irqs.put(None)
        for t in self._threads:
            t.join(timeout=5)
        stop = getattr(self.npu, "close", None)
        if callable(stop):
            stop()


_device: ShimDevice | None = None
_device_lock = threading.Lock()


def shared_device() -> ShimDevice:
    """The process's one shim device, booted on first use."""
    global _device
    with _device_lock:
        if _device is None:
            _device = ShimDevice()
            atexit.register(_device.close)
        return _device


# The largest array a user pointer may name: what kmalloc serves (KMALLOC_MAX_SIZE on x86-64); the
# kernel fails a bigger one with ENOMEM before it reads any of it.
MAX_USER_COPY = 4 << 20
_self_mem_fd = -1


def _self_mem() -> int:
    global _self_mem_fd
    if _self_mem_fd < 0:
        _self_mem_fd = os.open("/proc/self/mem", os.O_RDWR | os.O_CLOEXEC)
    return _self_mem_fd


def _user_range(addr: int, size: int, what: str) -> None:
    # NULL and the zero page fault, as does anything past the user half of the address space.
    if addr < hw.PAGE_SIZE or addr + size > 1 << 47:
        raise Errno(errno.EFAULT, f"{what} pointer {addr:#x} is not a valid user address")
    if size > MAX_USER_COPY:
        raise Errno(errno.ENOMEM, f"{what}: {size} bytes is more than the kernel allocates at once")


def copy_from_user(addr: int, size: int, what: str) -> bytes:
    """``size`` bytes at user address ``addr``; EFAULT (not SIGSEGV) where nothing is mapped.

    The shim's "user memory" is this process's: reading it through /proc/self/mem makes a bad
    pointer a failed read, as copy_from_user makes it in the kernel.
    """
    if size == 0:
        return b""
    _user_range(addr, size, what)
    try:
        data = os.pread(_self_mem(), size, addr)
    except OSError:
        data = b""
    if len(data) != size:
        raise Errno(errno.EFAULT, f"{what}: {size} bytes at {addr:#x} are not all readable")
    return data


def copy_to_user(addr: int, data: bytes, what: str) -> None:
    """Write ``data`` at user address ``addr``; EFAULT where it is not writable memory."""
    if not data:
        return
    _user_range(addr, len(data), what)
    try:
        written = os.pwrite(_self_mem(), data, addr)
    except OSError:
        written = 0
    if written != len(data):
        raise Errno(errno.EFAULT, f"{what}: {len(data)} bytes at {addr:#x} are not all writable")


class ShimBackend(Backend):
    """One open "file" of the shim device."""

    kind = "shim"
    path = "shim"
    #: see VALIDATE_STREAMS_PARAM; class-wide, like a module parameter
    validate_streams = True

    def __init__(self, device: ShimDevice | None = None) -> None:
        try:
            self.dev = device or shared_device()
        except Errno as e:
            raise from_errno(e.errno, "open shim", e.detail) from None
        self.file_id = self.dev.new_file_id()
        self.aspace = AddressSpace(self.dev.memory, self.dev.pt_pages)
        va_size = self.dev.param(b.DRM_VNPU_PARAM_VA_SIZE)
        self.va = ExtentAllocator(b.DRM_VNPU_VA_START, va_size)
        self.bos: dict[int, ShimBo] = {}
        self.syncobjs: dict[int, Fence | None] = {}
        self._closed = False
        self._handlers = {
            b.IOCTLS["DRM_IOCTL_VERSION"]: self._version,
            b.IOCTLS["DRM_IOCTL_GEM_CLOSE"]: self._gem_close,
            b.IOCTLS["DRM_IOCTL_SYNCOBJ_CREATE"]: self._syncobj_create,
            b.IOCTLS["DRM_IOCTL_SYNCOBJ_DESTROY"]: self._syncobj_destroy,
            b.IOCTLS["DRM_IOCTL_SYNCOBJ_WAIT"]: self._syncobj_wait,
            b.IOCTLS["DRM_IOCTL_VNPU_GET_PARAM"]: self._get_param,
            b.IOCTLS["DRM_IOCTL_VNPU_BO_CREATE"]: self._bo_create,
            b.IOCTLS["DRM_IOCTL_VNPU_BO_INFO"]: self._bo_info,
            b.IOCTLS["DRM_IOCTL_VNPU_BO_WAIT"]: self._bo_wait,
            b.IOCTLS["DRM_IOCTL_VNPU_SUBMIT"]: self._submit,
        }

    # --- Backend interface ---------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def ioctl(self, request: int, arg: Any) -> None:
        name = ioctl_name(request)
        if self._closed:
            raise DeviceClosed(errno.EBADF, name)
        handler = self._handlers.get(request)
        try:
            if handler is None:
                raise Errno(errno.EINVAL, "not an ioctl of this device")
            # The kernel copies the argument in and out; a handler that fails writes nothing back.
            size = ffi.sizeof(ffi.typeof(arg).item)
            work = ffi.new(ffi.typeof(arg))
            ffi.memmove(work, arg, size)
            handler(work)
            ffi.memmove(arg, work, size)
        except Errno as e:
            raise from_errno(e.errno, name, detail=e.detail) from None

    def mmap(self, offset: int, size: int) -> memoryview:
        if self._closed:
            raise DeviceClosed(errno.EBADF, "mmap")
        with self.dev.lock:
            bo = self.dev.mmap_table.get(offset)
            if bo is None or offset % hw.PAGE_SIZE or size <= 0 or size > bo.size:
                raise from_errno(errno.EINVAL, "mmap", "no BO at that mmap offset, or size beyond it")
            if bo.file is not self:
                raise from_errno(errno.EACCES, "mmap", "the BO belongs to another file")
            return self.dev.memory.view(bo.pa, size)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.dev.cancel_file_jobs(self)
        with self.dev.lock:
            for handle in list(self.bos):
                self.unref_bo(self.bos.pop(handle))
            self.syncobjs.clear()
            self.aspace.destroy()

    # --- helpers ----------------------------------------------------------------------
    @staticmethod
    def _new_handle(table: dict[int, Any]) -> int:
        # idr_alloc(..., 1, 0): the lowest free id from 1.
        h = 1
        while h in table:
            h += 1
        return h

    def _lookup_bo(self, handle: int, err: int = errno.ENOENT) -> ShimBo:
        bo = self.bos.get(handle)
        if bo is None:
            raise Errno(err, f"no BO with handle {handle}")
        return bo

    def unref_bo(self, bo: ShimBo) -> None:
        """Drop one reference (call with the device lock held); the last one frees VA and memory."""
        bo.refs -= 1
        if bo.refs:
            return
        npages = bo.size // hw.PAGE_SIZE
        if self.aspace.root >= 0:
            self.aspace.unmap(bo.va, npages)
        self.va.free(bo.va, bo.size + GUARD)
        self.dev.data.free(bo.pa, bo.size)
        self.dev.mmap_table.pop(bo.mmap_offset, None)

    def _alloc_mapped(self, size: int, writable: bool) -> tuple[int, int]:
        """Contiguous zeroed memory mapped at a fresh VA, followed by an unmapped guard page: (pa, va)."""
        va = self.va.alloc(size + GUARD)
        if va is None:
            raise Errno(errno.ENOSPC, "the file's device address space is full")
        pa = self.dev.data.alloc(size)
        if pa is None:
            self.va.free(va, size + GUARD)
            raise Errno(errno.ENOMEM, "out of device memory")
        np.frombuffer(self.dev.memory.view(pa, size), dtype=np.uint8)[:] = 0
        self.aspace.map(va, range(pa, pa + size, hw.PAGE_SIZE), writable=writable)
        return pa, va

    def free_cmd_copy(self, job: ShimJob) -> None:
        if self.aspace.root >= 0:
            self.aspace.unmap(job.cmd_va, job.cmd_alloc // hw.PAGE_SIZE)
        self.va.free(job.cmd_va, job.cmd_alloc + GUARD)
        self.dev.data.free(job.cmd_pa, job.cmd_alloc)

    # --- core DRM ioctls --------------------------------------------------------------
    def _version(self, a: Any) -> None:
        a.version_major, a.version_minor, a.version_patchlevel = DRIVER_VERSION
        for ptr_name, len_name, text in (
            ("name", "name_len", DRIVER_NAME),
            ("date", "date_len", "0"),
            ("desc", "desc_len", "vnpu NPU (shim)"),
        ):
            data = text.encode()
            n = min(int(getattr(a, len_name)), len(data))
            ptr = int(ffi.cast("uintptr_t", getattr(a, ptr_name)))
            if n and ptr:
                copy_to_user(ptr, data[:n], ptr_name)
            setattr(a, len_name, len(data))

    def _gem_close(self, a: Any) -> None:
        with self.dev.lock:
            bo = self._lookup_bo(a.handle, errno.EINVAL)
            del self.bos[a.handle]
            self.unref_bo(bo)

    def _syncobj_create(self, a: Any) -> None:
        if a.flags & ~b.DRM_SYNCOBJ_CREATE_SIGNALED:
            raise Errno(errno.EINVAL, f"unknown flags {a.flags:#x}")
        with self.dev.lock:
            h = self._new_handle(self.syncobjs)
            self.syncobjs[h] = Fence(signaled=True) if a.flags & b.DRM_SYNCOBJ_CREATE_SIGNALED else None
            a.handle = h

    def _syncobj_destroy(self, a: Any) -> None:
        if a.pad:
            raise Errno(errno.EINVAL, "pad is not zero")
        with self.dev.lock:
            if a.handle not in self.syncobjs:
                raise Errno(errno.EINVAL, f"no syncobj {a.handle}")
            del self.syncobjs[a.handle]

    def _syncobj_wait(self, a: Any) -> None:
        if a.flags & ~SYNCOBJ_WAIT_FLAGS:
            raise Errno(errno.EINVAL, f"unknown flags {a.flags:#x}")
        if a.count_handles == 0:
            return
        raw = copy_from_user(a.handles, 4 * a.count_handles, "handles")
        handles = list(struct.unpack(f"<{a.count_handles}I", raw))
        wait_all = bool(a.flags & b.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL)
        for_submit = bool(a.flags & b.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT)
        with self.dev.lock:
            for h in handles:
                if h not in self.syncobjs:
                    raise Errno(errno.ENOENT, f"no syncobj {h}")
            fences: list[Fence | None] = [self.syncobjs[h] for h in handles]
            if not for_submit and any(f is None for f in fences):
                raise Errno(errno.EINVAL, "a syncobj has no fence (use WAIT_FOR_SUBMIT)")
            while True:
                for i, h in enumerate(handles):
                    if fences[i] is None:
                        fences[i] = self.syncobjs.get(h)
                done = [f is not None and f.signaled for f in fences]
                if all(done) if wait_all else any(done):
                    if not wait_all:
                        a.first_signaled = done.index(True)
                    return
                left = a.timeout_nsec - _now()
                if left <= 0:
                    raise Errno(errno.ETIME, "timeout")
                self.dev.cond.wait(left / 1e9)

    # --- vnpu ioctls ------------------------------------------------------------------
    def _get_param(self, a: Any) -> None:
        if a.pad:
            raise Errno(errno.EINVAL, "pad is not zero")
        a.value = self.dev.param(a.param)

    def _bo_create(self, a: Any) -> None:
        if a.flags & ~b.DRM_VNPU_BO_FLAGS_MASK:
            raise Errno(errno.EINVAL, f"unknown flags {a.flags:#x}")
        if a.handle or a.mmap_offset or a.va:
            raise Errno(errno.EINVAL, "output fields are not zero")
        if a.size == 0:
            raise Errno(errno.EINVAL, "size is zero")
        if a.size > MAX_BO_SIZE:
            raise Errno(errno.E2BIG, f"size {a.size} exceeds {MAX_BO_SIZE}")
        size = _page_round(a.size)
        with self.dev.lock:
            pa, va = self._alloc_mapped(size, writable=not a.flags & b.DRM_VNPU_BO_DEVICE_READ_ONLY)
            bo = ShimBo(self, size, a.flags, pa, va, 0)
            bo.mmap_offset = self.dev.alloc_mmap_offset(bo)
            h = self._new_handle(self.bos)
            self.bos[h] = bo
        a.size, a.handle, a.mmap_offset, a.va = size, h, bo.mmap_offset, va

    def _bo_info(self, a: Any) -> None:
        if a.pad:
            raise Errno(errno.EINVAL, "pad is not zero")
        with self.dev.lock:
            bo = self._lookup_bo(a.handle)
            a.size, a.flags, a.pad2, a.mmap_offset, a.va = bo.size, bo.flags, 0, bo.mmap_offset, bo.va

    def _bo_wait(self, a: Any) -> None:
        if a.pad or a.pad2 or a.job_status or a.fault_va:
            raise Errno(errno.EINVAL, "pad or output fields are not zero")
        with self.dev.lock:
            bo = self._lookup_bo(a.handle)
            while bo.pending:
                left = a.timeout_ns - _now()
                if left <= 0:
                    raise Errno(errno.ETIME, "timeout")
                self.dev.cond.wait(left / 1e9)
            a.job_status = bo.last_status
            a.fault_va = bo.last_fault_va

    def _submit(self, a: Any) -> None:
        if a.flags or a.pad:
            raise Errno(errno.EINVAL, "flags or pad is not zero")
        if not 1 <= a.job_count <= b.DRM_VNPU_MAX_JOBS_PER_SUBMIT:
            raise Errno(errno.EINVAL, f"job_count {a.job_count} is not 1..{b.DRM_VNPU_MAX_JOBS_PER_SUBMIT}")
        if not JOB_V1_SIZE <= a.job_struct_size <= MAX_JOB_STRUCT_SIZE or a.job_struct_size % 8:
            raise Errno(errno.EINVAL, f"job_struct_size {a.job_struct_size} is not supported")
        raw_jobs = []
        for i in range(a.job_count):
            raw = copy_from_user(a.jobs + i * a.job_struct_size, a.job_struct_size, "jobs")
            if any(raw[JOB_V1_SIZE:]):
                raise Errno(errno.EINVAL, f"job {i}: bytes past the known struct are not zero")
            job = ffi.new("struct drm_vnpu_job *")
            ffi.memmove(job, raw[:JOB_V1_SIZE], JOB_V1_SIZE)
            raw_jobs.append(job)
        with self.dev.lock:
            # Validate every job before queueing any: all or none.
            checked = [self._check_job(i, j) for i, j in enumerate(raw_jobs)]
            copies: list[tuple[int, int, int]] = []
            try:
                for _, stream, _, _ in checked:
                    alloc = _page_round(len(stream))
                    pa, va = self._alloc_mapped(alloc, writable=False)
                    copies.append((pa, va, alloc))
                    self.dev.memory.view(pa, len(stream))[:] = stream
            except Errno:
                for pa, va, alloc in copies:
                    self.aspace.unmap(va, alloc // hw.PAGE_SIZE)
                    self.va.free(va, alloc + GUARD)
                    self.dev.data.free(pa, alloc)
                raise
            for (bos, stream, in_fences, out_handle), copy in zip(checked, copies, strict=True):
                self._queue(bos, len(stream), copy, in_fences, out_handle)

    def _check_job(self, i: int, j: Any) -> tuple[list[tuple[ShimBo, int]], bytes, list[Fence], int]:
        p = f"job {i}: "
        if j.flags or j.pad:
            raise Errno(errno.EINVAL, p + "flags or pad is not zero")
        if j.cmd_size == 0 or j.cmd_size % 8 or j.cmd_offset % 8:
            raise Errno(errno.EINVAL, p + "cmd_size/cmd_offset zero or not 8-byte aligned")
        if j.cmd_size > MAX_JOB_SIZE:
            raise Errno(errno.EINVAL, p + f"cmd_size exceeds {MAX_JOB_SIZE}")
        if not 1 <= j.bo_count <= MAX_JOB_BOS:
            raise Errno(errno.EINVAL, p + f"bo_count {j.bo_count} is not 1..{MAX_JOB_BOS}")
        if j.in_syncobj_count > MAX_IN_SYNCOBJS:
            raise Errno(errno.EINVAL, p + f"more than {MAX_IN_SYNCOBJS} in-syncobjs")
        cmd_bo = self._lookup_bo(j.cmd_bo_handle)
        if j.cmd_offset + j.cmd_size > cmd_bo.size:
            raise Errno(errno.EINVAL, p + "command range is outside its BO")
        arr = ffi.from_buffer(
            "struct drm_vnpu_job_bo[]",
            copy_from_user(j.bos, j.bo_count * ffi.sizeof("struct drm_vnpu_job_bo"), "bos"),
        )
        bos: list[tuple[ShimBo, int]] = []
        seen: set[int] = set()
        for k in range(j.bo_count):
            h, flags = arr[k].handle, arr[k].flags
            if flags == 0 or flags & ~b.DRM_VNPU_JOB_BO_FLAGS_MASK:
                raise Errno(errno.EINVAL, p + f"BO {h} has bad flags {flags:#x}")
            bo = self._lookup_bo(h)
            if h in seen:
                raise Errno(errno.EINVAL, p + f"BO {h} is listed twice")
            seen.add(h)
            if flags & b.DRM_VNPU_JOB_BO_WRITE and bo.flags & b.DRM_VNPU_BO_DEVICE_READ_ONLY:
                raise Errno(errno.EACCES, p + f"BO {h} is read-only but listed for writing")
            bos.append((bo, flags))
        in_fences: list[Fence] = []
        if j.in_syncobj_count:
            ins = struct.unpack(
                f"<{j.in_syncobj_count}I",
                copy_from_user(j.in_syncobjs, 4 * j.in_syncobj_count, "in_syncobjs"),
            )
            for k in range(j.in_syncobj_count):
                if ins[k] not in self.syncobjs:
                    raise Errno(errno.ENOENT, p + f"no syncobj {ins[k]}")
                fence = self.syncobjs[ins[k]]
                if fence is None:
                    raise Errno(errno.EINVAL, p + f"syncobj {ins[k]} has no fence")
                in_fences.append(fence)
        if j.out_syncobj and j.out_syncobj not in self.syncobjs:
            raise Errno(errno.ENOENT, p + f"no syncobj {j.out_syncobj}")
        # Copy the stream before checking it, so userspace cannot change it afterwards.
        stream = bytes(self.dev.memory.view(cmd_bo.pa + j.cmd_offset, j.cmd_size))
        try:
            if ShimBackend.validate_streams:
                check_stream(stream, [BoRange(bo.va, bo.size, fl) for bo, fl in bos])
            else:
                isa.decode(stream)
        except StreamRejected as e:
            raise Errno(e.errno, p + str(e)) from None
        except isa.IsaError as e:
            raise Errno(errno.ENOEXEC, p + str(e)) from None
        return bos, stream, in_fences, j.out_syncobj

    def _queue(
        self,
        bos: list[tuple[ShimBo, int]],
        cmd_size: int,
        copy: tuple[int, int, int],
        in_fences: list[Fence],
        out: int,
    ) -> None:
        pa, va, alloc = copy
        fence = Fence()
        deps = [f for f in in_fences if not f.signaled]
        # Implicit dependencies, as the BOs' reservations give them in vnpu.ko: a writer waits
        # for every earlier user of the BO, a reader for its earlier writers. (Jobs of this file
        # wait for each other anyway: a file's jobs run one at a time, in order.)
        for bo, flags in bos:
            for earlier in bo.pending:
                job = self.dev.jobs[earlier]
                if job.file is not self and (
                    flags & b.DRM_VNPU_JOB_BO_WRITE
                    or any(ebo is bo and ef & b.DRM_VNPU_JOB_BO_WRITE for ebo, ef in job.bos)
                ):
                    deps.append(job.out_fence)
        if out:
            self.syncobjs[out] = fence
        seqno = self.dev.new_seqno()
        for bo, _ in bos:
            bo.refs += 1
            bo.pending.add(seqno)
        self.dev.queue_job(ShimJob(seqno, self, bos, pa, va, alloc, cmd_size, fence, deps))
