"""`accel top` on vnpu.ko: a file whose job holds the NPU shows as busy, with its memory; a burst of
jobs shows in the device's jobs/s."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from kernel_helpers import fill_stream, hang_stream

from libaccel.tools import fdinfo


def top_once(capsys: pytest.CaptureFixture[str], interval: float) -> dict:
    from libaccel.tools.cli import main

    assert main(["top", "--once", "--json", "--interval", str(interval)]) == 0
    return json.loads(capsys.readouterr().out)


def client_id(dev) -> int:
    """This file's DRM client id: another test's file may still be open in this process."""
    return fdinfo.read(dev.backend.fileno()).client_id


def test_top_sees_a_busy_client(long_job_timeout, dev, capsys: pytest.CaptureFixture[str]) -> None:
    from libaccel import Job, JobBo

    sem = dev.create_bo(4096)
    out = dev.create_bo(64 << 10)
    stream = hang_stream(sem.va, out.va)
    dev.submit(
        Job(dev.create_bo_with(stream, read_only=True), len(stream), [JobBo(sem), JobBo(out, write=True)])
    )
    try:
        rec = top_once(capsys, 0.5)
    finally:
        sem.array(np.int32, 1)[0] = 1  # let the job end
        sem.sync(for_device=True)
    assert out.wait(timeout=30).status == 0
    (device,) = rec["devices"]
    mine = [c for c in device["clients"] if c["client_id"] == client_id(dev)]
    assert len(mine) == 1, device
    # The WAIT held the NPU through the interval: the client shows busy and the device at least as
    # busy. How busy depends on the host's load between the two reads, so no figure is asserted.
    assert mine[0]["npu_percent"] > 0 and device["npu_percent"] >= mine[0]["npu_percent"]
    assert mine[0]["memory_total"] >= 4096 + (64 << 10)
    assert device["bo_bytes"] >= mine[0]["memory_total"]


def test_top_counts_jobs_per_second(dev, capsys: pytest.CaptureFixture[str]) -> None:
    from libaccel import Job, JobBo

    out = dev.create_bo(4096)
    stream = fill_stream(out.va, 4096, 1)
    cmd = dev.create_bo_with(stream, read_only=True)
    stop = threading.Event()

    def burst() -> None:
        while not stop.is_set():
            dev.submit(Job(cmd, len(stream), [JobBo(out, write=True)]))
            out.wait(timeout=30)

    t = threading.Thread(target=burst)
    t.start()
    try:
        rec = top_once(capsys, 1.0)
    finally:
        stop.set()
        t.join(timeout=30)
    (device,) = rec["devices"]
    assert device["jobs_per_s"] > 1
    (mine,) = [c for c in device["clients"] if c["client_id"] == client_id(dev)]
    assert mine["jobs_per_s"] > 1  # fdinfo's vnpu-jobs: this file's own rate
