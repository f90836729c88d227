"""The README's main job: a real int8 model through the whole stack.

    python -m qemu_tests.main_job [--size 224] [--alpha 1.0] [--model FILE.tflite]

On the host it writes a MobileNetV1-shaped int8 model (modelgen; or takes
yours) and TFLite's reference-kernel (BUILTIN_REF) outputs for seeded random
inputs. Then it boots the QEMU guest and, inside it, runs the model with
libteflon.so in tflite_runtime on /dev/accel/accel0 (vnpu.ko, the emulated
NPU): the guest prints the placement, the latency and whether the outputs
equal the host's reference, 0 differing bytes. The reference is computed on
the host because TFLite's reference kernels are slow under TCG.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import delegate_teflon
from delegate_teflon.run import reference_outputs
from libaccel.compiler.tflite_check import ModelError
from qemu_tests import harness
from vnpu_common.cli import OneLineArgumentParser, cli_main

ROOT = Path(__file__).resolve().parents[1]
WORKDIR = ROOT / "build" / "main_job"


DEFAULT_SIZE, DEFAULT_ALPHA = 224, 1.0  # the generated model's input size and width multiplier


def default_model_path(size: int = DEFAULT_SIZE, alpha: float = DEFAULT_ALPHA) -> Path:
    """Where :func:`default_model` writes the generated model."""
    return WORKDIR / f"mobilenet_v1_{size}_{alpha:g}.tflite"


def default_model(size: int = DEFAULT_SIZE, alpha: float = DEFAULT_ALPHA) -> Path:
    """The generated MobileNetV1-shaped int8 model the job runs without ``--model``, written once."""
    from modelgen import mobilenet_v1_model

    WORKDIR.mkdir(parents=True, exist_ok=True)
    model = default_model_path(size, alpha)
    if not model.exists():
        print(f"[main] writing a MobileNetV1-shaped int8 model ({size}x{size}, alpha {alpha:g})")
        model.write_bytes(mobilenet_v1_model(size=size, alpha=alpha))
    return model


def prepare(model: Path | None, size: int, alpha: float, seed: int) -> tuple[Path, Path]:
    """Write (or reuse) the model and its reference outputs; return both paths."""
    WORKDIR.mkdir(parents=True, exist_ok=True)
    if model is None:
        model = default_model(size, alpha)
    reference = WORKDIR / f"{model.stem}.seed{seed}.reference.npz"
    if not reference.exists() or reference.stat().st_mtime < model.stat().st_mtime:
        start = time.perf_counter()
        print("[main] computing TFLite reference-kernel outputs on the host (BUILTIN_REF)")
        reference_outputs(model.read_bytes(), seed, reference)
        print(f"[main] reference ready in {time.perf_counter() - start:.1f} s")
    return model.resolve(), reference.resolve()


@cli_main("python -m qemu_tests.main_job")
def main(argv: list[str] | None = None) -> int:
    p = OneLineArgumentParser(prog="python -m qemu_tests.main_job", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, help="your own int8 .tflite file (default: generated MobileNetV1)")
    p.add_argument(
        "--size",
        type=int,
        default=DEFAULT_SIZE,
        help=f"input size of the generated model (default {DEFAULT_SIZE})",
    )
    p.add_argument(
        "--alpha", type=float, default=DEFAULT_ALPHA, help="width multiplier of the generated model"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--runs", type=int, default=3, help="timed invokes after the first")
    p.add_argument("--kernel", metavar="RELEASE", help="the guest kernel (as python -m qemu_tests --kernel)")
    p.add_argument(
        "--trace",
        action="store_true",
        help="run the model under accel trace: every ioctl decoded on stderr (streams not disassembled)",
    )
    args = p.parse_args(argv)
    if args.model is not None and not args.model.is_file():
        print(f"main_job: {args.model} is not a file", file=sys.stderr)
        return 2
    try:
        model, reference = prepare(args.model, args.size, args.alpha, args.seed)
    except ModelError as e:
        print(f"main_job: {args.model}: {e}", file=sys.stderr)
        return 2
    # Build libteflon.so on the host: the guest sees the host's cache read-only.
    print(f"[main] delegate library: {delegate_teflon.library_path()}")
    run = [
        "python", "-m", "delegate_teflon.run", str(model),
        "--device", "kernel", "--runs", str(args.runs), "--seed", str(args.seed),
        "--reference", str(reference),
    ]  # fmt: skip
    if args.trace:
        run = ["accel", "trace", "--no-stream", "--", *run]
    kernel = ["--kernel", args.kernel] if args.kernel else []
    return harness.main([*kernel, "--exec", shlex.join(run)])


if __name__ == "__main__":
    raise SystemExit(main())
