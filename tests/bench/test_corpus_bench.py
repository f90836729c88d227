"""bench.corpus: one corpus model through the whole command (table, JSON, docs markers, placement)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import corpus


def test_replace_between_markers() -> None:
    text = f"intro\n{corpus.MARK_BEGIN}\nold table\n{corpus.MARK_END}\noutro\n"
    assert corpus.replace_between_markers(text, "new") == (
        f"intro\n{corpus.MARK_BEGIN}\nnew\n{corpus.MARK_END}\noutro\n"
    )
    with pytest.raises(ValueError, match="markers"):
        corpus.replace_between_markers("no markers here", "new")


def test_one_model_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = "small_cnn_uint8"
    placement = tmp_path / "placement.json"
    placement.write_text(json.dumps({"other_model": {"kept": True}}))
    monkeypatch.setattr(corpus, "PLACEMENT_FILE", placement)
    monkeypatch.setattr(corpus, "MIN_GROUP_SECONDS", 0.0)
    doc = tmp_path / "models.md"
    doc.write_text(f"# models\n{corpus.MARK_BEGIN}\n{corpus.MARK_END}\n")
    out = tmp_path / "corpus.json"
    argv = ["--only", name, "--runs", "3", "--json", str(out), "--markdown", str(doc), "--update-placement"]
    assert corpus.main(argv) == 0

    (row,) = json.loads(out.read_text())["models"]
    assert row["name"] == name and row["differing_bytes"] == 0
    assert row["vnpu_ms"] > 0 and row["xnnpack_ms"] > 0
    text = doc.read_text()
    assert f"| {name} |" in text
    assert "load average" in text and "ai_edge_litert" in text  # the run's conditions, under the table
    written = json.loads(placement.read_text())
    assert written["other_model"] == {"kept": True}  # --update-placement rewrites only the models it ran
    committed = json.loads((corpus.ROOT / "tests/corpus/placement.json").read_text())
    assert written[name] == committed[name]


def test_unknown_model_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert corpus.main(["--only", "no_such_model"]) == 2
    assert "unknown model 'no_such_model'" in capsys.readouterr().err
