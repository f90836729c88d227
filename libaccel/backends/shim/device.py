"""The shim's device side: what vnpu.ko's PCI driver half does.

One :class:`ShimDevice` per process (the "PCI device"): system memory (``AnonymousMemory``), BAR2 (a
bytearray), the Npu; firmware boot through CMD_BOOT when the device is first opened. Submission
through the SQ ring in BAR2 and a doorbell kick, completion through the CQ ring and the Npu's
interrupt, the per-core schedulers (a job waits for its in-syncobjs, for earlier jobs that write a
BO it uses or use a BO it writes, and for its file's earlier jobs; a file stays on one core while it
has a job on the device, an idle file gets the least loaded core), the job watchdog and the
per-core reset, as vnpu_job.c does. The files' ioctl handlers are in :mod:`.file`.
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
import weakref
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from device_model.memory import AnonymousMemory, MemfdMemory
from device_model.page_tables import PageAllocator
from uapi import bindings as b
from uapi import driver_limits as limits
from uapi import hw_layout as hw
from uapi.bindings import ffi
from uapi.firmware_format import DEFAULT_IMAGE_PATH
from uapi.queue_entries import CQE, SQE
from vnpu_common import config, probe

if TYPE_CHECKING:
    from libaccel.backends.shim.file import ShimBackend
FIRMWARE_PATH = DEFAULT_IMAGE_PATH  # the image the device boots; $VNPU_SHIM_FIRMWARE for another


DRIVER_NAME = "vnpu"
DRIVER_VERSION = (limits.DRIVER_MAJOR, limits.DRIVER_MINOR, limits.DRIVER_PATCHLEVEL)
DEVICE_PEER = 1

# "Physical" memory layout of the shim's system memory (lazily backed).
RAM_SIZE = (1 << 30) + (64 << 20)
FW_PA = 0x10_0000  # firmware image load address (FW_MAX_SIZE bytes)
PT_BASE, PT_LIMIT = 0x20_0000, 0x400_0000  # page-table pages
DATA_BASE = 0x400_0000  # BOs and private command-stream copies, physically contiguous

# Limits the shim reports through GET_PARAM: vnpu.ko's (uapi/driver_limits.py, their one source).
MAX_BO_SIZE = limits.MAX_BO_SIZE
MAX_JOB_SIZE = limits.MAX_JOB_SIZE
MAX_JOB_BOS = limits.MAX_JOB_BOS
# Limits the uapi header fixes for every driver.
MAX_IN_SYNCOBJS = b.DRM_VNPU_MAX_IN_SYNCOBJS
MAX_JOB_STRUCT_SIZE = b.DRM_VNPU_MAX_JOB_STRUCT_SIZE
DEFAULT_JOB_TIMEOUT_MS = limits.JOB_TIMEOUT_MS
INLINE_IRQ_WAIT_S = 0.002  # how long a core waits for the device lock to complete its job itself
CONTROL_TIMEOUT_S = 10.0
CONTROL_CHECK_S = 0.05  # a control command's wait looks at CMD_ACK at least this often
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
    """A dma_fence: signals once, with an error (0 or a negative errno), and wakes the threads
    waiting on it alone (its callbacks), not every waiter of the device."""

    __slots__ = ("signaled", "error", "waiters")

    def __init__(self, signaled: bool = False, error: int = 0) -> None:
        self.signaled = signaled
        self.error = error
        self.waiters: list[threading.Condition] = []  # on the device lock

    def signal(self, error: int) -> None:
        """Signal with ``error`` and wake its waiters (call with the device lock held)."""
        self.error = error
        self.signaled = True
        for waiter in self.waiters:
            waiter.notify()
        self.waiters = []


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
    waiters: list[threading.Condition] = field(default_factory=list)  # BO_WAITs until pending empties
    last_status: int = 0
    last_fault_va: int = 0


@dataclass(eq=False, slots=True)
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
        self,
        firmware: Path | None = None,
        job_timeout_ms: int | None = None,
        num_cores: int | None = None,
        core_processes: bool | None = None,
    ) -> None:
        from device_model.npu import DEFAULT_CORES, Npu  # the device model

        if core_processes is None:
            # Off by default: a device then costs a worker start-up per core.
            core_processes = bool(config.SHIM_CORE_PROCESSES.get())
        # Worker processes map system memory themselves: a memfd they inherit.
        self.memory = MemfdMemory(RAM_SIZE) if core_processes else AnonymousMemory(RAM_SIZE)
        # Set in a forked child (_after_fork_in_child): the device is the parent's. Its threads
        # did not survive the fork and its locks may be held by threads that no longer exist, so
        # the child's copies of its files refuse every call and closing it does nothing.
        self.forked = False
        _devices.add(self)
        self.bar2 = bytearray(hw.BAR2_SIZE)
        self._bar32 = memoryview(self.bar2).cast("I")  # little-endian words, as Npu checks
        self._bar64 = memoryview(self.bar2).cast("Q")
        self.pt_pages = PageAllocator(self.memory, PT_BASE, PT_LIMIT)
        self.data = ExtentAllocator(DATA_BASE, RAM_SIZE)
        self.lock = threading.RLock()
        self._control_lock = threading.Lock()
        # Notified by the control interrupt (IRQ_CONTROL), on the device's thread that raised it:
        # a control command's caller waits for its acknowledgment here, whichever thread it is
        # (the interrupt thread itself resets a hung core).
        self._control_acked = threading.Condition(threading.Lock())
        self.cond = threading.Condition(self.lock)
        self._cond_waiters = 0  # threads in cond.wait (closing files): a completion notifies them
        # SYNCOBJ_WAITs (WAIT_FOR_SUBMIT) on a syncobj without a fence yet: woken when a submit
        # gives one a fence.
        self.submit_waiters: set[threading.Condition] = set()
        self._irqs: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._job_timeout_ms = job_timeout_ms or config.SHIM_JOB_TIMEOUT_MS.get() or DEFAULT_JOB_TIMEOUT_MS
        self._seqnos = itertools.count(1)
        self._mmap_next = MMAP_OFFSET_START
        self._file_ids = itertools.count(1)
        self.mmap_table: dict[int, ShimBo] = {}
        if num_cores is None:
            num_cores = config.SHIM_CORES.get() or DEFAULT_CORES
        self.backlog: deque[ShimJob] = deque()  # not on the device yet, in submission order
        self.jobs: dict[int, ShimJob] = {}
        self.sq_tail = 0
        self.cq_head = 0
        self.resets = 0
        # Runtime PM as vnpu_pm.c: powered while any job exists; off once idle for autosuspend_ms.
        autosuspend_ms = config.SHIM_AUTOSUSPEND_MS.get()
        self._autosuspend_ms = hw.AUTOSUSPEND_DELAY_MS if autosuspend_ms is None else autosuspend_ms
        self.powered = True
        self.power_offs = 0
        self.idle_since_ns = _now()
        self._fw_size = 0
        # The firmware the device runs whenever it is powered (the driver's view, as vnpu.ko's
        # fw_version and fw_build_id): powered off, its registers read 0.
        self.fw_version = 0
        self.fw_build_id = 0
        # A lone job for an idle core runs in the submitting thread (queue_job), unless the cores
        # are processes.
        self.inline_jobs = not core_processes
        self._closed = False
        self.broken = ""

        self.npu = Npu(
            self.bar2,
            self.memory,
            self._raise_irq,
            DEVICE_PEER,
            num_cores=num_cores,
            core_processes=core_processes,
        )
        self.num_cores = self.r32(hw.REG_NUM_CORES)
        # Per core, as vnpu.ko's schedulers: its jobs on the ring, in ring order; when it last
        # completed one (the watchdog counts from there); the ring entries it may hold.
        self.inflight: list[deque[ShimJob]] = [deque() for _ in range(self.num_cores)]
        self.last_completion_ns = [0] * self.num_cores
        self.credits = min(hw.SQ_ENTRIES, hw.CQ_ENTRIES) // self.num_cores
        self._threads = [threading.Thread(target=self._irq_loop, name="vnpu-shim-irq", daemon=True)]
        for t in self._threads:
            t.start()
        try:
            with self.lock:  # the interrupt thread's autosuspend waits for the boot
                self._boot(firmware or config.SHIM_FIRMWARE.get() or FIRMWARE_PATH)
                self.idle_since_ns = _now()
        except BaseException:
            self.close()
            raise

    # --- BAR2 access ----------------------------------------------------------
    def r32(self, off: int) -> int:
        return self._bar32[off >> 2]

    def r64(self, off: int) -> int:
        return self._bar64[off >> 3]

    def w32(self, off: int, v: int) -> None:
        self._bar32[off >> 2] = v & 0xFFFFFFFF

    def w64(self, off: int, v: int) -> None:
        self._bar64[off >> 3] = v

    # --- the two "wires" --------------------------------------------------------
    def _raise_irq(self, vector: int) -> None:
        """The Npu's interrupt line (any thread).

        The completion of the only job on the device is handled at once on the raising thread (a
        core's) when it gets the device lock: the waiter then wakes straight from the core that ran
        its job, not through the interrupt thread (one thread wake-up less per job). With more jobs
        on the ring the core goes on to the next one and the interrupt thread completes this one.
        The lock is waited for only briefly (its usual holder is the submitting thread, whose
        doorbell write let this core run the job before it returned): a holder may also be waiting
        on this core (a reset holds the lock while the core finishes), so past INLINE_IRQ_WAIT_S
        the interrupt thread takes it, as it takes the watchdog, which can reset a core."""
        if (
            vector == hw.IRQ_COMPLETION
            and sum(map(len, self.inflight)) <= 1  # read without the lock: a hint, either way is correct
            and self.lock.acquire(timeout=INLINE_IRQ_WAIT_S)
        ):
            try:
                self._drain_cq()  # each completion notifies the device's condition
                self._push_backlog()
                return
            except Errno:
                pass  # the interrupt thread handles it, and a broken device, as always
            finally:
                self.lock.release()
        if vector == hw.IRQ_CONTROL:
            with self._control_acked:
                self._control_acked.notify_all()
        self._irqs.put(vector)

    def ring(self, vector: int) -> None:
        """The doorbell: one write. The Npu only notes the vector (an eventfd write or an event) and
        serves it on its own threads, as it serves QEMU's eventfd: no thread of ours in between."""
        self.npu.kick(vector)

    @property
    def job_timeout_ms(self) -> int:
        return self._job_timeout_ms

    @job_timeout_ms.setter
    def job_timeout_ms(self, value: int) -> None:
        self._job_timeout_ms = value
        self._irqs.put(-1)  # the watchdog re-arms with the new timeout

    @property
    def autosuspend_ms(self) -> int:
        return self._autosuspend_ms

    @autosuspend_ms.setter
    def autosuspend_ms(self, value: int) -> None:
        self._autosuspend_ms = value
        self._irqs.put(-1)  # the interrupt thread looks again with the new delay

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
                    self._check_autosuspend()
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
        """Run a control command (BOOT, RESET, POWER); its status. Waits for CMD_ACK, woken by the
        control interrupt (and checking CMD_ACK every CONTROL_CHECK_S, should one be lost); any
        thread may call it, the interrupt thread too."""
        with self._control_lock:  # one command at a time, as vnpu.ko's ctrl_lock
            seq = (self.r32(hw.REG_CMD_SEQ) + 1) & 0xFFFFFFFF
            self.w64(hw.REG_CMD_ARG0, arg0)
            self.w64(hw.REG_CMD_ARG1, arg1)
            self.w32(hw.REG_CMD, cmd)
            self.w32(hw.REG_CMD_SEQ, seq)
            # Rung outside the condition: the device acknowledges a NOP inside the doorbell call.
            self.ring(hw.VEC_CONTROL)
            deadline = time.monotonic() + CONTROL_TIMEOUT_S
            with self._control_acked:  # an acknowledgment from here on notifies this wait
                while self.r32(hw.REG_CMD_ACK) != seq:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise Errno(errno.EIO, f"the device did not acknowledge control command {cmd}")
                    self._control_acked.wait(min(left, CONTROL_CHECK_S))
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
        self._fw_size = len(image)
        status = self._boot_kept_image()
        if status or not self.r32(hw.REG_STATUS) & hw.STATUS_READY:
            reason = self.r32(hw.REG_FW_REJECT)
            raise Errno(
                -status if status < 0 else errno.EIO,
                f"the device rejected firmware {firmware}: {hw.FW_REJECT_NAMES.get(reason, 'unknown')} "
                f"(reason {reason}); check it with: vnpu-fw verify {firmware}",
            )

    # --- power (vnpu_pm.c's runtime PM) ------------------------------------------
    def _check_autosuspend(self) -> None:
        """Power the device off once no job has existed for autosuspend_ms (lock held)."""
        if not self.powered or self.jobs or _now() - self.idle_since_ns < self.autosuspend_ms * 1_000_000:
            return
        if self.control(hw.CMD_POWER, hw.POWER_OFF) == -errno.EBUSY:
            self.idle_since_ns = _now()  # a completion not yet seen: again after another delay
            return
        self.powered = False
        self.power_offs += 1

    def _power_on(self) -> None:
        """Power on, start the rings from the device's positions, boot the image kept at FW_PA."""
        status = self.control(hw.CMD_POWER, hw.POWER_ON)
        if status:
            raise Errno(errno.EIO, f"the device did not power on: {status}")
        self.powered = True
        self.sq_tail = self.r32(hw.SQ_HEAD)
        self.w32(hw.SQ_TAIL, self.sq_tail)
        self.cq_head = self.r32(hw.CQ_TAIL)
        self.w32(hw.CQ_HEAD, self.cq_head)
        # A refused image leaves jobs failing with -EIO, as vnpu.ko's resume does.
        self._boot_kept_image()

    def _boot_kept_image(self) -> int:
        """BOOT the image at FW_PA; note the firmware it runs (0s if refused); CMD_STATUS."""
        status = self.control(hw.CMD_BOOT, FW_PA, self._fw_size)
        ready = not status and self.r32(hw.REG_STATUS) & hw.STATUS_READY
        self.fw_version = self.r32(hw.REG_FW_VERSION) if ready else 0
        self.fw_build_id = self.r64(hw.REG_FW_BUILD_ID) if ready else 0
        return status

    # --- params ---------------------------------------------------------------
    def param(self, p: int) -> int:
        values = {
            b.DRM_VNPU_PARAM_DEVICE_ID: self.r32(hw.REG_DEVICE_ID),
            b.DRM_VNPU_PARAM_DEVICE_REVISION: self.r32(hw.REG_REVISION),
            b.DRM_VNPU_PARAM_ISA_VERSION: self.r32(hw.REG_ISA_VERSION),
            b.DRM_VNPU_PARAM_FW_VERSION: self.fw_version,
            b.DRM_VNPU_PARAM_VA_SIZE: 1 << self.r32(hw.REG_VA_BITS),
            b.DRM_VNPU_PARAM_MAX_JOB_SIZE: MAX_JOB_SIZE,
            b.DRM_VNPU_PARAM_MAX_JOB_BOS: MAX_JOB_BOS,
            b.DRM_VNPU_PARAM_MAX_BO_SIZE: MAX_BO_SIZE,
            b.DRM_VNPU_PARAM_CAPABILITIES: self.r32(hw.REG_CAPS),
            b.DRM_VNPU_PARAM_JOB_TIMEOUT_MS: self.job_timeout_ms,
            b.DRM_VNPU_PARAM_MAX_IN_SYNCOBJS: MAX_IN_SYNCOBJS,
            b.DRM_VNPU_PARAM_FW_BUILD_ID: self.fw_build_id,
            b.DRM_VNPU_PARAM_NUM_CORES: self.num_cores,
            b.DRM_VNPU_PARAM_POWER_UPS: self.r32(hw.REG_POWER_UPS),
            b.DRM_VNPU_PARAM_POWERED_US: self.r64(hw.REG_POWERED_US),
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
    def queue_job(self, job: ShimJob, here: bool = False) -> int | None:
        """Queue ``job``; with ``here``, the core to run it on in the submitting thread, if any.

        With ``here`` (a lone job that cannot block the caller: no WAIT), a job that goes straight
        to an idle core does not ring the doorbell: the caller runs the core's queue itself once it
        has let go of the device lock (:meth:`run_here`), so no thread has to wake up. Otherwise,
        and whenever the job waits (for a fence, a BO, its file's earlier jobs or a busy core), the
        doorbell rings as usual and the core's thread runs it."""
        if not self.powered:
            self._power_on()
        self.jobs[job.seqno] = job
        self.backlog.append(job)
        return self._push_backlog(job if here and self.inline_jobs else None)

    def run_here(self, core: int) -> None:
        """Run ``core``'s queued jobs in this thread (call without the device lock), or ring the
        doorbell when the core is busy."""
        if not self.npu.run_here(core):
            probe.mark("shim.doorbell")
            self.ring(hw.VEC_QUEUE + core)

    def new_seqno(self) -> int:
        return next(self._seqnos)

    def _file_core(self, file: ShimBackend) -> int | None:
        """The core holding the file's jobs on the ring, None if it has none there."""
        for core, q in enumerate(self.inflight):
            for j in q:
                if j.file is file:
                    return core
        return None

    def _least_loaded(self, own: int) -> int:
        """The core with the fewest jobs on the ring, ``own`` (the file's last core) on a tie."""
        best, fewest = own, len(self.inflight[own])
        for core in range(self.num_cores):
            if len(self.inflight[core]) < fewest:
                best, fewest = core, len(self.inflight[core])
        return best

    def _push_backlog(self, here: ShimJob | None = None) -> int | None:
        """Put every job that may run on the ring, in submission order per file (drm_sched's part).

        A job goes when its dependencies have signalled and no earlier job of its file is still
        waiting; to the core its file's jobs are on, else to the least loaded core, the file's
        last core on a tie (vnpu.ko's vnpu_job_pick_core: drm_sched moves an entity only when it
        has nothing unfinished); while that core has credits.

        The doorbell rings for what was pushed, except when all that was pushed is ``here`` on a
        core that had nothing else: then that core is returned, for the caller to run it.
        """
        if not self.backlog:
            return None
        pushed = 0
        rung: set[int] = set()  # the cores given entries: each one's doorbell rings
        alone = False
        waiting: set[int] = set()  # files with an earlier job still in the backlog
        for job in list(self.backlog):
            fid = id(job.file)
            if fid in waiting or (job.deps and not all(f.signaled for f in job.deps)):
                waiting.add(fid)
                continue
            own = job.file.last_core
            if own < len(self.inflight) and not any(self.inflight):
                core = own  # an idle device: the file's last core (what the two calls below give)
            else:
                core = self._file_core(job.file)
                if core is None:
                    core = self._least_loaded(own)
            if len(self.inflight[core]) >= self.credits:
                waiting.add(fid)
                continue
            self.backlog.remove(job)
            alone = job is here and not self.inflight[core]
            self._write_sqe(job, core)
            pushed += 1
            rung.add(core)
        if pushed == 1 and alone:
            assert here is not None
            return here.core
        for core in sorted(rung):
            probe.mark("shim.doorbell")
            self.ring(hw.VEC_QUEUE + core)
        return None

    def _write_sqe(self, job: ShimJob, core: int) -> None:
        slot = hw.SQ_BASE + (self.sq_tail % hw.SQ_ENTRIES) * hw.SQ_ENTRY_SIZE
        # The whole entry (its reserved bytes zero) in one write, flags 0.
        file = job.file
        root, ctx = file.aspace.root, file.file_id
        SQE.pack_into(self.bar2, slot, job.seqno, root, job.cmd_va, job.cmd_size, 0, ctx, core)
        job.core = core
        file.last_core = core
        job.pushed_ns = _now()
        self.inflight[core].append(job)
        self.sq_tail = (self.sq_tail + 1) & 0xFFFFFFFF
        self.w32(hw.SQ_TAIL, self.sq_tail)  # the entry is written before the tail moves

    def _drain_cq(self) -> None:
        tail = self.r32(hw.CQ_TAIL)
        while self.cq_head != tail:
            e = hw.CQ_BASE + (self.cq_head % hw.CQ_ENTRIES) * hw.CQ_ENTRY_SIZE
            seqno, status, core, fault_va, _ = CQE.unpack_from(self.bar2, e)
            self.cq_head = (self.cq_head + 1) & 0xFFFFFFFF
            job = self.jobs.get(seqno)
            if job is not None and job.core == core:
                self._completed(job, status, fault_va)
        self.w32(hw.CQ_HEAD, self.cq_head)

    def _completed(self, job: ShimJob, status: int, fault_va: int) -> None:
        """The device says ``job`` ended with ``status``: complete it (lock held)."""
        self.last_completion_ns[job.core] = _now()
        # Only the statuses the device contract allows reach userspace (as in vnpu.ko).
        if status not in (0, -errno.EFAULT, -errno.EIO):
            status = -errno.EIO
        self._complete(job, status, fault_va)

    # --- replayed jobs (libaccel.backends.shim.replay; lock held) -----------------
    def start_replayed(self, job: ShimJob, core: int) -> None:
        """``job`` runs on ``core`` of an idle device without the ring: on the device as a job
        pushed to that core is (the watchdog, a reset and close see it), at the head of its
        queue. Being the head, a reset of the core completes it, never requeues it: it has no
        stream copy to put back on the ring."""
        self.jobs[job.seqno] = job
        job.core = core
        job.file.last_core = core
        job.pushed_ns = _now()
        self.inflight[core].append(job)

    def finish_replayed(self, job: ShimJob, status: int, fault_va: int) -> None:
        """The device ran the replayed ``job``: complete it as its completion entry would, unless
        a reset completed it meanwhile."""
        if self.jobs.get(job.seqno) is job:
            self._completed(job, status, fault_va)
            self._push_backlog()

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
            if not bo.pending and bo.waiters:
                for waiter in bo.waiters:
                    waiter.notify()
                bo.waiters = []
            bo.file.unref_bo(bo)
        job.file.free_cmd_copy(job)
        job.out_fence.signal(status)
        if not self.jobs:
            self.idle_since_ns = _now()
        probe.mark("shim.complete")
        if self._cond_waiters:
            self.cond.notify_all()

    # --- timeout and reset --------------------------------------------------------
    def _deadline_ns(self, core: int) -> int | None:
        """When the job running on ``core`` times out; None if the core is idle."""
        q = self.inflight[core]
        if not q:
            return None
        return max(q[0].pushed_ns, self.last_completion_ns[core]) + self.job_timeout_ms * 1_000_000

    def _watchdog_timeout(self) -> float:
        """How long the interrupt thread may sleep before it checks the watchdog.

        An idle device sleeps one job timeout: a job pushed meanwhile times out no earlier than a
        timeout after its push, later than the sleep ends, so pushing a job need not wake the
        thread (that cost every job a thread wake-up)."""
        with self.lock:
            deadlines = [d for c in range(self.num_cores) if (d := self._deadline_ns(c)) is not None]
            if self.powered:  # jobs may complete without this thread: look again for autosuspend
                deadlines.append(max(self.idle_since_ns, _now()) + self.autosuspend_ms * 1_000_000)
            if not deadlines:
                return self.job_timeout_ms / 1000
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
                self._cond_waiters += 1
                try:
                    self.cond.wait(0.05)
                finally:
                    self._cond_waiters -= 1

    def close(self) -> None:
        if self._closed or self.forked:
            return
        self._closed = True
        self._irqs.put(None)
        for t in self._threads:
            t.join(timeout=5)
        stop = getattr(self.npu, "close", None)
        if callable(stop):
            stop()


_device: ShimDevice | None = None
_device_lock = threading.Lock()
_devices: weakref.WeakSet[ShimDevice] = weakref.WeakSet()  # every device of this process


def _after_fork_in_child() -> None:
    """A forked child's shim devices are its parent's (one device per process): each is marked
    forked, and the child's next :func:`shared_device` makes a device of its own."""
    global _device, _device_lock
    for device in list(_devices):
        device.forked = True
    _device = None
    _device_lock = threading.Lock()  # another thread of the parent may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def shared_device() -> ShimDevice:
    """The process's one shim device, booted on first use."""
    global _device
    with _device_lock:
        if _device is None:
            _device = ShimDevice()
            atexit.register(_device.close)
        return _device
