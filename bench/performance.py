"""Every published performance figure from one run: model speed against XNNPACK, cores, round trip.

    python -m bench.performance [--markdown docs/performance.md --plots docs/img] [--out DIR]
    python -m bench.performance --quick        # a few invokes and jobs each: checks the run works
    python -m bench.performance --plot-only build/bench/performance/summary.json   # the pictures again

Runs, one after another and each in its own process (so one part's threads and caches do not
colour the next), on the machine as it is:

1. ``bench.model_bench --threads 1``: MobileNetV1 and V2 (224, int8) through ``libteflon.so`` on
   the shim against LiteRT's XNNPACK, in the same process, one thread each;
2. ``model_bench_cores2``: the same on a 2-core shim (``VNPU_SHIM_CORES=2``) against XNNPACK with
   two threads;
3. ``bench.corpus``: every model of the real-model corpus against XNNPACK the same way;
4. ``bench.model_bench --profile``: the fixed cost of an invoke on the shim: an empty job, a
   1-node and a 30-node partition through ``libteflon.so``, each split by the stack's parts;
5. ``bench --shim``: the empty-job round trip, and the throughput-by-cores table on a 1- and a
   2-core device, with the cores as threads and as worker processes;
6. ``bench.main_model`` on the shim: the main job's model (``./run.sh main``: MobileNetV1, 224)
   in tflite_runtime, the host's side of the guest's comparison;
7. in the QEMU guest on vnpu.ko, one boot of a 2-core device (``--guest-cores`` adds boots):
   ``bench --kernel``: the round trip against the doorbell floor timed in the same run, and the
   cores table with both cores and with core 0 alone (the driver's debugfs ``core_mask``),
   alternating run by run; then ``bench.main_model`` on vnpu.ko.

Every model invoke gets a new input before it (:mod:`bench.input_feed`), the XNNPACK peer's alike.

Each part's JSON goes to ``--out`` (default ``build/bench/performance``, which git ignores);
``summary.json`` and the printed summary hold the published figures, one "Targets" table with every
target of docs/performance.md's table (bench.targets) whose bench is ``bench.performance``: its
figure, met or missed, and the part that measured it, or "not measured" and why (a part left out
with ``--skip``, or one that gave no figure), and the host's load average around every part (a
figure measured beside other work is not comparable). ``--markdown`` replaces the block between
this module's markers; ``--from-summary JSON`` renders a run's ``summary.json`` again, measuring
nothing.

Every run (and ``--from-summary``) also draws the pictures docs/performance.md shows
(:mod:`bench.plots`, from the summary alone) into ``--out``'s ``img/``; ``--plots docs/img``
publishes them, ``--no-plots`` draws none. ``--plot-only JSON`` draws them from a summary.json and
does nothing else. Only ``--markdown`` and ``--plots`` write into the checkout's tracked files.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import RESULTS, ROOT
from bench.doc_block import replace_block
from bench.targets import target, targets
from qemu_tests.harness import GUEST_OUT  # the guest's view of the results directory
from qemu_tests.main_job import default_model, default_model_path
from vnpu_common.cli import OneLineArgumentParser, cli_main

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
    main_model_runs: int


# The cores table's points are ratios of two throughputs near 1: each run long enough (1500 jobs,
# 60 invokes a client) that a scheduling hiccup of a few ms does not decide the ratio, and five
# pairs of runs (A B B A ...) whose median ratio a change of the host's speed between pairs does
# not decide either (cores_rows).
FULL = Sizes(
    model_runs=60, corpus_runs=40, iterations=2000, jobs=1500, invokes=60, repeat=5, profile_runs=1000,
    main_model_runs=30,
)  # fmt: skip
QUICK = Sizes(
    model_runs=3, corpus_runs=2, iterations=50, jobs=50, invokes=2, repeat=1, profile_runs=20,
    main_model_runs=3,
)  # fmt: skip
MAIN_MODEL_JSON = "main_model.json"  # bench.main_model's result in a guest boot's directory


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


def plan(
    out: Path, sizes: Sizes, guest_cores: Sequence[int], main_model: Path | None = None
) -> list[tuple[str, list[str]]]:
    """The parts of the run: (name, command) in order. Every part writes ``out/<name>.json`` (a guest
    boot its directory ``out/<name>/``). ``main_model``: the main job's model file (default: where
    ``qemu_tests.main_job`` writes it; the guest reads it from the host's filesystem)."""
    py = sys.executable
    model = str(main_model or default_model_path())
    bench_kernel = (
        f"python -m bench --kernel {GUEST_OUT}/bench.json --iterations {sizes.iterations} "
        f"--jobs {sizes.jobs} --processes 1 4 --invokes {sizes.invokes} --repeat {sizes.repeat} && "
        f"python -m bench.main_model {shlex.quote(model)} --device kernel --runs {sizes.main_model_runs} "
        f"--json {GUEST_OUT}/{MAIN_MODEL_JSON}"
    )
    model_bench = [py, "-m", "bench.model_bench", "--runs", str(sizes.model_runs), "--no-rss"]
    parts = [
        ("model_bench", [*model_bench, "--threads", "1", "--out", str(out / "model_bench.json")]),
        (
            # Both NPU cores on one model against XNNPACK with as many threads.
            "model_bench_cores2",
            ["env", "VNPU_SHIM_CORES=2", *model_bench, "--threads", "2", "--no-check"]
            + ["--out", str(out / "model_bench_cores2.json")],
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
        (
            "shim_main_model",
            [py, "-m", "bench.main_model", model, "--device", "shim", "--runs", str(sizes.main_model_runs)]
            + ["--json", str(out / "shim_main_model.json")],
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
    summary |= {"invoke_split": [], "models_cores2": [], "main_model": []}
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
    for m in part_json(out, "model_bench_cores2")["models"] if "model_bench_cores2" in parts else []:
        xnn = m["cpu_runtime_ms"].get("ai_edge_litert")
        summary["models_cores2"].append(
            {
                "name": m["name"],
                "source": "model_bench_cores2",
                "threads": m["cpu_threads"],
                "vnpu_ms": m["invoke_ms"],
                "xnnpack_ms": xnn,
                "ratio": m["invoke_ms"] / xnn if xnn else None,
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
    for name in parts:
        path = out / name / MAIN_MODEL_JSON if name.startswith("guest_") else out / f"{name}.json"
        if (name == "shim_main_model" or name.startswith("guest_")) and path.exists():
            d = json.loads(path.read_text())
            where = "shim" if name == "shim_main_model" else name
            row = {"where": where, "part": name, "model": d["model"], "runs": d["runs"]}
            summary["main_model"].append(row | {"load_ms": d["load_ms"], "invoke_ms": d["invoke_ms"]})
    return summary


# The model-speed targets of bench.model_bench's models, and the guest's round-trip targets.
MODEL_TARGETS = ("model_vs_xnnpack", "model_vs_xnnpack_stretch")
ROUND_TRIP_TARGETS = ("guest_round_trip_p50", "guest_round_trip_over_floor")
# The corpus's converter-made models that stand for the targets' attention block and keyword-spotting
# CNN (tools/convert/make_corpus.py: Keras models through the TFLite converter).
KWS_MODELS = ("ds_cnn_kws",)
ATTENTION_MODELS = ("transformer_block",)
GUEST = "guest_"  # the prefix of a guest boot's part


@dataclass(frozen=True)
class TargetRow:
    """One row of the summary's Targets table: a target's figure where one part measured it, or
    ``figure`` None and ``why`` when the run has none."""

    key: str
    text: str  # the target as docs/performance.md writes it
    part: str  # the part(s) of the run that measured it
    where: str  # what the figure is of (a model, a backend, a client count)
    figure: str | None
    met: bool | None
    why: str = ""

    @property
    def mark(self) -> str:
        if self.figure is None:
            return f"not measured: {self.why}"
        return "-" if self.met is None else "met" if self.met else "**missed**"


def _row(key: str, part: str, where: str, figure: float | None, fmt: str) -> TargetRow:
    t = target(key)
    if figure is None:
        return TargetRow(key, t.text, part, where, None, None, "the part gave no figure")
    return TargetRow(key, t.text, part, where, fmt.format(figure), t.met(figure))


def _model_rows(key: str, models: Sequence[dict[str, Any]], label: str = "") -> list[TargetRow]:
    return [
        _row(key, m["source"], m["name"] + label, m["ratio"], "{:.2f}x")
        for m in models
        if m["ratio"] is not None
    ]


def _models(summary: dict[str, Any], source: str, names: Sequence[str] = ()) -> list[dict[str, Any]]:
    return [m for m in summary["models"] if m["source"] == source and (not names or m["name"] in names)]


def _partitions_rows(summary: dict[str, Any]) -> list[TargetRow]:
    key = "transformer_block_partitions"
    return [
        _row(key, "corpus", m["name"], m["partitions"], "{}")
        for m in _models(summary, "corpus", ATTENTION_MODELS)
        if "partitions" in m
    ]


def _round_trip_rows(summary: dict[str, Any], key: str, field: str, fmt: str) -> list[TargetRow]:
    on_shim = key == "shim_round_trip_p50"
    return [
        _row(key, r["where"], r["where"], r[field], fmt)
        for r in summary["round_trip"]
        if (r["where"] == "shim") == on_shim and field in r
    ]


def _one_node_rows(summary: dict[str, Any]) -> list[TargetRow]:
    where = "shim, a 1-node partition (one int8 ADD)"
    return [
        _row("one_node_invoke_p50", "invoke_split", where, sp["invoke_us"], "{:.0f} us")
        for sp in summary.get("invoke_split", [])
        if sp["nodes"] == 1
    ]


def _cores2_rows(summary: dict[str, Any]) -> list[TargetRow]:
    return [
        _row("cores2_vs_xnnpack_threads2", m["source"], f"{m['name']}: 2 NPU cores / {m['threads']} threads",
             m["ratio"], "{:.2f}x")
        for m in summary.get("models_cores2", [])
        if m["ratio"] is not None
    ]  # fmt: skip


def _guest_model_rows(summary: dict[str, Any]) -> list[TargetRow]:
    rows = summary.get("main_model", [])
    shim = next((r for r in rows if r["where"] == "shim"), None)
    if shim is None:
        return []
    return [
        _row("guest_model_vs_shim", f"{shim['part']}, {r['part']}", f"{r['model']}: {r['where']} / shim",
             r["invoke_ms"] / shim["invoke_ms"], "{:.2f}x")
        for r in rows
        if r["where"].startswith(GUEST)
    ]  # fmt: skip


# Each target bench.performance reports: the parts that measure it (a name, or GUEST for every guest
# boot) and its rows out of the summary.
REPORTED: dict[str, tuple[tuple[str, ...], Callable[[dict[str, Any]], list[TargetRow]]]] = {
    "model_vs_xnnpack": (
        ("model_bench",),
        lambda s: _model_rows("model_vs_xnnpack", _models(s, "model_bench")),
    ),
    "model_vs_xnnpack_stretch": (
        ("model_bench",),
        lambda s: _model_rows("model_vs_xnnpack_stretch", _models(s, "model_bench")),
    ),
    "corpus_vs_xnnpack": (("corpus",), lambda s: _model_rows("corpus_vs_xnnpack", _models(s, "corpus"))),
    "kws_vs_xnnpack": (
        ("corpus",),
        lambda s: _model_rows("kws_vs_xnnpack", _models(s, "corpus", KWS_MODELS), " (keyword spotting)"),
    ),
    "attention_vs_xnnpack": (
        ("corpus",),
        lambda s: _model_rows("attention_vs_xnnpack", _models(s, "corpus", ATTENTION_MODELS), " (attention)"),
    ),
    "transformer_block_partitions": (("corpus",), _partitions_rows),
    "shim_round_trip_p50": (
        ("shim",),
        lambda s: _round_trip_rows(s, "shim_round_trip_p50", "p50_us", "{:.0f} us"),
    ),
    "one_node_invoke_p50": (("invoke_split",), _one_node_rows),
    "cores2_vs_xnnpack_threads2": (("model_bench_cores2",), _cores2_rows),
    "cores_not_slower": (("shim", GUEST), lambda s: cores_rows(s)),
    "guest_round_trip_p50": (
        (GUEST,),
        lambda s: _round_trip_rows(s, "guest_round_trip_p50", "p50_us", "{:.0f} us"),
    ),
    "guest_round_trip_over_floor": (
        (GUEST,),
        lambda s: _round_trip_rows(s, "guest_round_trip_over_floor", "over_floor", "{:.2f}x"),
    ),
    "guest_model_vs_shim": (("shim_main_model", GUEST), _guest_model_rows),
}


def performance_targets() -> list[str]:
    """The keys of docs/performance.md's targets whose bench is ``bench.performance``, in its order."""
    return [k for k, t in targets().items() if "bench.performance" in t.bench]


def _not_measured(key: str, needs: Sequence[str], ran: Sequence[str]) -> TargetRow:
    def did_run(part: str) -> bool:
        return any(name.startswith(part) if part == GUEST else name == part for name in ran)

    missing = [("a guest boot" if p == GUEST else p) for p in needs if not did_run(p)]
    if missing:
        why = f"{' and '.join(missing)} did not run (--skip)"
    else:
        why = f"{', '.join('the guest boots' if p == GUEST else p for p in needs)} gave no figure for it"
    t = target(key)
    return TargetRow(
        key, t.text, ", ".join("guest" if p == GUEST else p for p in needs), "-", None, None, why
    )


def target_rows(summary: dict[str, Any]) -> list[TargetRow]:
    """Every target bench.performance reports (:func:`performance_targets`): its rows from the
    summary's figures, or one "not measured" row saying why."""
    rows: list[TargetRow] = []
    for key in performance_targets():
        if key not in REPORTED:
            raise KeyError(f"bench.performance measures nothing for the target {key!r} its table names")
        needs, produce = REPORTED[key]
        rows += produce(summary) or [_not_measured(key, needs, list(summary["parts"]))]
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


def cores_rows(summary: dict[str, Any]) -> list[TargetRow]:
    """``cores_not_slower``: per (where, mode, workload, clients), the most cores' rate over one
    core's (:func:`pair_ratio`).

    A guest boot measures its device with all its cores and with core 0 alone (vnpu.ko's debugfs
    ``core_mask``), so its rows compare within the boot."""
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
        rows.append(_row("cores_not_slower", where, label, ratio, "{:.2f}x"))
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
        "**Models against LiteRT XNNPACK** (one thread each, median invoke with a new input before every",
        "invoke of both, same process; vnpu is the whole invoke through `libteflon.so` on the shim, the",
        "device model's part of it where measured):",
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
    cores2 = summary.get("models_cores2", [])
    if cores2:
        lines += [
            "",
            "**Both NPU cores on one model** (`VNPU_SHIM_CORES=2`, against XNNPACK with as many threads;",
            "median invoke with a new input before every invoke of both, same process):",
            "",
            "| model | NPU cores | XNNPACK threads | vnpu ms | XNNPACK ms | vnpu / XNNPACK |",
            "|---|---|---|---|---|---|",
        ]
        for m in cores2:
            ratio = "-" if m["ratio"] is None else f"{m['ratio']:.2f}x"
            times = f"{_ms(m['vnpu_ms'])} | {_ms(m['xnnpack_ms'])}"
            lines.append(f"| {m['name']} | 2 | {m['threads']} | {times} | {ratio} |")
    main_model = summary.get("main_model", [])
    if main_model:
        shim_ms = next((r["invoke_ms"] for r in main_model if r["where"] == "shim"), None)
        lines += [
            "",
            "**The main job's model** (`./run.sh main`'s MobileNetV1, 224, int8, in tflite_runtime",
            "through `libteflon.so`; median invoke with a new input before each; the load includes the",
            "compile when the device's compile cache is empty):",
            "",
            "| where | model | load ms | invoke ms | / shim |",
            "|---|---|---|---|---|",
        ]
        for r in main_model:
            over = f"{r['invoke_ms'] / shim_ms:.2f}x" if shim_ms else "-"
            lines.append(
                f"| {r['where']} | {r['model']} | {r['load_ms']:.0f} | {r['invoke_ms']:.2f} | {over} |"
            )
    splits = summary.get("invoke_split", [])
    if splits:
        lines += [
            "",
            "**Where an invoke's time goes on the shim** (us, the median of each part; one thread;",
            "`bench.model_bench --profile`: an empty job, and partitions of 1 and 30 int8 ADDs through",
            "`libteflon.so`, a new input before each; the invoke timed without the marks, back to back):",
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
    lines += [
        "",
        "**Targets** (every target of the table below that `bench.performance` checks, each figure from",
        "this run; the part that measured it):",
        "",
        "| target | part | where | figure | met |",
        "|---|---|---|---|---|",
    ]
    for r in target_rows(summary):
        lines.append(f"| `{r.key}` {r.text} | {r.part} | {r.where} | {r.figure or '-'} | {r.mark} |")
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


@cli_main("python -m bench.performance")
def main(argv: Sequence[str] | None = None) -> int:
    p = OneLineArgumentParser(prog="python -m bench.performance", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"results directory (default {DEFAULT_OUT})")
    p.add_argument("--markdown", type=Path, help="replace the summary block between the markers of this file")
    p.add_argument("--quick", action="store_true", help="a few invokes and jobs per part (checks the run)")
    p.add_argument(
        "--guest-cores", type=int, nargs="*", default=[2], help="NPU cores of each guest boot (default 2)"
    )
    p.add_argument(
        "--skip",
        nargs="*",
        default=[],
        help="parts to leave out, by the first word of their names (model corpus invoke shim guest)",
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
    if any(n == "shim_main_model" or n.startswith(GUEST) for n, _ in todo):
        default_model()  # written on the host: the guest reads it
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
