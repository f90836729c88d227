"""bench.model_bench --profile's split: the marks' arithmetic, and a short run of each split on the shim."""

from __future__ import annotations

import pytest

from bench import model_bench as mb
from vnpu_common import probe


def test_each_gap_goes_to_the_part_of_the_mark_that_ends_it() -> None:
    marks = [("tflite.invoke", 0), ("delegate.entry", 2000), ("delegate.submit", 5000), ("core.end", 9000)]
    parts = mb.split_marks(list(reversed(marks)))  # ordered by time, whatever the order they came in
    assert parts == {
        "TFLite, copy in (C) -> delegate Python": 2.0,
        "delegate Python": 3.0,
        "device model (the job)": 4.0,
    }


def test_marks_are_kept_only_while_collected() -> None:
    probe.mark("tflite.invoke")
    assert not probe.active()
    with probe.collect() as marks:
        probe.mark("delegate.entry")
        with pytest.raises(RuntimeError), probe.collect():
            pass
    probe.mark("delegate.exit")
    assert [name for name, _ in marks] == ["delegate.entry"]


def test_the_splits_run_and_account_for_every_mark() -> None:
    empty, one = mb.profile_splits(5, [("1 node", mb.chain_model(1))])
    assert (empty.runs, one.runs) == (5, 5)
    for split in (empty, one):
        assert set(split.parts_us) == set(mb.SPLIT_ORDER)
        assert all(v >= 0 for v in split.parts_us.values())
    assert one.nodes == 1 and one.instructions >= 2
    assert "1 node" in mb.format_split([empty, one])
