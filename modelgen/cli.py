"""``python -m modelgen OUT_DIR [--check]``: write the sample models (and run each on BUILTIN_REF)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from modelgen.ops import (
    conv2d_model,
    depthwise_conv2d_model,
    elementwise_model,
    fully_connected_model,
    pool_model,
    softmax_model,
)
from modelgen.reference import random_inputs, run_reference
from vnpu_common.cli import OneLineArgumentParser, cli_main

SAMPLES: dict[str, Callable[[], bytes]] = {
    "conv2d_int8_per_channel": lambda: conv2d_model((1, 16, 16, 8), 16, 3, 1, "SAME", True, "RELU6", 1),
    "conv2d_uint8": lambda: conv2d_model((1, 12, 12, 4), 8, 3, 2, "VALID", False, "RELU", 2, "uint8"),
    "depthwise_int8": lambda: depthwise_conv2d_model((1, 16, 16, 8), 1, 3, 2, "SAME", True, "RELU6", 3),
    "fully_connected_int8": lambda: fully_connected_model(1, 64, 10, "NONE", 4),
    "add_int8": lambda: elementwise_model("ADD", (1, 8, 8, 16), None, "NONE", 5),
    "avgpool_int8": lambda: pool_model("AVERAGE_POOL_2D", (1, 8, 8, 16), 2, 2, "VALID", "NONE", 6),
    "softmax_int8": lambda: softmax_model((1, 10), 7, in_scale=0.02),
}


@cli_main("python -m modelgen")
def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineArgumentParser(
        prog="python -m modelgen", description="Write the sample int8 TFLite models"
    )
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--check", action="store_true", help="also run each on TFLite's reference kernels")
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, make in SAMPLES.items():
        data = make()
        path = args.out_dir / f"{name}.tflite"
        path.write_bytes(data)
        if args.check:
            run_reference(data, random_inputs(data))
        print(f"{path} ({len(data)} bytes)")
    return 0
