"""A process killed mid-job releases everything: debugfs's live counters return to their baseline."""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import re
import signal
import time

import numpy as np
from kernel_helpers import debugfs_counters, fill_stream, hang_stream

# Totals only ever grow; every other counter counts live objects and must come back down.
MONOTONIC = re.compile(r"_total$|submitted|done|failed|timedout|cancel|resets")


def _child(ready) -> None:
    """Open the device, hold BOs and a hung job, report ready, then wait to be killed."""
    from libaccel import Device, Job, JobBo

    dev = Device.open("kernel")
    bos = [dev.create_bo(65536) for _ in range(8)]
    sem, out = bos[0], bos[1]
    stream = hang_stream(sem.va, out.va)
    cmd = dev.create_bo_with(stream, read_only=True)
    dev.submit(Job(cmd, len(stream), [JobBo(sem), JobBo(out, write=True)]))
    ready.send("ready")
    time.sleep(600)


def _live(counters: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in counters.items() if not MONOTONIC.search(k)}


def test_killed_process_releases_everything() -> None:
    from libaccel import Device, Job, JobBo

    # No file of ours is open across the fork: the child must not inherit one. Earlier tests'
    # devices can linger until collected (a BO mapping keeps its file alive): collect them now.
    gc.collect()
    baseline = _live(debugfs_counters())
    assert baseline, "vnpu debugfs has no /sys/kernel/debug/accel/*/counters"
    # fork, not a new interpreter: a Python start-up costs seconds under TCG.
    ctx = mp.get_context("fork")
    parent_end, child_end = ctx.Pipe()
    child = ctx.Process(target=_child, args=(child_end,))
    child.start()
    try:
        assert parent_end.poll(120), "child did not get its job queued"
        assert parent_end.recv() == "ready"
        during = _live(debugfs_counters())
        grown = {k for k in baseline if during.get(k, 0) > baseline[k]}
        assert grown, f"no live counter grew while the child held BOs and a job: {during}"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(timeout=30)
    assert child.exitcode == -signal.SIGKILL

    with Device.open("kernel") as probe:
        timeout_s = probe.params.job_timeout_ms / 1000
    deadline = time.monotonic() + timeout_s + 30
    now = _live(debugfs_counters())

    def released(now: dict[str, int]) -> bool:
        # Below the baseline is fine: objects of earlier tests may be freed meanwhile.
        return all(now.get(k, 0) <= v for k, v in baseline.items())

    while not released(now) and time.monotonic() < deadline:
        time.sleep(0.2)
        now = _live(debugfs_counters())
    assert released(now), f"still held after the kill: {now} (baseline {baseline})"

    # The device still serves new files.
    with Device.open("kernel") as dev:
        out = dev.create_bo(4096)
        s = fill_stream(out.va, 4096, 5)
        dev.submit(Job(dev.create_bo_with(s, read_only=True), len(s), [JobBo(out, write=True)]))
        assert out.wait(timeout=30).status == 0
        assert (out.array(np.int8, 4096) == 5).all()
