"""The Npu ring protocol end to end, with a test driver playing vnpu.ko's part."""

from __future__ import annotations

import errno
import struct
import threading
import time
from dataclasses import dataclass

import numpy as np
import pytest
import reference_kernels as ref

from device_model.npu import Npu
from device_model.page_tables import AddressSpace
from firmware_tools.image import default_image, dev_private_key
from uapi import hw_layout as hw
from uapi import isa
from uapi.firmware_format import FirmwareImage, Limits, all_opcodes, build_image, parse_image
from vnpu_common.cli import ExitCode

from .helpers import Machine, program, tensor

TIMEOUT = 5.0


@dataclass
class Completion:
    seqno: int
    status: int
    fault_va: int
    cycles: int
    core: int = 0


class Driver:
    """The driver side of BAR2: what vnpu.ko (or the shim) does, in Python."""

    def __init__(self, machine: Machine, **npu_args: object) -> None:
        self.m = machine
        self.bar2 = bytearray(hw.BAR2_SIZE)
        self.irqs = {hw.IRQ_COMPLETION: 0, hw.IRQ_CONTROL: 0}
        self.cond = threading.Condition()
        self.npu = Npu(memoryview(self.bar2), machine.memory, self._irq, device_peer=3, **npu_args)
        self.seq = 0
        self.next_seqno = 1

    def _irq(self, vector: int) -> None:
        with self.cond:
            self.irqs[vector] += 1
            self.cond.notify_all()

    def r32(self, off: int) -> int:
        return struct.unpack_from("<I", self.bar2, off)[0]

    def r64(self, off: int) -> int:
        return struct.unpack_from("<Q", self.bar2, off)[0]

    def w32(self, off: int, v: int) -> None:
        struct.pack_into("<I", self.bar2, off, v & 0xFFFFFFFF)

    def control(self, cmd: int, arg0: int = 0, arg1: int = 0) -> int:
        struct.pack_into("<QQ", self.bar2, hw.REG_CMD_ARG0, arg0, arg1)
        self.w32(hw.REG_CMD, cmd)
        self.seq += 1
        self.w32(hw.REG_CMD_SEQ, self.seq)
        self.npu.kick(hw.VEC_CONTROL)
        with self.cond:
            assert self.cond.wait_for(lambda: self.r32(hw.REG_CMD_ACK) == self.seq, TIMEOUT)
        return struct.unpack_from("<i", self.bar2, hw.REG_CMD_STATUS)[0]

    def boot(self, image: bytes) -> int:
        pages = self.m.allocator.alloc_pages(-(-len(image) // hw.PAGE_SIZE))  # fresh pages are contiguous
        self.m.memory.view(pages[0], len(image))[:] = image
        return self.control(hw.CMD_BOOT, pages[0], len(image))

    def enqueue(
        self, stream: bytes, kick: bool = True, core: int = 0, space: AddressSpace | None = None
    ) -> int:
        """Queue ``stream`` as a job of address space ``space`` (default: the machine's)."""
        space = space or self.m.space
        va = self.m.buffer(len(stream), stream, space=space)
        tail = self.r32(hw.SQ_TAIL)
        assert tail - self.r32(hw.SQ_HEAD) < hw.SQ_ENTRIES
        e = hw.SQ_BASE + (tail % hw.SQ_ENTRIES) * hw.SQ_ENTRY_SIZE
        seqno = self.next_seqno
        self.next_seqno += 1
        struct.pack_into("<QQQII", self.bar2, e, seqno, space.root, va, len(stream), 0)
        self.w32(e + hw.SQE_CORE, core)
        self.w32(hw.SQ_TAIL, tail + 1)
        if kick:
            self.npu.kick(hw.VEC_QUEUE + core)  # the entry's core's doorbell
        return seqno

    def wait_cq(self, count: int) -> None:
        with self.cond:
            ok = self.cond.wait_for(lambda: self.r32(hw.CQ_TAIL) - self.r32(hw.CQ_HEAD) >= count, TIMEOUT)
        assert ok, f"only {self.r32(hw.CQ_TAIL) - self.r32(hw.CQ_HEAD)} of {count} completions"

    def drain(self) -> list[Completion]:
        head, tail = self.r32(hw.CQ_HEAD), self.r32(hw.CQ_TAIL)
        out = []
        for i in range(head, tail):
            e = hw.CQ_BASE + (i % hw.CQ_ENTRIES) * hw.CQ_ENTRY_SIZE
            seqno, status, core, fault_va, cycles = struct.unpack_from("<QiIQQ", self.bar2, e)
            out.append(Completion(seqno, status, fault_va, cycles, core))
        self.w32(hw.CQ_HEAD, tail)
        return out


@pytest.fixture
def drv(request: pytest.FixtureRequest):
    """A 2-core device; parametrized with "process" (indirect), its cores run in worker processes."""
    processes = getattr(request, "param", "thread") == "process"
    d = Driver(Machine(shared=processes), core_processes=processes)
    yield d
    d.npu.close()


# The tests that hold process mode (device_model.core_worker) to the thread mode's behaviour too.
both_modes = pytest.mark.parametrize("drv", ["thread", "process"], indirect=True)


NOP_JOB = program(isa.encode("NOP"))


def test_identification_block(drv: Driver) -> None:
    assert drv.r32(hw.REG_MAGIC) == hw.MAGIC
    assert drv.r32(hw.REG_DEVICE_ID) == hw.DEVICE_ID
    assert drv.r32(hw.REG_REVISION) == hw.DEVICE_REVISION
    assert drv.r32(hw.REG_ISA_VERSION) == isa.SPEC.version
    assert drv.r32(hw.REG_VA_BITS) == hw.VA_BITS
    assert drv.r32(hw.REG_CAPS) == 0b111
    assert drv.r32(hw.REG_DEVICE_PEER) == 3
    assert drv.r32(hw.REG_NUM_CORES) == 2  # the default
    assert drv.r32(hw.REG_STATUS) == 0 and drv.r32(hw.REG_FW_VERSION) == 0


@both_modes
def test_jobs_before_boot_fail_then_boot_and_run(drv: Driver) -> None:
    s = drv.enqueue(NOP_JOB)
    drv.wait_cq(1)
    assert drv.drain() == [Completion(s, -errno.EIO, 0, 0)]
    assert drv.boot(build_image(default_image(), dev_private_key())) == 0
    assert drv.r32(hw.REG_STATUS) == hw.STATUS_READY
    assert drv.r32(hw.REG_FW_VERSION) == default_image().fw_version
    assert drv.irqs[hw.IRQ_CONTROL] == 1
    s = drv.enqueue(NOP_JOB)
    drv.wait_cq(1)
    assert drv.drain() == [Completion(s, 0, 0, 2)]
    assert drv.r32(hw.REG_JOBS_DONE) == 2


def test_bad_firmware_is_refused(drv: Driver) -> None:
    good = build_image(default_image(), dev_private_key())
    image = bytearray(good)
    image[-1] ^= 0xFF  # breaks the signature
    assert drv.boot(bytes(image)) == -errno.ENOEXEC
    assert drv.r32(hw.REG_STATUS) == hw.STATUS_FW_ERROR
    assert drv.r32(hw.REG_FW_REJECT) == hw.FW_REJECT_SIGNATURE
    assert drv.r32(hw.REG_FW_VERSION) == 0 and drv.r64(hw.REG_FW_BUILD_ID) == 0
    assert drv.control(hw.CMD_BOOT, 1 << 40, 128) == -errno.EFAULT
    assert drv.r32(hw.REG_FW_REJECT) == hw.FW_REJECT_UNREADABLE
    assert drv.control(hw.CMD_BOOT, 0, 0) == -errno.ENOEXEC
    assert drv.r32(hw.REG_FW_REJECT) == hw.FW_REJECT_SIZE
    assert drv.control(99) == -errno.EINVAL
    assert drv.boot(good) == 0
    assert drv.r32(hw.REG_STATUS) == hw.STATUS_READY and drv.r32(hw.REG_FW_REJECT) == hw.FW_REJECT_NONE
    assert drv.r64(hw.REG_FW_BUILD_ID) == parse_image(good).build_id != 0


@both_modes
def test_boot_rom_rejects_every_flipped_byte_and_truncation(drv: Driver) -> None:
    """The device model's verdicts equal the tool's (tests/firmware_tools), and it keeps serving."""
    from tests.firmware_tools.test_fw_image import SMALL, expected_reason, flipped

    pa = drv.m.allocator.alloc_pages(1)[0]

    def boot_at(image: bytes) -> int:
        drv.m.memory.view(pa, len(image))[:] = image
        return drv.control(hw.CMD_BOOT, pa, len(image))

    cases = [(flipped(off), expected_reason(off)) for off in range(len(SMALL))]
    cases += [
        (
            SMALL[:n],
            hw.FW_REJECT_SIZE if n < hw.FW_HEADER_SIZE + hw.FW_SIGNATURE_SIZE else hw.FW_REJECT_LENGTH,
        )
        for n in range(1, len(SMALL))
    ]
    for image, reason in cases:
        assert boot_at(image) == -errno.ENOEXEC
        assert (drv.r32(hw.REG_STATUS), drv.r32(hw.REG_FW_REJECT)) == (hw.STATUS_FW_ERROR, reason)
    s = drv.enqueue(NOP_JOB)  # rejected: no firmware runs, the job fails
    drv.wait_cq(1)
    assert drv.drain() == [Completion(s, -errno.EIO, 0, 0)]
    assert boot_at(SMALL) == 0 and drv.r32(hw.REG_STATUS) == hw.STATUS_READY
    s = drv.enqueue(NOP_JOB)
    drv.wait_cq(1)
    assert drv.drain() == [Completion(s, 0, 0, 2)]


def test_boot_rom_trusts_only_its_own_key() -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    product = Ed25519PrivateKey.generate()
    d = Driver(Machine(), fw_pubkey=product.public_key())
    try:
        assert d.boot(build_image(default_image(), dev_private_key())) == -errno.ENOEXEC
        assert d.r32(hw.REG_FW_REJECT) == hw.FW_REJECT_SIGNATURE
        assert d.boot(build_image(default_image(), product)) == 0
    finally:
        d.npu.close()


def test_device_model_cli_refuses_a_bad_key(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from device_model.qemu_server import main

    bad = tmp_path / "bad.pem"
    bad.write_text("not a key\n")
    argv = ["--socket", str(tmp_path / "s"), "--ram", str(tmp_path / "ram"), "--fw-pubkey", str(bad)]
    assert main(argv) == ExitCode.BAD_FILE
    err = capsys.readouterr().err
    assert err.startswith("vnpu-device-model: --fw-pubkey:") and err.count("\n") == 1
    assert not (tmp_path / "ram").exists()


@both_modes
def test_firmware_limits_are_enforced(drv: Driver) -> None:
    tight = FirmwareImage(limits=Limits(max_cmd_size=8))
    assert drv.boot(build_image(tight, dev_private_key())) == 0
    s = drv.enqueue(NOP_JOB)  # NOP + END: 16 bytes, over the firmware's 8
    drv.wait_cq(1)
    assert drv.drain() == [Completion(s, -errno.EIO, 0, 0)]
    assert "not in (0, 8]" in drv.npu.last_result.error


@both_modes
def test_conv2d_job_end_to_end(drv: Driver) -> None:
    assert drv.boot(build_image(default_image(), dev_private_key())) == 0
    rng = np.random.default_rng(5)
    m = drv.m
    inp = rng.integers(0, 256, size=(1, 6, 6, 4), dtype=np.uint8)
    filt = rng.integers(0, 256, size=(5, 3, 3, 4), dtype=np.uint8)
    bias = rng.integers(-1000, 1000, size=5, dtype=np.int32)
    out = m.buffer(6 * 6 * 5)
    stream = program(
        tensor(0, "UINT8", m.array(inp), inp.shape, zp=120),
        tensor(1, "UINT8", m.array(filt), filt.shape, zp=130),
        tensor(2, "INT32", m.array(bias), (1, 1, 1, 5)),
        tensor(3, "UINT8", out, (1, 6, 6, 5), zp=7),
        isa.encode(
            "CONV2D", flags=isa.SPEC.flags["HAS_BIAS"], input=0, filter=1, bias=2, output=3, stride_h=1,
            stride_w=1, dilation_h=1, dilation_w=1, pad_top=1, pad_left=1, multiplier=1594323187, shift=-9,
            act_min=0, act_max=255,
        ),
        isa.encode("IRQ", value=42),
    )  # fmt: skip
    s = drv.enqueue(stream)
    drv.wait_cq(1)
    assert drv.drain() == [Completion(s, 0, 0, 7)]
    want = ref.conv2d(
        inp.tolist(), filt.tolist(), bias.tolist(), 120, 130, 1, 1, 1, 1, 1, 1, 6, 6,
        [1594323187] * 5, [-9] * 5, 7, 0, 255,
    )  # fmt: skip
    assert m.read(out, 180).reshape(1, 6, 6, 5).tolist() == want
    assert (drv.r32(hw.REG_IRQ_COUNT), drv.r32(hw.REG_IRQ_VALUE)) == (1, 42)
    assert drv.irqs[hw.IRQ_COMPLETION] == 1


@both_modes
def test_fault_and_disabled_opcode_completions(drv: Driver) -> None:
    fill = isa.SPEC.by_name("FILL").opcode
    assert (
        drv.boot(build_image(FirmwareImage(enabled_opcodes=all_opcodes() - {fill}), dev_private_key())) == 0
    )
    dst = drv.m.buffer(16)
    s1 = drv.enqueue(program(tensor(0, "INT8", dst, (4,)), isa.encode("FILL", dst=0, value=1)))
    s2 = drv.enqueue(program(tensor(0, "INT8", 0x2000_0000, (4,)), isa.encode("COPY", src=0, dst=0)))
    drv.wait_cq(2)
    assert drv.drain() == [Completion(s1, -errno.EIO, 0, 2), Completion(s2, -errno.EFAULT, 0x2000_0000, 2)]


def test_coalesced_kicks_drain_whole_queue(drv: Driver) -> None:
    assert drv.boot(build_image(default_image(), dev_private_key())) == 0
    seqnos = [drv.enqueue(NOP_JOB, kick=False) for _ in range(10)]
    for _ in range(5):
        drv.npu.kick(hw.VEC_QUEUE)  # five kicks for ten jobs: each job completes once
    drv.wait_cq(10)
    time.sleep(0.05)
    assert [c.seqno for c in drv.drain()] == seqnos
    assert drv.r32(hw.SQ_HEAD) == drv.r32(hw.SQ_TAIL) == 10


def test_full_cq_waits_for_the_driver(drv: Driver) -> None:
    assert drv.boot(build_image(default_image(), dev_private_key())) == 0
    for _ in range(hw.SQ_ENTRIES):
        drv.enqueue(NOP_JOB)
    drv.wait_cq(hw.CQ_ENTRIES)
    extra = [drv.enqueue(NOP_JOB) for _ in range(3)]
    time.sleep(0.1)
    assert drv.r32(hw.CQ_TAIL) == hw.CQ_ENTRIES  # no room: the device waits
    assert len(drv.drain()) == hw.CQ_ENTRIES
    drv.wait_cq(3)
    assert [c.seqno for c in drv.drain()] == extra


@both_modes
def test_reset_aborts_a_hung_wait_and_drops_the_queue(drv: Driver) -> None:
    assert drv.boot(build_image(default_image(), dev_private_key())) == 0
    sem = drv.m.buffer(4)
    drv.enqueue(program(tensor(0, "INT32", sem, (1,)), isa.encode("WAIT", sem=0, value=1)))
    deadline = time.monotonic() + TIMEOUT
    while drv.r32(hw.SQ_HEAD) != 1:  # core 0 took the job, and hangs in its WAIT
        assert time.monotonic() < deadline, "core 0 never took the job"
        time.sleep(0.001)
    drv.enqueue(NOP_JOB)
    drv.enqueue(NOP_JOB)
    time.sleep(0.1)
    # The NOPs stay on the ring: only core 0's doorbell rang, and core 0 is busy.
    assert drv.r32(hw.CQ_TAIL) == 0 and drv.r32(hw.SQ_HEAD) == 1
    t0 = time.monotonic()
    assert drv.control(hw.CMD_RESET) == 0
    assert time.monotonic() - t0 < 1
    assert drv.r32(hw.REG_RESET_COUNT) == 1
    assert drv.r32(hw.REG_ABORT_CYCLES) == 2  # the WAIT, the job's second instruction, was running
    assert drv.r32(hw.SQ_HEAD) == drv.r32(hw.SQ_TAIL) == 3
    time.sleep(0.05)
    assert drv.r32(hw.CQ_TAIL) == 0 and drv.irqs[hw.IRQ_COMPLETION] == 0  # no completion for any of them
    s = drv.enqueue(NOP_JOB)  # the device works after the reset
    drv.wait_cq(1)
    assert drv.drain() == [Completion(s, 0, 0, 2)]
    assert drv.control(hw.CMD_RESET) == 0 and drv.r32(hw.REG_ABORT_CYCLES) == 0  # nothing was running


def test_construction_checks_bar2(drv: Driver) -> None:
    with pytest.raises(ValueError, match="BAR2"):
        Npu(memoryview(bytearray(100)), drv.m.memory, lambda v: None)
    with pytest.raises(ValueError, match="BAR2"):
        Npu(memoryview(bytes(hw.BAR2_SIZE)), drv.m.memory, lambda v: None)


def _wait_job(drv: Driver) -> tuple[int, bytes]:
    """A job that hangs in WAIT until its semaphore (INT32 at the returned VA) becomes 1."""
    sem = drv.m.buffer(4)
    return sem, program(tensor(0, "INT32", sem, (1,)), isa.encode("WAIT", sem=0, value=1))


@both_modes
def test_cores_run_at_once_and_each_in_order(drv: Driver) -> None:
    assert drv.boot(build_image(default_image(), dev_private_key())) == 0
    sem_va, hang = _wait_job(drv)
    blocked = drv.enqueue(hang, core=0)
    behind = drv.enqueue(NOP_JOB, core=0)  # core 0 runs its jobs in order: this one waits
    other = [drv.enqueue(NOP_JOB, core=1) for _ in range(3)]
    drv.wait_cq(3)
    assert [(c.seqno, c.core) for c in drv.drain()] == [(s, 1) for s in other]
    time.sleep(0.05)
    assert drv.r32(hw.CQ_TAIL) == 3
    drv.m.write(sem_va, (1).to_bytes(4, "little"))
    drv.wait_cq(2)
    assert [(c.seqno, c.core) for c in drv.drain()] == [(blocked, 0), (behind, 0)]
    assert [c.jobs_done for c in drv.npu.cores] == [2, 3]


@both_modes
def test_a_queue_doorbell_wakes_only_its_core(drv: Driver) -> None:
    assert drv.boot(build_image(default_image(), dev_private_key())) == 0
    for core in (0, 0, 0, 1, 0):
        s = drv.enqueue(NOP_JOB, core=core)
        drv.wait_cq(1)
        assert [(c.seqno, c.core) for c in drv.drain()] == [(s, core)]
        time.sleep(0.01)  # the core is back asleep on its doorbell before the next one rings
    # One wake-up per job of its own (a shared doorbell woke both cores for each of the five).
    assert [c.doorbell_wakes for c in drv.npu.cores] == [4, 1]


@both_modes
def test_reset_of_one_core_leaves_the_other_running(drv: Driver) -> None:
    assert drv.boot(build_image(default_image(), dev_private_key())) == 0
    _, hang0 = _wait_job(drv)
    sem1_va, hang1 = _wait_job(drv)
    drv.enqueue(hang0, core=0)
    drv.enqueue(NOP_JOB, core=0)
    survivor = drv.enqueue(hang1, core=1)
    time.sleep(0.1)
    assert drv.control(hw.CMD_RESET, 1 << 0) == 0
    assert drv.r32(hw.REG_RESET_COUNT) == 1 and drv.r32(hw.REG_ABORT_CYCLES) == 2
    drv.m.write(sem1_va, (1).to_bytes(4, "little"))
    drv.wait_cq(1)  # core 1's job was never touched: it completes once released
    assert drv.drain() == [Completion(survivor, 0, 0, 3, 1)]  # TENSOR, WAIT, HALT
    time.sleep(0.05)
    assert drv.r32(hw.CQ_TAIL) == 1  # core 0's queued NOP was dropped with its hung job
    s = drv.enqueue(NOP_JOB, core=0)
    drv.wait_cq(1)
    assert drv.drain() == [Completion(s, 0, 0, 2, 0)]


@both_modes
def test_core_bounds(drv: Driver) -> None:
    assert drv.boot(build_image(default_image(), dev_private_key())) == 0
    bad = drv.enqueue(NOP_JOB, core=2)  # the device has cores 0 and 1
    drv.wait_cq(1)
    assert drv.drain() == [Completion(bad, -errno.EIO, 0, 0, 0)]
    assert drv.control(hw.CMD_RESET, 1 << 2) == -errno.EINVAL
    assert drv.r32(hw.REG_RESET_COUNT) == 0
    with pytest.raises(ValueError, match="num_cores"):
        Npu(memoryview(bytearray(hw.BAR2_SIZE)), drv.m.memory, lambda v: None, num_cores=hw.MAX_CORES + 1)


def test_one_core_device() -> None:
    d = Driver(Machine(), num_cores=1)
    try:
        assert d.r32(hw.REG_NUM_CORES) == 1
        assert d.boot(build_image(default_image(), dev_private_key())) == 0
        seqnos = [d.enqueue(NOP_JOB) for _ in range(4)]
        d.wait_cq(4)
        assert [(c.seqno, c.core) for c in d.drain()] == [(s, 0) for s in seqnos]
    finally:
        d.npu.close()


def test_an_injected_bad_command_status_leaves_jobs_alone(drv: Driver) -> None:
    """bad_cmd faults control commands only: the next command answers 1 without running, jobs run."""
    from device_model.faults import FaultInjector, FaultSpec

    image = build_image(default_image(), dev_private_key())
    drv.npu.faults = FaultInjector()
    drv.npu.faults.set(FaultSpec(kind="bad_cmd", count=1))
    assert drv.boot(image) == 1
    assert not drv.npu.ready  # not run
    assert drv.boot(image) == 0  # the count is spent
    seqno = drv.enqueue(NOP_JOB)
    drv.wait_cq(1)
    assert [(c.seqno, c.status) for c in drv.drain()] == [(seqno, 0)]
    assert drv.npu.faults.injected == {"bad_cmd": 1}


def test_an_injected_early_completion_names_seqno_1_on_every_core(drv: Driver) -> None:
    """early_cq: the command runs and answers as usual, but first a completion of seqno 1 for each
    core (no job has it) and a completion interrupt arrive; no job ran, the next command is clean."""
    from device_model.faults import FaultInjector, FaultSpec

    image = build_image(default_image(), dev_private_key())
    drv.npu.faults = FaultInjector()
    drv.npu.faults.set(FaultSpec(kind="early_cq", count=1))
    assert drv.boot(image) == 0 and drv.npu.ready  # run, unlike bad_cmd
    assert drv.irqs[hw.IRQ_COMPLETION] == 1
    assert [(c.seqno, c.status, c.core) for c in drv.drain()] == [(1, 0, 0), (1, 0, 1)]
    assert drv.r32(hw.REG_JOBS_DONE) == 0
    assert drv.boot(image) == 0  # the count is spent
    assert drv.irqs[hw.IRQ_COMPLETION] == 1 and drv.r32(hw.CQ_TAIL) == drv.r32(hw.CQ_HEAD)
    assert drv.npu.faults.injected == {"early_cq": 1}
