"""Reliability figures: the ioctl fuzzer, fault injection and stress at one budget, in the QEMU guest.

    python -m bench.reliability --budget 600 [--kernel debug] [--markdown docs/reliability.md]
    python -m bench.reliability --device shim --budget 30        # the same on the shim, no VM

On the kernel this boots the guest once (python -m qemu_tests --exec) and runs, in order:
vnpu.ko reloaded with a 1 s job timeout (so a hang's recovery is timed against a short bound),
the ioctl fuzzer (random and structure-aware, 2 processes x 2 threads, dmesg checked after every
batch, leak accounting at the end), the fault-injection campaign, stress, a last leak and splat
check, and the device model killed mid-job. The budget is split 58/28/14 between the three (each
part's long-run target needs about that share at the rates measured under TCG). It
prints the figures table, writes JSON (build/bench/reliability.json) and, with --markdown,
replaces the table in that file between its markers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import RESULTS
from bench.doc_block import replace_block
from bench.targets import target
from qemu_tests.leak_check import count_leaks
from vnpu_common import config
from vnpu_common.cli import OneLineArgumentParser, cli_main

DEFAULT_JSON = RESULTS / "reliability.json"
MARK_BEGIN = (
    "<!-- reliability figures: begin (python -m bench.reliability --markdown docs/reliability.md) -->"
)
MARK_END = "<!-- reliability figures: end -->"
SHARES = {"fuzz": 0.58, "faults": 0.28, "stress": 0.14}
# Seconds between the fuzzer's dmesg checks. Each batch forks fresh workers that open files and
# close them all at the end; at 5 s that setup and teardown cost a quarter of a batch under TCG.
FUZZ_BATCH_S = 15.0
GUEST_TIMEOUT_MS = 1000  # the job timeout vnpu.ko is reloaded with for the run
GUEST_JSON = "/tmp/vnpu-out/reliability.json"  # qemu_tests.harness GUEST_OUT


def say(msg: str) -> None:
    print(f"bench.reliability: {msg}", flush=True)


def run_parts(
    device: str, budget: float, seed: int, kill: bool, save: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """The three parts at ``budget`` seconds in all, on ``device``; their figures as one dict.

    ``save`` gets the figures so far after every part (a guest that dies late keeps them).
    """
    save = save or (lambda doc: None)
    from qemu_tests import fault_inject, ioctl_fuzz, leak_check, stress
    from qemu_tests.matrix import count_splats

    start = time.monotonic()
    kernel = device != "shim"
    doc: dict[str, Any] = {"device": device, "budget_s": budget, "seed": seed, "kernel": platform.release()}
    if kernel:
        fault_inject.reload_module(GUEST_TIMEOUT_MS)
        base_splats = count_splats(ioctl_fuzz.dmesg())
        baseline = leak_check.Baseline.take()
    else:
        # Through the environment: the fuzzer's forked workers open their own shim device (one
        # made here before the fork would be left without its threads in them).
        os.environ[config.SHIM_JOB_TIMEOUT_MS.name] = str(GUEST_TIMEOUT_MS)

    say(f"ioctl fuzzer, {budget * SHARES['fuzz']:.0f} s")
    fz = ioctl_fuzz.run(device, seed, budget * SHARES["fuzz"], procs=2, threads=2, batch=FUZZ_BATCH_S)
    s = fz.stats
    doc["fuzz"] = {
        "ioctls": s.ioctls,
        "random_ioctls": s.random_ioctls,
        "streams": s.streams,
        "submits_accepted": s.submits_accepted,
        "jobs_completed": s.jobs_completed,
        "jobs_failed": s.jobs_failed,
        "seconds": round(fz.seconds, 1),
        "leaks": {k: list(v) for k, v in fz.leaks.items()},
        "failures": fz.failures,
    }
    save(doc)
    say(f"fault injection, {budget * SHARES['faults']:.0f} s")
    fi = fault_inject.run(device, rounds=1, seed=seed, budget_s=budget * SHARES["faults"], rate_jobs=200)
    doc["faults"] = fi.to_json()
    save(doc)
    say(f"stress, {budget * SHARES['stress']:.0f} s")
    st = stress.run(device, budget * SHARES["stress"], procs=2, threads=2)
    doc["stress"] = {"checked": st.checked, "mismatches": st.mismatches, "errors": st.errors[:20]}
    leaks: dict[str, Any] = dict(doc["fuzz"]["leaks"])
    splats: dict[str, int] = {}
    if kernel:
        leaks.update({k: list(v) for k, v in baseline.leaks().items()})
        now = count_splats(ioctl_fuzz.dmesg())
        splats = {k: v - base_splats.get(k, 0) for k, v in now.items() if v > base_splats.get(k, 0)}
    doc["leaks"] = leaks
    doc["splats"] = splats
    doc["seconds"] = round(time.monotonic() - start, 1)
    save(doc)
    if kill and kernel:
        say("the device model killed mid-job")
        k = fault_inject.run(device, rounds=0, seed=seed, kill=True)  # the slow phase, then the kill
        doc["faults"]["kill"] = k.to_json()
        doc["faults"]["failures"] += k.failures
        doc["seconds"] = round(time.monotonic() - start, 1)
        save(doc)
    return doc


def figures(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(figure, value, target) rows of the reliability table; the targets are the rows of
    docs/performance.md's targets table (bench.targets)."""
    f, fi, st = doc["fuzz"], doc["faults"], doc["stress"]
    injected = sum(fi["injected"].values())
    recovered = sum(fi["recovered"].values())
    longest, longest_kind = max(((v, k) for k, v in fi["longest_recovery_s"].items()), default=(0.0, "-"))
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(fi["injected"].items()))
    kill = fi.get("kill")
    rows = []
    if kill:
        took = kill["longest_recovery_s"].get("kill", 0.0)
        ok = kill["recovered"].get("kill", 0) == kill["injected"].get("kill", 0) == 1
        rows.append(
            (
                "device model killed mid-job",
                f"job failed after {took:.2f} s, ioctls still answered: {'yes' if ok else 'NO'}",
                target("kill_recovery").text,
            )
        )
    return [
        (
            "ioctl calls made (random and structure-aware)",
            f"{f['ioctls']:,} ({f['random_ioctls']:,} random)",
            target("ioctl_calls").text,
        ),
        (
            "command streams fuzzed",
            f"{f['streams']:,} ({f['submits_accepted']:,} accepted, {f['jobs_completed']:,} waited ok, "
            f"{f['jobs_failed']:,} failed on the device)",
            "count",
        ),
        (
            "faults injected and recovered",
            f"{injected:,} / {recovered:,} ({kinds})",
            target("faults_recovered").text,
        ),
        (
            "longest recovery time",
            f"{longest:.2f} s ({longest_kind}, job timeout {GUEST_TIMEOUT_MS} ms)",
            target("longest_recovery").text,
        ),
        (
            "stress jobs checked, and any mismatches",
            f"{st['checked']:,}, {st['mismatches']} mismatches",
            target("stress_mismatches").text,
        ),
        (
            "leaks found",
            str(count_leaks(doc["leaks"])) + (f" {doc['leaks']}" if doc["leaks"] else ""),
            target("leaks").text,
        ),
        (
            "kernel splats",
            str(sum(doc["splats"].values())) + (f" {doc['splats']}" if doc["splats"] else ""),
            target("kernel_splats").text,
        ),
        *rows,
    ]


def table(doc: dict[str, Any]) -> str:
    rows = figures(doc)
    lines = ["| figure | this run | target for the documented long run |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def markdown_block(doc: dict[str, Any]) -> str:
    where = "vnpu.ko in the QEMU guest" if doc["device"] != "shim" else "the shim backend"
    failures = doc["fuzz"]["failures"] + doc["faults"]["failures"] + doc["stress"]["errors"]
    return (
        f"{table(doc)}\n\n"
        f"Run: `{doc['command']}` on {where}, kernel {doc['kernel']}, {doc['seconds']:.0f} s of "
        f"fuzzing, injection and stress ({doc['when']}, host load average {doc['host_load']}); "
        f"{len(failures)} failures."
    )


def write_markdown(path: Path, doc: dict[str, Any]) -> None:
    text = path.read_text()
    if MARK_BEGIN not in text or MARK_END not in text:  # said before a half-finished doc is rendered
        raise SystemExit(f"bench.reliability: {path} has no figures markers ({MARK_BEGIN!r} ...)")
    path.write_text(replace_block(text, MARK_BEGIN, MARK_END, markdown_block(doc)))


@cli_main("python -m bench.reliability")
def main(argv: list[str] | None = None) -> int:
    p = OneLineArgumentParser(prog="python -m bench.reliability", description=__doc__.split("\n\n")[0])
    p.add_argument("--budget", type=float, default=60.0, help="seconds of fuzzing, injection and stress")
    p.add_argument("--device", default="kernel", choices=("kernel", "shim"))
    p.add_argument("--kernel", metavar="SPEC", help="the guest kernel (as python -m qemu_tests --kernel)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"JSON output (default {DEFAULT_JSON})")
    p.add_argument("--markdown", type=Path, help="replace the figures table in this file")
    p.add_argument("--in-guest", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.budget <= 0:
        p.error("--budget must be positive")
    command = "python -m bench.reliability " + shlex.join(argv if argv is not None else sys.argv[1:])
    if args.in_guest or args.device == "shim":
        save = (lambda d: Path(GUEST_JSON).write_text(json.dumps(d))) if args.in_guest else None
        doc = run_parts(args.device, args.budget, args.seed, kill=args.in_guest, save=save)
        if args.in_guest:
            return 0
    else:
        from qemu_tests import harness

        # The harness builds libteflon.so, which the stress part loads in the guest, before it boots.
        out = harness.results_dir(None)
        inner = f"python -m bench.reliability --in-guest --budget {args.budget:g} --seed {args.seed}"
        hargs = ["--out", str(out), "--exec", inner, "--timeout", str(args.budget * 3 + 900)]
        if args.kernel:
            hargs += ["--kernel", args.kernel]
        rc = harness.main(hargs)
        result = out / Path(GUEST_JSON).name
        if not result.exists():
            print(
                f"bench.reliability: the guest run wrote no figures (exit code {rc}; see {out})",
                file=sys.stderr,
            )
            return 1
        doc = json.loads(result.read_text())
        doc["guest_exit"] = rc
        missing = [part for part in ("fuzz", "faults", "stress", "leaks") if part not in doc]
        if missing:
            print(
                f"bench.reliability: the guest run stopped before {missing[0]} (see {out})", file=sys.stderr
            )
            return 1
    doc["command"] = command
    doc["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    doc["host_load"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(table(doc))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=1, sort_keys=True))
    if args.markdown:
        write_markdown(args.markdown, doc)
    failures = doc["fuzz"]["failures"] + doc["faults"]["failures"] + doc["stress"]["errors"]
    bad = failures or doc["leaks"] or doc["splats"] or doc["stress"]["mismatches"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
