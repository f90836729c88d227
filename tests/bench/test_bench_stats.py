"""The benchmark's statistics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.clients import percentile
from bench.jobs import main


def test_percentile_interpolates() -> None:
    data = [float(x) for x in range(1, 101)]  # 1..100
    assert percentile(data, 50) == pytest.approx(50.5)
    assert percentile(data, 99) == pytest.approx(99.01)
    assert percentile(data, 0) == 1 and percentile(data, 100) == 100
    assert percentile([3.0], 99) == 3.0


def test_percentile_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_bench_on_the_shim_writes_its_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    args = ["--iterations", "20", "--jobs", "10", "--processes", "1", "--clients", "1", "2", "--invokes", "2"]
    args += ["--repeat", "2", "--beside", "5"]
    assert main([str(out), "--shim", *args]) == 0
    r = json.loads(out.read_text())
    assert r["backend"] == "shim" and not r["in_qemu_guest"]
    rt = r["round_trip"]
    assert rt["iterations"] == 20
    assert 0 < rt["min_us"] <= rt["p50_us"] <= rt["p90_us"] <= rt["p99_us"]
    assert 0 < rt["submit_p50_us"] < rt["p99_us"]
    (tp,) = r["throughput"]
    assert tp["processes"] == 1 and tp["jobs"] == 10 and tp["jobs_per_s"] > 0
    assert len(r["load_avg_before"]) == 3
    rows = r["throughput_by_cores"]
    # Both workloads, 1 and 2 clients, on a 1-core and a 2-core shim device; every result exact.
    assert {(t["cores"], t["clients"], t["workload"]) for t in rows} == {
        (c, n, w) for c in (1, 2) for n in (1, 2) for w in ("empty job", "model invoke")
    }
    for t in rows:
        assert t["exact"] and t["per_s"] > 0 and len(t["runs"]) == 2
        assert min(t["runs"]) <= t["per_s"] <= max(t["runs"])
        assert t["count"] == t["clients"] * (10 if t["workload"] == "empty job" else 2)
    # Head-of-line blocking: one row per core count, the round trips beside the other file's model.
    beside = r["round_trip_beside_model"]
    assert [b["cores"] for b in beside] == [1, 2]
    for b in beside:
        assert b["samples"] == 5 and 0 < b["p50_us"] <= b["p90_us"] and b["background_invokes"] >= 0
    # The MAC array's share of the device's time: inside the jobs, so below their total.
    m = r["mac_array_share"]
    assert m["invokes"] == 2 and 0 < m["mac_ms"] < m["job_ms"]
    text = capsys.readouterr().out
    assert "of which submit call" in text and "throughput by cores" in text and "beside model" in text


def test_cores_table_with_core_processes() -> None:
    """The shim's device model with its cores in worker processes: rows labelled, results exact."""
    from bench import cores

    report = cores.shim_table([2], [2], 5, 2, beside_samples=3, modes=(cores.PROCESSES,))
    assert {(t.mode, t.cores, t.clients) for t in report.throughput} == {(cores.PROCESSES, 2, 2)}
    assert all(t.exact and t.per_s > 0 and t.cpus is not None and t.cpus > 0 for t in report.throughput)
    assert [(b.mode, b.cores) for b in report.beside] == [(cores.PROCESSES, 2)]
    assert f"{cores.PROCESSES:>10}     2       2" in cores.format_table(report)
    # The model's work left the device model's process: the worker did most of it.
    h = report.hand_off
    assert h is not None and h.invokes == 2 and 0 < h.parent_ms < h.worker_ms
    assert 1 < h.two_core_bound <= 2
