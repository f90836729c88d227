"""The EP's placement and exactness as onnxruntime reports them, for docs/onnx.md's table.

    python -m vnpu_ort_ep.measure [--device shim] [--runs 3] [--activations int8|uint8]
                                  [--weights per-tensor|per-channel] [--exact] [MODEL.onnx ...]

With no model, it builds the odd-shaped CNN, the residual CNN, the attention block and the FFN of
``tools.convert.make_onnx_models`` (fixed seeds) and quantizes each with ``quantize_static``'s
defaults (QDQ, int8 weights) in every configuration: int8 and uint8 activations, per-tensor and
per-channel weights (``--activations`` / ``--weights`` pick one). Each model runs in a fresh
interpreter that imports onnxruntime alone (no vnpu module), as a user's script would: it registers
the library, counts the nodes ``get_provider_graph_assignment_info()`` gives each EP, and compares
every output of ``runs`` seeded random inputs with the CPU EP's, byte for byte. A row gives the
vnpu EP's share of the non-trivial nodes (all but the model's input QuantizeLinear and output
DequantizeLinear, which convert between float and the quantized graph) against the 90% target,
and, for what stays on the CPU EP, the reasons the EP logged.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import vnpu_ort_ep
from vnpu_common.cli import CliError, ExitCode, OneLineArgumentParser, cli_main

SCRIPT = r"""
import json, sys
import numpy as np
import onnxruntime as ort

lib, model, options, runs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
ort.register_execution_provider_library("vnpu", lib)
devices = [d for d in ort.get_ep_devices() if d.ep_name == "VnpuExecutionProvider"]
so = ort.SessionOptions()
so.log_severity_level = int(sys.argv[5]) if len(sys.argv) > 5 else 2
so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
so.add_provider_for_devices(devices, options)
result = {"vendor": devices[0].ep_vendor, "metadata": dict(devices[0].ep_metadata)}
try:
    session = ort.InferenceSession(model, so)
except Exception as e:
    result["error"] = str(e)
    print(json.dumps(result))
    sys.exit(0)
ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
rng = np.random.default_rng(0)
types = {"tensor(float)": np.float32, "tensor(uint8)": np.uint8, "tensor(int8)": np.int8}
result["differing_bytes"] = 0
result["bytes"] = 0
result["max_abs"] = [0.0] * len(ref.get_outputs())
for _ in range(runs):
    feeds = {}
    for inp in session.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in inp.shape]
        dtype = np.dtype(types[inp.type])
        if dtype.kind == "f":
            feeds[inp.name] = (2 * rng.standard_normal(shape)).astype(dtype)
        else:
            info = np.iinfo(dtype)
            feeds[inp.name] = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    for k, (y, r) in enumerate(zip(session.run(None, feeds), ref.run(None, feeds))):
        result["differing_bytes"] += int((y.view(np.uint8) != r.view(np.uint8)).sum())
        result["bytes"] += int(r.nbytes)
        diff = float(np.abs(y.astype(np.float64) - r.astype(np.float64)).max()) if r.size else 0.0
        result["max_abs"][k] = max(result["max_abs"][k], diff)
result["assigned"] = {}
result["cpu_nodes"] = []
for a in session.get_provider_graph_assignment_info():
    result["assigned"][a.ep_name] = result["assigned"].get(a.ep_name, 0) + len(a.get_nodes())
    if a.ep_name != "VnpuExecutionProvider":
        result["cpu_nodes"] += [[n.name, n.op_type] for n in a.get_nodes()]
result["vnpu_ops"] = sorted(
    n.op_type for a in session.get_provider_graph_assignment_info()
    if a.ep_name == "VnpuExecutionProvider" for n in a.get_nodes()
)
del session
ort.unregister_execution_provider_library("vnpu")
print(json.dumps(result))
"""

TARGET = 0.9  # the share of non-trivial nodes the EP should take


@dataclass
class Measured:
    """One model through the EP: nodes per EP, and the bytes that differ from the CPU EP's."""

    name: str
    vnpu: int
    total: int
    differing_bytes: int
    bytes: int
    vnpu_ops: list[str]
    max_units: float = 0.0  # the largest output difference, in quantized units of that output
    boundary: int = 0  # the model's input QuantizeLinear and output DequantizeLinear nodes
    cpu_ops: list[str] = field(default_factory=list)  # the CPU EP's other nodes' op types
    reasons: list[str] = field(default_factory=list)  # why they stay there, as the EP logged it

    @property
    def share(self) -> float:
        """The vnpu EP's share of the non-trivial nodes."""
        nontrivial = self.total - self.boundary
        return self.vnpu / nontrivial if nontrivial else 1.0


def output_units(model: Path | str) -> list[float]:
    """Each graph output's quantized unit: the scale of the DequantizeLinear that writes it (a
    float output), else 1 (an 8-bit output's stored values are its units)."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(model), load_external_data=False)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    producer = {o: n for n in m.graph.node for o in n.output}
    units = []
    for out in m.graph.output:
        node = producer.get(out.name)
        scale = inits.get(node.input[1]) if node is not None and node.op_type == "DequantizeLinear" else None
        if scale is not None and scale.size != 1:
            raise ValueError(f"output {out.name!r}: its DequantizeLinear is per channel")
        units.append(float(scale) if scale is not None else 1.0)
    return units


def boundary_nodes(model: Path | str) -> set[str]:
    """The names of the nodes that quantize a graph input or dequantize a graph output."""
    import onnx

    g = onnx.load(str(model), load_external_data=False).graph
    inputs, outputs = {i.name for i in g.input}, {o.name for o in g.output}
    return {
        n.name
        for n in g.node
        if (n.op_type == "QuantizeLinear" and n.input[0] in inputs)
        or (n.op_type == "DequantizeLinear" and n.output[0] in outputs)
    }


def run_ep(model: Path | str, options: dict[str, str], runs: int = 1, log_level: int = 2) -> dict:
    """``model`` in a fresh onnxruntime-only interpreter with the vnpu EP: the script's result, and
    onnxruntime's log (``log_level``: its severity, 1 for the EP's info lines) under ``log``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            vnpu_ort_ep.library_path(),
            str(model),
            json.dumps(options),
            str(runs),
            str(log_level),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd="/",
    )
    if proc.returncode != 0:  # a clean exit: the library unloads cleanly
        raise RuntimeError(f"the onnxruntime session failed: {proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["log"] = proc.stderr
    return result


# the EP's log lines that say why nodes stay on the CPU EP: the front end's placement report
# ("node 3 ONNX:QLinearSoftmax CPU (reason)") and the groups it does not claim
_FRONT_END_CPU = re.compile(r"^\s+node\s+\d+\s+ONNX:(\S+)\s+CPU\s+\((.*)\)\s*$")
_LEFT = re.compile(r"vnpu EP: nodes \[.*?\] stay on the CPU: (.*)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # onnxruntime colours its log on a terminal


def _unnamed(reason: str) -> str:
    """``reason`` without its tensor and node names, so that one reason is listed once."""
    return re.sub(r"'[^']*'", "'...'", reason)


def cpu_reasons(log: str) -> list[str]:
    """The distinct reasons in the EP's log for the nodes it leaves, but the boundary Q/DQ's."""
    reasons: dict[str, None] = {}
    for line in _ANSI.sub("", log).splitlines():
        if m := _FRONT_END_CPU.match(line):
            if m.group(1) not in ("QuantizeLinear", "DequantizeLinear"):
                reasons[f"{m.group(1)}: {_unnamed(m.group(2))}"] = None
        elif m := _LEFT.search(line):
            reasons[_unnamed(m.group(1))] = None
    return list(reasons)


def measure(name: str, model: Path | str, options: dict[str, str], runs: int = 1) -> Measured:
    r = run_ep(model, options, runs, log_level=1)
    if "error" in r:
        raise RuntimeError(f"{name}: {r['error']}")
    assigned = r["assigned"]
    units = output_units(model)
    edges = boundary_nodes(model)
    cpu = r["cpu_nodes"]
    return Measured(
        name,
        assigned.get(vnpu_ort_ep.EP_NAME, 0),
        sum(assigned.values()),
        r["differing_bytes"],
        r["bytes"],
        r["vnpu_ops"],
        max((d / u for d, u in zip(r["max_abs"], units, strict=True)), default=0.0),
        sum(1 for node, _ in cpu if node in edges),
        sorted(op for node, op in cpu if node not in edges),
        cpu_reasons(r["log"]),
    )


NETWORKS = ("odd_cnn", "resnet_like", "attention_block", "ffn")
CONFIGURATIONS = [(a, w) for a in ("int8", "uint8") for w in ("per-tensor", "per-channel")]


def quantized_networks(out: Path, activations: str = "int8", weights: str = "per-tensor") -> dict[str, Path]:
    """The networks, quantize_static's defaults (``activations`` may be "uint8", ``weights``
    "per-channel"), in ``out``."""
    import onnx

    from tools.convert import make_onnx_models as mk

    paths = {}
    for name in NETWORKS:
        path = out / f"{name}_{activations}_{weights}_qdq.onnx"
        model = mk.quantize(getattr(mk, name)(), "qdq", activations, per_channel=weights == "per-channel")
        onnx.save(model, path)
        paths[name] = path
    return paths


def row(label: str, m: Measured) -> str:
    """One table row: nodes, share against the target, differing bytes, and the CPU EP's reasons."""
    verdict = "met" if m.share >= TARGET else "missed"
    nodes = f"{m.vnpu} of {m.total - m.boundary}"
    diff = f"{m.differing_bytes} of {m.bytes}"
    if m.differing_bytes:
        diff += f" (max {m.max_units:.0f} unit)"
    text = f"{label:<40} {nodes:>9} {m.share:>5.0%} {verdict:>6} {diff:>18}"
    if m.cpu_ops:
        counts = Counter(m.cpu_ops)
        text += "\n    on the CPU EP: " + ", ".join(f"{op} x{n}" for op, n in sorted(counts.items()))
        text += "".join(f"\n      - {r}" for r in m.reasons)
    return text


@cli_main("python -m vnpu_ort_ep.measure")
def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog="python -m vnpu_ort_ep.measure", description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--device", default="shim")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--activations", choices=("int8", "uint8"), help="these activations only")
    parser.add_argument("--weights", choices=("per-tensor", "per-channel"), help="these weights only")
    parser.add_argument(
        "--exact", action="store_true", help="the EP's exact option (float sums on the CPU EP)"
    )
    args = parser.parse_args(argv)
    for model in args.models:  # before the first row: a long run does not end on a typo
        if not model.is_file():
            problem = "is a directory" if model.is_dir() else "no such file"
            raise CliError(f"{model}: {problem}; give an .onnx model", ExitCode.BAD_FILE)
    options = {"device": args.device, "exact": "true" if args.exact else "false"}
    configurations = [
        (a, w) for a, w in CONFIGURATIONS if args.activations in (None, a) and args.weights in (None, w)
    ]
    print(f"{'model':<40} {'vnpu EP':>9} {'share':>5} {'>=90%':>6} {'differing bytes':>18}")
    with tempfile.TemporaryDirectory() as tmp:
        if args.models:
            # Resolved: each model runs in a child whose working directory is /.
            batches = [{p.stem: p.resolve() for p in args.models}]
        else:
            batches = [
                {f"{n} {a} {w}": p for n, p in quantized_networks(Path(tmp), a, w).items()}
                for a, w in configurations
            ]
        for models in batches:
            for name, path in models.items():
                try:
                    m = measure(name, path, options, args.runs)
                except (RuntimeError, OSError, ValueError) as e:
                    print(f"vnpu_ort_ep.measure: {e}".splitlines()[0], file=sys.stderr)
                    return 1
                print(row(name, m), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
