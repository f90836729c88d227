"""``accel run MODEL.{onnx,tflite}``: a model file on the NPU, its placement, times and exactness.

    accel run model.onnx [--input [NAME=]x.npy|random]... [--output y.npy] [--device NODE|shim] [--compare]
                         [--json] [--shape name=1x3x224x224] [--runs N]

Prints the placement (which node ran on the NPU, in which partition, which stayed on the CPU and
why), the compile, load and invoke times, and with ``--compare`` the differing bytes against the
model's reference runtime (onnxruntime, or TFLite's BUILTIN_REF). The running is
:mod:`libaccel.runtime.model`'s (a .tflite file through :func:`libaccel.runtime.model.run_tflite`, the runner
``python -m delegate_teflon.run`` uses too). ``--output`` saves the model's
(first) output as .npy: float32 when the model's output is float (its DequantizeLinear ran), else
the quantized values. Exit status (:class:`vnpu_common.cli.ExitCode`): 0, 1 when ``--compare`` finds
differing bytes, 2 for a bad argument, 4 for a model, input or output file that cannot be used, 5 for
a device that cannot be opened; the error is one line on stderr (for a model: the node and the
reason). Every file and the device are checked before the model runs.
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

from libaccel.device import checked_device
from libaccel.discovery import DEVICE_HELP
from libaccel.errors import AccelError
from libaccel.tools.session import BadFile, UsageError, error_code
from vnpu_common.cli import ExitCode, non_negative_int, os_error_words, output_path_problem


def _shapes(items: list[str]) -> dict[str, tuple[int, ...]]:
    out = {}
    for item in items:
        name, sep, dims = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            out[name] = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            raise UsageError(f"--shape {item!r} is not NAME=DxDx...") from None
    return out


def add_run_command(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("run", help="run a .onnx or .tflite model on the NPU (placement, times, --compare)")
    p.add_argument("model", type=Path, help="the .onnx or .tflite file")
    p.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="[NAME=]x.npy",
        help="an input's data (repeatable, one per input; x.npy alone: the first input); default random",
    )
    p.add_argument("--output", type=Path, help="write the first output to this file (.npy format)")
    p.add_argument("--device", help=DEVICE_HELP)
    p.add_argument("--compare", action="store_true", help="differing bytes against the reference runtime")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--nodes", action="store_true", help="the placement node by node (default: a summary by op type)"
    )
    p.add_argument(
        "--shape", action="append", default=[], metavar="NAME=1x3x224x224", help="fix an input shape"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument(
        "--runs",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="timed invokes after the first (default 0)",
    )
    return p


def _checked_model(path: Path) -> None:
    from libaccel.runtime.model import MODEL_SUFFIXES

    if path.is_dir():
        raise BadFile(f"{path} is a directory; give a .onnx or .tflite file")
    if not path.is_file():
        raise BadFile(f"{path}: no such file")
    if path.suffix.lower() not in MODEL_SUFFIXES:
        raise BadFile(f"{path}: not a .onnx or .tflite file (the suffix says which reader reads it)")


def _inputs(items: list[str]) -> list[tuple[str, str]]:
    """(input name, .npy path) of each ``--input``: NAME=PATH, or a bare PATH for the first input
    ("" as its name); "random" (the default) gives none. A name given twice is refused."""
    out: list[tuple[str, str]] = []
    for item in items:
        if item == "random":
            continue
        name, sep, path = item.partition("=")
        if not sep or Path(item).is_file():  # a file whose name holds "=" is a file
            name, path = "", item
        elif not name or not path:
            raise UsageError(f"--input {item!r} is not NAME=FILE.npy")
        if any(name == seen for seen, _ in out):
            raise UsageError(f"--input {name or '(the first input)'} is given twice")
        out.append((name, path))
    return out


def _load_input(path: str) -> np.ndarray:
    try:
        loaded = np.load(path, allow_pickle=False)
    except OSError as e:
        raise BadFile(f"--input {path}: cannot read it: {os_error_words(e)}") from None
    except ValueError:  # numpy's "Cannot load file containing pickled data": neither .npy nor .npz
        raise BadFile(f"--input {path}: not a .npy file (write one with numpy.save)") from None
    if not isinstance(loaded, np.ndarray):
        loaded.close()
        raise BadFile(f"--input {path}: a .npz archive; give the one input array as .npy (numpy.save)")
    return loaded


def _save_output(path: Path, array: np.ndarray) -> None:
    try:
        with open(path, "wb") as f:  # the name given, not numpy's name + ".npy"
            np.save(f, array)
    except OSError as e:
        raise BadFile(f"--output {path}: cannot write it: {os_error_words(e)}") from None


def cmd_run(args: argparse.Namespace) -> int:
    # Before onnxruntime loads: its telemetry warns on stderr where it cannot store a device id (a
    # read-only home, as in the QEMU guest), which would break the one-line errors.
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    from libaccel.compiler.tflite_check import ModelError
    from libaccel.runtime import model as lm

    try:
        return _run(args, lm)
    except (UsageError, AccelError) as e:
        code, message = error_code(e)
    except (ModelError, lm.OnnxModelError) as e:  # one line names the node (ONNX) or the damage
        code, message = ExitCode.BAD_FILE, f"{args.model}: {e}"
    except lm.DelegateError as e:  # what the device check before the run could not foresee
        code, message = ExitCode.DEVICE, str(e)
    except ValueError as e:  # any other refusal of the model by a runtime: its first line
        code, message = ExitCode.BAD_FILE, f"{args.model}: {str(e).splitlines()[0]}"
    except RuntimeError as e:  # the runtime failed an invoke: its first line says why
        code, message = ExitCode.JOB_FAILED, f"{args.model}: {str(e).splitlines()[0]}"
    print(f"accel run: {message}", file=sys.stderr)
    return code


def _run(args: argparse.Namespace, lm: Any) -> int:
    # Every file, then the device, before the run: a mistake costs a line, not a run.
    _checked_model(args.model)
    if args.output is not None and (problem := output_path_problem(args.output)):
        raise BadFile(f"--output: {problem}")
    shapes = _shapes(args.shape)
    given = [(name, _load_input(path)) for name, path in _inputs(args.input)]
    onnx_model = not lm.is_tflite(args.model)
    if onnx_model:  # imported first: "read" times the front end, not the imports
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    t0 = time.perf_counter()
    graph = lm.load_onnx(args.model, shapes) if onnx_model else None
    read_ms = 1000 * (time.perf_counter() - t0)
    specs = lm.input_specs(graph if graph is not None else args.model, shapes)
    inputs = lm.random_inputs(specs, args.seed)
    by_name = {name: (dtype, shape) for name, dtype, shape in specs}
    seen: set[str] = set()
    for name, array in given:
        name = name or specs[0][0]  # a bare file: the first input
        if name in seen:
            raise UsageError(f"--input {name} is given twice")
        seen.add(name)
        if name not in by_name:
            raise BadFile(f"--input {name}=: the model has no input {name!r} (it has {', '.join(by_name)})")
        dtype, shape = by_name[name]
        if array.dtype != dtype or tuple(array.shape) != shape:
            got = f"{array.dtype} {list(array.shape)}"
            raise BadFile(f"--input {name}: {got}, input {name!r} is {dtype} {list(shape)}")
        inputs[name] = array
    # The device last: its rule's notice (a default device) follows the checks, not a refusal.
    args.device = checked_device(args.device)
    result = lm.run_model(args.model, inputs, device=args.device, shapes=shapes, graph=graph, runs=args.runs)
    diff = None
    if args.compare:
        diff = lm.differing_bytes(result.outputs, lm.reference_outputs(args.model, inputs, shapes))
    if args.output is not None:
        _save_output(args.output, next(iter(result.outputs.values())))
    try:
        _print_result(args, result, diff, read_ms)
    except BrokenPipeError:  # `accel run ... | head`: the reader left; not an error of the run
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return ExitCode.DIFFERENT if diff else ExitCode.OK


def _print_result(args: argparse.Namespace, result: Any, diff: int | None, read_ms: float) -> None:
    from libaccel.runtime.model import is_tflite

    reference = "TFLite BUILTIN_REF" if is_tflite(args.model) else "onnxruntime"
    if args.json:
        print(json.dumps({
            "model": str(args.model), "device": args.device, "form": result.form,
            "read_ms": round(read_ms, 3), "compile_ms": round(result.compile_ms, 3),
            "load_ms": round(result.load_ms, 3),
            "invoke_ms": round(result.invoke_ms, 3),
            "runs_ms": [round(t, 3) for t in result.runs_ms],
            "runs_percentiles_ms": {k: round(v, 3) for k, v in result.percentiles().items()},
            "partitions": result.partitions,
            "placement": [vars(p) for p in result.placement],
            "outputs": {k: [str(v.dtype), list(v.shape)] for k, v in result.outputs.items()},
            "differing_bytes": diff, "reference": reference if args.compare else None,
        }, indent=1))  # fmt: skip
    else:
        print(f"model: {args.model} ({result.form}), device {args.device}")
        print(result.report(nodes=args.nodes))
        print(result.timing(read_ms))
        for name, v in result.outputs.items():
            print(f"output {name}: {v.dtype} {list(v.shape)}")
        if diff is not None:
            what = "shapes or types differ" if diff < 0 else f"{diff} differing bytes"
            print(f"compare with {reference}: {'equal' if diff == 0 else 'NOT equal'}, {what}")
