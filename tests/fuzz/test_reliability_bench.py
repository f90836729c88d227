"""bench.reliability on the shim with a tiny budget: every part runs and the table lands in the page."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench import reliability

ROOT = Path(__file__).resolve().parents[2]


def test_shim_run_writes_the_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "reliability.md"
    shutil.copy(ROOT / "docs" / "reliability.md", page)
    out = tmp_path / "reliability.json"
    rc = reliability.main(["--device", "shim", "--budget", "8", "--json", str(out), "--markdown", str(page)])
    assert rc == 0, capsys.readouterr()
    doc = json.loads(out.read_text())
    assert doc["fuzz"]["ioctls"] > 0 and doc["stress"]["checked"] > 0
    assert sum(doc["faults"]["recovered"].values()) == sum(doc["faults"]["injected"].values()) > 0
    text = page.read_text()
    block = text[text.index(reliability.MARK_BEGIN) : text.index(reliability.MARK_END)]
    for figure, _, _ in reliability.figures(doc):
        assert f"| {figure} |" in block
    assert "python -m bench.reliability --device shim --budget 8" in block


def test_page_without_markers_is_one_error(tmp_path: Path) -> None:
    page = tmp_path / "x.md"
    page.write_text("no markers\n")
    with pytest.raises(SystemExit, match="has no figures markers"):
        reliability.write_markdown(page, {})
