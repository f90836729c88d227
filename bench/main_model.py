"""The main job's model (``./run.sh main``: MobileNetV1, 224, int8) through libteflon.so on one device.

    python -m bench.main_model MODEL.tflite --device kernel --runs 30 --json /tmp/vnpu-out/main_model.json

The median invoke in tflite_runtime, as ``python -m qemu_tests.main_job`` runs the model, with a new
input before every timed invoke (:mod:`bench.input_feed`), in three groups (:func:`bench.corpus.
median_invoke_ms`, the median of their medians). ``bench.performance`` runs it in the QEMU guest on
vnpu.ko and on the host's shim in the same run, and compares the two (``guest_model_vs_shim``).
The model is a file (``qemu_tests.main_job.default_model`` writes it on the host): the guest
reads it from the host's filesystem instead of generating it under TCG.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench import RESULTS
from bench.corpus import median_invoke_ms
from bench.input_feed import InputFeed
from vnpu_common.cli import OneLineArgumentParser, cli_main

GROUPS = 3
INPUT_SEED = 3

DEFAULT_JSON = RESULTS / "main_model.json"


def time_model(model: bytes, device: str, runs: int) -> dict[str, float | int | str]:
    """The delegate's load (ms) and the median invoke (ms) of ``model`` on ``device``."""
    import tflite_runtime.interpreter as tfl

    import delegate_teflon
    from libaccel.runtime.model import make_interpreter

    t0 = time.perf_counter()
    delegate = tfl.load_delegate(delegate_teflon.library_path(), {"device": device, "log_level": "quiet"})
    interp = make_interpreter(tfl, model, [delegate])
    load_ms = 1000 * (time.perf_counter() - t0)
    feed = InputFeed(interp.get_input_details(), INPUT_SEED)
    groups = [median_invoke_ms(interp, feed, max(1, runs // GROUPS)) for _ in range(GROUPS)]
    return {
        "device": device,
        "runtime": "tflite_runtime",
        "load_ms": load_ms,
        "invoke_ms": float(np.median(groups)),
    }


@cli_main("python -m bench.main_model")
def main(argv: Sequence[str] | None = None) -> int:
    p = OneLineArgumentParser(prog="python -m bench.main_model", description=__doc__.splitlines()[0])
    p.add_argument("model", type=Path, help="the .tflite file")
    p.add_argument("--device", default="shim", help="shim (default), kernel, or /dev/accel/accelN")
    p.add_argument("--runs", type=int, default=30, help="the fewest timed invokes (default 30)")
    p.add_argument(
        "--json", type=Path, default=DEFAULT_JSON, help="the result (default build/bench/main_model.json)"
    )
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be positive")
    try:
        model = args.model.read_bytes()
    except OSError as e:
        print(f"bench.main_model: cannot read {args.model}: {e.strerror}", file=sys.stderr)
        return 2
    result = {"model": args.model.name, "runs": args.runs} | time_model(model, args.device, args.runs)
    print(
        f"{args.model.name} on {args.device}: load {result['load_ms']:.1f} ms, "
        f"median invoke {result['invoke_ms']:.2f} ms (a new input before each)"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
