"""Run a .tflite model through the vnpu delegate and check it against TFLite's reference kernels.

    python -m delegate_teflon.run model.tflite [--device shim] [--runtime ai_edge_litert] [--runs 10]

Prints the placement report (which nodes run on the NPU, which stay on the CPU and why), the
latency of the delegated interpreter, and whether every output equals the same model on
``OpResolverType.BUILTIN_REF`` alone (the project's spec: 0 differing bytes). Exit status 0 when
equal, 1 when not, 2 for a bad model or option.

The running is :func:`libaccel.model.run_tflite`'s, the runner ``accel run MODEL.tflite`` uses
too; this module is its command line with the delegate's options, and keeps the names the
benches and tests import from it (:func:`make_interpreter`, :func:`invoke`, :func:`differing_bytes`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from libaccel.compiler.tflite_check import ModelError, check_tflite
from libaccel.inputs import random_arrays
from libaccel.model import RUNTIMES, differing_bytes, invoke, make_interpreter, run_tflite, runtime_module

__all__ = [
    "RUNTIMES",
    "differing_bytes",
    "invoke",
    "main",
    "make_interpreter",
    "random_inputs",
    "reference_outputs",
]


def random_inputs(details: list[dict[str, Any]], seed: int) -> list[np.ndarray]:
    """Random inputs for an interpreter's input details (:mod:`libaccel.inputs`)."""
    return random_arrays(((d["dtype"], d["shape"]) for d in details), seed)


def reference_outputs(model: bytes, seed: int, path: Path, runtime: str = "tflite_runtime") -> None:
    """Write BUILTIN_REF's outputs for ``seed``'s inputs to ``path`` (.npz), for ``--reference``.

    Raises :class:`ModelError` for a damaged model (before the runtime sees it).
    """
    check_tflite(model)
    interp = make_interpreter(runtime_module(runtime), model)
    outputs = invoke(interp, random_inputs(interp.get_input_details(), seed))
    np.savez(path, **{f"output{i}": out for i, out in enumerate(outputs)})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m delegate_teflon.run",
        description="Run a .tflite model on the vnpu NPU via libteflon.so and compare with BUILTIN_REF.",
    )
    parser.add_argument("model", type=Path, help="the .tflite file")
    parser.add_argument("--device", default="shim", help="NPU device: shim, kernel or /dev/accel/accelN")
    parser.add_argument("--runtime", choices=RUNTIMES, default="tflite_runtime")
    parser.add_argument("--log-level", choices=("quiet", "info", "verbose"), default="verbose")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another delegate option (allow_ops=..., deny_ops=..., cache_dir=...)",
    )
    parser.add_argument("--runs", type=int, default=5, help="timed invokes after the first (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--no-compare", action="store_true", help="skip the BUILTIN_REF comparison")
    parser.add_argument(
        "--reference",
        type=Path,
        help="expected outputs (.npz written by reference_outputs(); e.g. computed on a faster host) "
        "instead of running BUILTIN_REF here",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        model = args.model.read_bytes()
    except OSError as e:
        print(f"error: cannot read {args.model}: {e}", file=sys.stderr)
        return 2
    options = {"device": args.device, "log_level": args.log_level}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"error: --option {item!r} is not KEY=VALUE", file=sys.stderr)
            return 2
        options[key] = value
    try:
        result = run_tflite(model, None, args.device, args.runtime, options, args.runs, args.seed)
    except ModelError as e:  # a damaged file stops before the runtime reads it
        print(f"error: {args.model}: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # an option the delegate refuses
        print(f"error: {e}", file=sys.stderr)
        return 2
    times = result.runs_ms
    print(f"model: {args.model} ({len(model)} bytes), runtime {args.runtime}, device {args.device}")
    print(
        f"load (delegate prepare + compile): {result.compile_ms:.1f} ms; "
        f"first invoke {result.invoke_ms:.2f} ms"
        + (f"; median of {len(times)} invokes {statistics.median(times):.2f} ms" if times else "")
    )
    if args.no_compare:
        return 0
    if args.reference is not None:
        try:
            with np.load(args.reference) as saved:
                want = [saved[f"output{i}"] for i in range(len(saved.files))]
        except (OSError, ValueError, KeyError) as e:
            print(f"error: cannot read reference outputs {args.reference}: {e}", file=sys.stderr)
            return 2
    else:
        want = invoke(make_interpreter(runtime_module(args.runtime), model), result.inputs)
    diff = differing_bytes(list(result.outputs.values()), want)
    if diff == 0:
        print("outputs equal TFLite's reference kernels (BUILTIN_REF): yes, 0 differing bytes")
        return 0
    what = "shapes or types differ" if diff < 0 else f"{diff} differing bytes"
    print(f"outputs equal TFLite's reference kernels (BUILTIN_REF): NO, {what}")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
