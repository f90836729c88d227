"""Benchmark clients started together: wait until each is warm, start the clock, collect what each timed.

Each client process puts ``True`` on ``ready`` once its device is open and warm (``False``, or
nothing, when it failed), waits for the ``start`` event, then puts one record on ``results``:
``("ok", t_start, t_end, ...)`` or ``("error", message, ...)``.
"""

from __future__ import annotations

import queue
from collections.abc import Sequence
from typing import Any


def wait_until_ready(ready: Any, clients: int, timeout_s: float) -> None:
    """Wait for every client's ready signal; a client that failed stops the wait (its error follows)."""
    for _ in range(clients):
        try:
            if not ready.get(timeout=timeout_s):
                return
        except queue.Empty:
            return


def collect_results(workers: Sequence[Any], results: Any, timeout_s: float) -> list[tuple[Any, ...]]:
    """One record per client, the clients joined; RuntimeError with the first client's error."""
    got = [results.get(timeout=timeout_s) for _ in workers]
    for w in workers:
        w.join(timeout=60)
    errors = [r[1] for r in got if r[0] != "ok"]
    if errors:
        raise RuntimeError(f"benchmark client failed: {errors[0]}")
    return got


def wall_seconds(got: Sequence[tuple[Any, ...]]) -> float:
    """From the first client's start to the last client's end."""
    return max(r[2] for r in got) - min(r[1] for r in got)
