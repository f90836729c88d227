"""Every published performance figure from one run: model speed against XNNPACK, cores, round trip.

    python -m bench.performance [--markdown docs/performance.md --plots docs/img] [--out DIR]
    python -m bench.performance --quick        # a few invokes and jobs each: checks the run works
    python -m bench.performance --plot-only build/bench/performance/summary.json   # the pictures again

Runs, one after another and each in its own process (so one part's threads and caches do not
colour the next), on the machine as it is:

1. ``bench.model_bench --threads 1``: MobileNetV1 and V2 (224, int8) through ``libteflon.so`` on
   the shim against LiteRT's XNNPACK, in the same process, one thread each;
2. ``bench.corpus``: every model of the real-model corpus against XNNPACK the same way;
3. ``bench.model_bench --profile``: the fixed cost of an invoke on the shim: an empty job, a
   1-node and a 30-node partition through ``libteflon.so``, each split by the stack's parts;
4. ``bench --shim``: the empty-job round trip, and the throughput-by-cores table on a 1- and a
   2-core device, with the cores as threads and as worker processes;
5. in the QEMU guest on vnpu.ko, one boot of a 2-core device (``--guest-cores`` adds boots):
   ``bench --kernel``: the round trip against the doorbell floor timed in the same run, and the
   cores table with both cores and with core 0 alone (the driver's debugfs ``core_mask``),
   alternating run by run.

Each part's JSON goes to ``--out`` (default ``build/bench/performance``, which git ignores);
``summary.json`` and the printed summary hold the published figures, each target of
docs/performance.md's table (bench.targets) that they check with met or missed, and the host's load
average around every part (a figure measured beside other work is not comparable). ``--markdown``
replaces the block between this module's markers; ``--from-summary JSON`` renders a run's
``summary.json`` again, measuring nothing.

Every run (and ``--from-summary``) also draws the pictures docs/performance.md shows
(:mod:`bench.plots`, from the summary alone) into ``--out``'s ``img/``; ``--plots docs/img``
publishes them, ``--no-plots`` draws none. ``--plot-only JSON`` draws them from a summary.json and
does nothing else. Only ``--markdown`` and ``--plots`` write into the checkout's tracked files.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import RESULTS, ROOT
from bench.doc_block import replace_block
from bench.targets import target
from qemu_tests.harness import GUEST_OUT  # the guest's view of the results directory

DEFAULT_OUT = RESULTS / "performance"
PLOTS_SUBDIR = "img"  # the pictures of a run, under its --out
MARK_BEGIN = (
    "<!-- performance summary: begin (python -m bench.performance --markdown docs/performance.md) -->"
)
MARK_END = "<!-- performance summary: end -->"


@dataclass(frozen=True)
class Sizes:
    """How much each part measures: the full run, or a quick one that only checks the run works."""

    model_runs: int
    corpus_runs: int
    iterations: int
    jobs: int
    invokes: int
    repeat: int
    profile_runs: int


# The cores table's points are ratios of two throughputs near 1: each run long enough (1500 jobs,
# 60 invokes a client) that a scheduling hiccup of a few ms does not decide the ratio, and five
# pairs of runs (A B B A ...) whose median ratio a change of the host's speed between pairs does
# not decide either (cores_rows).
FULL = Sizes(
    model_runs=60, corpus_runs=40, iterations=2000, jobs=1500, invokes=60, repeat=5, profile_runs=1000
)
QUICK = Sizes(model_runs=3, corpus_runs=2, iterations=50, jobs=50, invokes=2, repeat=1, profile_runs=20)


def say(msg: str) -> None:
    print(f"bench.performance: {msg}", flush=True)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run_part(name: str, cmd: Sequence[str], log: Path) -> dict[str, Any]:
    """Run one part, its output to ``log`` and the terminal; its wall time and the load around it."""
    say(f"{name}: {shlex.join(cmd)}")
    before, start = load(), time.monotonic()
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            f.write(line)
            print(f"  {line}", end="", flush=True)
        rc = proc.wait()
    took = round(time.monotonic() - start, 1)
    if rc != 0:
        raise SystemExit(f"bench.performance: {name} failed (exit {rc}); its output is in {log}")
    return {"command": shlex.join(cmd), "seconds": took, "load_before": before, "load_after": load()}


def machine() -> dict[str, Any]:
    from bench.model_bench import machine_info

    info = machine_info()
    flags: set[str] = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    info["simd"] = sorted(flags & {"avx2", "avx512f", "avx512_vnni", "avx_vnni"})
    qemu = subprocess.run(["qemu-system-x86_64", "--version"], capture_output=True, text=True, check=False)
    info["qemu"] = qemu.stdout.splitlines()[0] if qemu.returncode == 0 and qemu.stdout else "not found"
    return info


def plan(out: Path, sizes: Sizes, guest_cores: Sequence[int]) -> list[tuple[str, list[str]]]:
    """The parts of the run: (name, command) in order. Every part writes ``out/<name>.json``."""
    py = sys.executable
    bench_kernel = (
        f"python -m bench --kernel {GUEST_OUT}/bench.json --iterations {sizes.iterations} "
        f"--jobs {sizes.jobs} --processes 1 4 --invokes {sizes.invokes} --repeat {sizes.repeat}"
    )
    parts = [
        (
            "model_bench",
            [py, "-m", "bench.model_bench", "--threads", "1", "--runs", str(sizes.model_runs), "--no-rss"]
            + ["--out", str(out / "model_bench.json")],
        ),
        (
            "corpus",
            [py, "-m", "bench.corpus", "--runs", str(sizes.corpus_runs), "--json", str(out / "corpus.json")],
        ),
        (
            "invoke_split",
            [py, "-m", "bench.model_bench", "--models", "", "--onnx", "", "--profile"]
            + ["--profile-runs", str(sizes.profile_runs), "--out", str(out / "invoke_split.json")],
        ),
        (
            "shim",
            [py, "-m", "bench", "--shim", str(out / "shim.json"), "--iterations", str(sizes.iterations)]
            + ["--jobs", str(sizes.jobs), "--processes", "1", "4", "--invokes", str(sizes.invokes)]
            + ["--repeat", str(sizes.repeat), "--core-modes", "threads", "processes"],
        ),
    ]
    for cores in guest_cores:
        guest_dir = out / f"guest_cores{cores}"
        parts.append(
            (
                f"guest_cores{cores}",
                [py, "-m", "qemu_tests", "--npu-cores", str(cores), "--no-npu-core-processes"]
                + ["--out", str(guest_dir), "--exec", bench_kernel],
            )
        )
    return parts


def part_json(out: Path, name: str) -> dict[str, Any]:
    path = out / name / "bench.json" if name.startswith("guest_") else out / f"{name}.json"
    return json.loads(path.read_text())


def summarize(out: Path, parts: dict[str, dict[str, Any]], info: dict[str, Any]) -> dict[str, Any]:
    """The published figures out of the parts' JSON."""
    summary: dict[str, Any] = {"machine": info, "parts": parts, "models": [], "round_trip": [], "cores": []}
    summary["invoke_split"] = []
    mb = part_json(out, "model_bench") if "model_bench" in parts else {"models": []}
    for m in mb["models"]:
        xnn = m["cpu_runtime_ms"].get("ai_edge_litert")
        summary["models"].append(
            {
                "name": m["name"],
                "source": "model_bench",
                "vnpu_ms": m["invoke_ms"],
                "device_ms": m["device_ms"],
                "xnnpack_ms": xnn,
                "ratio": m["invoke_ms"] / xnn if xnn else None,
                "exact": m["exact"],
            }
        )
    for m in part_json(out, "corpus")["models"] if "corpus" in parts else []:
        summary["models"].append(
            {
                "name": m["name"],
                "source": "corpus",
                "vnpu_ms": m["vnpu_ms"],
                "xnnpack_ms": m["xnnpack_ms"],
                "ratio": m["vnpu_ms"] / m["xnnpack_ms"] if m["xnnpack_ms"] else None,
                "exact": m["differing_bytes"] == 0,
                "npu_nodes": f"{m['npu_nodes']}/{m['nodes']}",
                "partitions": m["partitions"],
            }
        )
    if "invoke_split" in parts:
        for sp in part_json(out, "invoke_split")["invoke_split"]:
            row = {"name": sp["name"], "nodes": sp["nodes"], "invoke_us": sp["plain_invoke_us"]}
            summary["invoke_split"].append(row | {"parts_us": sp["parts_us"]})
    for name in parts:
        if name == "shim" or name.startswith("guest_"):
            d = part_json(out, name)
            rt, floor = d["round_trip"], d.get("doorbell_floor") or {}
            row = {"where": name, "p50_us": rt["p50_us"], "p90_us": rt["p90_us"], "p99_us": rt["p99_us"]}
            row |= {"min_us": rt["min_us"], "submit_p50_us": rt["submit_p50_us"]}
            if floor:
                row |= {"floor_p50_us": floor["p50_us"], "floor_min_us": floor["min_us"]}
                row |= {f"floor_{p}_us": floor[f"{p}_us"] for p in ("p90", "p99") if f"{p}_us" in floor}
                row["over_floor"] = rt["p50_us"] / floor["p50_us"]
            summary["round_trip"].append(row)
            for r in d.get("throughput_by_cores", []):
                # In the guest the cores' mode is the device model's: threads, as plan() boots it.
                summary["cores"].append(r | {"where": name, "mode": r.get("mode") or "threads"})
    return summary


# The targets this summary checks, and the models the model-speed targets are about.
MODEL_TARGETS = ("model_vs_xnnpack", "model_vs_xnnpack_stretch")
ROUND_TRIP_TARGETS = ("guest_round_trip_p50", "guest_round_trip_over_floor")


def target_rows(summary: dict[str, Any]) -> list[tuple[str, str, str, str, bool | None]]:
    """(key, target, where, figure, met) for each target the summary's figures check."""
    rows: list[tuple[str, str, str, str, bool | None]] = []
    for key in MODEL_TARGETS:
        t = target(key)
        for m in summary["models"]:
            if m["source"] == "model_bench" and m["ratio"] is not None:
                rows.append((key, t.text, m["name"], f"{m['ratio']:.2f}x", t.met(m["ratio"])))
    t = target("corpus_vs_xnnpack")
    for m in summary["models"]:
        if m["source"] == "corpus" and m["ratio"] is not None:
            rows.append((t.key, t.text, m["name"], f"{m['ratio']:.2f}x", t.met(m["ratio"])))
    for r in summary["round_trip"]:
        if r["where"] == "shim":
            t = target("shim_round_trip_p50")
            rows.append((t.key, t.text, "shim", f"{r['p50_us']:.0f} us", t.met(r["p50_us"])))
    for split in summary.get("invoke_split", []):
        if split["nodes"] == 1:
            t = target("one_node_invoke_p50")
            where = "shim, a 1-node partition (one int8 ADD)"
            rows.append((t.key, t.text, where, f"{split['invoke_us']:.0f} us", t.met(split["invoke_us"])))
    t = target("transformer_block_partitions")
    for m in summary["models"]:
        if m["source"] == "corpus" and m["name"] == "transformer_block" and "partitions" in m:
            rows.append((t.key, t.text, m["name"], str(m["partitions"]), t.met(m["partitions"])))
    rows += cores_rows(summary)
    for r in summary["round_trip"]:
        if not r["where"].startswith("guest_"):
            continue
        t = target("guest_round_trip_p50")
        rows.append((t.key, t.text, r["where"], f"{r['p50_us']:.0f} us", t.met(r["p50_us"])))
        if "over_floor" in r:
            t = target("guest_round_trip_over_floor")
            rows.append((t.key, t.text, r["where"], f"{r['over_floor']:.2f}x", t.met(r["over_floor"])))
    return rows


def pair_ratio(one: dict[str, Any], most: dict[str, Any]) -> float | None:
    """The most cores' rate over one core's: the median of the ratios of their k-th runs, which ran
    next to each other in time (the benches alternate the core counts run by run, A B B A), so a
    change of the host's speed between runs cancels out; the ratio of the medians when the runs
    are not paired."""
    a, b = one.get("runs") or [], most.get("runs") or []
    if a and len(a) == len(b) and all(a):
        return statistics.median(y / x for x, y in zip(a, b, strict=True))
    return most["per_s"] / one["per_s"] if one["per_s"] else None


def cores_rows(summary: dict[str, Any]) -> list[tuple[str, str, str, str, bool | None]]:
    """``cores_not_slower``: per (where, mode, workload, clients), the most cores' rate over one
    core's (:func:`pair_ratio`).

    A guest boot measures its device with all its cores and with core 0 alone (vnpu.ko's debugfs
    ``core_mask``), so its rows compare within the boot."""
    t = target("cores_not_slower")
    groups: dict[tuple[str, str, str, int], dict[int, dict[str, Any]]] = {}
    for r in summary["cores"]:
        key = (r["where"], r.get("mode") or "threads", r["workload"], r["clients"])
        groups.setdefault(key, {})[r["cores"]] = r
    rows = []
    for (where, mode, workload, clients), by_cores in sorted(groups.items()):
        if 1 not in by_cores or len(by_cores) < 2:
            continue
        most = max(by_cores)
        ratio = pair_ratio(by_cores[1], by_cores[most])
        label = f"{where} {mode}, {workload}, {clients} client(s): {most} cores / 1"
        rows.append((t.key, t.text, label, "-" if ratio is None else f"{ratio:.2f}x", t.met(ratio)))
    return rows


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def source_commit() -> str:
    """The checkout's commit (``-dirty`` with uncommitted changes), or "unknown" outside git."""
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--exclude", "*"], cwd=ROOT, capture_output=True,
            text=True, timeout=10, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() or "unknown"


def render(summary: dict[str, Any]) -> str:
    """The summary as the Markdown block the docs hold."""
    info = summary["machine"]
    lines = [
        f"Run {summary['when']}: {info['cpu']}, {info['cpus']} CPUs ({', '.join(info['simd']) or 'no AVX2'}),"
        " "
        f"host kernel {info['kernel']}, Python {info['python']}, numpy {info['numpy']}, {info['qemu']}. "
        f"Command: `{summary['command']}` (commit {summary.get('commit', 'unknown')}).",
        "",
        "| part | seconds | host load before -> after (1 min) |",
        "|---|---|---|",
    ]
    for name, p in summary["parts"].items():
        lines.append(
            f"| {name} | {p['seconds']:.0f} | {p['load_before'][0]:.2f} -> {p['load_after'][0]:.2f} |"
        )
    lines += [
        "",
        "**Models against LiteRT XNNPACK** (one thread each, median invoke, same process; vnpu is the",
        "whole invoke through `libteflon.so` on the shim, the device model's part of it where measured):",
        "",
        "| model | from | vnpu ms | XNNPACK ms | vnpu / XNNPACK | device model ms (/ XNNPACK) | exact |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in summary["models"]:
        ratio = "-" if m["ratio"] is None else f"{m['ratio']:.1f}x"
        device = "-"
        if m.get("device_ms") and m["xnnpack_ms"]:
            device = f"{m['device_ms']:.2f} ({m['device_ms'] / m['xnnpack_ms']:.1f}x)"
        lines.append(
            f"| {m['name']} | {m['source']} | {_ms(m['vnpu_ms'])} | {_ms(m['xnnpack_ms'])} | {ratio} "
            f"| {device} | {'yes' if m['exact'] else 'NO'} |"
        )
    splits = summary.get("invoke_split", [])
    if splits:
        lines += [
            "",
            "**Where an invoke's time goes on the shim** (us, the median of each part; one thread;",
            "`bench.model_bench --profile`: an empty job, and partitions of 1 and 30 int8 ADDs through",
            "`libteflon.so`; the invoke timed without the marks, back to back):",
            "",
            "| part | " + " | ".join(sp["name"] for sp in splits) + " |",
            "|---|" + "---|" * len(splits),
        ]
        for part in splits[0]["parts_us"]:
            lines.append(f"| {part} | " + " | ".join(f"{sp['parts_us'][part]:.1f}" for sp in splits) + " |")
        lines.append("| **invoke** | " + " | ".join(f"**{sp['invoke_us']:.1f}**" for sp in splits) + " |")
    lines += [
        "",
        "**Empty-job round trip** (us; the floor is the bare doorbell -> MSI-X -> waiter round trip",
        "vnpu.ko times in the same run):",
        "",
        "| where | p50 | p90 | p99 | min | submit call p50 | floor p50 (min) | p50 / floor |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in summary["round_trip"]:
        floor = f"{r['floor_p50_us']:.0f} ({r['floor_min_us']:.0f})" if "floor_p50_us" in r else "-"
        over = f"{r['over_floor']:.1f}x" if "over_floor" in r else "-"
        lines.append(
            f"| {r['where']} | {r['p50_us']:.0f} | {r['p90_us']:.0f} | {r['p99_us']:.0f} | {r['min_us']:.0f} "
            f"| {r['submit_p50_us']:.0f} | {floor} | {over} |"
        )
    checked = target_rows(summary)
    if checked:
        lines += [
            "",
            "**Against the targets** (the targets table below):",
            "",
            "| target | where | figure | met |",
            "|---|---|---|---|",
        ]
        for key, text, where, figure, met in checked:
            mark = "-" if met is None else "met" if met else "**missed**"
            lines.append(f"| `{key}` {text} | {where} | {figure} | {mark} |")
    lines += [
        "",
        "**Throughput by cores** (per second, median of the runs; every model output compared with a",
        "lone client's):",
        "",
        "| where | cores as | NPU cores | clients | empty jobs/s | model invokes/s | exact |",
        "|---|---|---|---|---|---|---|",
    ]
    rows: dict[tuple[str, str, int, int], dict[str, Any]] = {}
    for r in summary["cores"]:
        key = (r["where"], r["mode"], r["cores"], r["clients"])
        rows.setdefault(key, {})[r["workload"]] = r
    for (where, mode, cores, clients), w in rows.items():
        empty, model = w.get("empty job"), w.get("model invoke")
        exact = all(x.get("exact", True) for x in w.values())
        lines.append(
            f"| {where} | {mode} | {cores} | {clients} | {empty['per_s']:.0f} | "
            f"{model['per_s']:.1f} | {'yes' if exact else 'NO'} |"
            if empty and model
            else f"| {where} | {mode} | {cores} | {clients} | - | - | {'yes' if exact else 'NO'} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.performance", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"results directory (default {DEFAULT_OUT})")
    p.add_argument("--markdown", type=Path, help="replace the summary block between the markers of this file")
    p.add_argument("--quick", action="store_true", help="a few invokes and jobs per part (checks the run)")
    p.add_argument(
        "--guest-cores", type=int, nargs="*", default=[2], help="NPU cores of each guest boot (default 2)"
    )
    p.add_argument(
        "--skip", nargs="*", default=[], help="parts to leave out (model corpus invoke shim guest)"
    )
    p.add_argument(
        "--from-summary", type=Path, metavar="JSON", help="render this stored summary.json; measure nothing"
    )
    p.add_argument(
        "--plot-only",
        type=Path,
        metavar="JSON",
        help="draw the pictures of this stored summary.json; nothing else",
    )
    p.add_argument(
        "--plots", type=Path, help="where the SVGs go (default: --out's img/; docs/img publishes them)"
    )
    p.add_argument("--no-plots", action="store_true", help="draw no pictures")
    args = p.parse_args(argv)
    if args.plots is None:
        args.plots = args.out / PLOTS_SUBDIR
    plots = None if args.no_plots else args.plots
    if args.plot_only is not None:
        return plot(read_summary(args.plot_only), args.plots)
    if args.from_summary is not None:
        return publish(read_summary(args.from_summary), args.markdown, plots)
    sizes = QUICK if args.quick else FULL
    args.out.mkdir(parents=True, exist_ok=True)
    info = machine()
    say(f"{info['cpu']}, {info['cpus']} CPUs, host load {load()}")
    parts: dict[str, dict[str, Any]] = {}
    todo = [(n, c) for n, c in plan(args.out, sizes, args.guest_cores) if n.split("_")[0] not in args.skip]
    commit = source_commit()  # before the parts run: what was measured, not what a part changed
    for i, (name, cmd) in enumerate(todo, 1):
        say(f"part {i} of {len(todo)}")
        parts[name] = run_part(name, cmd, args.out / f"{name}.log")
    summary = summarize(args.out, parts, info)
    summary["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    summary["command"] = shlex.join(["python", "-m", "bench.performance", *(argv or sys.argv[1:])])
    summary["host"] = platform.node()
    summary["commit"] = commit
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
    return publish(summary, args.markdown, plots)


def read_summary(path: Path) -> dict[str, Any]:
    """A run's summary.json, or SystemExit naming the file and what is wrong with it."""
    try:
        summary = json.loads(path.read_text())
    except OSError as e:
        raise SystemExit(f"bench.performance: cannot read {path}: {e.strerror}") from None
    except ValueError as e:
        raise SystemExit(f"bench.performance: {path} is not JSON: {e}") from None
    if not isinstance(summary, dict) or "models" not in summary:
        raise SystemExit(f"bench.performance: {path} is not a bench.performance summary.json")
    return summary


def plot(summary: dict[str, Any], out: Path) -> int:
    """Draw the summary's pictures (bench.plots) into ``out``."""
    from bench.plots import write_plots

    for path in write_plots(summary, out):
        say(f"wrote {path}")
    return 0


def publish(summary: dict[str, Any], markdown: Path | None, plots: Path | None = None) -> int:
    """Print the summary, write it into ``markdown``'s block and its pictures into ``plots`` when given."""
    text = render(summary)
    print(text)
    if markdown:
        try:
            markdown.write_text(replace_block(markdown.read_text(), MARK_BEGIN, MARK_END, text))
        except ValueError as e:
            raise SystemExit(f"bench.performance: {markdown}: {e}") from None
    if plots is not None:
        plot(summary, plots)
    return 0


if __name__ == "__main__":
    sys.exit(main())
