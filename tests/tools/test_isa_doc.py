"""docs/isa.md's field layouts are what uapi/vnpu_isa.toml says (tools/generate_isa_doc.py)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import generate_isa_doc as gen  # noqa: E402

from uapi.isa import SPEC  # noqa: E402


def test_field_layouts_in_docs_are_current() -> None:
    assert gen.main(["--check"]) == 0, "run: python tools/generate_isa_doc.py"


def test_every_instruction_and_field_appears_in_order() -> None:
    body = gen.render()
    for ins in SPEC.instructions:
        table = "\n".join(gen.instruction_table(ins))
        assert table in body
        positions = [table.index(f"| `{f.name}` |") for f in sorted(ins.fields, key=lambda f: f.offset)]
        assert positions == sorted(positions), ins.name
        # Header, fields and reserved rows cover the instruction's bytes exactly once.
        covered = 0
        for row in table.splitlines()[4:]:
            lo, hi = (int(x) for x in row.split("|")[1].strip().split(".."))
            assert lo == covered, (ins.name, row)
            covered = hi + 1
        assert covered == ins.size, ins.name


def test_stale_tables_are_detected() -> None:
    doc = gen.DOC.read_text()
    broken = doc.replace("| header | u32 |", "| header | u16 |", 1)
    assert gen.splice(broken, gen.render()) == doc
    assert broken != doc
