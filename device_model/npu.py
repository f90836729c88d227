"""The NPU device front-end: BAR2 registers, control mailbox, job rings and cores.

Exactly the contract of uapi/hw_layout.py (docs/hardware.md). The
driver (vnpu.ko in a QEMU guest, or libaccel's shim in-process) writes
registers and ring entries into BAR2 and rings the doorbell; ``kick`` is
that doorbell. Threads serve it:

* the control thread takes control kicks: it performs control commands
  (BOOT, RESET) at once;
* one thread per NPU core (``num_cores``, REG_NUM_CORES) runs jobs: an idle
  core takes the submission queue's new entries, hands each to the core its
  SQE_CORE names (its own queue, waking that core), and runs its own queue's
  jobs one at a time, in order, through its own command processor, writing
  a completion for each. Cores run at the same time: numpy and the cffi MAC
  array (``device_model.mac_array``, API mode) release the GIL while they
  compute, so two cores' convolutions use two host CPUs. With
  ``core_processes`` the command processor of each core runs in a worker
  process of its own (``device_model.core_worker``): the core thread stays
  the core's owner and only hands each job over, so the cores' command
  processors do not share one GIL.

A queue kick wakes a core thread directly: every thread hand-off is a
wake-up plus a GIL transfer, tens of microseconds on a busy host, and the
empty-job round trip is mostly such hand-offs. Each core has its own queue
doorbell (vector ``VEC_QUEUE + core``), an eventfd its thread waits on
(given as ``queue_fds``: the ivshmem server passes QEMU's eventfds of the
queue vectors; else the Npu makes its own), so a guest doorbell reaches the
thread that runs the job with no thread in between, and wakes no other core:
one doorbell shared by the cores woke every idle core thread for each job,
which made two cores slower than one. The doorbells of cores the device lacks
are core 0's.

Keeping control apart is what lets a RESET be served while a job hangs in
WAIT: the control thread sets the reset cores' abort events, their jobs end,
and no completion is written for them or for anything still queued on them;
the other cores go on.

BAR2 is shared with another process (the guest), so every register access
is one aligned 32- or 64-bit load or store through numpy views, and ring
indices are read once before the entries they cover (an entry is read or
written whole, on the side of its index that makes it stable).
"""

from __future__ import annotations

import errno
import logging
import os
import select
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from uapi import bindings as b
from uapi import hw_layout as hw
from uapi import isa
from uapi.queue_entries import CQE, SQE
from vnpu_common import probe

from . import mac_array
from .command_processor import CommandProcessor, JobResult, PreparedJob
from .core_worker import (
    CoreWorker,
    CoreWorkerError,
    ProcessorSpec,
    RemoteProcessor,
    SharedAbort,
    check_shareable,
)
from .faults import FaultInjector
from .memory import PhysicalAddressError, SystemMemory

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

log = logging.getLogger(__name__)

# What the device offers (REG_CAPS), in the uapi's bits.
CAPS = b.DRM_VNPU_CAP_READ_ONLY_BO | b.DRM_VNPU_CAP_PER_CHANNEL_QUANT | b.DRM_VNPU_CAP_RESET_RECOVERY
_U32 = 0xFFFF_FFFF
_CQ_POLL_S = 0.001
_SQ_HEAD_WORD, _SQ_TAIL_WORD = hw.SQ_HEAD >> 2, hw.SQ_TAIL >> 2  # indexes of the 32-bit register view
DEFAULT_CORES = 2  # like an RK3588's NPU (three cores) scaled to the 2-CPU hosts this runs on


class SqEntry(NamedTuple):
    """One submission-queue entry, as the device read it (a tuple: built once per job)."""

    seqno: int
    pt_root: int
    cmd_va: int
    cmd_size: int
    flags: int
    core: int


@dataclass(eq=False)
class Core:
    """One NPU core: its queue of entries, its thread and the state a RESET needs."""

    index: int
    wake: int  # an eventfd: entries were queued for this core
    doorbells: tuple[int, ...] = ()  # eventfds of its queue doorbell (core 0: and the absent cores')
    doorbell_wakes: int = 0  # wake-ups of its thread by its queue doorbell
    queue: deque[SqEntry] = field(default_factory=deque)  # guarded by Npu._dispatch_lock
    lock: threading.Lock = field(default_factory=threading.Lock)  # held while it runs a job
    # A RESET of this core; a SharedAbort when a worker process runs its jobs.
    abort: threading.Event | SharedAbort = field(default_factory=threading.Event)
    aborted_cycles: int | None = None  # instructions of the job a RESET aborted, None if none
    # Its own caches (cores share no decode state); a RemoteProcessor in process mode.
    processor: CommandProcessor | RemoteProcessor | None = None
    jobs_done: int = 0
    thread: threading.Thread | None = None
    worker: CoreWorker | None = None  # process mode: the process that executes its jobs
    started: threading.Event = field(default_factory=threading.Event)  # its thread is serving
    start_error: str = ""  # why its worker did not start
    # Took an entry and has not written its completion yet (guarded by Npu._dispatch_lock when set).
    busy: bool = False


def _eventfd_drain(fd: int) -> bool:
    """Consume an eventfd's count; False if it was zero (another thread took it)."""
    try:
        os.eventfd_read(fd)
    except BlockingIOError:
        return False
    return True


class Npu:
    """One NPU. ``bar2`` is the shared register/ring memory, ``memory`` the DMA target."""

    def __init__(
        self,
        bar2: memoryview,
        memory: SystemMemory,
        raise_irq: Callable[[int], None],
        device_peer: int = 0,
        queue_fds: Sequence[int] | None = None,
        fw_pubkey: Ed25519PublicKey | None = None,
        num_cores: int = DEFAULT_CORES,
        core_processes: bool = False,
    ) -> None:
        mv = memoryview(bar2).cast("B")
        if mv.readonly or len(mv) < hw.BAR2_SIZE:
            raise ValueError(f"BAR2 must be a writable buffer of at least {hw.BAR2_SIZE} bytes")
        if not 1 <= num_cores <= hw.MAX_CORES:
            raise ValueError(f"num_cores {num_cores} is not 1..{hw.MAX_CORES}")
        if sys.byteorder != "little":
            raise RuntimeError(
                "the device model's registers are little-endian words: a big-endian host is not supported"
            )
        if core_processes:
            check_shareable(memory)
        self.core_processes = core_processes
        self._bar = mv
        # Registers as native-order words: the device model runs on little-endian hosts only
        # (x86-64, arm64), and a memoryview's item is a plain int, 5x quicker to read than numpy's.
        self._u32 = mv[: hw.BAR2_SIZE].cast("I")
        self._u64 = mv[: hw.BAR2_SIZE].cast("Q")
        self.memory = memory
        self._raise_irq = raise_irq
        # The boot ROM's key: a real device has it fused in; None means the development key.
        self._fw_pubkey = fw_pubkey
        self.last_result: JobResult | None = None  # for debugging and tests
        self._pending = 0
        self._kick_lock = threading.Lock()
        self._kicked = threading.Event()
        # The queue doorbells, one per possible core: QEMU's eventfds for the queue vectors, or our
        # own (then a core the device lacks shares core 0's).
        if queue_fds is None:
            self._own_queue_fds = [os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) for _ in range(num_cores)]
            self._queue_fds = self._own_queue_fds + [self._own_queue_fds[0]] * (hw.MAX_CORES - num_cores)
        elif len(queue_fds) != hw.MAX_CORES:
            raise ValueError(f"queue_fds must be {hw.MAX_CORES} eventfds, one per possible core")
        else:
            self._own_queue_fds = []
            self._queue_fds = list(queue_fds)
        self._stop = threading.Event()
        self._dispatch_lock = threading.Lock()  # SQ_HEAD and the cores' queues
        self._cq_lock = threading.Lock()  # the completion queue and REG_JOBS_DONE
        self._reg_lock = threading.Lock()  # read-modify-write device counters (REG_IRQ_*)
        absent = tuple(dict.fromkeys(self._queue_fds[num_cores:]))  # rung by no core of this device
        self.cores = [
            Core(
                i,
                os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC),
                doorbells=tuple(dict.fromkeys((self._queue_fds[i], *(absent if i == 0 else ())))),
            )
            for i in range(num_cores)
        ]
        if not core_processes:
            # Paid here, once (each worker process pays it itself): the first job must not wait
            # for the MAC array's import, or its build on first use, past the job timeout.
            mac_array.library()
        if core_processes:
            for core in self.cores:
                core.abort = SharedAbort()
                core.worker = CoreWorker(memory, core.index, core.abort)
        self.faults: FaultInjector | None = None  # fault injection (device_model.faults), off by default
        # Power (hw_layout "Power"): on from the start, the first power-up counted.
        self._powered = True
        self._power_ups = 1
        self._powered_ns = 0  # time powered on before the current power-on
        self._on_since = time.monotonic_ns()
        # The command processors a POWER_OFF or BOOT put aside, with the limits they were built
        # for (_set_processors): a BOOT of the same limits takes them back.
        self._spec: ProcessorSpec | None = None
        self._set_aside: tuple[ProcessorSpec, list[CommandProcessor | RemoteProcessor]] | None = None

        # Device-owned state starts from zero; the identification block is
        # filled last with MAGIC so a driver that sees MAGIC sees the rest.
        for reg in (hw.REG_FW_VERSION, hw.REG_STATUS, hw.REG_RESET_COUNT, hw.REG_JOBS_DONE):
            self._w32(reg, 0)
        for reg in (
            hw.REG_IRQ_COUNT,
            hw.REG_IRQ_VALUE,
            hw.REG_CMD_STATUS,
            hw.REG_ABORT_CYCLES,
            hw.SQ_HEAD,
            hw.CQ_TAIL,
        ):
            self._w32(reg, 0)
        self._w32(hw.REG_FW_REJECT, hw.FW_REJECT_NONE)
        self._w64(hw.REG_FW_BUILD_ID, 0)
        self._w32(hw.REG_CMD_ACK, self._r32(hw.REG_CMD_SEQ))
        self._w32(hw.SQ_HEAD, self._r32(hw.SQ_TAIL))
        self._w32(hw.CQ_TAIL, self._r32(hw.CQ_HEAD))
        self._w32(hw.REG_DEVICE_ID, hw.DEVICE_ID)
        self._w32(hw.REG_REVISION, hw.DEVICE_REVISION)
        self._w32(hw.REG_ISA_VERSION, isa.SPEC.version)
        self._w32(hw.REG_DEVICE_PEER, device_peer)
        self._w32(hw.REG_VA_BITS, hw.VA_BITS)
        self._w32(hw.REG_CAPS, CAPS)
        self._w32(hw.REG_NUM_CORES, num_cores)
        self._w32(hw.REG_POWER_STATE, hw.POWER_ON)
        self._w32(hw.REG_POWER_UPS, self._power_ups)
        self._w64(hw.REG_POWERED_US, 0)
        self._w32(hw.REG_MAGIC, hw.MAGIC)

        self._control_thread = threading.Thread(target=self._control_loop, name="vnpu-control", daemon=True)
        self._control_thread.start()
        for core in self.cores:
            core.thread = threading.Thread(
                target=self._core_loop, args=(core,), name=f"vnpu-core{core.index}", daemon=True
            )
            core.thread.start()
        # Process mode: every worker is up (numpy and the MAC array imported) before the device is.
        for core in self.cores:
            core.started.wait()
        failed = [c.start_error for c in self.cores if c.start_error]
        if failed:
            self.close()
            raise CoreWorkerError(failed[0])
        if core_processes:
            pids = ", ".join(str(c.worker.pid) for c in self.cores if c.worker is not None)
            log.info("%d cores, each in a worker process (pids %s)", num_cores, pids)

    @property
    def num_cores(self) -> int:
        return len(self.cores)

    # --- registers ----------------------------------------------------------------
    def _r32(self, off: int) -> int:
        return self._u32[off >> 2]

    def _w32(self, off: int, value: int) -> None:
        self._u32[off >> 2] = value & _U32

    def _r64(self, off: int) -> int:
        return self._u64[off >> 3]

    def _w64(self, off: int, value: int) -> None:
        self._u64[off >> 3] = value & 0xFFFF_FFFF_FFFF_FFFF

    def _irq(self, vector: int) -> None:
        try:
            self._raise_irq(vector)
        except Exception:  # the interrupt path must not kill the device
            log.exception("raise_irq(%d) failed", vector)

    @property
    def queue_kicks(self) -> int:
        """Wake-ups of the core threads by their queue doorbells."""
        return sum(c.doorbell_wakes for c in self.cores)

    @property
    def ready(self) -> bool:
        return bool(self._r32(hw.REG_STATUS) & hw.STATUS_READY)

    # --- doorbell -----------------------------------------------------------------
    def kick(self, vector: int) -> None:
        """The doorbell: note the vector and return at once. Kicks coalesce."""
        if vector in hw.QUEUE_VECTORS:
            os.eventfd_write(self._queue_fds[vector - hw.VEC_QUEUE], 1)
        elif vector == hw.VEC_CONTROL and self._r32(hw.REG_CMD) == hw.CMD_NOP:
            # Acknowledged here, with no thread hand-off: the doorbell -> MSI-X floor that a
            # job's round trip is measured against (bench --kernel).
            seq = self._r32(hw.REG_CMD_SEQ)
            if seq != self._r32(hw.REG_CMD_ACK):
                self._update_powered_us()
                self._w32(hw.REG_CMD_STATUS, 0)
                self._w32(hw.REG_CMD_ACK, seq)
                self._irq(hw.IRQ_CONTROL)
        elif vector == hw.VEC_CONTROL:
            with self._kick_lock:
                self._pending |= 1 << vector
                self._kicked.set()
        else:
            log.warning("doorbell with unknown vector %d ignored", vector)

    def close(self) -> None:
        """Stop every thread (running jobs are aborted without a completion)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._kicked.set()
        for core in self.cores:
            core.abort.set()
            os.eventfd_write(core.wake, 1)
        for t in (self._control_thread, *(c.thread for c in self.cores)):
            if t is not None and t is not threading.current_thread():
                t.join(timeout=10)
        for core in self.cores:
            if core.thread is None or not core.thread.is_alive():
                os.close(core.wake)
                if isinstance(core.abort, SharedAbort):
                    core.abort.close()
        for fd in self._own_queue_fds:
            os.close(fd)

    def __enter__(self) -> Npu:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- control ------------------------------------------------------------------
    def _control_loop(self) -> None:
        while True:
            self._kicked.wait()
            if self._stop.is_set():
                return
            with self._kick_lock:
                pending, self._pending = self._pending, 0
                self._kicked.clear()
            if pending & (1 << hw.VEC_CONTROL):
                self._serve_control()

    def _serve_control(self) -> None:
        seq = self._r32(hw.REG_CMD_SEQ)
        if seq == self._r32(hw.REG_CMD_ACK):
            return  # a coalesced or spurious kick: nothing new
        cmd = self._r32(hw.REG_CMD)
        fault = self.faults.next_command() if self.faults is not None else None
        if fault == "bad_cmd":
            status = 1  # outside the contract: the driver must not take it for success
        elif cmd == hw.CMD_BOOT:
            status = self._boot(self._r64(hw.REG_CMD_ARG0), self._r64(hw.REG_CMD_ARG1))
        elif cmd == hw.CMD_RESET:
            status = self._reset(self._r64(hw.REG_CMD_ARG0))
        elif cmd == hw.CMD_POWER:
            status = self._power(self._r64(hw.REG_CMD_ARG0))
        elif cmd == hw.CMD_NOP:
            status = 0
        else:
            log.warning("unknown control command %d", cmd)
            status = -errno.EINVAL
        if fault == "early_cq":
            self._phantom_completions()
        self._update_powered_us()
        self._w32(hw.REG_CMD_STATUS, status)
        self._w32(hw.REG_CMD_ACK, seq)
        self._irq(hw.IRQ_CONTROL)

    def _phantom_completions(self) -> None:
        """The "early_cq" fault: a completion of seqno 1 (a driver's first job) on every core, for
        no job, and the completion interrupt, while the driver waits for a control command."""
        with self._cq_lock:
            for core in self.cores:
                tail = self._r32(hw.CQ_TAIL)
                if (tail - self._r32(hw.CQ_HEAD)) & _U32 >= hw.CQ_ENTRIES:
                    break
                entry = hw.CQ_BASE + (tail % hw.CQ_ENTRIES) * hw.CQ_ENTRY_SIZE
                CQE.pack_into(self._bar, entry, 1, 0, core.index, 0, 0)
                self._w32(hw.CQ_TAIL, tail + 1)
        self._irq(hw.IRQ_COMPLETION)

    def _boot(self, pa: int, size: int) -> int:
        """The boot ROM: check the image (signature included) and run it, or stay rejected.

        A rejected image leaves no firmware running (jobs fail with -EIO), STATUS_FW_ERROR
        set and the reason in REG_FW_REJECT; the control command's status is -ENOEXEC
        (-EFAULT when the image is not in system memory).
        """
        from uapi.firmware_format import FirmwareError, parse_image

        if not self._powered:
            log.warning("BOOT while powered off refused")
            return -errno.EPERM
        self._set_processors(None)
        self._w32(hw.REG_FW_VERSION, 0)
        self._w64(hw.REG_FW_BUILD_ID, 0)
        self._w32(hw.REG_STATUS, 0)
        try:
            if not 0 < size <= hw.FW_MAX_SIZE:
                raise FirmwareError(f"image size {size} is not in (0, {hw.FW_MAX_SIZE}]", hw.FW_REJECT_SIZE)
            parsed = parse_image(self.memory.view(pa, size), self._fw_pubkey)
        except FirmwareError as e:
            log.warning("firmware rejected (%s): %s", e.reason_name, e)
            return self._reject(e.reason, -errno.ENOEXEC)
        except PhysicalAddressError as e:
            log.warning("firmware image unreadable: %s", e)
            return self._reject(hw.FW_REJECT_UNREADABLE, -errno.EFAULT)
        image = parsed.image
        self._set_processors(
            ProcessorSpec.of(
                image.enabled_opcodes, image.limits.max_cmd_size, image.limits.max_tensor_elements
            )
        )
        self._w32(hw.REG_FW_REJECT, hw.FW_REJECT_NONE)
        self._w32(hw.REG_FW_VERSION, image.fw_version)
        self._w64(hw.REG_FW_BUILD_ID, parsed.build_id)
        self._w32(hw.REG_STATUS, hw.STATUS_READY)
        log.info(
            "firmware %s booted (build id %016x, %s)", image.fw_version_str, parsed.build_id, image.build_tag
        )
        return 0

    def _reject(self, reason: int, status: int) -> int:
        self._w32(hw.REG_FW_REJECT, reason)
        self._w32(hw.REG_STATUS, hw.STATUS_FW_ERROR)
        return status

    @property
    def powered(self) -> bool:
        """REG_POWER_STATE is POWER_ON."""
        return self._powered

    def _update_powered_us(self) -> None:
        with self._reg_lock:
            total = self._powered_ns
            if self._powered:
                total += time.monotonic_ns() - self._on_since
            self._w64(hw.REG_POWERED_US, total // 1000)

    def _power(self, state: int) -> int:
        """CMD_POWER: on, or off when nothing is queued or running (hw_layout "Power")."""
        if state not in (hw.POWER_ON, hw.POWER_OFF):
            log.warning("CMD_POWER with state %d", state)
            return -errno.EINVAL
        if (state == hw.POWER_ON) == self._powered:
            return 0
        with self._dispatch_lock, self._cq_lock:
            if state == hw.POWER_OFF:
                busy = [c.index for c in self.cores if c.busy or c.queue]
                if busy or self._r32(hw.SQ_TAIL) != self._r32(hw.SQ_HEAD):
                    log.info("POWER_OFF refused: cores %s busy or entries not taken", busy)
                    return -errno.EBUSY
                if self._r32(hw.CQ_TAIL) != self._r32(hw.CQ_HEAD):
                    log.info("POWER_OFF refused: completions not consumed")
                    return -errno.EBUSY
                self._powered = False
                with self._reg_lock:
                    self._powered_ns += time.monotonic_ns() - self._on_since
                self._set_processors(None)  # the firmware goes (the emulator's caches wait)
                self._w32(hw.REG_STATUS, 0)
                self._w32(hw.REG_FW_VERSION, 0)
                self._w64(hw.REG_FW_BUILD_ID, 0)
                self._w32(hw.REG_POWER_STATE, hw.POWER_OFF)
                log.info("powered off")
                return 0
            for reg in (hw.SQ_HEAD, hw.SQ_TAIL, hw.CQ_HEAD, hw.CQ_TAIL, hw.REG_JOBS_DONE):
                self._w32(reg, 0)
            self._power_ups += 1
            self._on_since = time.monotonic_ns()
            self._powered = True
            self._w32(hw.REG_POWER_UPS, self._power_ups)
            self._w32(hw.REG_POWER_STATE, hw.POWER_ON)
            log.info("powered on (power-up %d)", self._power_ups)
        return 0

    def _set_processors(self, spec: ProcessorSpec | None) -> None:
        """The cores' command processors for the firmware's limits, or none (jobs fail with -EIO).

        None puts the processors aside; a spec takes them back when it is the one they were built
        for, else it builds new ones. What a processor caches (decoded streams, translations,
        bound instructions, layer plans) is the emulator's, not the NPU's state: each entry is
        checked against memory at every use, so it stays right across a power cycle, and a
        resume costs a firmware boot instead of planning every stream again (a MobileNet's first
        job after a power-up took 60-80 ms on the shim against 5-6 ms)."""
        if spec is None:
            current = [core.processor for core in self.cores if core.processor is not None]
            if self._spec is not None and len(current) == len(self.cores):
                self._set_aside = (self._spec, current)
            self._spec = None
            for core in self.cores:
                core.processor = None
            return
        kept = self._set_aside[1] if self._set_aside is not None and self._set_aside[0] == spec else None
        self._set_aside = None
        self._spec = spec
        for i, core in enumerate(self.cores):
            if kept is not None:
                core.processor = kept[i]
            elif core.worker is not None:
                core.processor = core.worker.processor(spec)  # sent to the worker with its next job
            else:
                core.processor = spec.build(self.memory)

    def _reset(self, mask: int) -> int:
        """CMD_RESET: ARG0 names the cores (0: all); the others go on as if nothing happened."""
        every = (1 << len(self.cores)) - 1
        if mask & ~every:
            log.warning("RESET of cores %#x: the device has %d", mask, len(self.cores))
            return -errno.EINVAL
        cores = [c for c in self.cores if (mask or every) >> c.index & 1]
        for core in cores:
            core.aborted_cycles = None
            core.abort.set()  # a running job ends at its next instruction or WAIT poll
        for core in cores:  # ... and its core lets go (ascending order: see _core_loop)
            core.lock.acquire()
        try:
            with self._dispatch_lock:
                # Entries not yet taken belong to their cores: those of the reset ones are dropped.
                self._dispatch()
                self._w32(hw.SQ_HEAD, self._r32(hw.SQ_TAIL))
                for core in cores:
                    core.queue.clear()
            aborted = [c.aborted_cycles for c in cores if c.aborted_cycles is not None]
            self._w32(hw.REG_ABORT_CYCLES, aborted[0] if aborted else 0)
            for core in cores:
                core.abort.clear()
            self._w32(hw.REG_RESET_COUNT, self._r32(hw.REG_RESET_COUNT) + 1)
        finally:
            for core in reversed(cores):
                core.lock.release()
        return 0

    # --- execution ----------------------------------------------------------------
    def _dispatch(self, taker: Core | None = None) -> None:
        """Move the submission queue's new entries to their cores' queues (call with _dispatch_lock).

        Each core that got entries is woken, but ``taker``: the core whose lock the caller holds and
        whose queue it runs until it is empty."""
        if not self._powered:
            return  # queue doorbells are ignored: the entries stay where they are
        regs = self._u32
        head = regs[_SQ_HEAD_WORD]
        tail = regs[_SQ_TAIL_WORD]
        if head == tail:
            return
        if (tail - head) & _U32 > hw.SQ_ENTRIES:
            log.error("SQ_TAIL %d is more than %d entries past SQ_HEAD %d", tail, hw.SQ_ENTRIES, head)
            return
        woken: set[int] = set()
        while head != tail:
            # The entry was written whole before the tail moved past it: one read of its fields.
            entry = hw.SQ_BASE + (head % hw.SQ_ENTRIES) * hw.SQ_ENTRY_SIZE
            seqno, pt_root, cmd_va, cmd_size, flags, _, core = SQE.unpack_from(self._bar, entry)
            sqe = SqEntry(seqno, pt_root, cmd_va, cmd_size, flags, core)
            # A core the device lacks: core 0 fails the job (_run), in the queue's order.
            target = self.cores[sqe.core] if sqe.core < len(self.cores) else self.cores[0]
            target.queue.append(sqe)
            woken.add(target.index)
            head = (head + 1) & _U32
        regs[_SQ_HEAD_WORD] = head
        for index in woken:
            if taker is None or index != taker.index:
                os.eventfd_write(self.cores[index].wake, 1)

    def _take(self, core: Core) -> SqEntry | None:
        with self._dispatch_lock:
            self._dispatch(core)
            if core.abort.is_set() or not core.queue:
                return None  # idle, or a RESET of this core is under way: it owns the queue
            core.busy = True
            return core.queue.popleft()

    def _wait_kick(self, core: Core) -> None:
        """Block until the core's queue doorbell rings or entries arrive for it (counts coalesce)."""
        ready, _, _ = select.select([*core.doorbells, core.wake], [], [])
        if core.wake in ready:
            _eventfd_drain(core.wake)
        for fd in core.doorbells:
            if fd in ready and _eventfd_drain(fd):
                core.doorbell_wakes += 1

    def _core_loop(self, core: Core) -> None:
        if core.worker is not None:
            # Started by this thread: the worker dies with it (PR_SET_PDEATHSIG), never orphaned.
            try:
                core.worker.start()
            except CoreWorkerError as e:
                core.start_error = str(e)
        core.started.set()
        if core.start_error:
            return
        try:
            self._serve_core(core)
        finally:
            if core.worker is not None:
                core.worker.close()

    def _serve_core(self, core: Core) -> None:
        while not self._stop.is_set():
            # The core's lock, then the dispatch lock: the order _reset takes them in too.
            with core.lock:
                sqe = self._take(core)
                if sqe is not None:
                    try:
                        self._run(core, sqe)
                    except Exception:
                        log.exception("core %d: unexpected error", core.index)
                    core.busy = False  # completed (then already clear), aborted or failed
                    continue
            self._wait_kick(core)

    def run_here(self, index: int) -> bool:
        """Run core ``index``'s jobs in the calling thread if the core is idle; False if it is not.

        The in-process driver's doorbell without a thread hand-off: the driver has written the
        core's entry to the submission queue and, instead of waking the core's thread, runs the
        core's queue here, under the core's lock, exactly as that thread would (in order, one job
        at a time, each completed through the CQ and the interrupt). False, and nothing run, when
        the core's thread or another caller holds the core (the driver then rings the doorbell),
        when a worker process runs the core's jobs, or while faults may be injected (a hang must not
        block the caller)."""
        core = self.cores[index]
        if core.worker is not None or self._injecting() or self._stop.is_set():
            return False
        if not core.lock.acquire(blocking=False):
            return False
        try:
            while (sqe := self._take(core)) is not None:
                try:
                    self._run(core, sqe)
                except Exception:
                    log.exception("core %d: unexpected error", core.index)
                core.busy = False  # as _serve_core: completed, aborted or failed
                if not core.queue and self._u32[_SQ_TAIL_WORD] == self._u32[_SQ_HEAD_WORD]:
                    break  # nothing new: an entry written from now on rings the doorbell
        finally:
            core.lock.release()
        return True

    def _injecting(self) -> bool:
        """Faults may be injected into the next job (which then must not run in a driver's thread:
        a hang would block it)."""
        return self.faults is not None and not self.faults.off

    def prepare(self, index: int, pt_root: int, stream: bytes) -> PreparedJob | None:
        """Core ``index``'s :class:`PreparedJob` of ``stream`` in the space at ``pt_root`` (None
        unless that core's last run of it left it bound; see :meth:`run_prepared`)."""
        processor = self.cores[index].processor if index < len(self.cores) else None
        if not isinstance(processor, CommandProcessor):
            return None
        return processor.prepare(pt_root, stream)

    def run_prepared(self, index: int, prepared: PreparedJob, admit: Callable[[], bool]) -> JobResult | None:
        """Run a job the in-process driver prepared (:meth:`prepare`) on core ``index``, in the
        calling thread and without the rings: the driver's replay of a job it validated before.

        The core must be idle with nothing queued for it, and still hold the command processor
        that prepared the job, whose state must be :meth:`PreparedJob.current`; then ``admit`` (the
        driver's bookkeeping of the job, which may decline) runs under the core's lock, and the
        job runs as the core would run it from its queue: its counters as a completion moves them,
        no completion entry and no interrupt (the caller completes the job itself). None, and
        nothing run, when any of it does not hold: the driver then submits through the ring. A
        RESET during the run aborts it as any job (its result is returned, no counter moves)."""
        core = self.cores[index]
        if core.worker is not None or self._injecting() or self._stop.is_set():
            return None
        if not core.lock.acquire(blocking=False):
            return None
        try:
            with self._dispatch_lock:
                idle = not (core.busy or core.queue or core.abort.is_set())
                if not (idle and self._powered and core.processor is prepared.processor):
                    return None
                if self._u32[_SQ_TAIL_WORD] != self._u32[_SQ_HEAD_WORD]:
                    return None  # entries not yet taken may be this core's: they run first
                core.busy = True
            try:
                if not prepared.current() or not admit():
                    return None
                probe.mark("core.start")
                result = prepared.run(core.abort, self._on_irq_instruction)
                probe.mark("core.end")
                self.last_result = result
                if result.status:
                    log.info("job failed on core %d: %d %s", core.index, result.status, result.error)
                if core.abort.is_set():
                    core.aborted_cycles = result.cycles
                    return result
                with self._cq_lock:  # the counters _write_cqe moves
                    self._w32(hw.REG_JOBS_DONE, self._r32(hw.REG_JOBS_DONE) + 1)
                    core.jobs_done += 1
                    self._update_powered_us()
                return result
            finally:
                core.busy = False
        finally:
            core.lock.release()

    def _run(self, core: Core, sqe: SqEntry) -> None:
        """Run one job on ``core`` (its lock held) and complete it, unless a RESET aborts it."""
        processor = core.processor
        fault = self.faults.next_job() if self.faults is not None else None
        if fault == "hang":
            core.abort.wait()  # until a reset (or close) takes the core
            return
        if fault == "kill":
            self.faults.kill_device_model()  # type: ignore[union-attr]
        started = time.perf_counter()
        if processor is None:
            result = JobResult(-errno.EIO, 0, 0, "firmware not booted")
        elif sqe.flags:
            result = JobResult(-errno.EIO, 0, 0, f"submission flags {sqe.flags:#x} are not 0")
        elif sqe.core != core.index:
            result = JobResult(-errno.EIO, 0, 0, f"core {sqe.core} is not below {len(self.cores)}")
        elif fault == "mmu_fault":
            result = JobResult(-errno.EFAULT, sqe.cmd_va, 0, "injected MMU fault")
        else:
            on_irq = self._on_irq_instruction
            probe.mark("core.start")
            result = processor.run(sqe.pt_root, sqe.cmd_va, sqe.cmd_size, core.abort, on_irq)
            probe.mark("core.end")
        if fault == "slow" and self.faults is not None:
            busy = (self.faults.spec.slow_factor - 1) * (time.perf_counter() - started)
            if core.abort.wait(busy):
                return
        elif fault == "bad_status" and self.faults is not None:
            status, fault_va = self.faults.bad_status()
            result = JobResult(status, fault_va, result.cycles, "injected bad status")
        self.last_result = result
        if result.status:
            log.info("job %d failed on core %d: %d %s", sqe.seqno, core.index, result.status, result.error)
        if core.abort.is_set():
            # Where the aborted job was (a crash dump marks its instruction); no completion.
            core.aborted_cycles = result.cycles
            return
        self._complete(core, sqe.seqno, result, fault)

    def _on_irq_instruction(self, value: int) -> None:
        with self._reg_lock:
            self._w32(hw.REG_IRQ_COUNT, self._r32(hw.REG_IRQ_COUNT) + 1)
            self._w32(hw.REG_IRQ_VALUE, value)

    def _complete(self, core: Core, seqno: int, result: JobResult, fault: str | None = None) -> bool:
        """Write a completion once the CQ has room; False if the core was reset while waiting.

        ``fault`` "garbage_cq" writes random bytes instead of the entry, "drop_irq" raises no
        interrupt for it (device_model.faults).
        """
        while True:
            with self._cq_lock:
                tail = self._r32(hw.CQ_TAIL)
                if (tail - self._r32(hw.CQ_HEAD)) & _U32 < hw.CQ_ENTRIES:
                    self._write_cqe(core, tail, seqno, result, fault)
                    break
            if core.abort.wait(_CQ_POLL_S):
                return False
        if fault != "drop_irq":
            self._irq(hw.IRQ_COMPLETION)
        return True

    def _write_cqe(self, core: Core, tail: int, seqno: int, result: JobResult, fault: str | None) -> None:
        entry = hw.CQ_BASE + (tail % hw.CQ_ENTRIES) * hw.CQ_ENTRY_SIZE
        if fault == "garbage_cq" and self.faults is not None:
            for off, word in enumerate(np.frombuffer(self.faults.garbage(hw.CQ_ENTRY_SIZE), "<u8")):
                self._w64(entry + 8 * off, int(word))
        else:  # the whole entry, before the tail moves past it
            CQE.pack_into(self._bar, entry, seqno, result.status, core.index, result.fault_va, result.cycles)
        core.busy = False  # idle as soon as the driver can see the completion
        self._w32(hw.CQ_TAIL, tail + 1)
        self._w32(hw.REG_JOBS_DONE, self._r32(hw.REG_JOBS_DONE) + 1)
        core.jobs_done += 1
        self._update_powered_us()
