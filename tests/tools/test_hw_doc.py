"""docs/hardware.md is what uapi/hw_layout.py and its template say (tools/generate_hw_doc.py)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import generate_hw_doc as gen  # noqa: E402

from uapi import hw_layout  # noqa: E402

OFFSET_NAMES = [n for n in vars(hw_layout) if re.search(r"^(REG|SQE|CQE|FWH)_|^(SQ|CQ)_(HEAD|TAIL|BASE)$", n)]


def _layout_copy(tmp_path: Path, edit) -> Path:
    path = tmp_path / "hw_layout.py"
    path.write_text(edit(gen.HW_LAYOUT.read_text()))
    return path


def test_doc_is_current() -> None:
    assert gen.main(["--check"]) == 0, "run: python tools/generate_hw_doc.py"


def test_a_layout_edit_without_regenerating_is_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def move_cq(text: str) -> str:
        assert re.search(r"^CQ_HEAD = ", text, flags=re.M)
        return re.sub(r"^CQ_HEAD = 0x[0-9A-Fa-f]+", "CQ_HEAD = 0x2800", text, count=1, flags=re.M)

    edited = _layout_copy(tmp_path, move_cq)
    assert "| 0x2800 | `CQ_HEAD` |" in gen.render(edited)
    monkeypatch.setattr(gen, "HW_LAYOUT", edited)
    assert gen.main(["--check"]) == 1


def test_every_offset_row_is_the_layouts() -> None:
    """Checked against hw_layout's values directly, not through the generator's formatting."""
    doc = gen.DOC.read_text()
    for name in OFFSET_NAMES:
        value = getattr(hw_layout, name)
        digits = 2 if name.startswith(("SQE_", "CQE_", "FWH_")) else 3
        offsets = re.findall(rf"^\| (0x[0-9a-f]+) \| `{name}` \|", doc, flags=re.M)
        assert offsets == [f"0x{value:0{digits}x}"], name


def test_offset_rows_ascend_within_each_table() -> None:
    table: list[int] = []
    for line in gen.DOC.read_text().splitlines() + [""]:
        m = re.match(r"\| (0x[0-9a-f]+) \| `[A-Z0-9_]+` \|", line)
        if m:
            table.append(int(m[1], 16))
        elif not line.startswith("|"):
            assert table == sorted(table) and len(set(table)) == len(table), table
            table = []


def test_names_in_the_doc_are_the_layouts() -> None:
    """Every layout-looking name in a code span exists in hw_layout.py (no renamed or stale names)."""
    doc = gen.DOC.read_text()
    layoutish = re.compile(r"^(REG|SQE|CQE|FWH|FW|CMD|STATUS|PTE|VEC|IRQ|SQ|CQ)_")
    names = set(re.findall(r"`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)`", doc))
    assert names
    unknown = sorted(n for n in names if layoutish.match(n) and not hasattr(hw_layout, n))
    assert not unknown


def test_template_types_no_layout_numbers() -> None:
    """Outside its placeholders and captured console output, the template holds no number."""
    text = gen.TEMPLATE.read_text()
    text = re.sub(r"```console\n.*?```", "", text, flags=re.S)
    text = gen.PLACEHOLDER.sub("", text)
    allowed = [
        r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b",  # constant names (L1_SHIFT, BAR2_SIZE)
        r"\bBAR[02]\b",
        r"\bARG[01]\b",
        r"\bbar0\b",  # the driver's variable
        r"\bL[12]\b",
        r"\bRK3588\b",
        r"\bEd25519\b",
        r"\bSHA-256\b",
        r"\baccel0\b",
        r"(?m)^\d+\. ",  # list items
        r"0x\.\.\.",  # "magic 0x..." in a log line: any value
        r"(?<![\w.])0(?![\w.])",  # the value zero
    ]
    for pattern in allowed:
        text = re.sub(pattern, "", text)
    typed = [line.strip() for line in text.splitlines() if re.search(r"\d", line)]
    assert not typed, "numbers typed by hand; use {{ }} over hw_layout.py's constants"


def test_an_undescribed_constant_is_refused(tmp_path: Path) -> None:
    register = _layout_copy(tmp_path, lambda t: t + "REG_SPARE = 0x048  # u32 spare\n")
    with pytest.raises(SystemExit, match="no row\\(\\) for REG_SPARE"):
        gen.render(register)
    other = _layout_copy(tmp_path, lambda t: t + "SPARE_LIMIT = 3\n")
    with pytest.raises(SystemExit, match="never used: SPARE_LIMIT"):
        gen.render(other)


def test_a_name_the_layout_lacks_is_refused(tmp_path: Path) -> None:
    template = tmp_path / "hardware.md.in"
    template.write_text(gen.TEMPLATE.read_text().replace("{{NUM_VECTORS}}", "{{NUM_VECTOR}}", 1))
    with pytest.raises(SystemExit, match="NUM_VECTOR"):
        gen.render(gen.HW_LAYOUT, template)
