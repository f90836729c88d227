"""Power management of vnpu.ko: runtime PM with autosuspend, and the system-sleep callbacks.

The device powers off when idle for the autosuspend delay (power/autosuspend_delay_ms) and a job
powers it on again, its firmware booted anew; jobs in flight never see a suspend. Processes are
frozen for real (pm_test ``freezer``). A suspend of every device would take this guest's 9p root
with it: qemu_tests/system_sleep.py tests the system-sleep callbacks through the PM core in a guest
of its own, with an initramfs root (docs/kernel.md, "Power management").
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from kernel_helpers import DEBUGFS, copy_stream, wait_until

SIZE = 1 << 16


def power_dir(dev) -> Path:
    return Path("/sys/class/accel") / Path(dev.path).name / "device" / "power"


def debugfs_file(dev, name: str) -> Path:
    pci = (Path("/sys/class/accel") / Path(dev.path).name / "device").resolve().name
    return DEBUGFS / "accel" / pci / name


def power_state(dev) -> dict[str, str]:
    """debugfs ``power``: state, power_ups, powered_us, power_offs, runtime_status, usage_count."""
    text = debugfs_file(dev, "power").read_text()
    return dict(re.findall(r"^(\w+): (\S+)$", text, re.M))


def runtime_status(dev) -> str:
    return (power_dir(dev) / "runtime_status").read_text().strip()


@pytest.fixture
def autosuspend(dev) -> Iterator[object]:
    """Sets power/autosuspend_delay_ms for the test (``set(ms)``), then restores it."""
    path = power_dir(dev) / "autosuspend_delay_ms"
    old = path.read_text().strip()

    class Delay:
        def set(self, ms: int) -> None:
            path.write_text(str(ms))

    try:
        yield Delay()
    finally:
        path.write_text(old)


def copy_jobs(dev, count: int, size: int = SIZE) -> list[tuple[object, np.ndarray]]:
    """Submit ``count`` jobs, each copying its own random bytes; (output BO, expected bytes) each."""
    from libaccel import Job, JobBo

    rng = np.random.default_rng(count)
    out = []
    for _ in range(count):
        data = rng.integers(-128, 128, size, dtype=np.int8)
        src = dev.create_bo_with(data.tobytes())
        dst = dev.create_bo(size)
        stream = copy_stream(src.va, dst.va, size)
        dev.submit(
            Job(dev.create_bo_with(stream, read_only=True), len(stream), [JobBo(src), JobBo(dst, write=True)])
        )
        out.append((dst, data))
    return out


def check_exact(jobs: list[tuple[object, np.ndarray]]) -> None:
    for i, (dst, data) in enumerate(jobs):
        status = dst.wait(timeout=60)
        assert status.status == 0, f"job {i}: {status}"
        assert np.array_equal(dst.array(np.int8, data.size), data), f"job {i}: output differs"


def test_idle_device_powers_off_and_a_job_powers_it_on(dev, autosuspend) -> None:
    autosuspend.set(50)
    assert wait_until(lambda: runtime_status(dev) == "suspended", 20), power_state(dev)
    assert power_state(dev)["state"] == "off"
    ups = dev.get_param("power_ups")
    fw = dev.get_param("fw_version")
    powered = dev.get_param("powered_us")
    assert fw and ups >= 1 and powered > 0

    # The job powers the device on; the firmware boots again and the output is exact.
    check_exact(copy_jobs(dev, 1))
    assert dev.get_param("power_ups") == ups + 1
    assert dev.get_param("fw_version") == fw
    assert dev.get_param("powered_us") >= powered
    # Idle again, off again.
    assert wait_until(lambda: power_state(dev)["state"] == "off", 20), power_state(dev)
    assert runtime_status(dev) == "suspended"


def test_jobs_back_to_back_never_see_a_suspend(dev, autosuspend) -> None:
    autosuspend.set(2000)  # far above the gap between two jobs of one loop, even under TCG
    check_exact(copy_jobs(dev, 1))
    before = power_state(dev)
    assert before["state"] == "on"
    for _ in range(20):  # one at a time: each waits for the previous one
        check_exact(copy_jobs(dev, 1))
    check_exact(copy_jobs(dev, 40))  # all at once: the queue holds the device powered
    after = power_state(dev)
    assert after["power_ups"] == before["power_ups"] and after["power_offs"] == before["power_offs"]


def test_frozen_processes_find_their_jobs_done(dev, autosuspend, long_job_timeout) -> None:
    """pm_test "freezer": the kernel freezes every process (this one too) and thaws it; jobs
    submitted before run meanwhile and their outputs are exact."""
    pm_test = Path("/sys/power/pm_test")
    if not pm_test.exists() or "mem" not in Path("/sys/power/state").read_text():
        pytest.skip("no /sys/power/pm_test (CONFIG_PM_DEBUG) or no suspend-to-RAM")
    old = re.search(r"\[(\w+)\]", pm_test.read_text()).group(1)
    delay = Path("/sys/module/suspend/parameters/pm_test_delay")  # the test level's wait, 5 s
    old_delay = delay.read_text().strip() if delay.exists() else None
    submitted = copy_jobs(dev, 20)
    pm_test.write_text("freezer")
    if old_delay is not None:
        delay.write_text("0")
    try:
        r = subprocess.run(["sh", "-c", "echo mem > /sys/power/state"], capture_output=True, text=True)
    finally:
        pm_test.write_text(old)
        if old_delay is not None:
            delay.write_text(old_delay)
    assert r.returncode == 0, r.stderr
    check_exact(submitted)


def test_power_counters_in_accel_info(dev, capsys: pytest.CaptureFixture[str]) -> None:
    from libaccel.tools import cli

    assert cli.main(["info", "--device", dev.path]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^power_ups: [1-9]\d*$", out, re.M), out
    assert re.search(r"^powered_us: [1-9]\d*$", out, re.M), out
