"""Timestamps along one invoke's path, for ``bench.model_bench --profile`` (off unless collected).

Each layer calls :func:`mark` at the points where an invoke crosses from one part of the stack to
the next (the delegate's entry, libaccel's submit, the shim's ioctl handler, the core taking the
job, the completion, the waiter waking, the copy out). Outside :func:`collect` a mark is one
global lookup and a return; inside, it appends ``(name, perf_counter_ns())`` to the collecting
list, from any thread (list.append is atomic under the GIL).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

_marks: list[tuple[str, int]] | None = None
_clock = time.perf_counter_ns


def mark(name: str) -> None:
    """Note that the invoke reached ``name`` now (nothing unless :func:`collect` is active)."""
    marks = _marks
    if marks is not None:
        marks.append((name, _clock()))


def active() -> bool:
    return _marks is not None


@contextmanager
def collect() -> Iterator[list[tuple[str, int]]]:
    """Collect every mark made inside the block, in the order they were made."""
    global _marks
    if _marks is not None:
        raise RuntimeError("probe marks are already being collected")
    sink: list[tuple[str, int]] = []
    _marks = sink
    try:
        yield sink
    finally:
        _marks = None
