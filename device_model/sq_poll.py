"""Submission-queue polling: how long an idle core watches SQ_TAIL before it sleeps.

After a job a core thread may spin on the submission ring in BAR2 for a short window before it
blocks on the queue doorbell's eventfd, in the manner of NVMe hybrid polling and io_uring's
SQPOLL: a job that arrives inside the window is taken without the host waking a sleeping thread.
The window adapts, as NVMe's hybrid polling does, so a core whose jobs come further apart than
the window stops paying for the spin:

* a job seen while polling doubles the window (from at least ``MIN_STEP_US``), up to the limit;
* a window that ends without one halves it, down to an eighth of the limit, so that a core keeps
  probing and finds the jobs again when they come closer together.

A limit of 0 turns polling off (the core sleeps on the doorbell at once). The limit is a device
model option (``vnpu-device-model --sq-poll-us``) and can be changed while a guest runs through
a control file holding one integer (``--sq-poll-control``), so that an A/B comparison can be
made in one boot; docs/performance.md ("Polling the submission ring") has the decision and its figures.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("vnpu.device_model.sq_poll")

MAX_LIMIT_US = 2000  # a larger window burns a host CPU for nothing the doorbell would not give
MIN_STEP_US = 10  # the window a hit grows from when it had shrunk below this
DEFAULT_LIMIT_US = 0
CONTROL_CHECK_S = 0.05  # how often an idle core looks at the control file (a stat)


def adapt(window_us: int, hit: bool, limit_us: int) -> int:
    """The next polling window after one that saw a job (``hit``) or did not."""
    if limit_us <= 0:
        return 0
    if hit:
        return min(limit_us, max(MIN_STEP_US, 2 * window_us))
    return max(limit_us // 8, window_us // 2)


def check_limit(limit_us: int) -> int:
    """``limit_us`` if it is a valid polling limit; ValueError otherwise."""
    if not 0 <= limit_us <= MAX_LIMIT_US:
        raise ValueError(f"SQ polling limit {limit_us} us is not 0..{MAX_LIMIT_US}")
    return limit_us


@dataclass
class PollStats:
    """What polling did since the limit last changed: for the A/B log line."""

    jobs: int = 0
    hits: int = 0
    misses: int = 0
    polled_s: float = 0.0
    cpu_s: float = 0.0  # the process's CPU time when counting started
    wall_s: float = 0.0


class SqPoller:
    """One core's polling window, and the limit shared through the control file."""

    def __init__(self, limit_us: int = DEFAULT_LIMIT_US, control: Path | None = None, name: str = "") -> None:
        self.name = name
        self.limit_us = check_limit(limit_us)
        self.window_us = limit_us
        self.control = control
        self._stamp: tuple[int, int] | None = None
        self._next_check = 0.0
        self.stats = self._fresh_stats()

    @staticmethod
    def _fresh_stats() -> PollStats:
        return PollStats(cpu_s=time.process_time(), wall_s=time.monotonic())

    def refresh(self, jobs_done: int) -> None:
        """Re-read the control file if it changed (at most every CONTROL_CHECK_S)."""
        if self.control is None:
            return
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + CONTROL_CHECK_S
        try:
            st = os.stat(self.control)
        except FileNotFoundError:
            return
        except OSError as e:
            log.error("SQ poll control %s: %s", self.control, e)
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            limit = check_limit(int(self.control.read_text().strip() or "0"))
        except (OSError, ValueError) as e:
            log.error("SQ poll control %s: %s", self.control, e)
            return
        self.set_limit(limit, jobs_done)

    def set_limit(self, limit_us: int, jobs_done: int) -> None:
        """Change the limit, logging what the old one cost per job (process CPU time, all threads)."""
        s = self.stats
        jobs = jobs_done - s.jobs
        if jobs > 0:
            cpu = time.process_time() - s.cpu_s
            log.info(
                "%s: SQ poll limit %d us -> %d us: %d jobs in %.1f s, process CPU %.1f us/job, "
                "windows %d hit %d missed, %.1f us polled/job",
                self.name,
                self.limit_us,
                limit_us,
                jobs,
                time.monotonic() - s.wall_s,
                1e6 * cpu / jobs,
                s.hits,
                s.misses,
                1e6 * s.polled_s / jobs,
            )
        self.limit_us = check_limit(limit_us)
        self.window_us = limit_us
        self.stats = self._fresh_stats()
        self.stats.jobs = jobs_done

    def poll(self, arrived: Callable[[], bool]) -> bool:
        """Spin up to the window for ``arrived()``; adapt the window; True if it saw a job.

        Each turn yields the CPU (and the GIL): on a 2-core host the guest's vCPU threads that
        are about to ring the doorbell run on the same cores as this spin.
        """
        window = self.window_us
        if window <= 0:
            return False
        start = time.perf_counter()
        deadline = start + window * 1e-6
        hit = False
        while True:
            if arrived():
                hit = True
                break
            if time.perf_counter() >= deadline:
                break
            os.sched_yield()
        self.stats.polled_s += time.perf_counter() - start
        if hit:
            self.stats.hits += 1
        else:
            self.stats.misses += 1
        self.window_us = adapt(window, hit, self.limit_us)
        return hit
