"""Run a whole model file on the NPU: ``run_model(path, inputs, device=...)`` for .onnx and .tflite.

ONNX models go through :func:`libaccel.compiler.onnx_frontend.graph_from_onnx` into the compiler's
IR; every run of consecutive nodes the compiler supports becomes one NPU partition (one job), and
the other nodes run on the CPU in onnxruntime, in ONNX's layout (their inputs are transposed back
from the IR's NHWC at the boundary, their outputs forward). TFLite models run through the delegate
as an application runs them: :func:`run_tflite` loads ``libteflon.so`` into a TFLite runtime
(``ai_edge_litert`` or ``tflite_runtime``) on BUILTIN_REF, and the delegate's placement report comes
back through its ``placement_file`` option. This is the one TFLite runner: ``accel run`` and
``python -m delegate_teflon.run`` both call it, and the helpers around it (:func:`make_interpreter`,
:func:`invoke`, :func:`differing_bytes`) serve the benches and tests that drive a runtime directly.

The result carries the outputs, the placement (which node ran where and why), and the times.
``reference_outputs`` runs the same model in its reference runtime (TFLite's BUILTIN_REF kernels
without the delegate; onnxruntime, one thread: the QDQ form with onnxruntime's QDQ fusion,
ORT_ENABLE_EXTENDED, the QOperator form with all graph optimizations off), for ``accel run
--compare``.
"""

from __future__ import annotations

import importlib
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from libaccel.compiler import onnx_frontend as fe
from libaccel.compiler import partition
from libaccel.compiler.onnx_frontend import OnnxModelError
from libaccel.compiler.partition import Placement
from libaccel.runtime.inputs import random_arrays

__all__ = [
    "RUNTIMES",
    "DelegateError",
    "ModelResult",
    "OnnxModelError",
    "Placement",
    "differing_bytes",
    "invoke",
    "load_onnx",
    "make_interpreter",
    "reference_outputs",
    "run_model",
    "run_tflite",
    "runtime_module",
]

RUNTIMES = ("tflite_runtime", "ai_edge_litert")  # the TFLite runtimes libteflon.so loads into


@dataclass
class ModelResult:
    outputs: dict[str, np.ndarray]
    placement: list[Placement]
    partitions: int
    compile_ms: float
    load_ms: float
    invoke_ms: float
    form: str = ""
    notes: list[str] = field(default_factory=list)
    inputs: dict[str, np.ndarray] = field(default_factory=dict)  # what the model ran on
    runs_ms: list[float] = field(default_factory=list)  # timed invokes after the first (run_tflite's runs)

    def timing(self, read_ms: float = 0.0) -> str:
        """The timing line both runners print (``accel run``, ``python -m delegate_teflon.run``): the
        setup, the first invoke (it pays for what first use sets up), the median of ``runs_ms``.
        A .tflite model's setup is one figure, the delegate's prepare; an ONNX model's is reading
        (``read_ms``), compiling and loading."""
        if self.form == "tflite":
            setup = f"load (delegate prepare + compile): {self.compile_ms:.1f} ms"
        else:
            setup = f"read {read_ms:.1f} ms, compile {self.compile_ms:.1f} ms, load {self.load_ms:.1f} ms"
        text = f"{setup}; first invoke {self.invoke_ms:.2f} ms"
        if self.runs_ms:
            p = self.percentiles()
            text += (
                f"; median of {len(self.runs_ms)} invokes {p['median']:.2f} ms "
                f"(min {p['min']:.2f}, p90 {p['p90']:.2f}, p99 {p['p99']:.2f})"
            )
        return text

    def percentiles(self) -> dict[str, float]:
        """min, median, p90 and p99 of ``runs_ms`` (empty when there were no timed runs)."""
        if not self.runs_ms:
            return {}
        runs = sorted(self.runs_ms)

        def at(q: float) -> float:  # nearest rank: a figure one of the invokes took
            return runs[min(len(runs), max(1, math.ceil(q * len(runs)))) - 1]

        return {"min": runs[0], "median": statistics.median(runs), "p90": at(0.9), "p99": at(0.99)}

    def report(self, nodes: bool = False) -> str:
        """The placement report, in the delegate's format: the summary (counts, ops by type and the
        reasons for the CPU ones), or with ``nodes`` one line per node."""
        if nodes:
            return partition.format_report(self.placement, "placement", self.partitions)
        return partition.format_summary(self.placement, "placement", self.partitions)


class _CpuNode:
    """One ONNX node run alone in onnxruntime (one thread, no graph optimization)."""

    def __init__(self, model: Any, node: Any, info: Mapping[str, tuple[str, tuple[int, ...]]]) -> None:
        self.session, self.input_names = fe.node_session(model, node, dict(info))
        self.label = fe._label(node)
        self.output_names = [o for o in node.output if o]

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        try:
            return self.session.run(self.output_names, feeds)
        except Exception as e:  # onnxruntime's Fail (a kernel refusing these values): one line
            raise OnnxModelError(f"onnxruntime cannot run {self.label}: {str(e).splitlines()[0]}") from None


def onnx_placement(og: fe.OnnxGraph, strict: bool | None = None) -> list[Placement]:
    """Where each IR node of an ONNX model runs: :func:`partition.place` with the front end's rules
    (its CPU nodes with their reasons; the IR nodes of one ONNX node placed together), numbered by
    partition. Every ONNX runner (``OnnxProgram``, the onnxruntime EP) places through this."""
    graph = og.graph
    # One ONNX node may be several IR nodes (a layout TRANSPOSE and a RESHAPE): they go together.
    members: dict[int, list[int]] = {}
    for index, node in og.onnx_nodes.items():
        members.setdefault(id(node), []).append(index)
    cpu = {
        n.index: f"{og.cpu_reasons.get(n.index, f'{n.op[5:]} has no NPU lowering')}; runs in onnxruntime"
        for n in graph.nodes
        if n.op.startswith("ONNX:")
    }
    if strict is None:
        strict = partition.strict_default()
    rules = partition.Rules(cpu=cpu, groups=[g for g in members.values() if len(g) > 1], strict=strict)
    return partition.numbered(partition.place(graph, rules))


class OnnxProgram:
    """A model compiled for a device: NPU partitions loaded, CPU nodes as onnxruntime sessions.

    The placement is :func:`libaccel.compiler.partition.place`'s; ``strict`` (default
    ``$VNPU_STRICT_PLACEMENT``) makes a planner error raise instead of leaving its node on the CPU."""

    def __init__(self, og: fe.OnnxGraph, device: Any, cache: bool = True, strict: bool | None = None) -> None:
        from libaccel.compiler import PartitionRunner, compile_cached, compile_partition

        self.og = og
        graph = og.graph
        self.steps: list[tuple[str, Any]] = []  # ("npu", (runner, compiled)) / ("cpu", (node, _CpuNode))
        t0 = time.perf_counter()
        placed = onnx_placement(og, strict)
        runs = {run[0]: run for run in partition.partition_runs(placed)}
        compiled_runs = {}
        for first, run in runs.items():
            if cache:
                compiled_runs[first], _ = compile_cached(graph, list(run), device.params.isa_version)
            else:
                compiled_runs[first] = compile_partition(graph, list(run), device.params.isa_version)
        self.compile_ms = 1000 * (time.perf_counter() - t0)
        t0 = time.perf_counter()
        self.partitions = len(runs)
        # Steps in execution order: a partition at its first node, a CPU ONNX node at its first IR node.
        seen: set[int] = set()
        for p in placed:
            node = og.onnx_nodes[p.node]
            if p.node in compiled_runs:
                compiled = compiled_runs[p.node]
                self.steps.append(("npu", (PartitionRunner(device, compiled), compiled)))
            elif not p.npu and id(node) not in seen:
                self.steps.append(("cpu", (graph.node(p.node), _CpuNode(og.model, node, og.info))))
            seen.add(id(node))
        self.load_ms = 1000 * (time.perf_counter() - t0)
        # The report is per ONNX node (its position in the model), where its first IR node is placed.
        position = {id(n): k for k, n in enumerate(og.model.graph.node)}
        reported: set[int] = set()
        self.placement: list[Placement] = []
        for p in placed:
            node = og.onnx_nodes[p.node]
            if id(node) not in reported:
                reported.add(id(node))
                # a QDQ group's DequantizeLinear/QuantizeLinear nodes are where its op is
                for n in [node, *og.absorbed.get(id(node), [])]:
                    self.placement.append(
                        Placement(position[id(n)], n.op_type, p.npu, p.reason, p.partition, n.name)
                    )

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        og, graph = self.og, self.og.graph
        values: dict[int, np.ndarray] = {}
        for index in graph.inputs:
            t = graph.tensors[index]
            if t.name not in inputs:
                raise ValueError(f"missing model input {t.name!r}")
            arr = np.asarray(inputs[t.name])
            want = (
                tuple(t.shape[p] for p in np.argsort(og.layouts[index])) if index in og.layouts else t.shape
            )
            if arr.dtype != np.dtype(t.dtype) or tuple(arr.shape) != want:
                raise ValueError(
                    f"input {t.name!r}: got {arr.dtype} {list(arr.shape)}, expected {t.dtype} {list(want)}"
                )
            values[index] = og.to_ir(index, arr)
        for kind, step in self.steps:
            if kind == "npu":
                runner, compiled = step
                feeds = {b.index: values[b.index] for b in compiled.inputs}
                values.update(runner.run(feeds))
                continue
            node, cpu = step
            feeds = {}
            for name in cpu.input_names:
                index = og.names[name]
                feeds[name] = og.to_onnx(index, values[index].reshape(graph.tensors[index].shape))
            for name, value in zip(cpu.output_names, cpu.run(feeds), strict=True):
                index = og.names[name]
                values[index] = og.to_ir(index, value)
        out = {}
        for index in graph.outputs:
            t = graph.tensors[index]
            out[t.name] = og.to_onnx(index, values[index].reshape(t.shape))
        return out

    def close(self) -> None:
        for kind, step in self.steps:
            if kind == "npu":
                step[0].close()


MODEL_SUFFIXES = (".onnx", ".tflite")


class DelegateError(ValueError):
    """``load_delegate`` refused: the message is the delegate's own reason, one line."""


def _delegate_reason(e: ValueError) -> str:
    # TFLite's ValueError is "Failed to load delegate from PATH", then what report_error got.
    lines = [line for line in str(e).splitlines() if line.strip()]
    return "; ".join(lines[1:]) or (lines[0] if lines else "the delegate did not load")


def is_tflite(path: str | Path) -> bool:
    """Whether ``path`` names a .tflite file (else .onnx); the suffix in any case (model.TFLITE)."""
    return Path(path).suffix.lower() == ".tflite"


def load_onnx(path: str | Path | bytes, shapes: dict[str, tuple[int, ...]] | None = None) -> fe.OnnxGraph:
    return fe.graph_from_onnx(path, shapes)


def input_specs(
    model: str | Path | fe.OnnxGraph, shapes: dict[str, tuple[int, ...]] | None = None
) -> list[tuple[str, np.dtype, tuple[int, ...]]]:
    """(name, dtype, shape) of each model input, in the file's layout (a path, or a read ONNX graph)."""
    if isinstance(model, (str, Path)) and is_tflite(model):
        from libaccel.compiler.tflite_check import check_tflite

        data = Path(model).read_bytes()
        check_tflite(data)  # before the runtime reads it: tflite_runtime 2.14 trusts the flatbuffer
        return _tflite_specs(make_interpreter(runtime_module(), data))
    og = model if isinstance(model, fe.OnnxGraph) else fe.graph_from_onnx(model, shapes)
    out = []
    for index in og.graph.inputs:
        t = og.graph.tensors[index]
        shape = tuple(t.shape[p] for p in np.argsort(og.layouts[index])) if index in og.layouts else t.shape
        out.append((t.name, np.dtype(t.dtype), shape))
    return out


def random_inputs(specs: list[tuple[str, np.dtype, tuple[int, ...]]], seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs by name for :func:`input_specs`' (name, dtype, shape) (from :mod:`.inputs`)."""
    arrays = random_arrays(((dtype, shape) for _, dtype, shape in specs), seed)
    return {name: a for (name, _, _), a in zip(specs, arrays, strict=True)}


def runtime_module(runtime: str = "ai_edge_litert") -> Any:
    """The ``interpreter`` module of a TFLite runtime (:data:`RUNTIMES`)."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown TFLite runtime {runtime!r} (one of {', '.join(RUNTIMES)})")
    return importlib.import_module(f"{runtime}.interpreter")


def make_interpreter(
    mod: Any, model: bytes, delegates: Sequence[Any] = (), threads: int | None = None
) -> Any:
    """An allocated interpreter of runtime module ``mod`` on BUILTIN_REF (TFLite's reference kernels:
    the CPU nodes of a delegated model, and the whole model without ``delegates``)."""
    interp = mod.Interpreter(
        model_content=model,
        experimental_delegates=list(delegates) or None,
        experimental_op_resolver_type=mod.OpResolverType.BUILTIN_REF,
        num_threads=threads,
    )
    interp.allocate_tensors()
    return interp


def invoke(interp: Any, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Set the inputs (in the interpreter's order, or by name), invoke, and copy the outputs out."""
    details = interp.get_input_details()
    values = [inputs[d["name"]] for d in details] if isinstance(inputs, Mapping) else inputs
    for detail, value in zip(details, values, strict=True):
        interp.set_tensor(detail["index"], value)
    interp.invoke()
    return [interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()]


def _named_outputs(interp: Any, outputs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    return {d["name"]: v for d, v in zip(interp.get_output_details(), outputs, strict=True)}


def _tflite_specs(interp: Any) -> list[tuple[str, np.dtype, tuple[int, ...]]]:
    return [
        (d["name"], np.dtype(d["dtype"]), tuple(int(s) for s in d["shape"]))
        for d in interp.get_input_details()
    ]


def differing_bytes(
    got: Sequence[np.ndarray] | Mapping[str, np.ndarray],
    want: Sequence[np.ndarray] | Mapping[str, np.ndarray],
) -> int:
    """The bytes in which two models' outputs differ (by position, or by name when ``want`` is a
    mapping); -1 when a shape or type differs."""
    if isinstance(want, Mapping):
        got = [got[name] for name in want]  # type: ignore[call-overload]
        want = list(want.values())
    total = 0
    for g, w in zip(got, want, strict=True):
        if g.shape != w.shape or g.dtype != w.dtype:
            return -1
        total += int(np.count_nonzero(g.view(np.uint8) != w.view(np.uint8)))
    return total


def run_tflite(
    model: bytes,
    inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray] | None = None,
    device: str = "shim",
    runtime: str = "ai_edge_litert",
    options: Mapping[str, str] | None = None,
    runs: int = 0,
    seed: int = 0,
) -> ModelResult:
    """A .tflite model's bytes through libteflon.so in ``runtime``, as an application runs it.

    ``options`` are more delegate options (``log_level`` defaults to quiet; with ``placement_file``
    the report stays there, else it goes to a temporary file); ``inputs`` by name or in the model's
    order (None: :func:`random_inputs` of ``seed``). ``compile_ms`` is the delegate's load and the
    interpreter's creation (its prepare: placement, compile, upload), ``invoke_ms`` the first
    invoke, ``runs_ms`` ``runs`` more. Raises :class:`libaccel.compiler.ModelError` for a damaged
    model (before the runtime reads it) and :class:`DelegateError` (a ValueError) for an option or
    device the delegate refuses.
    """
    import json
    import tempfile

    from delegate_teflon import library_path
    from libaccel.compiler.tflite_check import check_tflite

    check_tflite(model)  # tflite_runtime 2.14 does not verify the flatbuffer
    mod = runtime_module(runtime)
    with tempfile.TemporaryDirectory(prefix="vnpu-run-") as tmp:
        opts = {"device": device, "log_level": "quiet", "placement_file": str(Path(tmp) / "placement.json")}
        opts |= dict(options or {})
        report = Path(opts["placement_file"])
        t0 = time.perf_counter()
        try:
            delegate = mod.load_delegate(library_path(), opts)
        except ValueError as e:
            raise DelegateError(_delegate_reason(e)) from None
        interp = make_interpreter(mod, model, [delegate])
        compile_ms = 1000 * (time.perf_counter() - t0)
        nodes = json.loads(report.read_text())["nodes"] if report.exists() else []
    if inputs is None:
        inputs = random_inputs(_tflite_specs(interp), seed)
    elif not isinstance(inputs, Mapping):
        inputs = {name: v for (name, _, _), v in zip(_tflite_specs(interp), inputs, strict=True)}
    t0 = time.perf_counter()
    outputs = invoke(interp, inputs)
    invoke_ms = 1000 * (time.perf_counter() - t0)
    times = _timed_runs(lambda: invoke(interp, inputs), runs)
    placement, partitions = _tflite_placement(nodes)
    return ModelResult(_named_outputs(interp, outputs), placement, partitions, compile_ms, 0.0, invoke_ms,
                       "tflite", ["compile covers the delegate's prepare (compile and load)"], dict(inputs),
                       times)  # fmt: skip


def _timed_runs(run: Callable[[], object], runs: int) -> list[float]:
    """The milliseconds of each of ``runs`` calls of ``run`` (the invokes after the first)."""
    times = []
    for _ in range(max(0, runs)):
        t0 = time.perf_counter()
        run()
        times.append(1000 * (time.perf_counter() - t0))
    return times


def _tflite_placement(nodes: list[dict[str, Any]]) -> tuple[list[Placement], int]:
    """The delegate's placement records, NPU nodes numbered by partition: TFLite groups maximal runs
    of delegated nodes in execution order into one kernel each."""
    placed = partition.numbered([Placement(n["node"], n["op"], bool(n["npu"]), n["reason"]) for n in nodes])
    return placed, len(partition.partition_runs(placed))


def run_model(
    path: str | Path,
    inputs: Mapping[str, np.ndarray] | None = None,
    device: str = "shim",
    shapes: dict[str, tuple[int, ...]] | None = None,
    seed: int = 0,
    graph: fe.OnnxGraph | None = None,
    runs: int = 0,
) -> ModelResult:
    """Run the model at ``path`` (.onnx or .tflite) on ``device`` ("shim", "kernel" or a node).

    ``inputs`` maps input names to arrays in the file's layout (None: seeded random inputs);
    ``runs`` more invokes after the first are timed into ``runs_ms``;
    ``graph`` is the ONNX model already read (``load_onnx``), to read it once. Raises
    :class:`OnnxModelError` for a model that cannot be read (one line naming the node and reason).
    """
    path = Path(path)
    if is_tflite(path):
        return run_tflite(path.read_bytes(), inputs, device, runs=runs, seed=seed)
    from libaccel import Device

    og = graph if graph is not None else fe.graph_from_onnx(path, shapes)
    if inputs is None:
        inputs = random_inputs(input_specs(og), seed)
    with Device.open(device) as dev:
        program = OnnxProgram(og, dev)
        try:
            t0 = time.perf_counter()
            outputs = program.run(inputs)
            invoke_ms = 1000 * (time.perf_counter() - t0)
            times = _timed_runs(lambda: program.run(inputs), runs)
        finally:
            program.close()
    return ModelResult(outputs, program.placement, program.partitions, program.compile_ms, program.load_ms,
                       invoke_ms, og.form, inputs=dict(inputs), runs_ms=times)  # fmt: skip


def reference_outputs(
    path: str | Path, inputs: Mapping[str, np.ndarray], shapes: dict[str, tuple[int, ...]] | None = None
) -> dict[str, np.ndarray]:
    """The model's outputs in its reference runtime (see the module docstring)."""
    path = Path(path)
    if is_tflite(path):
        interp = make_interpreter(runtime_module(), path.read_bytes())
        return _named_outputs(interp, invoke(interp, inputs))
    import onnx

    model = onnx.ModelProto()
    model.CopyFrom(fe.load_model(path))
    fe.fix_shapes(model, shapes)
    sess = fe.reference_session(model)
    names = [o.name for o in sess.get_outputs()]
    try:
        values = sess.run(names, dict(inputs))
    except Exception as e:  # onnxruntime's Fail and InvalidArgument: one line
        raise OnnxModelError(f"onnxruntime cannot run the model: {str(e).splitlines()[0]}") from None
    return dict(zip(names, values, strict=True))
