"""Several processes submitting to the device at once: every job lands in its own file's buffers."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest
from kernel_helpers import fill_stream

PROCESSES = 4
JOBS = 8
SIZE = 4096


def _worker(index: int, queue: mp.Queue) -> None:
    from libaccel import Device, Job, JobBo

    try:
        with Device.open("kernel") as dev:
            outs = [dev.create_bo(SIZE) for _ in range(JOBS)]
            jobs = []
            for j, out in enumerate(outs):
                value = (index * JOBS + j) % 120 + 1
                cmd = dev.create_bo_with(fill_stream(out.va, SIZE, value), read_only=True)
                jobs.append(
                    (Job(cmd, len(fill_stream(out.va, SIZE, value)), [JobBo(out, write=True)]), value)
                )
            for job, _ in jobs:
                dev.submit(job)
            bad = []
            for out, (_, value) in zip(outs, jobs, strict=True):
                status = out.wait(timeout=60)
                data = out.array(np.int8, SIZE)
                if status.status != 0 or not (data == value).all():
                    bad.append((out.va, status.status, int(data[0]), value))
            queue.put((index, bad))
    except Exception as e:  # report, do not hang the parent
        queue.put((index, [repr(e)]))


def test_parallel_processes_submit() -> None:
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(i, queue)) for i in range(PROCESSES)]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=180) for _ in procs)
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert results == {i: [] for i in range(PROCESSES)}


FILES = 8


def test_many_files_submitting_at_once_spread_over_both_cores() -> None:
    """Eight files, each submitting from its own thread at once, on a 2-core device: vnpu_job_pick_core()
    runs concurrently for all of them, both cores run jobs, every output is exact, and the kernel log
    has no splat."""
    import threading

    from kernel_helpers import bad_dmesg_lines, log_mark

    from libaccel import Device, Job, JobBo
    from libaccel.tools import fdinfo

    since = log_mark()
    devs = [Device.open("kernel") for _ in range(FILES)]
    try:
        if devs[0].get_param("NUM_CORES") < 2:
            pytest.skip("the NPU has one core (python -m qemu_tests --npu-cores 2)")
        plans = []
        for i, dev in enumerate(devs):
            outs = [dev.create_bo(SIZE) for _ in range(JOBS)]
            values = [(i * JOBS + j) % 120 + 1 for j in range(JOBS)]
            streams = [fill_stream(out.va, SIZE, v) for out, v in zip(outs, values, strict=True)]
            jobs = [
                Job(dev.create_bo_with(s, read_only=True), len(s), [JobBo(out, write=True)])
                for out, s in zip(outs, streams, strict=True)
            ]
            plans.append((dev, jobs, outs, values))
        start = threading.Barrier(FILES)
        errors: list[BaseException] = []

        def submit(dev, jobs) -> None:  # noqa: ANN001
            try:
                start.wait(timeout=60)
                for job in jobs:
                    dev.submit(job)
            except BaseException as e:  # noqa: BLE001 - reported by the test
                errors.append(e)

        threads = [threading.Thread(target=submit, args=(dev, jobs)) for dev, jobs, _, _ in plans]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
        bad = []
        for _dev, _jobs, outs, values in plans:
            for out, v in zip(outs, values, strict=True):
                status = out.wait(timeout=60).status
                if status != 0 or not (out.array(np.int8, SIZE) == v).all():
                    bad.append((out.va, status, v))
        assert bad == []
        by_core = [fdinfo.read(dev.backend.fileno()).jobs_by_core for dev in devs]
        ran = {core: sum(c.get(core, 0) for c in by_core) for core in (0, 1)}
        assert sum(ran.values()) == FILES * JOBS and all(ran.values()), (ran, by_core)
    finally:
        for dev in devs:
            dev.close()
    assert bad_dmesg_lines(since) == []
