"""The MAC array's C variants timed on MobileNet-224 layers: ``python -m bench.layer_bench``.

Each layer (random int8 data and per-channel requantization, TFLite's shapes for MobileNetV1 and
V2 at 224 x 224, width 1.0) is planned once and run ``--reps`` times per variant this CPU has,
the variants interleaved layer by layer so that a change in the host's load touches them alike;
the table shows the fastest run of each (kernel time only: no command processor, no tensor
copies) and whether every variant wrote the same bytes; the figures go to ``build/bench/layer_bench.json`` as
JSON (``--out FILE`` elsewhere).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from bench import RESULTS
from device_model.mac_array import ISA_NAMES, KIND_CONV, KIND_DEPTHWISE, cpu_isas, plan_layer, run
from device_model.numerics import Requant
from modelgen.networks import MOBILENET_V1_BLOCKS, MOBILENET_V2_BLOCKS
from vnpu_common.cli import OneLineArgumentParser, cli_main

Geometry = tuple[int, int, int, int, int, int, int, int]


@dataclass(frozen=True)
class Layer:
    name: str
    kind: int
    in_shape: tuple[int, int, int, int]
    filter_shape: tuple[int, int, int, int]
    geometry: Geometry


@dataclass
class LayerTime:
    model: str
    name: str
    kind: str
    ms: dict[str, float] = field(default_factory=dict)  # variant -> fastest run
    identical: bool = True


def _pointwise(s: int, cin: int, cout: int) -> Layer:
    return Layer(
        f"1x1 {s}x{s}x{cin}->{cout}", KIND_CONV, (1, s, s, cin), (cout, 1, 1, cin), (1, 1, 1, 1, 0, 0, s, s)
    )


def _depthwise(s: int, c: int, stride: int) -> Layer:
    so, pad = s // stride, 1 if stride == 1 else 0  # TFLite SAME: stride 2 pads after, not before
    geometry = (stride, stride, 1, 1, pad, pad, so, so)
    return Layer(f"dw {s}x{s}x{c}/{stride}", KIND_DEPTHWISE, (1, s, s, c), (1, 3, 3, c), geometry)


STEM = Layer("3x3 224x224x3->32/2", KIND_CONV, (1, 224, 224, 3), (32, 3, 3, 3), (2, 2, 1, 1, 0, 0, 112, 112))


def mobilenet_v1() -> list[Layer]:
    """MobileNetV1-224's convolutions, as modelgen builds the network (width 1.0)."""
    layers, c, s = [STEM], 32, 112
    for cout, stride in MOBILENET_V1_BLOCKS:
        layers.append(_depthwise(s, c, stride))
        s //= stride
        layers.append(_pointwise(s, c, cout))
        c = cout
    return layers


def mobilenet_v2() -> list[Layer]:
    """MobileNetV2-224's convolutions, as modelgen builds the network (width 1.0)."""
    layers, c, s = [STEM], 32, 112
    for expand, cout, repeat, first_stride in MOBILENET_V2_BLOCKS:
        for i in range(repeat):
            stride = first_stride if i == 0 else 1
            if expand != 1:
                layers.append(_pointwise(s, c, c * expand))
            layers.append(_depthwise(s, c * expand, stride))
            s //= stride
            layers.append(_pointwise(s, c * expand, cout))
            c = cout
    layers.append(_pointwise(s, c, 1280))
    return layers


DEFAULT_OUT = RESULTS / "layer_bench.json"

MODELS = {"mobilenet_v1": mobilenet_v1, "mobilenet_v2": mobilenet_v2}


def time_layer(
    layer: Layer, isas: list[int], reps: int, rng: np.random.Generator
) -> tuple[dict[str, float], bool]:
    """The fastest of ``reps`` runs per variant (ms) and whether all variants agree byte for byte."""
    x = rng.integers(-128, 128, layer.in_shape, dtype=np.int8)
    f = rng.integers(-128, 128, layer.filter_shape, dtype=np.int8)
    cout = layer.filter_shape[0] if layer.kind == KIND_CONV else layer.filter_shape[-1]
    bias = rng.integers(-5000, 5000, cout, dtype=np.int32)
    multiplier, shift = rng.integers(2**30, 2**31, cout), rng.integers(-9, -5, cout)
    rq = Requant(
        input_zp=-1, filter_zp=0, multiplier=multiplier, shift=shift, output_zp=-128, act_min=-128,
        act_max=127, out_dtype=np.dtype(np.int8),
    )  # fmt: skip
    plan = plan_layer(
        layer.kind, f, bias, rq, in_shape=layer.in_shape, in_dtype=x.dtype, geometry=layer.geometry
    )
    best = {isa: float("inf") for isa in isas}
    outputs = {isa: run(plan, x, isa) for isa in isas}
    for _ in range(reps):
        for isa in isas:
            t0 = time.perf_counter()
            run(plan, x, isa)
            best[isa] = min(best[isa], time.perf_counter() - t0)
    first = outputs[isas[0]]
    identical = all(np.array_equal(o, first) for o in outputs.values())
    return {ISA_NAMES[isa]: best[isa] * 1e3 for isa in isas}, identical


@cli_main("python -m bench.layer_bench")
def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog="python -m bench.layer_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=sorted(MODELS))
    parser.add_argument("--reps", type=int, default=15, help="runs per layer and variant (default 15)")
    parser.add_argument("--layers", type=int, default=0, help="only the first N layers of each model")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"the figures as JSON (default {DEFAULT_OUT})"
    )
    parser.add_argument("--per-layer", action="store_true", help="print every layer, not only the totals")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    isas = cpu_isas()
    if not isas:
        print("layer_bench: the MAC array's C kernels could not be built here", file=sys.stderr)
        return 1
    names = [ISA_NAMES[i] for i in isas]
    rng = np.random.default_rng(0)
    rows: list[LayerTime] = []
    load = [os.getloadavg()[0]]
    for model in args.models:
        layers = MODELS[model]()
        for layer in layers[: args.layers or None]:
            ms, same = time_layer(layer, isas, args.reps, rng)
            kind = "depthwise" if layer.kind == KIND_DEPTHWISE else "conv"
            rows.append(LayerTime(model, layer.name, kind, ms, same))
            if args.per_layer:
                print(f"{model:13s} {layer.name:24s}" + "".join(f"{ms[n]:9.3f}" for n in names))
    load.append(os.getloadavg()[0])
    print(f"fastest of {args.reps} runs, ms (load average {load[0]:.1f} -> {load[1]:.1f})")
    print(f"{'':13s} {'':10s}" + "".join(f"{n:>11s}" for n in names))
    for model in args.models:
        for kind in ("conv", "depthwise"):
            sel = [r for r in rows if r.model == model and r.kind == kind]
            print(f"{model:13s} {kind:10s}" + "".join(f"{sum(r.ms[n] for r in sel):11.2f}" for n in names))
    differing = [f"{r.model} {r.name}" for r in rows if not r.identical]
    print("identical bytes in every variant: " + ("yes" if not differing else "NO: " + ", ".join(differing)))
    report = {"variants": names, "reps": args.reps, "load": load, "layers": [asdict(r) for r in rows]}
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
    except OSError as e:
        print(f"layer_bench: cannot write {args.out}: {e.strerror}", file=sys.stderr)
        return 1
    print(f"results: {args.out}")
    return 0 if not differing else 1


if __name__ == "__main__":
    raise SystemExit(main())
