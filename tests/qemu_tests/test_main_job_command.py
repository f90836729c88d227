"""What the main job asks the guest to run: the model through the delegate, optionally under accel trace."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from qemu_tests import main_job


@pytest.fixture
def guest_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[list[str]]:
    seen: list[list[str]] = []
    model, reference = tmp_path / "m.tflite", tmp_path / "ref.npz"
    monkeypatch.setattr(main_job, "prepare", lambda *a: (model, reference))
    monkeypatch.setattr(main_job.delegate_teflon, "library_path", lambda: tmp_path / "libteflon.so")
    monkeypatch.setattr(main_job.harness, "main", lambda argv: seen.append(argv) or 0)
    return seen


def _exec(argv: list[str]) -> list[str]:
    return shlex.split(argv[argv.index("--exec") + 1])


def test_the_model_runs_through_the_delegate_on_the_kernel(guest_command: list[list[str]]) -> None:
    assert main_job.main(["--runs", "2"]) == 0
    cmd = _exec(guest_command[0])
    assert cmd[:3] == ["python", "-m", "delegate_teflon.run"]
    assert cmd[cmd.index("--device") + 1] == "kernel" and cmd[cmd.index("--runs") + 1] == "2"


def test_trace_wraps_the_same_command_in_accel_trace(guest_command: list[list[str]]) -> None:
    assert main_job.main(["--trace", "--kernel", "6.12.117+deb12-amd64"]) == 0
    argv = guest_command[0]
    assert argv[:2] == ["--kernel", "6.12.117+deb12-amd64"]
    cmd = _exec(argv)
    assert cmd[:4] == ["accel", "trace", "--no-stream", "--"]
    assert cmd[4:7] == ["python", "-m", "delegate_teflon.run"]
