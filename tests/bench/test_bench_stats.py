"""The benchmark's statistics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.jobs import main, percentile


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
    assert main([str(out), "--shim", "--iterations", "20", "--jobs", "10", "--processes", "1"]) == 0
    r = json.loads(out.read_text())
    assert r["backend"] == "shim" and not r["in_qemu_guest"]
    rt = r["round_trip"]
    assert rt["iterations"] == 20
    assert 0 < rt["min_us"] <= rt["p50_us"] <= rt["p90_us"] <= rt["p99_us"]
    assert 0 < rt["submit_p50_us"] < rt["p99_us"]
    (tp,) = r["throughput"]
    assert tp["processes"] == 1 and tp["jobs"] == 10 and tp["jobs_per_s"] > 0
    assert len(r["load_avg_before"]) == 3
    assert "of which submit call" in capsys.readouterr().out
