"""Runtime power management, on every backend: an idle device powers off after the autosuspend
delay, a job powers it on again (GET_PARAM POWER_UPS counts it) and runs exactly, and jobs that
follow each other closely never see a power-off (docs/kernel.md, Power management)."""

from __future__ import annotations

import time

import numpy as np
from driver_knobs import autosuspend
from test_job_contract import copy_stream

from libaccel import Device, Job, JobBo

SIZE = 4096


def copy_exactly(device: Device, count: int = 1) -> None:
    """Submit ``count`` copy jobs of random bytes at once, then check every output."""
    rng = np.random.default_rng(count)
    jobs = []
    for _ in range(count):
        data = rng.integers(-128, 128, SIZE, dtype=np.int8)
        src, dst = device.create_bo_with(data.tobytes()), device.create_bo(SIZE)
        stream = copy_stream(src.va, dst.va, SIZE)
        cmd = device.create_bo_with(stream, read_only=True)
        device.submit(Job(cmd, len(stream), [JobBo(src), JobBo(dst, write=True)]))
        jobs.append((dst, data))
    for dst, data in jobs:
        assert dst.wait(timeout=60).status == 0
        assert np.array_equal(dst.array(np.int8, SIZE), data)


def powered_off(device: Device, timeout: float) -> bool:
    """Wait until the device is off: its powered time (GET_PARAM POWERED_US, which counts only while
    it is on) stands still across 100 ms, on any backend."""
    deadline = time.monotonic() + timeout
    before = device.get_param("powered_us")
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = device.get_param("powered_us")
        if now == before:
            return True
        before = now
    return False


def test_power_counters(device: Device) -> None:
    ups, powered = device.get_param("power_ups"), device.get_param("powered_us")
    assert ups >= 1 and powered > 0
    copy_exactly(device)
    assert device.get_param("power_ups") >= ups and device.get_param("powered_us") >= powered


def test_idle_device_powers_off_and_a_job_powers_it_on(backend: str, device: Device) -> None:
    with autosuspend(backend, 50):
        copy_exactly(device)
        ups = device.get_param("power_ups")
        assert powered_off(device, 30), "the idle device never powered off"
        copy_exactly(device)
        assert device.get_param("power_ups") == ups + 1


def test_jobs_back_to_back_never_see_a_power_off(backend: str, device: Device) -> None:
    with autosuspend(backend, 2000):  # far above the gap between two jobs of the loop, even under TCG
        copy_exactly(device)
        ups = device.get_param("power_ups")
        for _ in range(10):
            copy_exactly(device)
        copy_exactly(device, 30)
        assert device.get_param("power_ups") == ups
