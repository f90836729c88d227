"""``accel run MODEL.{onnx,tflite}``: a model file on the NPU, its placement, times and exactness.

    accel run model.onnx [--input x.npy|random] [--output y.npy] [--device NODE|shim] [--compare]
                         [--json] [--shape name=1x3x224x224]

Prints the placement (which node ran on the NPU, in which partition, which stayed on the CPU and
why), the compile, load and invoke times, and with ``--compare`` the differing bytes against the
model's reference runtime (onnxruntime, or TFLite's BUILTIN_REF). The running is
:mod:`libaccel.model`'s (a .tflite file through :func:`libaccel.model.run_tflite`, the runner
``python -m delegate_teflon.run`` uses too). ``--output`` saves the model's
(first) output as .npy: float32 when the model's output is float (its DequantizeLinear ran), else
the quantized values. Exit status: 0, 1 when ``--compare`` finds differing bytes, 2 for a bad model
or argument (one line on stderr naming the node and the reason).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def _shapes(items: list[str]) -> dict[str, tuple[int, ...]]:
    out = {}
    for item in items:
        name, sep, dims = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            out[name] = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            raise ValueError(f"--shape {item!r} is not NAME=DxDx...") from None
    return out


def add_run_command(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("run", help="run a .onnx or .tflite model on the NPU (placement, times, --compare)")
    p.add_argument("model", type=Path, help="the .onnx or .tflite file")
    p.add_argument("--input", default="random", help="x.npy (the first input) or 'random' (default)")
    p.add_argument("--output", type=Path, help="write the first output here (.npy)")
    p.add_argument(
        "--device",
        default=os.environ.get("VNPU_DEVICE") or "shim",
        help="node path, 'kernel' or 'shim' (default: $VNPU_DEVICE, else shim)",
    )
    p.add_argument("--compare", action="store_true", help="differing bytes against the reference runtime")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--shape", action="append", default=[], metavar="NAME=1x3x224x224", help="fix an input shape"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    return p


def cmd_run(args: argparse.Namespace) -> int:
    # Before onnxruntime loads: its telemetry warns on stderr where it cannot store a device id (a
    # read-only home, as in the QEMU guest), which would break the one-line errors.
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    from libaccel import model as lm

    try:
        if not args.model.is_file():
            raise ValueError(f"{args.model}: no such file")
        if args.model.suffix not in (".onnx", ".tflite"):
            raise ValueError(f"{args.model}: not a .onnx or .tflite file")
        shapes = _shapes(args.shape)
        if args.model.suffix == ".onnx":  # imported first: "read" times the front end, not the imports
            import onnx  # noqa: F401
            import onnxruntime  # noqa: F401
        t0 = time.perf_counter()
        graph = lm.load_onnx(args.model, shapes) if args.model.suffix == ".onnx" else None
        read_ms = 1000 * (time.perf_counter() - t0)
        specs = lm.input_specs(graph if graph is not None else args.model, shapes)
        inputs = lm.random_inputs(specs, args.seed)
        if args.input != "random":
            arr = np.load(args.input)
            name, dtype, shape = specs[0]
            if arr.dtype != dtype or tuple(arr.shape) != shape:
                raise ValueError(
                    f"{args.input}: {arr.dtype} {list(arr.shape)}, input {name!r} is {dtype} {list(shape)}"
                )
            inputs[name] = arr
        result = lm.run_model(args.model, inputs, device=args.device, shapes=shapes, graph=graph)
        diff = None
        if args.compare:
            diff = lm.differing_bytes(result.outputs, lm.reference_outputs(args.model, inputs, shapes))
    except (ValueError, OSError) as e:  # OnnxModelError is a ValueError: one line names node and reason
        print(f"accel run: {e}", file=sys.stderr)
        return 2
    first = next(iter(result.outputs.values()))
    if args.output is not None:
        np.save(args.output, first)
    try:
        _print_result(args, result, diff, read_ms)
    except BrokenPipeError:  # `accel run ... | head`: the reader left; not an error of the run
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1 if diff else 0


def _print_result(args: argparse.Namespace, result: Any, diff: int | None, read_ms: float) -> None:
    reference = "TFLite BUILTIN_REF" if args.model.suffix == ".tflite" else "onnxruntime"
    if args.json:
        print(json.dumps({
            "model": str(args.model), "device": args.device, "form": result.form,
            "read_ms": round(read_ms, 3), "compile_ms": round(result.compile_ms, 3),
            "load_ms": round(result.load_ms, 3),
            "invoke_ms": round(result.invoke_ms, 3), "partitions": result.partitions,
            "placement": [vars(p) for p in result.placement],
            "outputs": {k: [str(v.dtype), list(v.shape)] for k, v in result.outputs.items()},
            "differing_bytes": diff, "reference": reference if args.compare else None,
        }, indent=1))  # fmt: skip
    else:
        print(f"model: {args.model} ({result.form}), device {args.device}")
        print(result.report())
        times = (read_ms, result.compile_ms, result.load_ms, result.invoke_ms)
        print("read {:.1f} ms, compile {:.1f} ms, load {:.1f} ms, invoke {:.1f} ms".format(*times))
        for name, v in result.outputs.items():
            print(f"output {name}: {v.dtype} {list(v.shape)}")
        if diff is not None:
            what = "shapes or types differ" if diff < 0 else f"{diff} differing bytes"
            print(f"compare with {reference}: {'equal' if diff == 0 else 'NOT equal'}, {what}")
