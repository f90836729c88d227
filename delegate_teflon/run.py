"""Run a .tflite model through the vnpu delegate and check it against TFLite's reference kernels.

    python -m delegate_teflon.run model.tflite [--device shim] [--runtime ai_edge_litert] [--runs 10]

Prints the placement report (which nodes run on the NPU, which stay on the CPU and why), the
latency of the delegated interpreter, and whether every output equals the same model on
``OpResolverType.BUILTIN_REF`` alone (the project's spec: 0 differing bytes). Exit status
(:class:`vnpu_common.cli.ExitCode`, docs/tools.md): 0 when equal, 1 when not, 2 for a bad option, 4
for a model or reference file that cannot be used, 5 for a device that cannot be opened. The model,
the reference, the options and the device are checked before the run.

The running is :func:`libaccel.runtime.model.run_tflite`'s, the runner ``accel run MODEL.tflite`` uses
too; this module is its command line with the delegate's options, and keeps the names the
benches and tests import from it (:func:`make_interpreter`, :func:`invoke`, :func:`differing_bytes`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from libaccel.compiler.tflite_check import ModelError, check_tflite
from libaccel.device import checked_device
from libaccel.discovery import DEVICE_HELP
from libaccel.errors import AccelError
from libaccel.runtime.inputs import random_arrays
from libaccel.runtime.model import (
    RUNTIMES,
    DelegateError,
    differing_bytes,
    invoke,
    make_interpreter,
    run_tflite,
    runtime_module,
)
from vnpu_common.cli import (
    CliError,
    ExitCode,
    OneLineArgumentParser,
    add_version,
    cli_main,
    non_negative_int,
    os_error_words,
)

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
    """Random inputs for an interpreter's input details (:mod:`libaccel.runtime.inputs`)."""
    return random_arrays(((d["dtype"], d["shape"]) for d in details), seed)


def reference_outputs(model: bytes, seed: int, path: Path, runtime: str = "tflite_runtime") -> None:
    """Write BUILTIN_REF's outputs for ``seed``'s inputs to ``path`` (.npz), for ``--reference``.

    Raises :class:`ModelError` for a damaged model (before the runtime sees it).
    """
    check_tflite(model)
    interp = make_interpreter(runtime_module(runtime), model)
    outputs = invoke(interp, random_inputs(interp.get_input_details(), seed))
    np.savez(path, **{f"output{i}": out for i, out in enumerate(outputs)})


PROG = "python -m delegate_teflon.run"


class UsageError(CliError):
    """A command line argparse refused (ExitCode.USAGE); the message is one line."""


class _Parser(OneLineArgumentParser):
    usage_error = UsageError


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Run a .tflite model on the vnpu NPU via libteflon.so and compare with BUILTIN_REF.",
    )
    add_version(parser)
    parser.add_argument("model", type=Path, help="the .tflite file")
    parser.add_argument("--device", help=f"the NPU device: {DEVICE_HELP}")
    parser.add_argument("--runtime", choices=RUNTIMES, default="tflite_runtime")
    parser.add_argument("--log-level", choices=("quiet", "info", "verbose"), default="verbose")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another delegate option (allow_ops=..., deny_ops=..., cache_dir=...)",
    )
    parser.add_argument(
        "--runs", type=non_negative_int, default=5, help="timed invokes after the first (default 5)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--no-compare", action="store_true", help="skip the BUILTIN_REF comparison")
    parser.add_argument(
        "--reference",
        type=Path,
        help="expected outputs (.npz written by reference_outputs(); e.g. computed on a faster host) "
        "instead of running BUILTIN_REF here",
    )
    return parser


def _options(args: argparse.Namespace) -> dict[str, str]:
    """The delegate's options, validated here as the delegate would: a bad one is this tool's one
    line, not the delegate's line, TFLite's "Failed to load delegate" and the line again."""
    from delegate_teflon.context_reader import KNOWN_OPS
    from delegate_teflon.options import OptionError, parse_options

    options = {"log_level": args.log_level}
    if args.device is not None:
        options["device"] = args.device
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--option {item!r} is not KEY=VALUE", ExitCode.USAGE)
        options[key] = value
    try:
        parse_options(list(options.items()), KNOWN_OPS)
    except OptionError as e:
        raise CliError(str(e), ExitCode.USAGE) from None
    return options


def _reference(path: Path) -> list[np.ndarray]:
    """The outputs saved by :func:`reference_outputs`, read before the run."""
    try:
        with np.load(path, allow_pickle=False) as saved:
            return [saved[f"output{i}"] for i in range(len(saved.files))]
    except OSError as e:
        message = f"cannot read reference outputs {path}: {os_error_words(e)}"
    except (ValueError, KeyError, AttributeError):  # not an .npz, or not reference_outputs()'s
        message = f"{path}: not a reference .npz (write one with delegate_teflon.run.reference_outputs)"
    raise CliError(message, ExitCode.BAD_FILE)


def _device(which: str | None) -> str:
    try:
        return checked_device(which)
    except AccelError as e:
        raise CliError(str(e), ExitCode.DEVICE) from None


@cli_main(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        model = args.model.read_bytes()
    except OSError as e:
        raise CliError(f"cannot read {args.model}: {os_error_words(e)}", ExitCode.BAD_FILE) from None
    try:
        check_tflite(model)  # a damaged file stops before the runtime reads it
    except ModelError as e:
        raise CliError(f"{args.model}: {e}", ExitCode.BAD_FILE) from None
    want = _reference(args.reference) if args.reference is not None and not args.no_compare else None
    options = _options(args)
    # The device last: its rule's notice (a default device) follows the checks, not a refusal.
    args.device = options["device"] = _device(args.device)
    try:
        result = run_tflite(model, None, args.device, args.runtime, options, args.runs, args.seed)
    except DelegateError as e:  # load_delegate refused what the checks above could not foresee
        raise CliError(str(e), ExitCode.DEVICE) from None
    except RuntimeError as e:  # an invoke failed: the runtime's first line says which node
        raise CliError(f"{args.model}: {str(e).splitlines()[0]}", ExitCode.JOB_FAILED) from None
    print(f"model: {args.model} ({len(model)} bytes), runtime {args.runtime}, device {args.device}")
    print(result.timing())
    if args.no_compare:
        return ExitCode.OK
    if want is None:
        want = invoke(make_interpreter(runtime_module(args.runtime), model), result.inputs)
    diff = differing_bytes(list(result.outputs.values()), want)
    if diff == 0:
        print("outputs equal TFLite's reference kernels (BUILTIN_REF): yes, 0 differing bytes")
        return ExitCode.OK
    what = "shapes or types differ" if diff < 0 else f"{diff} differing bytes"
    print(f"outputs equal TFLite's reference kernels (BUILTIN_REF): NO, {what}")
    return ExitCode.DIFFERENT


if __name__ == "__main__":
    raise SystemExit(main())
