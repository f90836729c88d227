"""bench.plots: docs/performance.md's pictures drawn from a run's summary.json alone."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import bench_parts
import pytest

from bench import performance, plots

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "performance.md"
SVG = "{http://www.w3.org/2000/svg}"
SERIES = ("vnpu.", "xnnpack.", "device_model.", "round_trip.", "floor.", "empty_job.", "model_invoke.")


def _ids(path: Path) -> set[str]:
    root = ET.parse(path).getroot()  # well-formed XML, else ParseError
    assert root.tag == f"{SVG}svg"
    ids = [e.get("id") for e in root.iter() if e.get("id")]
    assert len(ids) == len(set(ids)), f"{path.name}: an id twice"
    return set(ids)


def _texts(path: Path) -> str:
    return " ".join(e.text or "" for e in ET.parse(path).getroot().iter(f"{SVG}text"))


@pytest.fixture(scope="module")
def summary_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run")
    path = out / "summary.json"
    path.write_text(json.dumps(bench_parts.summary(out)))
    return path


@pytest.fixture(scope="module")
def summary(summary_file: Path) -> dict[str, Any]:
    return json.loads(summary_file.read_text())


@pytest.fixture(scope="module")
def drawn(summary_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plots")
    assert performance.main(["--plot-only", str(summary_file), "--plots", str(out)]) == 0
    return out


def test_a_result_draws_every_series(summary: dict[str, Any], drawn: Path) -> None:
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
    for r in summary["round_trip"]:  # a floor without some percentiles says which
        missing = [p for p in plots.PERCENTILES if "floor_p50_us" in r and f"floor_{p}_us" not in r]
        assert not missing or f"({', '.join(missing)} not in this result)" in texts
    assert "(p90 not in this result)" in texts  # bench_parts' guest floor has no p90

    ids = _ids(drawn / plots.CORES_SVG)
    for r in summary["cores"]:
        workload = r["workload"].replace(" ", "_")
        assert f"{workload}.{r['where']}.{r['mode']}.{r['cores']}" in ids


def _table(block: list[str], header: str) -> list[list[str]]:
    """The cells of each row of the block's table whose header line starts with ``header``."""
    start = next(i for i, line in enumerate(block) if line.startswith(header)) + 2
    rows = []
    for line in block[start:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def _published_series() -> tuple[set[str], str]:
    """The series ids docs/performance.md's summary block implies, and its run's "when at commit"."""
    text = DOC.read_text()
    block = text[text.index(performance.MARK_BEGIN) : text.index(performance.MARK_END)].splitlines()
    first = block[1]
    when = first.removeprefix("Run ").split(":", 2)
    when_text = f"{when[0]}:{when[1]}"
    commit = first.rsplit("(commit ", 1)[1].split(")")[0]
    ids = set()
    for name, source, _, xnn, _, device, _ in _table(block, "| model | from |"):
        ids.add(f"vnpu.{name}.{source}")
        ids |= {f"xnnpack.{name}.{source}"} if xnn != "-" else set()
        ids |= {f"device_model.{name}.{source}"} if device != "-" else set()
    for row in _table(block, "| where | p50 |"):
        ids.add(f"round_trip.{row[0]}.percentiles")
        ids |= {f"floor.{row[0]}.percentiles"} if row[6] != "-" else set()
    for where, mode, cores, _, empty, model, _ in _table(block, "| where | cores as |"):
        ids |= {f"empty_job.{where}.{mode}.{cores}"} if empty != "-" else set()
        ids |= {f"model_invoke.{where}.{mode}.{cores}"} if model != "-" else set()
    return ids, f"run {when_text} at {commit}"


def test_the_published_pictures_show_the_published_summary() -> None:
    """docs/img holds the pictures of the run whose summary docs/performance.md's block shows: the
    same run in their titles, and a series for every row of the block's tables (a run publishes
    both with ``--markdown docs/performance.md --plots docs/img``)."""
    want, run = _published_series()
    got: set[str] = set()
    for name in (plots.MODELS_SVG, plots.ROUND_TRIP_SVG, plots.CORES_SVG):
        path = ROOT / "docs" / "img" / name
        assert run in _texts(path), f"{name} is not of the run in the summary block ({run})"
        got |= {i for i in _ids(path) if i.startswith(SERIES) and not i.endswith((".range", ".p50-p90"))}
        assert f"img/{name}" in DOC.read_text()
    assert got == want


def test_plots_go_under_out_unless_plots_says_where(summary_file: Path, tmp_path: Path) -> None:
    assert performance.main(["--plot-only", str(summary_file), "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in (tmp_path / performance.PLOTS_SUBDIR).iterdir()) == sorted(
        [plots.MODELS_SVG, plots.ROUND_TRIP_SVG, plots.CORES_SVG]
    )


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "cannot read"), ("{", "is not JSON"), ('{"parts": {}}', "is not a bench.performance summary")],
)
def test_a_bad_summary_is_one_line(tmp_path: Path, content: str | None, problem: str) -> None:
    path = tmp_path / "summary.json"
    if content is not None:
        path.write_text(content)
    for option in ("--from-summary", "--plot-only"):
        with pytest.raises(SystemExit) as e:
            performance.main([option, str(path), "--out", str(tmp_path)])
        message = str(e.value)
        assert message.startswith("bench.performance: ") and str(path) in message and problem in message
        assert "\n" not in message


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
