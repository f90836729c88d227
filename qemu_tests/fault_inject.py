"""The fault-injection campaign: make the device misbehave, check that the driver recovers, time it.

    python -m qemu_tests.fault_inject --device shim --rounds 3
    python -m qemu_tests --exec 'python -m qemu_tests.fault_inject --rounds 3 --timeout-ms 1000 --kill'

Each round injects one fault (device_model.faults) into the next job of one file (the victim)
while another file has a job queued behind it (the innocent), then checks what the uapi promises
(docs/reliability.md, "Fault injection"):

* the victim's fence signals within the job timeout plus :data:`MARGIN_S`;
* the victim ends with the documented status (:data:`EXPECTED`) and, where it completes
  normally, with the right bytes; ``fault_va`` is set only for -EFAULT;
* the innocent job and a follow-up job run with status 0 and the right bytes: the device was
  reset where it had to be and serves the next jobs.

A rate phase then injects bad statuses and MMU faults into a random share of a stream of jobs, and
a slow phase makes every job ten times slower. ``--kill`` ends with the device model killed
mid-job: the job fails (-ETIMEDOUT or -ECANCELED) and every ioctl still returns (no device after
that, so it comes last). On the shim the injector is set directly; in the QEMU guest through the
control file the harness shares (qemu_tests.harness.FAULT_CONTROL).
"""

from __future__ import annotations

import errno
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from device_model.faults import FaultSpec
from libaccel import Device, Job, JobBo
from libaccel.bo import BufferObject
from libaccel.errors import AccelError
from qemu_tests import leak_check
from uapi.isa import SPEC, encode
from vnpu_common import config
from vnpu_common.cli import OneLineArgumentParser, cli_main

# The status the victim of each fault ends with (uapi "Job status", docs/kernel.md).
EXPECTED: dict[str, tuple[int, ...]] = {
    "drop_irq": (0,),  # completed, only its interrupt is lost: the next one (or the timeout) reaps it
    "hang": (-errno.ETIMEDOUT,),
    "bad_status": (-errno.EIO,),  # an out-of-contract status is reported as -EIO
    "mmu_fault": (-errno.EFAULT,),
    "garbage_cq": (-errno.ETIMEDOUT,),  # its completion never came: it hangs as far as anyone knows
    "slow": (0,),
    "kill": (-errno.ETIMEDOUT, -errno.ECANCELED),
}
ROUND_KINDS = ("drop_irq", "hang", "bad_status", "mmu_fault", "garbage_cq")
# Recovery must come within the job timeout plus this: the reset, the re-queue and, under TCG, a
# scheduler tick or two.
MARGIN_S = 1.5
# With the device model dead, the timeout's reset command waits out vnpu.ko's VNPU_RESET_TIMEOUT_MS
# (vnpu_io.c) before the job fails: that is added to the kill's bound.
DEAD_DEVICE_RESET_WAIT_S = 2.0
INT8 = SPEC.dtypes["INT8"].code
FILL_VALUES = range(1, 120)  # INT8 FILL values; each job's differs from the last, so stale bytes show
GUEST_CONTROL = Path("/tmp/vnpu-out") / "faults.json"  # harness GUEST_OUT / FAULT_CONTROL


def fill_stream(va: int, count: int, value: int) -> bytes:
    return (
        encode("TENSOR", slot=0, dtype=INT8, va=va, n=1, h=1, w=1, c=count, stride_c=1)
        + encode("FILL", dst=0, value=value)
        + encode("END")
    )


@dataclass
class Stats:
    """Per fault kind: injected, recovered (every check held), recovery times."""

    injected: dict[str, int] = field(default_factory=dict)
    recovered: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, list[float]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def count(self, kind: str, ok: bool, seconds: float | None) -> None:
        self.injected[kind] = self.injected.get(kind, 0) + 1
        if ok:
            self.recovered[kind] = self.recovered.get(kind, 0) + 1
        if seconds is not None:
            self.seconds.setdefault(kind, []).append(seconds)

    @property
    def longest(self) -> float:
        return max((max(v) for v in self.seconds.values() if v), default=0.0)

    def to_json(self) -> dict[str, object]:
        return {
            "injected": self.injected,
            "recovered": self.recovered,
            "longest_recovery_s": {k: max(v) for k, v in self.seconds.items() if v},
            "failures": self.failures,
        }


class ControlFile:
    """Sets the device model's fault spec through the harness's shared control file (the guest)."""

    def __init__(self, path: Path = GUEST_CONTROL) -> None:
        self.path = path

    def injected(self, seq: int) -> int:
        """Faults the device injected under spec ``seq`` (from the status file it writes back)."""
        try:
            status = json.loads(self.path.with_name(self.path.name + ".status.json").read_text())
        except (OSError, ValueError):
            return 0
        return sum(status.get("injected", {}).values()) if status.get("seq") == seq else 0

    def __call__(self, spec: FaultSpec) -> None:
        # fsync: the device model stats the file before the next job, which this write must beat.
        # A new file renamed over the old one: the device model sees a new inode even when two
        # specs of one size are written within one tick of the file system's clock.
        tmp = self.path.with_name(self.path.name + ".new")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, spec.to_json().encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)


class ShimControl:
    """Sets the shim device's fault spec directly."""

    def __init__(self) -> None:
        from device_model.faults import FaultInjector
        from libaccel.backends.shim import shared_device

        npu = shared_device().npu
        if npu.faults is None:
            npu.faults = FaultInjector()
        self.faults = npu.faults
        self._base = 0

    def __call__(self, spec: FaultSpec) -> None:
        self.faults.set(spec)
        self._base = sum(self.faults.injected.values())

    def injected(self, seq: int) -> int:
        del seq  # set() and this run in one process: the count since the last set() is this spec's
        return sum(self.faults.injected.values()) - self._base


def shim_control() -> ShimControl:
    return ShimControl()


class Control(Protocol):
    """Where a campaign sets the fault spec, and reads how many faults the device injected under it."""

    def __call__(self, spec: FaultSpec) -> None: ...

    def injected(self, seq: int) -> int: ...


class Campaign:
    """Rounds of injected faults on ``device`` ("shim" or "kernel")."""

    def __init__(self, device: str, control: Control, seed: int = 0) -> None:
        self.victim = Device.open(device)
        self.other = Device.open(device)
        self.control = control
        self.rng = random.Random(seed)
        self.seq = int(time.time())  # distinct from any spec a previous run left in the control file
        self.timeout_s = self.victim.params.job_timeout_ms / 1000
        self.stats = Stats()
        self._bos: dict[int, tuple[BufferObject, BufferObject]] = {}

    def set(self, kind: str = "", count: int = 0, rate: float = 0.0) -> None:
        self.seq += 1
        self.control(
            FaultSpec(kind=kind, count=count, rate=rate, seq=self.seq, seed=self.rng.getrandbits(32))
        )

    def submit_fill(self, dev: Device, value: int, size: int = 4096) -> BufferObject:
        out = dev.create_bo(size)
        stream = fill_stream(out.va, size, value)
        cmd = dev.create_bo_with(stream, read_only=True)
        dev.submit(Job(cmd, len(stream), [JobBo(cmd, read=True), JobBo(out, write=True)]))
        cmd.close()  # the job holds its own reference
        return out

    def check_output(self, what: str, out: BufferObject, value: int, status: int) -> str | None:
        if status != 0:
            return f"{what}: status {status}, expected 0"
        got = out.read()
        if got != bytes([value]) * len(got):
            return f"{what}: {sum(b != value for b in got)} wrong bytes"
        return None

    def round(self, kind: str) -> None:
        value = self.rng.choice(FILL_VALUES)
        self.set(kind, count=1)
        start = time.monotonic()
        victim = self.submit_fill(self.victim, value)
        # The fault goes to the next job a core takes: with several cores the other file's job
        # could be taken first, so it is submitted once the device has taken the victim.
        deadline = time.monotonic() + self.timeout_s + 30
        while not self.control.injected(self.seq) and time.monotonic() < deadline:
            time.sleep(0.005)
        innocent = self.submit_fill(self.other, value + 1)
        st = victim.wait(timeout=self.timeout_s + 30)
        took = time.monotonic() - start
        problems = []
        if st.status not in EXPECTED[kind]:
            problems.append(f"victim status {st.status}, expected {EXPECTED[kind]}")
        if (st.fault_va != 0) != (st.status == -errno.EFAULT):
            problems.append(f"victim fault_va {st.fault_va:#x} with status {st.status}")
        if st.status == 0 and (p := self.check_output("victim", victim, value, 0)):
            problems.append(p)
        if took > self.timeout_s + MARGIN_S:
            problems.append(f"recovery took {took:.2f} s, bound {self.timeout_s + MARGIN_S:.2f} s")
        ist = innocent.wait(timeout=self.timeout_s + 30)
        if p := self.check_output("innocent job of another file", innocent, value + 1, ist.status):
            problems.append(p)
        after = self.submit_fill(self.victim, value + 2)
        ast = after.wait(timeout=self.timeout_s + 30)
        if p := self.check_output("the next job", after, value + 2, ast.status):
            problems.append(p)
        for bo in (victim, innocent, after):
            bo.close()
        self.stats.count(kind, not problems, took)
        self.stats.failures += [f"{kind}: {p}" for p in problems]

    def rate_phase(self, kind: str, jobs: int, rate: float) -> None:
        """``jobs`` jobs with ``kind`` injected at ``rate``: each ends correct or with EXPECTED[kind]."""
        self.set(kind, rate=rate)
        values = [self.rng.choice(FILL_VALUES) for _ in range(jobs)]
        outs = [self.submit_fill(self.victim, v) for v in values]
        for v, out in zip(values, outs, strict=True):
            st = out.wait(timeout=self.timeout_s + 30)
            if st.status == 0:
                problem = self.check_output(f"{kind} rate job", out, v, 0)
                if problem:
                    self.stats.failures.append(problem)
            else:
                ok = st.status in EXPECTED[kind]
                self.stats.count(kind, ok, None)
                if not ok:
                    self.stats.failures.append(f"{kind} rate job: status {st.status}")
            out.close()
        self.set()

    def slow_phase(self, jobs: int) -> None:
        """Every job ten times slower: all still correct, none timed out."""
        self.set("slow", rate=1.0)
        for _ in range(jobs):
            v = self.rng.choice(FILL_VALUES)
            start = time.monotonic()
            out = self.submit_fill(self.victim, v)
            st = out.wait(timeout=self.timeout_s + 30)
            problem = self.check_output("slow job", out, v, st.status)
            self.stats.count("slow", problem is None, time.monotonic() - start)
            if problem:
                self.stats.failures.append(problem)
            out.close()
        self.set()

    def kill_phase(self) -> None:
        """The device model dies mid-job: the job fails in bound, the ioctls keep returning."""
        self.set("kill", count=1)
        start = time.monotonic()
        out = self.submit_fill(self.victim, 9)
        st = out.wait(timeout=self.timeout_s + 30)
        took = time.monotonic() - start
        bound = self.timeout_s + DEAD_DEVICE_RESET_WAIT_S + MARGIN_S
        ok = st.status in EXPECTED["kill"] and took <= bound
        if not ok:
            self.stats.failures.append(f"kill: status {st.status} after {took:.2f} s (bound {bound:.2f} s)")
        try:
            self.victim.get_param("DEVICE_ID")  # the driver still answers with no device behind it
            self.victim.create_bo(4096).close()
        except AccelError as e:
            ok = False
            self.stats.failures.append(f"kill: an ioctl failed after the device model died: {e}")
        self.stats.count("kill", ok, took)

    def close(self) -> None:
        self.victim.close()
        self.other.close()


def reload_module(timeout_ms: int) -> None:
    """Load vnpu.ko again with ``timeout_ms`` (no file of the device may be open)."""
    module = str(config.MODULE.get())
    subprocess.run(["rmmod", "vnpu"], check=True, capture_output=True)
    subprocess.run(["insmod", module, f"timeout_ms={timeout_ms}"], check=True, capture_output=True)
    deadline = time.monotonic() + 10
    while not list(Path("/dev/accel").glob("accel*")):
        if time.monotonic() > deadline:
            raise RuntimeError("vnpu.ko reloaded but no /dev/accel/accel* appeared")
        time.sleep(0.05)


def run(
    device: str,
    rounds: int,
    seed: int = 0,
    budget_s: float | None = None,
    kill: bool = False,
    control: Control | None = None,
    rate_jobs: int = 10,
) -> Stats:
    """``rounds`` rounds of every kind (or rounds until ``budget_s``), the rate and slow phases, ``kill``."""
    if control is None:
        control = shim_control() if device == "shim" else ControlFile()
    # The leak check needs a device that still answers: not after the kill.
    baseline = leak_check.Baseline.take() if device != "shim" and not kill else None
    c = Campaign(device, control, seed)
    try:
        start = time.monotonic()
        n = 0
        while (n < rounds) if budget_s is None else (time.monotonic() - start < budget_s or n == 0):
            for kind in ROUND_KINDS:
                c.round(kind)
            c.rate_phase("bad_status", rate_jobs, 0.5)
            c.rate_phase("mmu_fault", rate_jobs, 0.5)
            n += 1
        c.slow_phase(3)
        if kill:
            c.kill_phase()
    finally:
        c.set()
        c.close()
    if baseline is not None and (leaks := baseline.leaks()):
        c.stats.failures.append(f"leaks (baseline, end): {leaks}")
    return c.stats


@cli_main("python -m qemu_tests.fault_inject")
def main(argv: list[str] | None = None) -> int:
    p = OneLineArgumentParser(prog="python -m qemu_tests.fault_inject", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="kernel", help="kernel (default) or shim")
    p.add_argument("--rounds", type=int, default=1, help="rounds of every fault kind (default 1)")
    p.add_argument("--seconds", type=float, help="rounds until this many seconds have passed instead")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout-ms", type=int, help="reload vnpu.ko with this job timeout first (guest only)")
    p.add_argument("--kill", action="store_true", help="end by killing the device model mid-job")
    p.add_argument("--json", type=Path, help="write the figures here")
    args = p.parse_args(argv)
    if args.device == "shim" and args.kill:
        p.error("--kill needs the QEMU guest (the shim's device model is this process)")
    try:
        if args.timeout_ms is not None:
            if args.device == "shim":
                os.environ[config.SHIM_JOB_TIMEOUT_MS.name] = str(args.timeout_ms)
            else:
                reload_module(args.timeout_ms)
        stats = run(args.device, args.rounds, args.seed, args.seconds, args.kill)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as e:
        print(f"fault_inject: {e}", file=sys.stderr)
        return 2
    total = sum(stats.injected.values())
    recovered = sum(stats.recovered.values())
    kinds = ", ".join(f"{k} {stats.recovered.get(k, 0)}/{v}" for k, v in sorted(stats.injected.items()))
    print(f"fault_inject: {recovered} of {total} faults recovered ({kinds}); longest {stats.longest:.2f} s")
    if args.json:
        args.json.write_text(json.dumps(stats.to_json(), indent=1, sort_keys=True))
    for f in stats.failures:
        print(f"fault_inject: FAIL: {f}", file=sys.stderr)
    if stats.failures:
        print(f"reproduce: python -m qemu_tests.fault_inject --device {args.device} --seed {args.seed}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
