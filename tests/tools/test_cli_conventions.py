"""The conventions every CLI shares (vnpu_common.cli): one table of exit codes, and --version."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from vnpu_common.cli import EXIT_MEANINGS, ExitCode, exit_code_table, output_path_problem, package_version

ROOT = Path(__file__).resolve().parents[2]

#: Every user-facing CLI, as a user starts it (the console scripts are these modules' main()).
CLIS = {
    "accel": ["-m", "libaccel.cli"],
    "vnpu-asm": ["-m", "firmware_tools.asm_cli"],
    "vnpu-fw": ["-m", "firmware_tools.fw_cli"],
    "python -m delegate_teflon.run": ["-m", "delegate_teflon.run"],
    "python -m libaccel.demo": ["-m", "libaccel.demo"],
    "python -m libaccel.camera_demo": ["-m", "libaccel.camera_demo"],
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
