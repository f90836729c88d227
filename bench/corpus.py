"""The real-model corpus on the NPU: exactness, placement and speed against LiteRT's XNNPACK.

Runs every model of ``tests/corpus/models`` (made by ``tools.convert.make_corpus`` with the
TensorFlow converter) through ``libteflon.so`` and prints one table:

* differing bytes against TFLite's reference kernels (BUILTIN_REF), the CPU nodes on BUILTIN_REF too;
* the placement: nodes on the NPU out of all nodes, NPU partitions, the ops left on the CPU;
* the median invoke through the delegate next to LiteRT's default CPU path (XNNPACK, one thread),
  measured in the same run, a new input before every invoke of both (:mod:`bench.input_feed`;
  CPU nodes of the delegated model run TFLite's default kernels here).

::

    python -m bench.corpus                                  # shim, every model
    python -m bench.corpus --device kernel --runs 5         # vnpu.ko (in the QEMU guest)
    python -m bench.corpus --markdown docs/models.md        # rewrite the table in docs/models.md
    python -m bench.corpus --update-placement               # rewrite tests/corpus/placement.json

Writes JSON to ``build/bench/corpus.json`` (``--json`` to change).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench import RESULTS, ROOT
from bench.doc_block import replace_block
from bench.input_feed import InputFeed
from vnpu_common.cli import OneLineArgumentParser, cli_main

CORPUS_DIR = ROOT / "tests" / "corpus" / "models"
PLACEMENT_FILE = ROOT / "tests" / "corpus" / "placement.json"
DEFAULT_JSON = RESULTS / "corpus.json"
MARK_BEGIN = "<!-- corpus table: begin (python -m bench.corpus --markdown docs/models.md) -->"
MARK_END = "<!-- corpus table: end -->"
INPUT_SEED = 11


def manifest() -> dict[str, dict[str, Any]]:
    """The corpus manifest: model name -> what it is (source, exercises, io, bytes)."""
    return json.loads((CORPUS_DIR / "manifest.json").read_text())


def model_bytes(name: str) -> bytes:
    """The corpus model's bytes, checked (ModelError) before any runtime sees them."""
    from libaccel.compiler.tflite_check import check_tflite

    data = (CORPUS_DIR / f"{name}.tflite").read_bytes()
    check_tflite(data)
    return data


@dataclass(frozen=True)
class PlacementSummary:
    """Where a model's nodes ran: the part of a run the placement expectation pins down."""

    nodes: int
    npu_nodes: int
    partitions: int
    cpu_ops: dict[str, int]  # op name -> nodes of that op left on the CPU


@dataclass
class ExactRun:
    outputs: list[np.ndarray]
    reference: list[np.ndarray]
    placement: PlacementSummary
    reasons: dict[str, str]  # op -> one reason it stayed on the CPU

    @property
    def differing_bytes(self) -> int:
        from delegate_teflon.run import differing_bytes

        return differing_bytes(self.outputs, self.reference)


def run_exact(model: bytes, runtime: str, device: str, lib_path: str | None = None) -> ExactRun:
    """``model`` through libteflon.so and alone, both on BUILTIN_REF; the placement the delegate chose."""
    import delegate_teflon
    from delegate_teflon import plugin
    from delegate_teflon.run import invoke, make_interpreter, random_inputs

    mod = importlib.import_module(f"{runtime}.interpreter")
    reference = make_interpreter(mod, model, [], None)
    inputs = random_inputs(reference.get_input_details(), INPUT_SEED)
    want = invoke(reference, inputs)
    delegate = mod.load_delegate(
        lib_path or delegate_teflon.library_path(), {"device": device, "log_level": "quiet"}
    )
    npu = make_interpreter(mod, model, [delegate], None)
    record = plugin.last_prepare()
    if record is None:
        raise RuntimeError("the delegate recorded no Prepare")
    got = invoke(npu, inputs)
    partitions = sum(1 for op in npu._get_ops_details() if op["op_name"] == "DELEGATE")
    cpu = [p for p in record.placements if not p.npu]
    placement = PlacementSummary(
        nodes=len(record.placements),
        npu_nodes=len(record.placements) - len(cpu),
        partitions=partitions,
        cpu_ops=dict(sorted(Counter(p.op for p in cpu).items())),
    )
    reasons = {p.op: p.reason for p in reversed(cpu)}
    del npu
    return ExactRun(got, want, placement, dict(sorted(reasons.items())))


MIN_GROUP_SECONDS = 0.2  # a timing group lasts at least this long: small models get enough invokes


def median_invoke_ms(interp: Any, feed: InputFeed, runs: int) -> float:
    """Median of at least ``runs`` invokes, and of as many more as fit in ``MIN_GROUP_SECONDS``, each
    after a new input (:mod:`bench.input_feed`, not timed)."""
    feed.feed(interp)
    interp.invoke()  # warm-up: first-touch of the arena and the plans
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < runs or time.perf_counter() - start < MIN_GROUP_SECONDS:
        feed.feed(interp)
        t0 = time.perf_counter()
        interp.invoke()
        samples.append(1000 * (time.perf_counter() - t0))
    return float(np.median(samples))


def time_invokes(model: bytes, device: str, runs: int) -> tuple[float, float]:
    """Median invoke (ms) through the delegate and on LiteRT's default CPU path, one thread each, a
    new input before every invoke of both."""
    import ai_edge_litert.interpreter as litert

    import delegate_teflon

    cpu = litert.Interpreter(model_content=model, num_threads=1)
    cpu.allocate_tensors()
    feed = InputFeed(cpu.get_input_details(), INPUT_SEED)
    delegate = litert.load_delegate(delegate_teflon.library_path(), {"device": device, "log_level": "quiet"})
    npu = litert.Interpreter(model_content=model, num_threads=1, experimental_delegates=[delegate])
    npu.allocate_tensors()
    # Interleave the two so that a change in the machine's load hits both alike.
    npu_ms, cpu_ms = [], []
    for _ in range(3):
        npu_ms.append(median_invoke_ms(npu, feed, max(1, runs // 3)))
        cpu_ms.append(median_invoke_ms(cpu, feed, max(1, runs // 3)))
    return float(np.median(npu_ms)), float(np.median(cpu_ms))


@dataclass
class ModelRow:
    name: str
    exercises: str
    differing_bytes: int
    nodes: int
    npu_nodes: int
    partitions: int
    cpu_ops: dict[str, int]
    vnpu_ms: float
    xnnpack_ms: float

    @property
    def ratio(self) -> float:
        return self.vnpu_ms / self.xnnpack_ms if self.xnnpack_ms > 0 else float("inf")


def _cpu_ops_text(cpu_ops: dict[str, int]) -> str:
    return ", ".join(f"{op}" + (f" x{n}" if n > 1 else "") for op, n in cpu_ops.items()) or "-"


def table(rows: Sequence[ModelRow], device: str) -> str:
    head = (
        f"| model | exercises | differing bytes | nodes on the NPU | partitions | on the CPU | "
        f"vnpu ({device}) ms | XNNPACK ms | ratio |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r.name} | {r.exercises} | {r.differing_bytes} | {r.npu_nodes} / {r.nodes} | "
            f"{r.partitions} | {_cpu_ops_text(r.cpu_ops)} | "
            f"{r.vnpu_ms:.2f} | {r.xnnpack_ms:.2f} | {r.ratio:.1f}x |"
        )
    return "\n".join(lines)


def caption(machine: dict[str, Any], started: str, runtime: str) -> str:
    """One line under the table: when, where and how loaded the machine was (ratios depend on it)."""
    before, after = machine["load_average"][0], machine["load_average_after"][0]
    return (
        f"Run {started} in {runtime}, {machine['cpu']} ({machine['cpus']} CPUs), "
        f"load average {before:.1f} before and {after:.1f} after."
    )


def replace_between_markers(text: str, body: str) -> str:
    """``text`` with the part between the corpus-table markers replaced by ``body``."""
    return replace_block(text, MARK_BEGIN, MARK_END, body)


@cli_main("python -m bench.corpus")
def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog="python -m bench.corpus", description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="shim", help="shim (default), kernel, or /dev/accel/accelN")
    parser.add_argument(
        "--runs",
        type=int,
        default=15,
        help="the fewest timed invokes per model and path (default 15; fast models get more)",
    )
    parser.add_argument("--only", action="append", help="a model name (repeatable)")
    parser.add_argument("--runtime", default="ai_edge_litert", choices=("ai_edge_litert", "tflite_runtime"))
    parser.add_argument(
        "--json", type=Path, default=DEFAULT_JSON, help=f"JSON output (default {DEFAULT_JSON})"
    )
    parser.add_argument("--markdown", type=Path, help="rewrite the table between the markers of this file")
    parser.add_argument("--update-placement", action="store_true", help=f"rewrite {PLACEMENT_FILE.name}")
    args = parser.parse_args(argv)
    entries = manifest()
    for name in args.only or []:
        if name not in entries:
            print(
                f"bench.corpus: unknown model {name!r}; known: {', '.join(sorted(entries))}", file=sys.stderr
            )
            return 2
    from bench.model_bench import machine_info

    machine = machine_info()  # before the run: its load average is the one that says how quiet it was
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows: list[ModelRow] = []
    placements: dict[str, dict[str, Any]] = {}
    failed: list[str] = []
    for name, entry in entries.items():
        if args.only and name not in args.only:
            continue
        print(f"[{name}] exactness and placement ...", file=sys.stderr, flush=True)
        model = model_bytes(name)
        try:
            run = run_exact(model, args.runtime, args.device)
        except Exception as e:  # a model that does not load is a row of the table, not the end of the run
            print(f"[{name}] FAILED: {e}", file=sys.stderr)
            failed.append(name)
            continue
        print(f"[{name}] timing ({args.runs} invokes per path) ...", file=sys.stderr, flush=True)
        vnpu_ms, cpu_ms = time_invokes(model, args.device, args.runs)
        p = run.placement
        rows.append(
            ModelRow(
                name,
                entry["exercises"],
                run.differing_bytes,
                p.nodes,
                p.npu_nodes,
                p.partitions,
                p.cpu_ops,
                vnpu_ms,
                cpu_ms,
            )
        )
        placements[name] = asdict(p) | {"cpu_reasons": run.reasons}
    machine["load_average_after"] = list(os.getloadavg())
    text = table(rows, args.device)
    if failed:
        text += "\n\nFailed to load through the delegate: " + ", ".join(failed)
    text += "\n\n" + caption(machine, started, args.runtime)
    print(text)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "device": args.device,
                "runs": args.runs,
                "started": started,
                "runtime": args.runtime,
                "machine": machine,
                "models": [asdict(r) for r in rows],
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {args.json}", file=sys.stderr)
    if args.markdown:
        args.markdown.write_text(replace_between_markers(args.markdown.read_text(), text))
        print(f"wrote the table into {args.markdown}", file=sys.stderr)
    if args.update_placement:
        old = json.loads(PLACEMENT_FILE.read_text()) if PLACEMENT_FILE.exists() else {}
        old.update(
            {k: {kk: vv for kk, vv in v.items() if kk != "cpu_reasons"} for k, v in placements.items()}
        )
        PLACEMENT_FILE.write_text(json.dumps(dict(sorted(old.items())), indent=2) + "\n")
        print(f"wrote {PLACEMENT_FILE}", file=sys.stderr)
    return 0 if not failed and all(r.differing_bytes == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
