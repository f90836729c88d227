"""Benchmark clients started together: wait until each is warm, start the clock, collect what each timed;
and what the benches' clients share: the empty job (:class:`EmptyJob`) and :func:`percentile`.

Each client process puts ``True`` on ``ready`` once its device is open and warm (``False``, or
nothing, when it failed), waits for the ``start`` event, then puts one record on ``results``:
``("ok", t_start, t_end, ...)`` or ``("error", message, ...)``.
"""

from __future__ import annotations

import queue
from collections.abc import Sequence
from typing import Any

from uapi.isa import encode


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


def percentile(samples: list[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks."""
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    s = sorted(samples)
    pos = (len(s) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


class EmptyJob:
    """One file's empty job: END in a read-only BO, a scratch BO to list, an out syncobj."""

    def __init__(self, device: str | Any) -> None:
        """``device``: a name for Device.open (the job owns the file), or an open Device."""
        from libaccel import Device, Job, JobBo

        self._owned = isinstance(device, str)
        self.dev = Device.open(device) if isinstance(device, str) else device
        stream = encode("END")
        self.cmd = self.dev.create_bo_with(stream, read_only=True)
        self.scratch = self.dev.create_bo(4096)
        self.syncobj = self.dev.create_syncobj()
        self.job = Job(self.cmd, len(stream), [JobBo(self.scratch)], out_syncobj=self.syncobj)

    def submit(self) -> None:
        self.dev.submit(self.job)

    def wait(self) -> None:
        self.dev.wait_syncobjs([self.syncobj], timeout=60)

    def close(self) -> None:
        if self._owned:
            self.dev.close()
