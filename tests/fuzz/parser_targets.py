"""The host parsers as fuzz targets: each takes bytes and lets only its documented exception through.

tests/fuzz/atheris_targets.py runs them under atheris (libFuzzer); tests/fuzz/test_parser_targets.py
runs them on their seed corpora in CI, so a target that no longer fits its parser fails there first.
"""

from __future__ import annotations

from collections.abc import Callable

from libaccel.compiler import ModelError, graph_from_tflite
from libaccel.compiler.onnx_frontend import OnnxModelError, graph_from_onnx
from uapi import firmware_format as fw_image
from uapi import isa


def tflite(data: bytes) -> None:
    try:
        graph_from_tflite(data)
    except ModelError:
        pass


def isa_decode(data: bytes) -> None:
    try:
        decoded = isa.decode(data)
    except isa.IsaError:
        return
    if isa.assemble(decoded) != data:
        raise AssertionError("a stream that decodes does not re-encode to itself")


def firmware(data: bytes) -> None:
    try:
        fw_image.parse_image(data, check_signature=False)
    except fw_image.FirmwareError:
        pass


def onnx(data: bytes) -> None:
    try:
        graph_from_onnx(data)
    except OnnxModelError as e:
        if "\n" in str(e):
            raise AssertionError(f"OnnxModelError is not one line: {e!r}") from None


TARGETS: dict[str, Callable[[bytes], None]] = {
    "tflite": tflite,
    "isa": isa_decode,
    "firmware": firmware,
    "onnx": onnx,
}
