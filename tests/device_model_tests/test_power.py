"""The device's power state (hw_layout "Power"), with the test driver of test_npu playing vnpu.ko."""

from __future__ import annotations

import errno
import time

import pytest

from firmware_tools.image import default_image, dev_private_key
from uapi import hw_layout as hw
from uapi import isa
from uapi.firmware_format import build_image

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
