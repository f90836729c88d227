"""The guest runner's watch on the kernel log: an Oops-class report stops the tests after a grace
period instead of leaving the run to its timeout; a WARNING does not."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qemu_tests import kernel_oops as ko

OOPSES = [
    "BUG: kernel NULL pointer dereference, address: 0000000000000008",
    "BUG: unable to handle page fault for address: ffffc90000a00000",
    "Oops: 0000 [#1] PREEMPT SMP NOPTI",
    "general protection fault, probably for non-canonical address 0xdead000000000122: 0000 [#1] SMP",
    "kernel BUG at drivers/accel/vnpu/vnpu_job.c:412!",
    "Kernel panic - not syncing: Fatal exception",
    "BUG: KASAN: slab-use-after-free in vnpu_job_free+0x1c/0x90",
]
NOT_OOPSES = [
    "WARNING: CPU: 0 PID: 812 at drivers/accel/vnpu/vnpu_job.c:300 vnpu_job_run+0x5/0x10",
    "WARNING: possible circular locking dependency detected",
    "vnpu 0000:00:0a.0: [drm] job 12 timed out on core 0: resetting",
    "a BUG: in the middle is not the start of a report",
    "watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [python:812]",  # a stalled TCG vCPU can do it
]


@pytest.mark.parametrize("message", OOPSES)
def test_oops_reports_are_recognised(message: str) -> None:
    assert ko.is_oops(message)


@pytest.mark.parametrize("message", NOT_OOPSES)
def test_warnings_and_driver_messages_are_not(message: str) -> None:
    assert not ko.is_oops(message)


def test_kmsg_records_give_their_messages() -> None:
    chunk = b"6,1203,5132001,-;vnpu: loaded\n SUBSYSTEM=pci\n1,1204,5132005,-;Oops: 0002 [#1] SMP\n"
    assert ko.messages(chunk) == ["vnpu: loaded", "Oops: 0002 [#1] SMP"]


def test_the_watch_sees_an_oops_written_to_the_log(tmp_path: Path) -> None:
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    watch = ko.KmsgWatch(str(fifo))
    watch.start()
    with open(fifo, "wb", buffering=0) as log:
        log.write(b"6,1,100,-;vnpu 0000:00:0a.0: firmware 1.0 booted\n")
        time.sleep(0.1)
        assert watch.oops is None
        log.write(b"1,2,200,-;" + OOPSES[0].encode() + b"\n")
        watch.join(timeout=5)
    assert watch.oops == OOPSES[0] and watch.seen_at > 0


def test_an_unreadable_log_says_why() -> None:
    watch = ko.KmsgWatch("/nonexistent/kmsg")
    watch.start()
    watch.join(timeout=5)
    assert watch.oops is None and watch.error is not None


def test_a_run_after_an_oops_is_killed_after_the_grace_period() -> None:
    """The tests (here a process tree that would sleep a minute) are killed, children included."""
    code = "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    watch = ko.KmsgWatch("/nonexistent/kmsg")
    watch.oops, watch.seen_at = OOPSES[2], time.monotonic()
    t0 = time.monotonic()
    assert ko.wait_unless_oops(proc, watch, grace=0.5, poll=0.1) == ko.OOPS_EXIT
    assert time.monotonic() - t0 < 10
    # The sleeping child too (a zombie at most): SIGKILL is sent to the group at once, but a loaded
    # host may take a moment to end a process it was sent to.
    deadline = time.monotonic() + 10
    while _running_in_group(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _running_in_group(proc.pid) == []


def _running_in_group(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` that are not zombies, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # fields: state, ppid, pgrp, ...
            found.append(int(stat.parent.name))
    return found


def test_a_run_without_an_oops_keeps_its_exit_code() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"], start_new_session=True)
    watch = ko.KmsgWatch("/nonexistent/kmsg")
    assert ko.wait_unless_oops(proc, watch, grace=0.1, poll=0.1) == 3
    assert ko.wait_unless_oops(subprocess.Popen(["true"]), None, poll=0.1) == 0
