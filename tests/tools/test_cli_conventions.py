"""The conventions every CLI shares (vnpu_common.cli): one table of exit codes, and --version."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from vnpu_common.cli import (
    EXIT_MEANINGS,
    ExitCode,
    exit_code_table,
    non_negative_int,
    os_error_words,
    output_path_problem,
    package_version,
    positive_float,
)

ROOT = Path(__file__).resolve().parents[2]

#: Every user-facing CLI, as a user starts it (the console scripts are these modules' main()).
CLIS = {
    "accel": ["-m", "libaccel.tools.cli"],
    "vnpu-asm": ["-m", "firmware_tools.asm_cli"],
    "vnpu-fw": ["-m", "firmware_tools.fw_cli"],
    "python -m delegate_teflon.run": ["-m", "delegate_teflon.run"],
    "python -m libaccel.demos.demo": ["-m", "libaccel.demos.demo"],
    "python -m libaccel.demos.camera_demo": ["-m", "libaccel.demos.camera_demo"],
    "vnpu-device-model": ["-m", "device_model.qemu_server"],
}


def test_docs_table_is_the_exit_code_enum() -> None:
    assert set(EXIT_MEANINGS) == set(ExitCode)
    assert exit_code_table() in (ROOT / "docs" / "tools.md").read_text()


def test_version_is_pyprojects() -> None:
    assert package_version() == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


@pytest.mark.parametrize("prog", CLIS)
def test_every_cli_prints_its_version(prog: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, *CLIS[prog], "--version"], capture_output=True, text=True, env=env, timeout=120
    )
    assert (r.returncode, r.stdout, r.stderr) == (0, f"{prog} {package_version()}\n", "")


def test_output_path_problems(tmp_path: Path) -> None:
    assert output_path_problem(tmp_path / "y.npy") is None
    assert "is a directory" in str(output_path_problem(tmp_path))
    assert f"no such directory {tmp_path / 'no'}" in str(output_path_problem(tmp_path / "no" / "y.npy"))


def test_counts_and_durations_are_checked_at_parsing() -> None:
    assert non_negative_int("0") == 0 and positive_float("0.5") == 0.5
    for parse, text in ((non_negative_int, "-3"), (non_negative_int, "x"), (positive_float, "0"),
                        (positive_float, "-1"), (positive_float, "nan")):  # fmt: skip
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)


def test_os_errors_in_words(tmp_path: Path) -> None:
    with pytest.raises(OSError) as e:
        (tmp_path / "missing").read_bytes()
    assert os_error_words(e.value) == "no such file or directory"
    with pytest.raises(OSError) as e:
        tmp_path.read_bytes()
    assert os_error_words(e.value) == "is a directory, not a file"
