"""Careless input to every CLI, run as a user runs it (a subprocess): each mistake is one line on
stderr in the project's words, the documented exit code (docs/tools.md#exit-codes), no traceback,
and, where a run would follow, nothing run (stdout empty: the checks come before the work)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import modelgen as gen
from vnpu_common.cli import ExitCode

ROOT = Path(__file__).resolve().parents[2]
COREDUMP = ROOT / "tests" / "libaccel" / "data" / "coredump_fault.bin"

ACCEL = ["-m", "libaccel.tools.cli"]
RUN = ["-m", "delegate_teflon.run"]
ASM = ["-m", "firmware_tools.asm_cli"]
FW = ["-m", "firmware_tools.fw_cli"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files the cases name, in one directory (the subprocesses' working directory)."""
    d = tmp_path_factory.mktemp("careless")
    model = gen.elementwise_model("ADD", (1, 4, 4, 4), None, "NONE", 1)
    (d / "add.tflite").write_bytes(model)
    (d / "cut.tflite").write_bytes(model[: len(model) // 2])
    (d / "random.tflite").write_bytes(np.random.default_rng(0).integers(0, 256, 3000, np.uint8).tobytes())
    flipped = bytearray(model)
    flipped[100:104] = b"\xff\xff\xff\xff"
    (d / "flipped.tflite").write_bytes(bytes(flipped))
    (d / "empty.tflite").write_bytes(b"")
    (d / "model.ONNX").write_bytes(b"\x08\x01garbage")
    (d / "notes.txt").write_text("a model?\n")
    (d / "pickle.npy").write_text("not numpy\n")
    (d / "add.s").write_text("END\n")
    (d / "dump.bin").write_bytes(COREDUMP.read_bytes())
    return d


# (argv, extra environment, exit code, a fragment of the one line on stderr)
CASES: dict[str, tuple[list[str], dict[str, str], ExitCode, str]] = {
    # a device that is not one
    "info-dir": ([*ACCEL, "info", "--device", "/tmp"], {}, ExitCode.DEVICE, "/tmp failed: ENODEV"),
    "list-dir": ([*ACCEL, "list", "--device", "/tmp"], {}, ExitCode.DEVICE, "a directory, not a device node"),
    "submit-dir": (
        [*ACCEL, "submit", "add.s", "--device", "/tmp"],
        {},
        ExitCode.DEVICE,
        "a directory, not a device node",
    ),
    "info-file": ([*ACCEL, "info", "--device", "add.s"], {}, ExitCode.DEVICE, "a regular file, not a device"),
    "info-env": ([*ACCEL, "info"], {"VNPU_DEVICE": "bogus"}, ExitCode.DEVICE, "$VNPU_DEVICE='bogus'"),
    "run-env": (
        [*ACCEL, "run", "add.tflite"],
        {"VNPU_DEVICE": "bogus"},
        ExitCode.DEVICE,
        "$VNPU_DEVICE='bogus'",
    ),
    "run-dir": ([*ACCEL, "run", "add.tflite", "--device", "/tmp"], {}, ExitCode.DEVICE, "open /tmp failed"),
    "delegate-env": ([*RUN, "add.tflite"], {"VNPU_DEVICE": "bogus"}, ExitCode.DEVICE, "$VNPU_DEVICE='bogus'"),
    "delegate-dir": (
        [*RUN, "add.tflite", "--device", "/tmp"],
        {},
        ExitCode.DEVICE,
        "a directory, not a device",
    ),
    "demo-dir": (
        ["-m", "libaccel.demos.demo", "--device", "/tmp"],
        {},
        ExitCode.DEVICE,
        "a directory, not a device",
    ),
    # output paths, checked before the work
    "run-output-nodir": (
        [*ACCEL, "run", "add.tflite", "--output", "/no/such/dir/y.npy"],
        {},
        ExitCode.BAD_FILE,
        "--output: cannot write /no/such/dir/y.npy: no such directory /no/such/dir",
    ),
    "run-output-dir": (
        [*ACCEL, "run", "add.tflite", "--output", "/tmp"],
        {},
        ExitCode.BAD_FILE,
        "/tmp is a directory",
    ),
    "coredump-save": (
        [*ACCEL, "coredump", "dump.bin", "--save", "/no/such/dir/x"],
        {},
        ExitCode.BAD_FILE,
        "--save: cannot write /no/such/dir/x: no such directory",
    ),
    "asm-output": (
        [*ASM, "asm", "add.s", "-o", "/nonexistent/x.bin"],
        {},
        ExitCode.BAD_FILE,
        "-o: cannot write /nonexistent/x.bin: no such directory /nonexistent",
    ),
    # input files
    "run-input-pickle": (
        [*ACCEL, "run", "add.tflite", "--input", "pickle.npy"],
        {},
        ExitCode.BAD_FILE,
        "not a .npy file",
    ),
    "run-input-missing": (
        [*ACCEL, "run", "add.tflite", "--input", "x.npy"],
        {},
        ExitCode.BAD_FILE,
        "--input x.npy: cannot read it: no such file or directory",
    ),
    "run-missing": ([*ACCEL, "run", "nope.tflite"], {}, ExitCode.BAD_FILE, "nope.tflite: no such file"),
    "run-txt": ([*ACCEL, "run", "notes.txt"], {}, ExitCode.BAD_FILE, "not a .onnx or .tflite file"),
    "run-cut": ([*ACCEL, "run", "cut.tflite"], {}, ExitCode.BAD_FILE, "cut.tflite: not a valid TFLite model"),
    "run-random": ([*ACCEL, "run", "random.tflite"], {}, ExitCode.BAD_FILE, "not a TFLite model"),
    "run-flipped": ([*ACCEL, "run", "flipped.tflite"], {}, ExitCode.BAD_FILE, "not a valid TFLite model"),
    "run-empty": (
        [*ACCEL, "run", "empty.tflite"],
        {},
        ExitCode.BAD_FILE,
        "not a valid TFLite model (0 bytes)",
    ),
    "run-upper-onnx": ([*ACCEL, "run", "model.ONNX"], {}, ExitCode.BAD_FILE, "model.ONNX: not an ONNX model"),
    "delegate-cut": ([*RUN, "cut.tflite"], {}, ExitCode.BAD_FILE, "cut.tflite: not a valid TFLite model"),
    "delegate-empty": ([*RUN, "empty.tflite"], {}, ExitCode.BAD_FILE, "(0 bytes)"),
    "delegate-missing": (
        [*RUN, "nope.tflite"],
        {},
        ExitCode.BAD_FILE,
        "cannot read nope.tflite: no such file",
    ),
    "delegate-reference-missing": (
        [*RUN, "add.tflite", "--reference", "ref.npz"],
        {},
        ExitCode.BAD_FILE,
        "cannot read reference outputs ref.npz: no such file or directory",
    ),
    "delegate-reference-bad": (
        [*RUN, "add.tflite", "--reference", "pickle.npy"],
        {},
        ExitCode.BAD_FILE,
        "not a reference .npz",
    ),
    "submit-missing": (
        [*ACCEL, "submit", "nope.s", "--device", "shim"],
        {},
        ExitCode.BAD_FILE,
        "cannot read nope.s: no such file or directory",
    ),
    "asm-missing": ([*ASM, "asm", "nope.s", "-o", "x.bin"], {}, ExitCode.BAD_FILE, "cannot read nope.s"),
    "fw-missing": ([*FW, "verify", "nope.bin"], {}, ExitCode.BAD_FILE, "cannot read nope.bin: no such file"),
    # values out of range, refused by the parser
    "run-runs": ([*ACCEL, "run", "add.tflite", "--runs", "-3"], {}, ExitCode.USAGE, "-3 is negative"),
    "delegate-runs": ([*RUN, "add.tflite", "--runs", "-3"], {}, ExitCode.USAGE, "--runs: -3 is negative"),
    "submit-timeout": (
        [*ACCEL, "submit", "add.s", "--device", "shim", "--timeout", "-1"],
        {},
        ExitCode.USAGE,
        "--timeout: -1 is not a positive number of seconds",
    ),
    "delegate-option": (
        [*RUN, "add.tflite", "--option", "speed=fast"],
        {},
        ExitCode.USAGE,
        "unknown option 'speed'",
    ),
    "camera-frames": (
        ["-m", "libaccel.demos.camera_demo", "--frames", "-1"],
        {},
        ExitCode.USAGE,
        "-1 is negative",
    ),
    "delegate-bad-flag": (
        [*RUN, "add.tflite", "--frob"],
        {},
        ExitCode.USAGE,
        "unrecognized arguments: --frob",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_careless_input_is_one_line(files: Path, case: str) -> None:
    argv, extra_env, code, fragment = CASES[case]
    env = {k: v for k, v in os.environ.items() if k != "VNPU_DEVICE"}
    env.update(PYTHONPATH=str(ROOT), **extra_env)
    r = subprocess.run(
        [sys.executable, *argv], cwd=files, env=env, capture_output=True, text=True, timeout=300
    )
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.endswith("\n"), r.stderr
    assert fragment in r.stderr, r.stderr
    assert r.returncode == code, (r.returncode, r.stderr)
    assert r.stdout == "", r.stdout  # refused before any work that prints


def test_a_model_suffix_in_capitals_runs(files: Path) -> None:
    (files / "ADD.TFLITE").write_bytes((files / "add.tflite").read_bytes())
    env = {**{k: v for k, v in os.environ.items() if k != "VNPU_DEVICE"}, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, *ACCEL, "run", "ADD.TFLITE", "--runs", "2", "--output", "y"],
        cwd=files, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    # stderr: only the device rule's notice (no --device, no VNPU_DEVICE).
    assert r.returncode == 0 and r.stderr.startswith("vnpu: using ") and r.stderr.count("\n") == 1, r.stderr
    assert "first invoke" in r.stdout and "median of 2 invokes" in r.stdout
    assert np.load(files / "y").shape == (1, 4, 4, 4)  # the name given, not y.npy
