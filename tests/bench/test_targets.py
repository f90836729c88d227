"""The targets table in docs/performance.md: it parses, and every target a bench reads is in it."""

from __future__ import annotations

import pytest

from bench import model_bench, performance, reliability
from bench.targets import COLUMNS, MARK_BEGIN, MARK_END, parse_table, parse_target, target, targets


def test_the_docs_table_parses_with_numbers_and_units() -> None:
    table = targets()
    assert (
        table["cold_load"].op == "<" and table["cold_load"].value == 400 and table["cold_load"].unit == "ms"
    )
    assert table["ioctl_calls"].value == 1_000_000 and table["ioctl_calls"].text == ">= 1,000,000"
    assert table["leaks"].op == "=" and table["leaks"].value == 0
    assert table["kill_recovery"].op is None  # a target in words: reported, not checked


def test_every_key_the_benches_read_is_in_the_table() -> None:
    keys = set(model_bench.TARGET_KEYS) | set(performance.MODEL_TARGETS) | set(performance.ROUND_TRIP_TARGETS)
    keys |= {"ioctl_calls", "faults_recovered", "longest_recovery", "kill_recovery", "stress_mismatches"}
    keys |= {"leaks", "kernel_splats"}
    assert keys <= set(targets())
    source = (reliability.__file__, model_bench.__file__, performance.__file__)
    read = " ".join(open(path).read() for path in source)
    unread = [k for k in targets() if f'"{k}"' not in read]
    assert not unread, f"targets no bench reads: {unread}"


@pytest.mark.parametrize(
    ("text", "figure", "met"),
    [
        ("<= 2 x", 2.0, True),
        ("<= 2 x", 2.01, False),
        ("< 400 ms", 400.0, False),
        (">= 10,000", 10_000, True),
        ("0", 0, True),
        ("0 differing bytes", 3, False),
        ("job timeout + 2 s reset wait", 1.0, None),
        ("<= 300 us", None, None),
    ],
)
def test_met(text: str, figure: float | None, met: bool | None) -> None:
    assert parse_target("k", "b", text, "w").met(figure) is met


def test_bad_tables_fail() -> None:
    header = "| " + " | ".join(COLUMNS) + " |\n|---|---|---|---|\n"
    with pytest.raises(ValueError, match="no targets table"):
        parse_table("no markers here")
    with pytest.raises(ValueError, match="twice"):
        parse_table(f"{MARK_BEGIN}\n{header}| a | b | 1 | w |\n| a | b | 2 | w |\n{MARK_END}")
    with pytest.raises(ValueError, match="columns"):
        parse_table(f"{MARK_BEGIN}\n| key | target |\n|---|---|\n| a | 1 |\n{MARK_END}")
    with pytest.raises(KeyError, match="no target 'nope'"):
        target("nope")
