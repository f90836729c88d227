"""The conventions every CLI shares (vnpu_common.cli): one table of exit codes, --version, and a bad
VNPU_* value as one line and exit 2 from every entry point (pyproject's scripts and every ``python -m``
command the README and docs show)."""

from __future__ import annotations

import argparse
import os
import re
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


def entry_points() -> dict[str, list[str]]:
    """Every command a user is told to run, as the interpreter's arguments: the console scripts as
    pip's wrapper starts them, and each of the project's ``python -m`` modules the docs name."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    found: dict[str, list[str]] = {}
    for name, target in scripts.items():
        module, function = target.split(":")
        found[name] = ["-c", f"import sys; from {module} import {function}; sys.exit({function}())"]
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    modules = {m for doc in docs for m in re.findall(r"\bpython3? -m ([A-Za-z_][\w.]*)", doc.read_text())}
    for module in sorted(modules):
        path = ROOT.joinpath(*module.split("."))
        ours = path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()  # not pytest, pip
        if ours and not module.startswith("tests."):
            found[f"python -m {module}"] = ["-m", module]
    return found


ENTRY_POINTS = entry_points()


def test_the_entry_points_are_found() -> None:
    assert {"accel", "vnpu-fw", "vnpu-asm", "vnpu-device-model"} <= set(ENTRY_POINTS)
    for module in ("qemu_tests", "delegate_teflon.run", "bench.performance", "tools.upstream"):
        assert f"python -m {module}" in ENTRY_POINTS
    assert "python -m pytest" not in ENTRY_POINTS and "python -m build" not in ENTRY_POINTS


@pytest.mark.parametrize("prog", ENTRY_POINTS)
def test_a_bad_vnpu_variable_is_one_line_from_every_entry_point(prog: str, tmp_path: Path) -> None:
    """Each checks the environment at start-up, before its own work. The unknown option makes a
    command that does not check first fail fast (argparse's refusal names no variable) instead of
    running a bench or booting a guest."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VNPU_SHIM_CORES": "two"}
    r = subprocess.run(
        [sys.executable, *ENTRY_POINTS[prog], "--no-such-option"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.endswith("\n"), r.stderr
    assert "VNPU_SHIM_CORES='two': expected a positive integer" in r.stderr, r.stderr
    assert r.returncode == ExitCode.USAGE, (r.returncode, r.stderr)
    assert r.stdout == "", r.stdout


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
