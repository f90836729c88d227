"""Signed firmware on vnpu.ko: the booted image's state, reload through debugfs, and rejection.

A tampered image (one signature byte flipped) is served by pointing firmware_class.path at
a directory holding it: a reload then fails with ENOEXEC and the device's reason in one
dmesg line, and a probe with it fails the same way; the committed image brings the device back.
"""

from __future__ import annotations

import errno
import glob
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from kernel_helpers import (
    REPO,
    accel_nodes,
    debugfs_counters,
    dmesg,
    dmesg_since,
    fill_stream,
    hang_stream,
    insmod_command,
    log_mark,
    wait_until,
)

from firmware_tools.image import DEFAULT_IMAGE_PATH
from uapi.firmware_format import parse_image

FW_PATH = Path("/sys/module/firmware_class/parameters/path")
BUILD_ID = parse_image(DEFAULT_IMAGE_PATH.read_bytes()).build_id
REJECTED_LINE = "firmware vnpu/vnpu_fw.bin rejected by the device: bad signature (reason 7"


def debugfs(name: str) -> Path:
    (path,) = glob.glob(f"/sys/kernel/debug/accel/*/{name}")
    return Path(path)


def fw_state() -> dict[str, str]:
    lines = debugfs("firmware").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines)


def reload() -> None:
    # One unbuffered write: a buffered file would write again when closed after a failure.
    fd = os.open(debugfs("fw_reload"), os.O_WRONLY)
    try:
        os.write(fd, b"1\n")
    finally:
        os.close(fd)


@contextmanager
def tampered_firmware(tmp_path: Path) -> Iterator[None]:
    """request_firmware() finds an image with a flipped signature byte until the block ends."""
    image = bytearray(DEFAULT_IMAGE_PATH.read_bytes())
    image[-1] ^= 0x01
    (tmp_path / "vnpu").mkdir()
    (tmp_path / "vnpu" / "vnpu_fw.bin").write_bytes(bytes(image))
    saved = FW_PATH.read_text().strip() or str(REPO / "firmware")
    FW_PATH.write_text(str(tmp_path))
    try:
        yield
    finally:
        FW_PATH.write_text(saved)


def _fill(dev, value: int):  # noqa: ANN001, ANN202
    from libaccel import Job, JobBo

    out = dev.create_bo(4096)
    s = fill_stream(out.va, 4096, value)
    dev.submit(Job(dev.create_bo_with(s, read_only=True), len(s), [JobBo(out, write=True)]))
    return out


def test_booted_firmware_state(dev) -> None:
    st = fw_state()
    assert st["state"] == "running" and st["reject_reason"] == "0 (none)"
    assert int(st["build_id"], 16) == BUILD_ID
    assert int(st["version"], 16) == parse_image(DEFAULT_IMAGE_PATH.read_bytes()).image.fw_version


def test_reload_lets_a_running_job_finish(long_job_timeout, dev) -> None:
    from libaccel import Job, JobBo

    reloads = int(fw_state()["reloads"])
    sem = dev.create_bo(4096)
    out = dev.create_bo(4096)
    stream = hang_stream(sem.va, out.va)
    dev.submit(
        Job(dev.create_bo_with(stream, read_only=True), len(stream), [JobBo(sem), JobBo(out, write=True)])
    )
    queued = _fill(dev, 5)  # behind the WAIT: it runs after the reload
    assert wait_until(lambda: debugfs_counters()["jobs_on_device"] >= 1, 30), "the job never started"
    errors: list[BaseException] = []
    writing = threading.Event()
    returned: list[float] = []

    def reload_in_thread() -> None:
        writing.set()
        _catch(errors, reload)
        returned.append(time.monotonic())

    t = threading.Thread(target=reload_in_thread)
    t.start()
    assert writing.wait(30)
    time.sleep(0.5)  # room for a reload that does not wait to return (it would fail below)
    released = time.monotonic()
    sem.array(np.int32, 1)[0] = 1  # release the WAIT: the job finishes, the reload proceeds
    sem.sync(for_device=True)
    t.join(timeout=30)
    assert not t.is_alive() and not errors, errors
    assert returned[0] > released, "the reload returned before the job on the device finished"
    assert out.wait(timeout=30).status == 0 and out.array(np.int8, 1)[0] == 7
    assert queued.wait(timeout=30).status == 0 and (queued.array(np.int8, 4096) == 5).all()
    st = fw_state()
    assert st["state"] == "running" and int(st["reloads"]) == reloads + 1
    assert int(st["build_id"], 16) == BUILD_ID


@pytest.fixture
def reload_job_timeout() -> Iterator[int]:
    """A timeout the test can see a hung job inside of, even on the debug kernel (where reading
    debugfs takes seconds under TCG), and short enough to wait for: 10 s."""
    from driver_knobs import job_timeout

    with job_timeout("kernel", 10_000) as ms:
        yield ms


def test_reload_lets_a_hung_job_time_out_and_runs_the_jobs_behind_it(reload_job_timeout, dev) -> None:
    """A reload waits for the jobs on the device as system sleep does: a hung one fails with its own
    -ETIMEDOUT (the watchdog still runs while the reload waits), and the job queued behind it, which
    is innocent, runs after the reload instead of being cancelled."""
    from libaccel import Job, JobBo

    sem = dev.create_bo(4096)
    out = dev.create_bo(4096)
    stream = hang_stream(sem.va, out.va)
    dev.submit(
        Job(dev.create_bo_with(stream, read_only=True), len(stream), [JobBo(sem), JobBo(out, write=True)])
    )
    queued = _fill(dev, 6)
    log_before = log_mark()
    assert wait_until(lambda: debugfs_counters()["jobs_on_device"] >= 1, 30), "the job never started"
    reload()  # waits for the job timeout
    assert out.wait(timeout=30).status == -errno.ETIMEDOUT
    assert queued.wait(timeout=30).status == 0 and (queued.array(np.int8, 4096) == 6).all()
    assert "cancelled" not in "\n".join(dmesg_since(log_before))
    assert _fill(dev, 7).wait(timeout=30).status == 0


def test_reload_with_a_tampered_image_is_rejected_then_recovers(dev, tmp_path: Path) -> None:
    try:
        with tampered_firmware(tmp_path):
            with pytest.raises(OSError) as e:
                reload()
            assert e.value.errno == errno.ENOEXEC
        assert REJECTED_LINE in dmesg()
        st = fw_state()
        assert (
            st["state"] == "rejected"
            and st["reject_reason"] == "7 (bad signature)"
            and st["build_id"] == "0" * 16
        )
        # No firmware runs: jobs fail with -EIO until a good image is booted.
        assert _fill(dev, 1).wait(timeout=30).status == -errno.EIO
    finally:
        reload()  # the good image again, whatever failed above: later tests need it
    assert fw_state()["state"] == "running"
    out = _fill(dev, 2)
    assert out.wait(timeout=30).status == 0 and (out.array(np.int8, 4096) == 2).all()


def test_a_device_status_outside_the_contract_is_an_errno(dev) -> None:
    """The device answers BOOT with status 1 (neither 0 nor a negative errno; injected): the reload
    fails with EIO instead of passing the positive value on (a probe would have taken it for
    success), and a good reload recovers."""
    from driver_knobs import autosuspend, injected_fault

    with autosuspend("kernel", 60_000):
        assert _fill(dev, 3).wait(timeout=30).status == 0  # powered: BOOT is the reload's one command
        try:
            with injected_fault("kernel", "bad_cmd"), pytest.raises(OSError) as e:
                reload()
            assert e.value.errno == errno.EIO
            assert "answered status 0x1, not an errno" in dmesg()
        finally:
            reload()
    out = _fill(dev, 4)
    assert out.wait(timeout=30).status == 0 and (out.array(np.int8, 4096) == 4).all()


def _catch(errors: list[BaseException], fn) -> None:  # noqa: ANN001
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - reported by the test thread
        errors.append(e)


def _sh(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=False)


@pytest.mark.isolated
def test_probe_with_a_tampered_image_fails_with_one_line(tmp_path: Path) -> None:
    assert wait_until(lambda: _sh("rmmod", "vnpu").returncode == 0, 30), "vnpu is busy"
    before = log_mark()
    try:
        with tampered_firmware(tmp_path):
            r = _sh(*insmod_command())
            assert r.returncode == 0, r.stderr  # the module loads; the device's probe fails
            assert not accel_nodes()

            def ours() -> list[str]:
                return [line for line in dmesg_since(before) if "vnpu" in line and "*ERROR*" in line]

            # The probe's verdict may land in the log after insmod returns: wait for it, then count.
            wait_until(lambda: any(REJECTED_LINE in line for line in ours()), 10)
            lines = ours()
            assert len(lines) == 1 and REJECTED_LINE in lines[0], dmesg_since(before)
            assert _sh("rmmod", "vnpu").returncode == 0
    finally:
        if not accel_nodes():
            _sh("rmmod", "vnpu")  # loaded with a failed probe, if an assertion stopped the test
            _sh(*insmod_command())
    assert wait_until(lambda: bool(accel_nodes()), 10), dmesg()[-2000:]
