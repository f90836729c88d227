"""The device's power state (hw_layout "Power"), with the test driver of test_npu playing vnpu.ko."""

from __future__ import annotations

import errno
import time

import numpy as np
import pytest
import reference_kernels as ref

from firmware_tools.image import default_image, dev_private_key
from uapi import hw_layout as hw
from uapi import isa
from uapi.firmware_format import FirmwareImage, Limits, build_image

from .helpers import program, tensor
from .test_npu import NOP_JOB, Completion, Driver
from .test_npu import drv as _drv_fixture

IMAGE = build_image(default_image(), dev_private_key())

drv = _drv_fixture  # test_npu's 2-core device ("process" in both_modes: cores in worker processes)
both_modes = pytest.mark.parametrize("drv", ["thread", "process"], indirect=True)


def power(drv: Driver, state: int) -> int:
    return drv.control(hw.CMD_POWER, state)


def test_starts_powered_on_with_one_power_up(drv: Driver) -> None:
    assert drv.r32(hw.REG_POWER_STATE) == hw.POWER_ON
    assert drv.r32(hw.REG_POWER_UPS) == 1


@both_modes
def test_power_off_loses_firmware_and_queue_positions(drv: Driver) -> None:
    assert drv.boot(IMAGE) == 0
    for _ in range(3):
        drv.enqueue(NOP_JOB)
    drv.wait_cq(3)
    drv.drain()
    assert power(drv, hw.POWER_OFF) == 0
    assert drv.r32(hw.REG_POWER_STATE) == hw.POWER_OFF
    assert (
        drv.r32(hw.REG_STATUS) == 0 and drv.r32(hw.REG_FW_VERSION) == 0 and drv.r64(hw.REG_FW_BUILD_ID) == 0
    )
    assert power(drv, hw.POWER_OFF) == 0  # what already is: nothing changes
    assert drv.boot(IMAGE) == -errno.EPERM
    # Powered off, a queue doorbell is ignored: the entry stays, no completion comes.
    drv.enqueue(NOP_JOB)
    time.sleep(0.1)
    assert drv.r32(hw.SQ_HEAD) == 3 and drv.r32(hw.CQ_TAIL) == 3
    assert power(drv, hw.POWER_ON) == 0
    assert drv.r32(hw.REG_POWER_UPS) == 2
    for reg in (hw.SQ_HEAD, hw.SQ_TAIL, hw.CQ_HEAD, hw.CQ_TAIL, hw.REG_JOBS_DONE):
        assert drv.r32(reg) == 0, hex(reg)
    # The firmware is gone until a BOOT: a job fails, then after the BOOT it runs.
    drv.next_seqno = 10
    s = drv.enqueue(NOP_JOB)
    drv.wait_cq(1)
    assert drv.drain() == [Completion(s, -errno.EIO, 0, 0)]
    assert drv.boot(IMAGE) == 0
    s = drv.enqueue(NOP_JOB)
    drv.wait_cq(1)
    assert drv.drain() == [Completion(s, 0, 0, 2)]


def test_power_off_refused_while_a_job_runs_or_completions_wait(drv: Driver) -> None:
    assert drv.boot(IMAGE) == 0
    sem = drv.m.buffer(4)
    drv.enqueue(program(tensor(0, "INT32", sem, (1,)), isa.encode("WAIT", sem=0, value=1)))
    time.sleep(0.1)
    assert power(drv, hw.POWER_OFF) == -errno.EBUSY  # a job is running
    assert drv.r32(hw.REG_POWER_STATE) == hw.POWER_ON and drv.r32(hw.REG_STATUS) == hw.STATUS_READY
    drv.m.write(sem, (1).to_bytes(4, "little"))
    drv.wait_cq(1)
    assert power(drv, hw.POWER_OFF) == -errno.EBUSY  # its completion is not consumed
    drv.drain()
    assert power(drv, hw.POWER_OFF) == 0


def test_bad_power_state_is_einval(drv: Driver) -> None:
    assert power(drv, 2) == -errno.EINVAL
    assert drv.r32(hw.REG_POWER_STATE) == hw.POWER_ON


def test_powered_time_counts_only_powered_on(drv: Driver) -> None:
    time.sleep(0.05)
    assert drv.control(hw.CMD_NOP) == 0
    on = drv.r64(hw.REG_POWERED_US)
    assert on >= 50_000
    assert power(drv, hw.POWER_OFF) == 0
    off = drv.r64(hw.REG_POWERED_US)
    time.sleep(0.1)
    assert drv.control(hw.CMD_NOP) == 0
    assert drv.r64(hw.REG_POWERED_US) == off  # nothing accrues while off
    assert power(drv, hw.POWER_ON) == 0
    time.sleep(0.02)
    assert drv.control(hw.CMD_NOP) == 0
    assert drv.r64(hw.REG_POWERED_US) >= off + 20_000


@pytest.mark.parametrize("state", [hw.POWER_ON, hw.POWER_OFF])
def test_reset_works_in_either_state(drv: Driver, state: int) -> None:
    assert power(drv, state) == 0
    assert drv.control(hw.CMD_RESET) == 0
    assert drv.r32(hw.REG_RESET_COUNT) == 1


def _cycle_and_boot(drv: Driver, image: bytes) -> None:
    drv.drain()
    assert power(drv, hw.POWER_OFF) == 0 and power(drv, hw.POWER_ON) == 0
    assert drv.boot(image) == 0


@both_modes
def test_a_power_cycle_keeps_the_emulators_caches_for_the_same_limits(drv: Driver) -> None:
    """The command processors' caches are the emulator's, checked against memory at every use:
    a power cycle and a BOOT of the same limits take the same processors back; other limits get
    new ones."""
    assert drv.boot(IMAGE) == 0
    before = [core.processor for core in drv.npu.cores]
    assert all(p is not None for p in before)
    _cycle_and_boot(drv, IMAGE)
    assert [core.processor for core in drv.npu.cores] == before
    tight = build_image(FirmwareImage(limits=Limits(max_cmd_size=4096)), dev_private_key())
    _cycle_and_boot(drv, tight)
    assert not any(core.processor is p for core, p in zip(drv.npu.cores, before, strict=True))


@both_modes
def test_a_job_after_a_power_cycle_reads_what_memory_holds_now(drv: Driver) -> None:
    """The same stream after a power cycle, its input and filter rewritten while the device was
    off: the kept caches must not answer with the old values."""
    assert drv.boot(IMAGE) == 0
    rng = np.random.default_rng(9)
    m = drv.m
    inp = rng.integers(0, 256, size=(1, 5, 5, 4), dtype=np.uint8)
    filt = rng.integers(0, 256, size=(3, 3, 3, 4), dtype=np.uint8)
    in_va, filt_va, out = m.array(inp), m.array(filt), m.buffer(5 * 5 * 3)
    stream = program(
        tensor(0, "UINT8", in_va, inp.shape, zp=100),
        tensor(1, "UINT8", filt_va, filt.shape, zp=110),
        tensor(3, "UINT8", out, (1, 5, 5, 3), zp=3),
        isa.encode(
            "CONV2D", input=0, filter=1, output=3, stride_h=1, stride_w=1, dilation_h=1,
            dilation_w=1, pad_top=1, pad_left=1, multiplier=1594323187, shift=-9, act_min=0,
            act_max=255,
        ),
    )  # fmt: skip

    def run_and_check() -> None:
        drv.enqueue(stream)
        drv.wait_cq(1)
        assert [c.status for c in drv.drain()] == [0]
        want = ref.conv2d(
            inp.tolist(), filt.tolist(), [0, 0, 0], 100, 110, 1, 1, 1, 1, 1, 1, 5, 5,
            [1594323187] * 3, [-9] * 3, 3, 0, 255,
        )  # fmt: skip
        assert m.read(out, 75).reshape(1, 5, 5, 3).tolist() == want

    run_and_check()
    run_and_check()  # bound now
    drv.drain()
    assert power(drv, hw.POWER_OFF) == 0
    inp[...] = rng.integers(0, 256, size=inp.shape, dtype=np.uint8)
    filt[...] = rng.integers(0, 256, size=filt.shape, dtype=np.uint8)
    m.write(in_va, inp.tobytes())
    m.write(filt_va, filt.tobytes())
    assert power(drv, hw.POWER_ON) == 0 and drv.boot(IMAGE) == 0
    run_and_check()
