"""The project's performance and reliability targets, read from the one table in docs/performance.md.

The table sits between two marker comments in that document; each row is a target's key, the bench
that checks it, the target itself and what it measures. A numeric target reads ``<= 2 x``,
``< 400 ms``, ``>= 1,000,000`` or a bare value (equal to it); anything after the number is its unit
(and may say more, as ``x model + arena``). A target that is not a number (``job timeout + 2 s``) is
text for the reports, with no check. The benches look their targets up here by key, so the
document and the checks cannot drift apart::

    from bench.targets import target
    target("warm_load").met(12.5)      # True: 12.5 ms < 20 ms
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from bench import ROOT

DOC = ROOT / "docs" / "performance.md"
MARK_BEGIN = "<!-- targets: begin (bench/targets.py reads this table) -->"
MARK_END = "<!-- targets: end -->"
COLUMNS = ("key", "bench", "target", "what it measures")

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
    "=": operator.eq,
}
_NUMERIC = re.compile(r"(?P<op><=|>=|<|>|=)?\s*(?P<value>\d[\d,]*(?:\.\d+)?)\s*(?P<unit>.*)")


@dataclass(frozen=True)
class Target:
    """One row of the table."""

    key: str
    bench: str
    text: str  # the target as the document writes it
    what: str
    op: str | None = None  # None: a target in words, reported but not checked
    value: float | None = None
    unit: str = ""

    def met(self, figure: float | None) -> bool | None:
        """Whether ``figure`` (in the target's unit) meets it; None without a figure or a number."""
        if figure is None or self.op is None or self.value is None:
            return None
        return _OPS[self.op](figure, self.value)


def parse_target(key: str, bench: str, text: str, what: str) -> Target:
    """A row's cells as a :class:`Target` (numeric when the target cell reads as one)."""
    m = _NUMERIC.fullmatch(text.strip())
    if m is None:
        return Target(key, bench, text, what)
    value = float(m["value"].replace(",", ""))
    return Target(key, bench, text, what, m["op"] or "=", value, m["unit"].strip())


def parse_table(markdown: str) -> dict[str, Target]:
    """The targets table between the markers of ``markdown``: key -> :class:`Target`."""
    try:
        body = markdown.split(MARK_BEGIN, 1)[1].split(MARK_END, 1)[0]
    except IndexError:
        raise ValueError(f"no targets table (between {MARK_BEGIN!r} and {MARK_END!r})") from None
    rows = [line.strip() for line in body.splitlines() if line.strip().startswith("|")]
    if len(rows) < 2:
        raise ValueError("the targets table has no rows")
    header = tuple(c.strip() for c in rows[0].strip("|").split("|"))
    if header != COLUMNS:
        raise ValueError(f"the targets table's columns are {header}, expected {COLUMNS}")
    out: dict[str, Target] = {}
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        if len(cells) != len(COLUMNS):
            raise ValueError(f"targets row {row!r} has {len(cells)} cells, expected {len(COLUMNS)}")
        key, bench, text, what = cells
        key = key.strip("`")
        if key in out:
            raise ValueError(f"target {key!r} is in the table twice")
        out[key] = parse_target(key, bench.strip("`"), text, what)
    return out


@cache
def targets(path: Path = DOC) -> dict[str, Target]:
    """Every target of the document (read once per process)."""
    return parse_table(path.read_text())


def target(key: str) -> Target:
    """The target named ``key``; KeyError naming the document when it has none."""
    table = targets()
    if key not in table:
        raise KeyError(f"{DOC.relative_to(ROOT)} has no target {key!r} (its keys: {', '.join(table)})")
    return table[key]
