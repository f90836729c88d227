"""`accel top` on a stand-in /proc and debugfs: clients found through fd links and fdinfo (the
format of tests/libaccel/data/fdinfo_vnpu.txt, captured from vnpu.ko), busy share from two samples."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from libaccel.tools import top
from libaccel.tools.cli import main

SAMPLE = (Path(__file__).parent / "data" / "fdinfo_vnpu.txt").read_text()
SLOT = "0000:00:0a.0"


def _client(
    proc: Path, pid: int, fd: int, client_id: int, npu_ns: int, comm: str = "python", jobs: int = 20
) -> None:
    d = proc / str(pid)
    (d / "fd").mkdir(parents=True, exist_ok=True)
    (d / "fdinfo").mkdir(exist_ok=True)
    (d / "comm").write_text(comm + "\n")
    link = d / "fd" / str(fd)
    if not link.is_symlink():
        os.symlink("/dev/accel/accel0", link)
    text = SAMPLE.replace("drm-client-id:\t1", f"drm-client-id:\t{client_id}")
    text = text.replace("drm-engine-npu:\t10201976 ns", f"drm-engine-npu:\t{npu_ns} ns")
    text = text.replace("vnpu-jobs:\t20", f"vnpu-jobs:\t{jobs}")
    (d / "fdinfo" / str(fd)).write_text(text)


def test_scan_finds_clients_and_merges_shared_files(tmp_path: Path) -> None:
    _client(tmp_path, 100, 3, 1, 5_000)
    _client(tmp_path, 101, 7, 1, 5_000)  # the same file, inherited by a child
    _client(tmp_path, 200, 4, 2, 9_000, comm="other")
    (tmp_path / "300" / "fd").mkdir(parents=True)
    os.symlink("/dev/null", tmp_path / "300" / "fd" / "0")  # not an accel file
    (tmp_path / "self").mkdir()
    found = top.scan_clients(tmp_path)
    assert sorted(found) == [1, 2]
    assert found[1].pids == (100, 101) and found[1].npu_ns == 5_000 and found[1].pdev == SLOT
    assert found[1].memory_total == found[1].memory_resident == 1028 << 10
    assert found[2].comm == "other"


def test_measure_busy_share_and_jobs_per_second(tmp_path: Path) -> None:
    proc, debugfs = tmp_path / "proc", tmp_path / "debugfs"
    _client(proc, 100, 3, 1, 1_000_000)
    _client(proc, 200, 4, 2, 0)
    (debugfs / SLOT).mkdir(parents=True)
    counters = debugfs / SLOT / "counters"
    counters.write_text("jobs_done: 10\njobs_failed: 0\nbo_bytes: 4096\n")
    (debugfs / SLOT / "power").write_text("state: on\npower_ups: 7\npowered_us: 123\n")
    interval = 0.2

    def sleep(s: float) -> None:  # the device works while we wait: client 1 busy half the time
        time.sleep(s)
        _client(proc, 100, 3, 1, 1_000_000 + int(s * 1e9 / 2), jobs=20 + 12)
        counters.write_text("jobs_done: 30\njobs_failed: 2\nbo_bytes: 8192\n")

    (dev,) = top.measure(interval, proc, debugfs, sleep)
    assert dev.pdev == SLOT and [c.client_id for c in dev.clients] == [1, 2]
    busy = dev.clients[0].npu_percent
    assert 35 < busy <= 50, busy  # half the interval, over a slightly longer measured wall time
    assert dev.clients[1].npu_percent == 0 and dev.npu_percent == busy
    assert 0 < dev.clients[0].jobs_per_s <= 12 / interval and dev.clients[1].jobs_per_s == 0
    assert 100 < dev.jobs_per_s <= 22 / interval and dev.bo_bytes == 8192
    text = top.render([dev], interval)
    assert f"({SLOT})" in text and "PID" in text and "python" in text and "JOBS/S" in text
    assert dev.power == "on" and dev.power_ups == 7 and "power on (7 ups)" in text


def test_cli_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["top", "--interval", "-1"]) == 2
    assert "--interval must be positive" in capsys.readouterr().err
