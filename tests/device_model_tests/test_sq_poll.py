"""Submission-queue polling: the adaptive window, its control file, and the Npu taking a job
that arrived with no doorbell while it polled."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

import pytest

from device_model import sq_poll
from device_model.sq_poll import MIN_STEP_US, SqPoller, adapt, check_limit
from firmware_tools.image import default_image, dev_private_key
from uapi import hw_layout as hw
from uapi.firmware_format import build_image

from .helpers import Machine
from .test_npu import NOP_JOB, Driver


def test_window_grows_on_a_hit_up_to_the_limit() -> None:
    assert adapt(0, True, 200) == MIN_STEP_US  # a hit grows a collapsed window from the step
    assert adapt(MIN_STEP_US, True, 200) == 2 * MIN_STEP_US
    assert adapt(150, True, 200) == 200
    assert adapt(200, True, 200) == 200


def test_window_halves_on_a_miss_down_to_an_eighth() -> None:
    assert adapt(200, False, 200) == 100
    assert adapt(50, False, 200) == 25
    assert adapt(25, False, 200) == 25  # keeps probing
    assert adapt(1000, False, 200) == 500  # after the limit was lowered, shrinks toward it


def test_limit_zero_is_off() -> None:
    assert adapt(0, True, 0) == 0 and adapt(100, False, 0) == 0
    poller = SqPoller(0)
    assert poller.poll(lambda: True) is False  # not even looked at
    assert poller.stats.hits == poller.stats.misses == 0


def test_limit_bounds() -> None:
    assert check_limit(0) == 0 and check_limit(sq_poll.MAX_LIMIT_US) == sq_poll.MAX_LIMIT_US
    for bad in (-1, sq_poll.MAX_LIMIT_US + 1):
        with pytest.raises(ValueError, match="not 0.."):
            check_limit(bad)
    with pytest.raises(ValueError):
        SqPoller(-5)


def test_poll_hit_and_miss_adapt_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    # A clock that moves 10 us per reading: a loaded host's scheduling cannot end a window early.
    ticks = iter(range(0, 10**9, 10))
    clock = SimpleNamespace(
        perf_counter=lambda: next(ticks) * 1e-6, monotonic=time.monotonic, process_time=time.process_time
    )
    monkeypatch.setattr(sq_poll, "time", clock)  # sq_poll's clock only
    limit = sq_poll.MAX_LIMIT_US
    poller = SqPoller(limit)
    calls = iter([False, False, True])
    assert poller.poll(lambda: next(calls)) is True
    assert poller.window_us == limit and poller.stats.hits == 1
    polled = poller.stats.polled_s
    assert poller.poll(lambda: False) is False
    assert poller.stats.polled_s - polled >= limit * 1e-6  # it watched the whole window
    assert poller.window_us == limit // 2 and poller.stats.misses == 1


def test_control_file_changes_the_limit(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    control = tmp_path / "sqpoll"
    poller = SqPoller(0, control, "core 0")
    poller.refresh(jobs_done=0)  # no file yet: unchanged
    assert poller.limit_us == 0
    control.write_text("150\n")
    poller._next_check = 0.0  # the file is looked at every CONTROL_CHECK_S at most
    poller.refresh(jobs_done=10)
    assert poller.limit_us == poller.window_us == 150
    poller.poll(lambda: True)
    control.write_text("0")
    poller._next_check = 0.0
    with caplog.at_level(logging.INFO, logger="vnpu.device_model.sq_poll"):
        poller.refresh(jobs_done=20)
    assert poller.limit_us == 0
    assert "core 0: SQ poll limit 150 us -> 0 us: 10 jobs" in caplog.text
    assert "windows 1 hit 0 missed" in caplog.text
    control.write_text("99999")
    poller._next_check = 0.0
    poller.refresh(jobs_done=20)
    assert poller.limit_us == 0  # refused, logged
    assert "is not 0.." in caplog.text


def _unkicked_job_runs(drv: Driver, attempts: int, settle_s: float) -> bool:
    """Does a job whose doorbell never rings run, queued ``settle_s`` after a completion?"""
    poller = drv.npu.cores[0].poller
    for _ in range(attempts):
        drv.enqueue(NOP_JOB)
        drv.wait_cq(1)
        drv.drain()
        time.sleep(settle_s)
        hits = poller.stats.hits
        drv.enqueue(NOP_JOB, kick=False)
        deadline = time.monotonic() + 0.1
        while time.monotonic() < deadline:
            if drv.r32(hw.CQ_TAIL) != drv.r32(hw.CQ_HEAD):
                drv.drain()
                # A core that had not yet looked at the ring again takes it too: count only
                # the ones a polling window saw.
                if poller.stats.hits > hits:
                    return True
                break
            time.sleep(0.001)
        else:
            drv.npu.kick(hw.VEC_QUEUE)  # not taken while polling: the doorbell runs it
            drv.wait_cq(1)
            drv.drain()
    return False


def test_npu_takes_a_job_it_sees_while_polling() -> None:
    drv = Driver(Machine(), num_cores=1, sq_poll_us=sq_poll.MAX_LIMIT_US)
    try:
        assert drv.boot(build_image(default_image(), dev_private_key())) == 0
        assert _unkicked_job_runs(drv, 20, 0.0)  # one attempt may miss the window on a loaded host
    finally:
        drv.npu.close()


def test_npu_without_polling_waits_for_the_doorbell() -> None:
    drv = Driver(Machine(), num_cores=1, sq_poll_us=0)
    try:
        assert drv.boot(build_image(default_image(), dev_private_key())) == 0
        # 20 ms: the core thread is asleep on the doorbell by then.
        assert not _unkicked_job_runs(drv, 3, 0.02)
        assert drv.npu.cores[0].jobs_done == 6
    finally:
        drv.npu.close()
