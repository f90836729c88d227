"""Coverage-guided fuzzing of the host parsers with atheris (libFuzzer): a longer run, not in CI.

    pip install -e '.[fuzz]'
    python -m tests.fuzz.atheris_targets tflite -max_total_time=600 /tmp/corpus-tflite
    python -m tests.fuzz.atheris_targets isa -max_total_time=600
    python -m tests.fuzz.atheris_targets firmware -max_total_time=600
    python -m tests.fuzz.atheris_targets onnx -max_total_time=600 /tmp/corpus-onnx

Each target (tests/fuzz/parser_targets.py) feeds libFuzzer's bytes to one parser and lets only its
documented exceptions through; anything else (or a signal, a hang past -timeout) is a crash
libFuzzer saves as a reproducer file. Seed the tflite target's corpus directory with
tests/corpus/models/*.tflite, the onnx target's with tests/onnx/models/*.onnx. The hypothesis
properties in tests/fuzz run the same parsers in CI.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from tests.fuzz.parser_targets import TARGETS


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        print(f"usage: python -m tests.fuzz.atheris_targets {{{','.join(TARGETS)}}} [libFuzzer options]")
        raise SystemExit(2)
    atheris.Setup([sys.argv[0], *sys.argv[2:]], TARGETS[sys.argv[1]])
    atheris.Fuzz()


if __name__ == "__main__":
    main()
