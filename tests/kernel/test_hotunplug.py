"""Unbinding the NPU under an open file with a job on the device: what a hot-unplug does.

Runs in the isolated pass (it takes the device away from every other file), before
test_lifecycle's final dmesg check, which then also covers this test's kernel log.
"""

from __future__ import annotations

import errno
import gc
import os
import subprocess
import threading
import time
from collections import Counter

import numpy as np
import pytest
from dmabuf_sources import UDMABUF, udmabuf_buffer
from kernel_helpers import PCI_DRIVER as DRIVER
from kernel_helpers import (
    accel_nodes,
    bad_dmesg_lines,
    fill_stream,
    hang_stream,
    holders,
    insmod_command,
    log_mark,
    npu_address,
    wait_until,
    write_once,
)

from libaccel.tools import fdinfo

pytestmark = pytest.mark.isolated


def _unplug_under_a_running_job(address: str) -> None:
    from libaccel import Device, Job, JobBo
    from libaccel.errors import NoDevice

    with Device.open("kernel") as dev:
        sem = dev.create_bo(4096)
        out = dev.create_bo(4096)
        s = hang_stream(sem.va, out.va)
        dev.submit(Job(dev.create_bo_with(s, read_only=True), len(s), [JobBo(sem), JobBo(out, write=True)]))
        started = wait_until(lambda: fdinfo.read(dev.backend.fileno()).engine_ns() > 0, 10)
        assert started, "the job never started"
        # CPU mappings made now stay valid after the unplug (a new mmap is refused then).
        sem_view, out_view = sem.array(np.int32, 1), out.array(np.int8, 4096)
        # An import held across the unplug: its DMA mapping goes with the binding (DMA-API debug
        # reports one that outlives it), the attachment with the file.
        # A udmabuf where the kernel has it, else another vnpu file's BO (the debug kernel has none).
        imported = udmabuf_buffer(4096) if UDMABUF.exists() else None
        if imported is not None:
            imported.view[:4] = b"vnpu"
            dev.import_dmabuf(imported.fd)
        else:
            exporter = Device.open("kernel")
            fd = exporter.create_bo(4096).export_dmabuf()
            dev.import_dmabuf(fd)
            os.close(fd)

        write_once(DRIVER / "unbind", address)
        assert not (DRIVER / address).exists()
        assert wait_until(lambda: not accel_nodes(), 10)
        # The file stays open, and every ioctl says the device is gone.
        with pytest.raises(NoDevice):
            dev.get_param("DEVICE_ID")
        with pytest.raises(fdinfo.FdInfoError, match="no drm-driver"):
            fdinfo.read(dev.backend.fileno())
        # The reset at unbind stopped the job: releasing its WAIT now runs nothing.
        sem_view[0] = 1
        time.sleep(0.2)
        assert out_view[0] == 0
        del sem_view, out_view
        for bo in (sem, out):
            with pytest.raises(NoDevice):
                bo.close()
        if imported is not None:
            assert bytes(imported.view[:4]) == b"vnpu"  # the exporter's pages are untouched
            imported.close()
        else:
            exporter.close()
    # Closing the last file tears the scheduler down.


def test_unbind_with_an_open_file_and_a_running_job_then_rebind() -> None:

    gc.collect()
    address = npu_address()
    try:
        _unplug_under_a_running_job(address)
        gc.collect()  # the BOs' CPU mappings hold the file open until they go
    finally:
        if not (DRIVER / address).exists():
            write_once(DRIVER / "bind", address)
    assert wait_until(lambda: bool(accel_nodes()), 10)
    _fill_works(13)


RACERS_PER_FILE = 2


def _race(dev, out, cmd, size: int, stop: threading.Event, outcomes: Counter[str]) -> None:  # noqa: ANN001
    """SUBMIT a FILL of ``out`` and BO_CREATE then GEM_CLOSE a BO, in a loop, until ``stop``: counts
    each ioctl's outcome ("ok", "ENODEV", anything else by its errno or exception)."""
    from libaccel import Job, JobBo

    calls = (
        lambda: dev.submit(Job(cmd, size, [JobBo(out, write=True)])),
        lambda: dev.create_bo(4096).close(),
    )
    while not stop.is_set():
        for call in calls:
            try:
                call()
                outcomes["ok"] += 1
            except OSError as e:
                outcomes[errno.errorcode.get(e.errno or 0, repr(e))] += 1
            except Exception as e:  # noqa: BLE001 - reported by the test
                outcomes[repr(e)] += 1


def _racers(devs: list, stop: threading.Event) -> tuple[list[threading.Thread], list[Counter[str]]]:
    """RACERS_PER_FILE threads per file, each with a FILL job of its file to submit, and their counts.
    The BOs live in the threads' arguments only, so they go when the threads end."""
    threads, outcomes = [], []
    for dev in devs:
        out = dev.create_bo(4096)
        s = fill_stream(out.va, 4096, 5)
        cmd = dev.create_bo_with(s, read_only=True)
        for _ in range(RACERS_PER_FILE):
            outcomes.append(Counter())
            args = (dev, out, cmd, len(s), stop, outcomes[-1])
            threads.append(threading.Thread(target=_race, args=args, daemon=True))
    return threads, outcomes


def test_submit_and_bo_create_racing_an_unbind_answer_0_or_enodev() -> None:
    """Threads on two files SUBMIT and BO_CREATE in a loop while the NPU is unbound and bound again:
    every ioctl answers 0 or ENODEV, the kernel log has no splat, no job outlives the files (rmmod
    succeeds), and the device runs a job after the rebind and after a reload."""
    from libaccel import Device

    gc.collect()
    address, since = npu_address(), log_mark()
    devs = [Device.open("kernel") for _ in range(2)]
    stop = threading.Event()
    threads, outcomes = _racers(devs, stop)
    try:
        for t in threads:
            t.start()
        assert wait_until(lambda: all(c["ok"] >= 4 for c in outcomes), 60), outcomes
        write_once(DRIVER / "unbind", address)
        assert wait_until(lambda: all(c["ENODEV"] >= 4 for c in outcomes), 30), outcomes
        write_once(DRIVER / "bind", address)
        assert wait_until(lambda: bool(accel_nodes()), 10)
        time.sleep(0.5)  # the old files keep answering ENODEV while the new binding comes up
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
        for dev in devs:
            dev.close()
        if not (DRIVER / address).exists():
            write_once(DRIVER / "bind", address)
    assert not any(t.is_alive() for t in threads), "an ioctl did not return"
    total = sum(outcomes, Counter())
    assert set(total) == {"ok", "ENODEV"}, total
    assert bad_dmesg_lines(since) == [], bad_dmesg_lines(since)[:20]
    _fill_works(14)
    del devs, threads
    gc.collect()  # the command BOs' CPU mappings hold their files open until they go
    rmmod = ["rmmod", "vnpu"]
    assert wait_until(lambda: subprocess.run(rmmod, check=False).returncode == 0, 30), holders()
    assert wait_until(lambda: not accel_nodes(), 10)
    assert subprocess.run(insmod_command(), check=False).returncode == 0
    assert wait_until(lambda: bool(accel_nodes()), 10)
    _fill_works(15)


def _fill_works(value: int) -> None:
    from libaccel import Device, Job, JobBo

    with Device.open("kernel") as dev:
        out = dev.create_bo(4096)
        s = fill_stream(out.va, 4096, value)
        dev.submit(Job(dev.create_bo_with(s, read_only=True), len(s), [JobBo(out, write=True)]))
        assert out.wait(timeout=30).status == 0
        assert (out.array(np.int8, 4096) == value).all()
