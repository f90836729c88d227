"""Coverage-guided fuzzing of the host parsers with atheris (libFuzzer): a longer run, not in CI.

    pip install -e '.[fuzz]'
    python -m tests.fuzz.atheris_targets tflite -max_total_time=600 /tmp/corpus-tflite
    python -m tests.fuzz.atheris_targets isa -max_total_time=600
    python -m tests.fuzz.atheris_targets firmware -max_total_time=600

Each target feeds libFuzzer's bytes to one parser and lets only its documented exceptions
through; anything else (or a signal, a hang past -timeout) is a crash libFuzzer saves as a
reproducer file. Seed the tflite target's corpus directory with tests/corpus/models/*.tflite.
The hypothesis properties in tests/fuzz run the same parsers in CI.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import atheris

with atheris.instrument_imports():
    from libaccel.compiler import ModelError, graph_from_tflite
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


TARGETS: dict[str, Callable[[bytes], None]] = {"tflite": tflite, "isa": isa_decode, "firmware": firmware}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        print(f"usage: python -m tests.fuzz.atheris_targets {{{','.join(TARGETS)}}} [libFuzzer options]")
        raise SystemExit(2)
    target = TARGETS[sys.argv[1]]
    atheris.Setup([sys.argv[0], *sys.argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
