"""A prepared submit (one job SUBMITted again and again, each time followed by a BO_WAIT on one of
its BOs: a compiled partition's invoke) gives what fresh submissions of the job give: outputs,
statuses, fences. On the shim its runs after the first are replays of the job it validated
(libaccel.backends.shim.replay); any change of the file's BOs or mappings, or of the stream in the
command BO, sends the next run through the full SUBMIT path again, so no replay runs a stream
nobody checked or touches memory the job may no longer touch.
"""

from __future__ import annotations

import errno

import driver_knobs
import numpy as np
import pytest
from test_job_contract import PAGE, copy_stream, fill_stream, padded

from libaccel import Device, Job, JobBo
from libaccel.errors import AccessDenied, JobFault
from libaccel.job import PreparedSubmit

COUNT = 64


class CopyJob:
    """A 64-byte COPY src -> dst with an out-syncobj, prepared to run again and again (waiting on dst)."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self.src, self.dst = device.create_bo(PAGE), device.create_bo(PAGE)
        self.stream = copy_stream(self.src.va, self.dst.va, COUNT)
        self.cmd = device.create_bo_with(self.stream)
        self.out = device.create_syncobj()
        bos = [JobBo(self.cmd), JobBo(self.src), JobBo(self.dst, read=False, write=True)]
        self.job = Job(self.cmd, len(self.stream), bos, out_syncobj=self.out)
        self.prepared: PreparedSubmit = device.backend.prepare_submit(self.job, self.dst.handle, 30.0)
        self.rng = np.random.default_rng(7)

    def new_input(self) -> bytes:
        data = self.rng.integers(-128, 128, COUNT, dtype=np.int8)
        self.src.array(np.int8, COUNT)[:] = data
        self.dst.array(np.int8, COUNT)[:] = 0
        return data.tobytes()

    def output(self) -> bytes:
        return self.dst.read(COUNT)

    def runs(self) -> tuple[int, int]:
        return self.prepared.full_submits, self.prepared.replays


def replays_on_shim(backend: str, job: CopyJob, full: int, replays: int) -> None:
    """The shim ran ``full`` full submissions and ``replays`` replays; the kernel only full ones."""
    assert job.runs() == ((full, replays) if backend == "shim" else (full + replays, 0))


def test_a_prepared_job_gives_what_fresh_submissions_give(device: Device, backend: str) -> None:
    job = CopyJob(device)
    for _ in range(5):
        data = job.new_input()
        job.prepared.run()
        assert job.output() == data
        device.wait_syncobjs([job.out], timeout=5)  # its fence is in the out-syncobj, signalled
        # A fresh submission of the same job on the same input gives the same bytes and status.
        job.dst.array(np.int8, COUNT)[:] = 0
        device.submit(job.job)
        assert job.dst.wait(timeout=30).ok
        assert job.output() == data
        device.wait_syncobjs([job.out], timeout=5)
    # The fresh submissions between them left the file's BOs and mappings as they were.
    replays_on_shim(backend, job, 1, 4)


def test_a_failing_run_reports_what_a_fresh_one_does(device: Device, backend: str) -> None:
    job = CopyJob(device)
    for _ in range(3):
        job.new_input()
        job.prepared.run()
    with driver_knobs.injected_fault(backend, "mmu_fault"), pytest.raises(JobFault) as excinfo:
        job.prepared.run()
    assert excinfo.value.errno == errno.EFAULT
    device.wait_syncobjs([job.out], timeout=5)  # a failed job's fence signals too
    data = job.new_input()
    job.prepared.run()
    assert job.output() == data


def test_a_bo_created_or_closed_sends_the_next_run_through_submit(device: Device, backend: str) -> None:
    job = CopyJob(device)
    job.new_input()
    job.prepared.run()
    job.prepared.run()
    replays_on_shim(backend, job, 1, 1)
    other = device.create_bo(PAGE)  # a new BO and mapping in the file
    data = job.new_input()
    job.prepared.run()
    assert job.output() == data
    replays_on_shim(backend, job, 2, 1)
    other.close()  # unmapped again
    data = job.new_input()
    job.prepared.run()
    job.prepared.run()
    assert job.output() == data
    replays_on_shim(backend, job, 3, 2)


def test_no_run_writes_a_closed_bo_s_memory_after_it_was_reused(device: Device) -> None:
    job = CopyJob(device)
    job.new_input()
    job.prepared.run()
    job.prepared.run()
    job.dst.close()
    # The closed BO's handle now names a BO elsewhere (too big for the hole it left), and another BO
    # takes its place (on the shim, the same VA and memory): the stream's COPY now writes outside
    # every BO the job lists, and a run from what was validated before would write into ``victim``.
    moved = device.create_bo(2 * PAGE)
    victim = device.create_bo(PAGE)
    assert moved.handle == job.dst.handle
    victim.array(np.uint8, PAGE)[:] = 0xA5
    with pytest.raises(AccessDenied):
        job.prepared.run()
    assert victim.read(PAGE) == b"\xa5" * PAGE
    assert moved.read(2 * PAGE) == bytes(2 * PAGE)


def test_a_rewritten_stream_is_the_one_that_runs_once_checked(device: Device, backend: str) -> None:
    job = CopyJob(device)
    unlisted = device.create_bo(PAGE)
    unlisted.array(np.int8, COUNT)[:] = 3
    job.new_input()
    job.prepared.run()
    job.prepared.run()
    # SUBMIT takes the stream as the command BO holds it: a FILL now, checked and run.
    job.cmd.write(padded(fill_stream(job.dst.va, COUNT, 9), len(job.stream)))
    job.new_input()
    job.prepared.run()
    assert job.output() == bytes([9]) * COUNT
    # A stream that reads a BO the job does not list is refused, whatever ran before.
    job.cmd.write(copy_stream(unlisted.va, job.dst.va, COUNT))
    job.new_input()
    with pytest.raises(AccessDenied):
        job.prepared.run()
    assert job.output() == bytes(COUNT)
    job.cmd.write(job.stream)
    data = job.new_input()
    job.prepared.run()
    job.prepared.run()
    assert job.output() == data
    # Each rewrite went through SUBMIT (the refused one counts as a full run), the rest replayed.
    replays_on_shim(backend, job, 4, 2)
