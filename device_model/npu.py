"""The NPU device front-end: BAR2 registers, control mailbox and job rings.

Exactly the contract of device_model/hw_layout.py (docs/hardware.md). The
driver (vnpu.ko in a QEMU guest, or libaccel's shim in-process) writes
registers and ring entries into BAR2 and rings the doorbell; ``kick`` is
that doorbell. Two threads serve it:

* the control thread takes control kicks: it performs control commands
  (BOOT, RESET) at once;
* the execution thread takes queue kicks: it drains the submission queue,
  one job at a time, through the command processor, and writes completions.

A queue kick wakes the execution thread directly: every thread hand-off is a
wake-up plus a GIL transfer, tens of microseconds on a busy host, and the
empty-job round trip is mostly such hand-offs. Given ``queue_fd`` (the
ivshmem server passes QEMU's eventfd of the queue vector), the execution
thread blocks on that eventfd itself, so a guest doorbell reaches it with no
thread in between.

Keeping them apart is what lets a RESET be served while a job hangs in
WAIT: the control thread sets the abort event, the job ends, and no
completion is written for it or for anything still queued.

BAR2 is shared with another process (the guest), so every register access
is one aligned 32- or 64-bit load or store through numpy views, and ring
indices are read once before the entries they cover.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from uapi import isa

from . import hw_layout as hw
from .command_processor import CommandProcessor, JobResult
from .faults import FaultInjector
from .memory import PhysicalAddressError, SystemMemory

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

log = logging.getLogger(__name__)

CAPS = (1 << 0) | (1 << 1) | (1 << 2)  # uapi DRM_VNPU_CAP_READ_ONLY_BO | PER_CHANNEL_QUANT | RESET_RECOVERY
_U32 = 0xFFFF_FFFF
_CQ_POLL_S = 0.001


class Npu:
    """One NPU. ``bar2`` is the shared register/ring memory, ``memory`` the DMA target."""

    def __init__(
        self,
        bar2: memoryview,
        memory: SystemMemory,
        raise_irq: Callable[[int], None],
        device_peer: int = 0,
        queue_fd: int | None = None,
        fw_pubkey: Ed25519PublicKey | None = None,
    ) -> None:
        mv = memoryview(bar2).cast("B")
        if mv.readonly or len(mv) < hw.BAR2_SIZE:
            raise ValueError(f"BAR2 must be a writable buffer of at least {hw.BAR2_SIZE} bytes")
        self._u32 = np.frombuffer(mv, dtype="<u4", count=hw.BAR2_SIZE // 4)
        self._u64 = np.frombuffer(mv, dtype="<u8", count=hw.BAR2_SIZE // 8)
        self.memory = memory
        self._raise_irq = raise_irq
        # The boot ROM's key: a real device has it fused in; None means the development key.
        self._fw_pubkey = fw_pubkey
        self._processor: CommandProcessor | None = None  # set by a successful BOOT
        self.last_result: JobResult | None = None  # for debugging and tests
        self._pending = 0
        self._kick_lock = threading.Lock()
        self._kicked = threading.Event()
        self._queue_kicked = threading.Event()
        self._queue_fd = queue_fd  # an eventfd the queue doorbell signals, or None
        self.queue_kicks = 0  # wake-ups of the execution thread by a queue doorbell
        self._abort = threading.Event()
        self._stop = threading.Event()
        self._exec_lock = threading.Lock()  # held while one queue entry is being executed
        self.faults: FaultInjector | None = None  # fault injection (device_model.faults), off by default

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
        self._w32(hw.REG_MAGIC, hw.MAGIC)

        self._control_thread = threading.Thread(target=self._control_loop, name="vnpu-control", daemon=True)
        self._exec_thread = threading.Thread(target=self._exec_loop, name="vnpu-exec", daemon=True)
        self._control_thread.start()
        self._exec_thread.start()

    # --- registers ----------------------------------------------------------------
    def _r32(self, off: int) -> int:
        return int(self._u32[off >> 2])

    def _w32(self, off: int, value: int) -> None:
        self._u32[off >> 2] = value & _U32

    def _r64(self, off: int) -> int:
        return int(self._u64[off >> 3])

    def _w64(self, off: int, value: int) -> None:
        self._u64[off >> 3] = value & 0xFFFF_FFFF_FFFF_FFFF

    def _irq(self, vector: int) -> None:
        try:
            self._raise_irq(vector)
        except Exception:  # the interrupt path must not kill the device
            log.exception("raise_irq(%d) failed", vector)

    @property
    def ready(self) -> bool:
        return bool(self._r32(hw.REG_STATUS) & hw.STATUS_READY)

    # --- doorbell -----------------------------------------------------------------
    def kick(self, vector: int) -> None:
        """The doorbell: note the vector and return at once. Kicks coalesce."""
        if vector == hw.VEC_QUEUE:
            if self._queue_fd is not None:
                os.eventfd_write(self._queue_fd, 1)
            else:
                self._queue_kicked.set()
        elif vector == hw.VEC_CONTROL and self._r32(hw.REG_CMD) == hw.CMD_NOP:
            # Acknowledged here, with no thread hand-off: the doorbell -> MSI-X floor that a
            # job's round trip is measured against (bench --kernel).
            seq = self._r32(hw.REG_CMD_SEQ)
            if seq != self._r32(hw.REG_CMD_ACK):
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
        """Stop both threads (a running job is aborted without a completion)."""
        self._stop.set()
        self._abort.set()
        self._kicked.set()
        self._queue_kicked.set()
        if self._queue_fd is not None:
            os.eventfd_write(self._queue_fd, 1)
        for t in (self._control_thread, self._exec_thread):
            if t is not threading.current_thread():
                t.join(timeout=10)

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
        if cmd == hw.CMD_BOOT:
            status = self._boot(self._r64(hw.REG_CMD_ARG0), self._r64(hw.REG_CMD_ARG1))
        elif cmd == hw.CMD_RESET:
            status = self._reset()
        elif cmd == hw.CMD_NOP:
            status = 0
        else:
            log.warning("unknown control command %d", cmd)
            status = -errno.EINVAL
        self._w32(hw.REG_CMD_STATUS, status)
        self._w32(hw.REG_CMD_ACK, seq)
        self._irq(hw.IRQ_CONTROL)

    def _boot(self, pa: int, size: int) -> int:
        """The boot ROM: check the image (signature included) and run it, or stay rejected.

        A rejected image leaves no firmware running (jobs fail with -EIO), STATUS_FW_ERROR
        set and the reason in REG_FW_REJECT; the control command's status is -ENOEXEC
        (-EFAULT when the image is not in system memory).
        """
        from firmware_tools.image import FirmwareError, parse_image

        self._processor = None
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
        self._processor = CommandProcessor(
            self.memory, image.enabled_opcodes, image.limits.max_cmd_size, image.limits.max_tensor_elements
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
    def fw_reject_reason(self) -> int:
        """REG_FW_REJECT: why the last BOOT failed (hw_layout.FW_REJECT_*), 0 after a good one."""
        return self._r32(hw.REG_FW_REJECT)

    def _reset(self) -> int:
        self._w32(hw.REG_ABORT_CYCLES, 0)  # the execution thread sets it if a job was running
        self._abort.set()  # a running job ends at its next instruction or WAIT poll
        with self._exec_lock:  # ... and the execution thread lets go of the queue
            self._w32(hw.SQ_HEAD, self._r32(hw.SQ_TAIL))
            self._abort.clear()
            self._w32(hw.REG_RESET_COUNT, self._r32(hw.REG_RESET_COUNT) + 1)
        return 0

    # --- execution ----------------------------------------------------------------
    def _wait_queue_kick(self) -> None:
        """Block until the queue doorbell rings (counts coalesce: one wake-up covers every ring)."""
        if self._queue_fd is None:
            self._queue_kicked.wait()
            self._queue_kicked.clear()
        else:
            # The eventfd is non-blocking (QEMU shares its file description): poll, then drain it.
            select.select([self._queue_fd], [], [])
            try:
                os.eventfd_read(self._queue_fd)
            except BlockingIOError:
                pass
        self.queue_kicks += 1

    def _exec_loop(self) -> None:
        while True:
            self._wait_queue_kick()
            if self._stop.is_set():
                return
            try:
                self._drain()
            except Exception:
                log.exception("execution thread: unexpected error")

    def _drain(self) -> None:
        while not self._stop.is_set():
            with self._exec_lock:
                head = self._r32(hw.SQ_HEAD)
                tail = self._r32(hw.SQ_TAIL)
                if head == tail:
                    return
                if (tail - head) & _U32 > hw.SQ_ENTRIES:
                    log.error("SQ_TAIL %d is more than %d entries past SQ_HEAD %d", tail, hw.SQ_ENTRIES, head)
                    return
                entry = hw.SQ_BASE + (head % hw.SQ_ENTRIES) * hw.SQ_ENTRY_SIZE
                seqno = self._r64(entry + hw.SQE_SEQNO)
                pt_root = self._r64(entry + hw.SQE_PT_ROOT)
                cmd_va = self._r64(entry + hw.SQE_CMD_VA)
                cmd_size = self._r32(entry + hw.SQE_CMD_SIZE)
                flags = self._r32(entry + hw.SQE_FLAGS)
                processor = self._processor
                fault = self.faults.next_job() if self.faults is not None else None
                if fault == "hang":
                    self._abort.wait()  # until a reset (or close) takes the queue
                    return
                if fault == "kill":
                    self.faults.kill_device_model()  # type: ignore[union-attr]
                started = time.perf_counter()
                if processor is None:
                    result = JobResult(-errno.EIO, 0, 0, "firmware not booted")
                elif flags:
                    result = JobResult(-errno.EIO, 0, 0, f"submission flags {flags:#x} are not 0")
                elif fault == "mmu_fault":
                    result = JobResult(-errno.EFAULT, cmd_va, 0, "injected MMU fault")
                else:
                    result = processor.run(pt_root, cmd_va, cmd_size, self._abort, self._on_irq_instruction)
                if fault == "slow" and self.faults is not None:
                    busy = (self.faults.spec.slow_factor - 1) * (time.perf_counter() - started)
                    if self._abort.wait(busy):
                        return
                elif fault == "bad_status" and self.faults is not None:
                    status, fault_va = self.faults.bad_status()
                    result = JobResult(status, fault_va, result.cycles, "injected bad status")
                self.last_result = result
                if result.status:
                    log.info("job %d failed: %d %s", seqno, result.status, result.error)
                if self._abort.is_set():
                    # Where the aborted job was (a crash dump marks its instruction); no completion.
                    self._w32(hw.REG_ABORT_CYCLES, result.cycles)
                    return
                if not self._complete(seqno, result, fault):
                    return  # a reset (or close) owns the queue now: no completion
                self._w32(hw.SQ_HEAD, head + 1)

    def _on_irq_instruction(self, value: int) -> None:
        self._w32(hw.REG_IRQ_COUNT, self._r32(hw.REG_IRQ_COUNT) + 1)
        self._w32(hw.REG_IRQ_VALUE, value)

    def _complete(self, seqno: int, result: JobResult, fault: str | None = None) -> bool:
        """Write a completion once the CQ has room; False if aborted while waiting.

        ``fault`` "garbage_cq" writes random bytes instead of the entry, "drop_irq" raises no
        interrupt for it (device_model.faults).
        """
        tail = self._r32(hw.CQ_TAIL)
        while (tail - self._r32(hw.CQ_HEAD)) & _U32 >= hw.CQ_ENTRIES:
            if self._abort.wait(_CQ_POLL_S):
                return False
        entry = hw.CQ_BASE + (tail % hw.CQ_ENTRIES) * hw.CQ_ENTRY_SIZE
        if fault == "garbage_cq" and self.faults is not None:
            for off, word in enumerate(np.frombuffer(self.faults.garbage(hw.CQ_ENTRY_SIZE), "<u8")):
                self._w64(entry + 8 * off, int(word))
        else:
            self._w64(entry + hw.CQE_SEQNO, seqno)
            self._w64(entry + 0x08, 0)  # CQE_STATUS (s32) and its reserved pad
            self._w32(entry + hw.CQE_STATUS, result.status)
            self._w64(entry + hw.CQE_FAULT_VA, result.fault_va)
            self._w64(entry + hw.CQE_CYCLES, result.cycles)
        self._w32(hw.CQ_TAIL, tail + 1)
        self._w32(hw.REG_JOBS_DONE, self._r32(hw.REG_JOBS_DONE) + 1)
        if fault != "drop_irq":
            self._irq(hw.IRQ_COMPLETION)
        return True
