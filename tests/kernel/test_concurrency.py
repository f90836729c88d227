"""Several processes submitting to the device at once: every job lands in its own file's buffers."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
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
