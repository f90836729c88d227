"""Fault injection: the NPU misbehaving on purpose, so the driver's recovery can be tested and timed.

A :class:`FaultInjector` is attached to an :class:`~device_model.npu.Npu` (``npu.faults``). Before
each job the execution thread asks it which fault, if any, that job gets:

========== ===================================================================================
kind       what the device does
========== ===================================================================================
drop_irq   runs the job and writes its completion, but raises no completion interrupt
hang       never runs the job nor completes it (until a reset aborts it)
bad_status runs the job, then completes it with a status and fault VA outside the contract
mmu_fault  does not run the job; completes it with -EFAULT at the job's command-stream VA
garbage_cq writes a completion-queue entry of random bytes (no such job) instead of the job's
kill       the device-model process dies (SIGKILL) with the job in flight
slow       runs the job, then stays busy for ``slow_factor - 1`` times as long
bad_cmd    answers a control command (BOOT, RESET, POWER) with status 1, outside the contract (0
           or a negative errno), without running it: a job-less fault, counted per command
early_cq   runs a control command, then writes a completion for seqno 1 on every core (no job
           has it) and raises the completion interrupt before answering: an interrupt that
           reaches a driver still probing, and a phantom completion for its first job
========== ===================================================================================

Faults are switched by a :class:`FaultSpec` ("the next ``count`` jobs", or each job with
probability ``rate``), given directly (:meth:`FaultInjector.set`, the shim's tests) or written as
JSON to a control file the injector re-reads when it changes (the QEMU guest writes it through
the harness's shared results directory; ``python -m qemu_tests --fault-injection``). Every
injection is counted per kind (:attr:`FaultInjector.injected`) and, with a control file, written
next to it as ``<control>.status.json`` for the host to read.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

KINDS = ("drop_irq", "hang", "bad_status", "mmu_fault", "garbage_cq", "kill", "slow", "bad_cmd", "early_cq")
# The kinds that fault a control command instead of a job.
COMMAND_KINDS = frozenset({"bad_cmd", "early_cq"})


class FaultSpecError(ValueError):
    """A fault spec that names an unknown kind or an impossible count, rate or factor."""


@dataclass(frozen=True)
class FaultSpec:
    """Which fault, for how many jobs: the next ``count`` jobs, else each with probability ``rate``."""

    kind: str = ""  # "" switches injection off
    count: int = 0
    rate: float = 0.0
    slow_factor: float = 10.0
    seq: int = 0  # changes with every spec written, so the same spec twice is two requests
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind and self.kind not in KINDS:
            raise FaultSpecError(f"unknown fault kind {self.kind!r} (known: {', '.join(KINDS)})")
        if self.count < 0 or not 0.0 <= self.rate <= 1.0 or self.slow_factor < 1.0:
            raise FaultSpecError(
                f"bad fault spec: count {self.count}, rate {self.rate}, slow {self.slow_factor}"
            )

    @classmethod
    def from_json(cls, text: str) -> FaultSpec:
        try:
            doc = json.loads(text)
            return cls(**doc)
        except (ValueError, TypeError) as e:
            raise FaultSpecError(f"bad fault spec {text!r}: {e}") from None

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)


class FaultInjector:
    """Decides, job by job, which fault the device injects; counts what it injected."""

    def __init__(self, control: Path | None = None) -> None:
        self.control = control
        self._spec = FaultSpec()
        self._left = 0
        self._rng = random.Random(0)
        self._stamp: tuple[int, int, int] | None = None
        self._lock = threading.Lock()
        self.injected: Counter[str] = Counter()

    @property
    def spec(self) -> FaultSpec:
        return self._spec

    @property
    def off(self) -> bool:
        """No job can get a fault: no kind is set, and no control file could set one."""
        return self.control is None and not self._spec.kind

    def set(self, spec: FaultSpec) -> None:
        with self._lock:
            self._apply(spec)

    def _apply(self, spec: FaultSpec) -> None:
        self._spec = spec
        self._left = spec.count
        self._rng = random.Random(spec.seed)
        log.info("fault injection: %s", spec.to_json())

    def _poll(self) -> None:
        # One stat per job: the guest's write (fsync'd through 9p, renamed into place) shows up as
        # a new inode, mtime or size.
        if self.control is None:
            return
        try:
            st = os.stat(self.control)
        except FileNotFoundError:
            return
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            spec = FaultSpec.from_json(self.control.read_text())
        except (OSError, FaultSpecError) as e:
            log.error("fault control %s: %s", self.control, e)
            return
        if spec != self._spec:
            self._apply(spec)

    def next_job(self) -> str | None:
        """The fault the next job gets (None: run it normally). Counts it as injected."""
        return self._next(commands=False)

    def next_command(self) -> str | None:
        """The fault the next control command gets (None: run it normally). Counts it as injected."""
        return self._next(commands=True)

    def _next(self, commands: bool) -> str | None:
        with self._lock:
            self._poll()
            spec = self._spec
            if not spec.kind or (spec.kind in COMMAND_KINDS) != commands:
                return None
            if spec.count:
                if self._left == 0:
                    return None
                self._left -= 1
            elif not (spec.rate and self._rng.random() < spec.rate):
                return None
            self.injected[spec.kind] += 1
            self._write_status()
            return spec.kind

    def garbage(self, size: int) -> bytes:
        with self._lock:
            return self._rng.randbytes(size)

    def bad_status(self) -> tuple[int, int]:
        """A (status, fault VA) pair outside the device contract (which allows 0, -EFAULT, -EIO)."""
        with self._lock:
            status = self._rng.choice((1, 7, -1, -12, -110, -125, 0x7FFF_FFFF, -(2**31), 0x1234_5678))
            return status, self._rng.getrandbits(64) | 1

    def _write_status(self) -> None:
        if self.control is None:
            return
        status = {"seq": self._spec.seq, "injected": dict(self.injected)}
        path = self.control.with_name(self.control.name + ".status.json")
        try:
            path.write_text(json.dumps(status, sort_keys=True))
        except OSError as e:
            log.error("fault status %s: %s", path, e)

    @staticmethod
    def kill_device_model() -> None:
        """The "kill" fault: this process dies as abruptly as a crashed device model would."""
        log.warning("fault injection: killing the device model (pid %d)", os.getpid())
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)
