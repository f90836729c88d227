"""bench.plots: docs/performance.md's pictures drawn again from a committed summary.json alone."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from bench import performance, plots

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = ROOT / "bench" / "results" / "performance" / "summary.json"
SVG = "{http://www.w3.org/2000/svg}"


def _ids(path: Path) -> set[str]:
    root = ET.parse(path).getroot()  # well-formed XML, else ParseError
    assert root.tag == f"{SVG}svg"
    ids = [e.get("id") for e in root.iter() if e.get("id")]
    assert len(ids) == len(set(ids)), f"{path.name}: an id twice"
    return set(ids)


def _texts(path: Path) -> str:
    return " ".join(e.text or "" for e in ET.parse(path).getroot().iter(f"{SVG}text"))


@pytest.fixture(scope="module")
def summary() -> dict[str, Any]:
    return json.loads(SUMMARY.read_text())


@pytest.fixture(scope="module")
def drawn(summary: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plots")
    assert performance.main(["--plot-only", str(SUMMARY), "--plots", str(out)]) == 0
    return out


def test_the_committed_result_draws_every_series(summary: dict[str, Any], drawn: Path) -> None:
    assert sorted(p.name for p in drawn.iterdir()) == sorted(
        [plots.MODELS_SVG, plots.ROUND_TRIP_SVG, plots.CORES_SVG]
    )
    ids = _ids(drawn / plots.MODELS_SVG)
    for m in summary["models"]:
        assert f"vnpu.{m['name']}.{m['source']}" in ids
        assert f"xnnpack.{m['name']}.{m['source']}" in ids
        assert (f"device_model.{m['name']}.{m['source']}" in ids) == bool(m.get("device_ms"))
        assert f"{m['ratio']:.1f}x" in _texts(drawn / plots.MODELS_SVG)

    ids = _ids(drawn / plots.ROUND_TRIP_SVG)
    for r in summary["round_trip"]:
        assert f"round_trip.{r['where']}.percentiles" in ids
        assert (f"floor.{r['where']}.percentiles" in ids) == ("floor_p50_us" in r)
    texts = _texts(drawn / plots.ROUND_TRIP_SVG)
    assert "no doorbell floor measured here" in texts  # the shim's row
    partial = any("floor_p50_us" in r and "floor_p90_us" not in r for r in summary["round_trip"])
    assert ("p90, p99 not in this result" in texts) == partial  # a floor with min and p50 alone says so

    ids = _ids(drawn / plots.CORES_SVG)
    for r in summary["cores"]:
        workload = r["workload"].replace(" ", "_")
        assert f"{workload}.{r['where']}.{r['mode']}.{r['cores']}" in ids


def test_the_committed_pictures_are_drawn_from_the_committed_result(drawn: Path) -> None:
    """docs/img holds what --plot-only draws from the committed summary (the same series; the bytes
    may differ with the matplotlib version)."""
    for name in (plots.MODELS_SVG, plots.ROUND_TRIP_SVG, plots.CORES_SVG):
        assert _ids(ROOT / "docs" / "img" / name) == _ids(drawn / name), name
        assert f"img/{name}" in (ROOT / "docs" / "performance.md").read_text()


def test_series_missing_from_a_result_are_left_out_or_said(tmp_path: Path) -> None:
    summary = {
        "when": "now",
        "commit": "abc1234",
        "models": [{"name": "m", "source": "corpus", "vnpu_ms": 2.0, "xnnpack_ms": None, "ratio": None}],
        "round_trip": [{"where": "shim", "p50_us": 50.0, "p90_us": 60.0}],
        "cores": [],
    }
    plots.write_plots(summary, tmp_path)
    ids = _ids(tmp_path / plots.MODELS_SVG)
    assert "vnpu.m.corpus" in ids and not any(i.startswith(("xnnpack.", "device_model.")) for i in ids)
    assert "no XNNPACK time" in _texts(tmp_path / plots.MODELS_SVG)
    assert "round_trip.shim.percentiles" in _ids(tmp_path / plots.ROUND_TRIP_SVG)
    assert not any(i.startswith("empty_job.") for i in _ids(tmp_path / plots.CORES_SVG))
    assert "no empty job rows in this result" in _texts(tmp_path / plots.CORES_SVG)
    # the same summary draws the same bytes (no date, fixed ids)
    first = (tmp_path / plots.CORES_SVG).read_bytes()
    plots.write_plots(summary, tmp_path)
    assert (tmp_path / plots.CORES_SVG).read_bytes() == first
