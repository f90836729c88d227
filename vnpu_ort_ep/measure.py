"""The EP's placement and exactness as onnxruntime reports them, for docs/onnx.md's table.

    python -m vnpu_ort_ep.measure [--device shim] [--runs 3] [--activations int8] [MODEL.onnx ...]

With no model, it builds the odd-shaped CNN, the attention block and the FFN of
``tools.convert.make_onnx_models`` (fixed seeds) and quantizes each with ``quantize_static``'s
defaults (int8 activations, int8 weights, per tensor, QDQ). Each model runs in a fresh interpreter
that imports onnxruntime alone (no vnpu module), as a user's script would: it registers the library,
counts the nodes ``get_provider_graph_assignment_info()`` gives each EP, and compares every output
of ``runs`` seeded random inputs with the CPU EP's, byte for byte.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import vnpu_ort_ep

SCRIPT = r"""
import json, sys
import numpy as np
import onnxruntime as ort

lib, model, options, runs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
ort.register_execution_provider_library("vnpu", lib)
devices = [d for d in ort.get_ep_devices() if d.ep_name == "VnpuExecutionProvider"]
so = ort.SessionOptions()
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
for a in session.get_provider_graph_assignment_info():
    result["assigned"][a.ep_name] = result["assigned"].get(a.ep_name, 0) + len(a.get_nodes())
result["vnpu_ops"] = sorted(
    n.op_type for a in session.get_provider_graph_assignment_info()
    if a.ep_name == "VnpuExecutionProvider" for n in a.get_nodes()
)
del session
ort.unregister_execution_provider_library("vnpu")
print(json.dumps(result))
"""


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


def run_ep(model: Path | str, options: dict[str, str], runs: int = 1) -> dict:
    """``model`` in a fresh onnxruntime-only interpreter with the vnpu EP: the script's result."""
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
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd="/",
    )
    if proc.returncode != 0:  # a clean exit: the library unloads cleanly
        raise RuntimeError(f"the onnxruntime session failed: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(name: str, model: Path | str, options: dict[str, str], runs: int = 1) -> Measured:
    r = run_ep(model, options, runs)
    if "error" in r:
        raise RuntimeError(f"{name}: {r['error']}")
    assigned = r["assigned"]
    units = output_units(model)
    return Measured(
        name,
        assigned.get(vnpu_ort_ep.EP_NAME, 0),
        sum(assigned.values()),
        r["differing_bytes"],
        r["bytes"],
        r["vnpu_ops"],
        max((d / u for d, u in zip(r["max_abs"], units, strict=True)), default=0.0),
    )


NETWORKS = ("odd_cnn", "attention_block", "ffn")


def quantized_networks(out: Path, activations: str = "int8") -> dict[str, Path]:
    """The three networks, quantize_static's defaults (``activations`` may be "uint8"), in ``out``."""
    import onnx

    from tools.convert import make_onnx_models as mk

    paths = {}
    for name in NETWORKS:
        path = out / f"{name}_{activations}_qdq.onnx"
        onnx.save(mk.quantize(getattr(mk, name)(), "qdq", activations), path)
        paths[name] = path
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--device", default="shim")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--activations", choices=("int8", "uint8"), default="int8")
    parser.add_argument(
        "--exact", action="store_true", help="the EP's exact option (float sums on the CPU EP)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        models = {p.stem: p for p in args.models} or quantized_networks(Path(tmp), args.activations)
        print(f"{'model':<28} {'vnpu EP':>10} {'CPU EP':>7} {'differing bytes':>16}")
        for name, path in models.items():
            try:
                options = {"device": args.device, "exact": "true" if args.exact else "false"}
                m = measure(name, path, options, args.runs)
            except (RuntimeError, OSError) as e:
                print(f"vnpu_ort_ep.measure: {e}".splitlines()[0], file=sys.stderr)
                return 1
            print(
                f"{name:<28} {f'{m.vnpu} of {m.total}':>10} {m.total - m.vnpu:>7} "
                f"{f'{m.differing_bytes} of {m.bytes}':>16}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
