"""Device coredumps: an MMU fault and a hang each leave a devcoredump that `accel coredump` decodes,
with the failing instruction marked."""

from __future__ import annotations

import errno
import json
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
from driver_knobs import injected_fault
from kernel_helpers import copy_stream, hang_stream

from libaccel.tools.coredump import parse, vnpu_dumps
from uapi import hw_layout as hw


def discard_dumps() -> None:
    """devcoredump keeps one dump per device: free what earlier failures left."""
    for path in vnpu_dumps():
        path.write_text("1")
    deadline = time.monotonic() + 10
    while vnpu_dumps() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not vnpu_dumps()


def wait_dump(timeout: float = 30) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = vnpu_dumps()
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError("no vnpu devcoredump appeared")


class Result(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def accel_coredump(capsys: pytest.CaptureFixture[str], *args: str) -> Result:
    """The CLI in this process: a Python start-up costs seconds in the TCG guest."""
    from libaccel.tools.cli import main

    code = main(["coredump", *args])
    out, err = capsys.readouterr()
    return Result(code, out, err)


def test_mmu_fault_leaves_a_dump(dev, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A job the device faults leaves a dump: its status and faulting VA, the stream, its BOs and the
    registers. The fault is injected (the device model faults the job before running it, at its
    command-stream VA): the stream check, always on, refuses every stream that could fault."""
    from libaccel import Job, JobBo

    discard_dumps()
    out = dev.create_bo(4096)
    stream = copy_stream(out.va, out.va + 2048, 16)
    cmd = dev.create_bo_with(stream, read_only=True)
    with injected_fault("kernel", "mmu_fault"):
        dev.submit(Job(cmd, len(stream), [JobBo(out, write=True)]))
        status = out.wait(timeout=60)
    assert status.status == -errno.EFAULT
    path = wait_dump()

    saved = tmp_path / "dump.bin"
    r = accel_coredump(capsys, "--json", "--save", str(saved))
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    job = rec["job"]
    assert job["status"] == -errno.EFAULT and job["fault_va"] == status.fault_va == job["cmd_va"]
    assert job["cmd_size"] == len(stream) and job["cycles"] == 0  # faulted before its first instruction
    assert rec["failing_instruction"] is None and rec["disassembly"][2].startswith("COPY ")
    assert bytes.fromhex(rec["stream"]) == stream
    assert [(b["va"], b["size"]) for b in rec["bos"]] == [(out.va, 4096)]
    regs = {r["name"]: r["value"] for r in rec["registers"]}
    assert regs["REG_MAGIC"] == hw.MAGIC and regs["REG_STATUS"] == hw.STATUS_READY
    assert {"SQ_HEAD", "SQ_TAIL", "CQ_HEAD", "CQ_TAIL"} <= regs.keys()

    human = accel_coredump(capsys, str(saved))
    assert human.returncode == 0, human.stderr
    assert f"-EFAULT (MMU fault) at VA {status.fault_va:#x}" in human.stdout
    assert "(no instruction marked: none had started)" in human.stdout

    assert parse(saved.read_bytes()).job.seqno == job["seqno"]
    assert accel_coredump(capsys, "--discard").returncode == 0
    assert not path.exists() or not vnpu_dumps()


def test_hang_leaves_a_dump_marking_the_wait(
    short_job_timeout, dev, capsys: pytest.CaptureFixture[str]
) -> None:
    from libaccel import Job, JobBo

    discard_dumps()
    sem = dev.create_bo(4096)
    out = dev.create_bo(4096)
    stream = hang_stream(sem.va, out.va)
    dev.submit(
        Job(dev.create_bo_with(stream, read_only=True), len(stream), [JobBo(sem), JobBo(out, write=True)])
    )
    assert out.wait(timeout=dev.params.job_timeout_ms / 1000 + 30).status == -errno.ETIMEDOUT
    wait_dump()
    r = accel_coredump(capsys, "--json", "--discard")
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert rec["job"]["status"] == -errno.ETIMEDOUT and rec["job"]["fault_va"] == 0
    assert rec["disassembly"][rec["failing_instruction"]].startswith("WAIT ")
    regs = {r["name"]: r["value"] for r in rec["registers"]}
    assert regs["REG_ABORT_CYCLES"] == rec["job"]["cycles"] == 3
    assert [b["va"] for b in rec["bos"]] == [sem.va, out.va]
    assert not np.any(out.array(np.int8, 1))


def test_a_user_who_faults_many_jobs_cannot_flood_the_kernel_log(dev) -> None:
    """Any user can make jobs fault: the coredump line each faulting job logs is rate-limited."""
    from kernel_helpers import debugfs_counters, dmesg_since, log_mark, wait_until

    from libaccel import Job, JobBo

    jobs = 25  # the kernel's default rate limit lets 10 lines through in 5 s
    live = debugfs_counters()["jobs"]
    out = dev.create_bo(4096)
    stream = copy_stream(out.va, out.va + 2048, 16)
    cmd = dev.create_bo_with(stream, read_only=True)
    before = log_mark()
    with injected_fault("kernel", "mmu_fault", count=jobs):
        for _ in range(jobs):
            dev.submit(Job(cmd, len(stream), [JobBo(out, write=True)]))
        assert out.wait(timeout=120).status == -errno.EFAULT
    # Each job logs when it is freed, after its fence: wait until all of them are.
    assert wait_until(lambda: debugfs_counters()["jobs"] <= live, 30)
    lines = [line for line in dmesg_since(before) if "device coredump captured" in line]
    assert 1 <= len(lines) <= 10, lines
    discard_dumps()
