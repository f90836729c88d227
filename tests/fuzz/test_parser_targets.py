"""The atheris fuzz targets on their seed corpora, cut short and bit-flipped: each ends quietly.

atheris is not installed by `./run.sh test`; this runs the same target functions without it, so a
target that no longer fits its parser (a renamed exception, a changed signature) fails here.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from firmware_tools.image import DEFAULT_IMAGE_PATH
from tests.fuzz.parser_targets import TARGETS
from uapi import isa

ROOT = Path(__file__).resolve().parents[2]


def _isa_seed() -> bytes:
    """Every opcode once with all fields zero, then END: a stream the decoder accepts."""
    program = [
        isa.Instruction(spec.name, {f.name: 0 for f in spec.fields})
        for spec in isa.SPEC.instructions
        if spec.name != "END"
    ]
    return isa.assemble([*program, isa.Instruction("END", {})])


def _seeds(target: str) -> list[bytes]:
    if target == "tflite":
        names = ("small_cnn_uint8.tflite", "ds_cnn_kws.tflite")
        return [(ROOT / "tests" / "corpus" / "models" / n).read_bytes() for n in names]
    if target == "onnx":
        return [p.read_bytes() for p in sorted((ROOT / "tests" / "onnx" / "models").glob("*_qop.onnx"))]
    if target == "firmware":
        return [DEFAULT_IMAGE_PATH.read_bytes()]
    return [_isa_seed()]


def _damaged(seed: bytes, rng: random.Random, count: int) -> list[bytes]:
    """The seed, cut at a few lengths, and with a few bytes flipped."""
    out = [seed, b""]
    out += [seed[: rng.randrange(len(seed))] for _ in range(count)]
    for _ in range(count):
        data = bytearray(seed)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        out.append(bytes(data))
    return out


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_target_ends_quietly_on_damaged_seeds(target: str) -> None:
    rng = random.Random(f"parser-targets-{target}")
    seeds = _seeds(target)
    assert seeds and all(seeds)
    for seed in seeds:
        for data in _damaged(seed, rng, 6):
            TARGETS[target](data)  # raises only on a finding (an undocumented exception or a bad error)


def test_the_seeds_are_accepted() -> None:
    """The seeds themselves parse: a target that rejects everything would fuzz nothing."""
    assert isa.assemble(isa.decode(_isa_seed())) == _isa_seed()
    from libaccel.compiler import graph_from_tflite
    from libaccel.compiler.onnx_frontend import graph_from_onnx
    from uapi.firmware_format import parse_image

    for data in _seeds("tflite"):
        graph_from_tflite(data)
    for data in _seeds("onnx"):
        graph_from_onnx(data)
    parse_image(DEFAULT_IMAGE_PATH.read_bytes(), check_signature=False)
