"""Run a .tflite model through the vnpu delegate and check it against TFLite's reference kernels.

    python -m delegate_teflon.run model.tflite [--device shim] [--runtime ai_edge_litert] [--runs 10]

Prints the placement report (which nodes run on the NPU, which stay on the CPU and why), the
latency of the delegated interpreter, and whether every output equals the same model on
``OpResolverType.BUILTIN_REF`` alone (the project's spec: 0 differing bytes). Exit status 0 when
equal, 1 when not, 2 for a bad model or option.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import delegate_teflon
from libaccel.compiler.tflite_check import ModelError, check_tflite
from libaccel.inputs import random_arrays

RUNTIMES = ("tflite_runtime", "ai_edge_litert")


def random_inputs(details: list[dict[str, Any]], seed: int) -> list[np.ndarray]:
    """Random inputs for an interpreter's input details (:mod:`libaccel.inputs`)."""
    return random_arrays(((d["dtype"], d["shape"]) for d in details), seed)


def make_interpreter(mod: Any, model: bytes, delegates: Sequence[Any], threads: int | None) -> Any:
    interp = mod.Interpreter(
        model_content=model,
        experimental_delegates=list(delegates) or None,
        experimental_op_resolver_type=mod.OpResolverType.BUILTIN_REF,
        num_threads=threads,
    )
    interp.allocate_tensors()
    return interp


def invoke(interp: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    for detail, value in zip(interp.get_input_details(), inputs, strict=True):
        interp.set_tensor(detail["index"], value)
    interp.invoke()
    return [interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()]


def differing_bytes(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> int:
    total = 0
    for g, w in zip(got, want, strict=True):
        if g.shape != w.shape or g.dtype != w.dtype:
            return -1
        total += int(np.count_nonzero(g.view(np.uint8) != w.view(np.uint8)))
    return total


def reference_outputs(model: bytes, seed: int, path: Path, runtime: str = "tflite_runtime") -> None:
    """Write BUILTIN_REF's outputs for ``seed``'s inputs to ``path`` (.npz), for ``--reference``.

    Raises :class:`ModelError` for a damaged model (before the runtime sees it).
    """
    check_tflite(model)
    mod = importlib.import_module(f"{runtime}.interpreter")
    interp = make_interpreter(mod, model, [], None)
    outputs = invoke(interp, random_inputs(interp.get_input_details(), seed))
    np.savez(path, **{f"output{i}": out for i, out in enumerate(outputs)})


def main(argv: Sequence[str] | None = None) -> int:
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
    args = parser.parse_args(argv)

    try:
        model = args.model.read_bytes()
    except OSError as e:
        print(f"error: cannot read {args.model}: {e}", file=sys.stderr)
        return 2
    # tflite_runtime 2.14 does not verify the flatbuffer: a damaged file must stop here, not in it.
    try:
        check_tflite(model)
    except ModelError as e:
        print(f"error: {args.model}: {e}", file=sys.stderr)
        return 2
    options = {"device": args.device, "log_level": args.log_level}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"error: --option {item!r} is not KEY=VALUE", file=sys.stderr)
            return 2
        options[key] = value
    mod = importlib.import_module(f"{args.runtime}.interpreter")
    try:
        delegate = mod.load_delegate(delegate_teflon.library_path(), options)
        start = time.perf_counter()
        interp = make_interpreter(mod, model, [delegate], None)
        load_ms = 1000 * (time.perf_counter() - start)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    inputs = random_inputs(interp.get_input_details(), args.seed)
    start = time.perf_counter()
    got = invoke(interp, inputs)
    first_ms = 1000 * (time.perf_counter() - start)
    times = []
    for _ in range(max(0, args.runs)):
        start = time.perf_counter()
        invoke(interp, inputs)
        times.append(1000 * (time.perf_counter() - start))
    print(f"model: {args.model} ({len(model)} bytes), runtime {args.runtime}, device {args.device}")
    print(
        f"load (delegate prepare + compile): {load_ms:.1f} ms; first invoke {first_ms:.2f} ms"
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
        want = invoke(make_interpreter(mod, model, [], None), inputs)
    diff = differing_bytes(got, want)
    if diff == 0:
        print("outputs equal TFLite's reference kernels (BUILTIN_REF): yes, 0 differing bytes")
        return 0
    what = "shapes or types differ" if diff < 0 else f"{diff} differing bytes"
    print(f"outputs equal TFLite's reference kernels (BUILTIN_REF): NO, {what}")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
