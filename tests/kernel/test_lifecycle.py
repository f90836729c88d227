"""Module lifecycle, then the kernel log. Runs last, in its own pytest process (marker ``isolated``)."""

from __future__ import annotations

import gc
import subprocess

import numpy as np
import pytest
from kernel_helpers import (
    accel_nodes,
    bad_dmesg_lines,
    copy_stream,
    fill_stream,
    hang_stream,
    holders,
    insmod_command,
    wait_until,
)

pytestmark = pytest.mark.isolated


def _job_works(value: int) -> bool:
    """Open the device, run one FILL job, check it. Returns with no file or mapping left open.

    A BO's CPU mapping keeps its file (and so the module) alive after the
    device is closed, so every mapping must be gone before the next rmmod:
    they all live in this function's frame.
    """
    from libaccel import Device, Job, JobBo

    with Device.open("kernel") as dev:
        out = dev.create_bo(4096)
        s = fill_stream(out.va, 4096, value)
        cmd = dev.create_bo_with(s, read_only=True)
        dev.submit(Job(cmd, len(s), [JobBo(out, write=True)]))
        ok = out.wait(timeout=30).status == 0 and bool((out.array(np.int8, 4096) == value).all())
        out.close()
        cmd.close()
    return ok


def test_rmmod_insmod_cycle() -> None:
    for i in range(2):
        gc.collect()  # drop unreachable BOs (and their mappings) of earlier tests
        r = subprocess.run(["rmmod", "vnpu"], capture_output=True, text=True, check=False)
        assert r.returncode == 0, f"{r.stderr}{holders()}"
        assert wait_until(lambda: not accel_nodes(), 10)
        r = subprocess.run(insmod_command(), capture_output=True, text=True, check=False)
        assert r.returncode == 0, r.stderr
        assert wait_until(lambda: bool(accel_nodes()), 10)
        assert _job_works(11 + i)


def _leave_hung_job() -> None:
    """Submit a job that hangs (WAIT on a semaphore never set), then close everything at once."""
    from libaccel import Device, Job, JobBo

    with Device.open("kernel") as dev:
        sem, out = dev.create_bo(4096), dev.create_bo(4096)
        s = hang_stream(sem.va, out.va)
        cmd = dev.create_bo_with(s, read_only=True)
        dev.submit(Job(cmd, len(s), [JobBo(sem), JobBo(out, write=True)]))
        for bo in (sem, out, cmd):
            bo.close()


def test_rmmod_with_a_job_in_flight() -> None:
    """Closing a file with a hung job, then rmmod at once: the job is cancelled or times out, the
    module unloads, and a reloaded module works."""
    gc.collect()
    _leave_hung_job()
    gc.collect()
    r = subprocess.run(["rmmod", "vnpu"], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        # The driver may still be tearing the file down; give it the job timeout at most.
        assert wait_until(
            lambda: subprocess.run(["rmmod", "vnpu"], capture_output=True, check=False).returncode == 0, 30
        ), f"{r.stderr}{holders()}"
    assert wait_until(lambda: not accel_nodes(), 10)
    r = subprocess.run(insmod_command(), capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert wait_until(lambda: bool(accel_nodes()), 10)
    assert _job_works(21)


def test_a_closed_files_job_behind_a_foreign_fence_holds_the_module_not_close() -> None:
    """A job waiting on another driver's fence (vgem's, through a dma-buf): closing its file returns at
    once; the job keeps vnpu loaded (rmmod refuses) until the fence signals, then it ends, unrun, and
    the module unloads and reloads."""
    import time

    from dmabuf_sources import VgemBuffer, vgem_card

    from libaccel import Device, Job, JobBo

    card = vgem_card()
    if card is None:
        pytest.skip("no vgem in this kernel")
    gc.collect()
    foreign = VgemBuffer(card, 4096)
    try:
        dev = Device.open("kernel")
        imp, out = dev.import_dmabuf(foreign.fd), dev.create_bo(4096)
        s = copy_stream(imp.va, out.va, 64)
        cmd = dev.create_bo_with(s, read_only=True)
        dev.submit(Job(cmd, len(s), [JobBo(imp), JobBo(out, write=True)]))  # waits for vgem's fence
        t0 = time.monotonic()
        for bo in (imp, out, cmd):
            bo.close()
        del imp, out, cmd
        gc.collect()
        dev.close()
        took = time.monotonic() - t0
        assert took < 5, f"close() took {took:.1f} s behind another driver's fence"
        r = subprocess.run(["rmmod", "vnpu"], capture_output=True, text=True, check=False)
        assert r.returncode != 0, "vnpu unloaded while a job of a closed file was alive"
        foreign.signal()
    finally:
        foreign.close()
    assert wait_until(
        lambda: subprocess.run(["rmmod", "vnpu"], capture_output=True, check=False).returncode == 0, 30
    ), holders()
    assert wait_until(lambda: not accel_nodes(), 10)
    r = subprocess.run(insmod_command(), capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert wait_until(lambda: bool(accel_nodes()), 10)
    assert _job_works(31)


def test_dmesg_has_no_warnings() -> None:
    bad = bad_dmesg_lines()
    assert not bad, "\n".join(bad[:40])
