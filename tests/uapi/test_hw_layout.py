"""The BAR2 map of uapi.hw_layout: every block fits and none overlaps another."""

from __future__ import annotations

from uapi import hw_layout as hw


def test_bar2_blocks_do_not_overlap() -> None:
    blocks = {
        "identification": (hw.REG_MAGIC, hw.REG_IRQ_VALUE + 4),
        "control": (hw.REG_CMD, hw.REG_CMD_ARG1 + 8),
        "sq indices": (hw.SQ_HEAD, hw.SQ_TAIL + 4),
        "sq entries": (hw.SQ_BASE, hw.SQ_BASE + hw.SQ_ENTRIES * hw.SQ_ENTRY_SIZE),
        "cq indices": (hw.CQ_HEAD, hw.CQ_TAIL + 4),
        "cq entries": (hw.CQ_BASE, hw.CQ_BASE + hw.CQ_ENTRIES * hw.CQ_ENTRY_SIZE),
    }
    spans = sorted(blocks.items(), key=lambda kv: kv[1])
    for (name_a, (_, end_a)), (name_b, (start_b, _)) in zip(spans, spans[1:], strict=False):
        assert end_a <= start_b, f"{name_a} overlaps {name_b}"
    assert spans[-1][1][1] <= hw.BAR2_SIZE
    assert hw.SQE_CONTEXT + 4 <= hw.SQ_ENTRY_SIZE and hw.CQE_CYCLES + 8 <= hw.CQ_ENTRY_SIZE
