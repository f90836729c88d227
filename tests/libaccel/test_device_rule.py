"""The one device rule (libaccel.discovery.resolve): a tool's device option, else $VNPU_DEVICE,
else the first vnpu kernel device, else the shim, said in one line on stderr; and every tool
follows it, run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import modelgen as gen
from libaccel import discovery
from libaccel.discovery import AccelDevice
from libaccel.errors import NoDevice

ROOT = Path(__file__).resolve().parents[2]
NODE = AccelDevice("/dev/accel/accel3", "/sys/devices/pci0000:00/0000:00:0a.0/accel/accel3", "0000:00:0a.0")
SHIM_NOTICE = (
    "vnpu: using the in-process shim: no vnpu kernel device found "
    "(VNPU_DEVICE or a device option chooses another)\n"
)
COPY = (
    "TENSOR slot=0 dtype=INT8 va=src n=1 h=1 w=1 c=64 stride_c=1\n"
    "TENSOR slot=1 dtype=INT8 va=dst n=1 h=1 w=1 c=64 stride_c=1\nCOPY src=0 dst=1\nEND\n"
)


@pytest.fixture
def rule(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No $VNPU_DEVICE, no notice said yet in this process."""
    monkeypatch.delenv(discovery.ENV_DEVICE, raising=False)
    monkeypatch.setattr(discovery, "_noticed", set())
    return monkeypatch


def test_no_kernel_device_is_the_shim_said_once(
    rule: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rule.setattr(discovery, "list_devices", lambda driver=discovery.DRIVER_NAME: [])
    assert discovery.resolve() == discovery.SHIM
    assert discovery.resolve() == discovery.SHIM
    assert capsys.readouterr().err == SHIM_NOTICE


def test_a_kernel_device_is_taken_first(rule: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    rule.setattr(discovery, "list_devices", lambda driver=discovery.DRIVER_NAME: [NODE])
    assert discovery.resolve() == NODE.node
    assert capsys.readouterr().err.startswith("vnpu: using /dev/accel/accel3, the first vnpu kernel device (")


def test_what_is_named_is_taken_without_a_notice(
    rule: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rule.setattr(discovery, "list_devices", lambda driver=discovery.DRIVER_NAME: [NODE])
    assert discovery.resolve("shim") == discovery.SHIM
    assert discovery.resolve("/dev/accel/accel9") == "/dev/accel/accel9"
    rule.setenv(discovery.ENV_DEVICE, "shim")
    assert discovery.resolve() == discovery.SHIM
    assert discovery.resolve(quiet=True) == discovery.SHIM
    assert capsys.readouterr().err == ""


def test_quiet_says_nothing(rule: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    rule.setattr(discovery, "list_devices", lambda driver=discovery.DRIVER_NAME: [])
    assert discovery.resolve(quiet=True) == discovery.SHIM
    assert capsys.readouterr().err == ""


def test_kernel_asked_for_is_not_the_shim(rule: pytest.MonkeyPatch) -> None:
    rule.setattr(discovery, "list_devices", lambda driver=discovery.DRIVER_NAME: [])
    with pytest.raises(NoDevice, match="no vnpu device found"):
        discovery.resolve("kernel")


def test_a_bogus_variable_is_named_as_the_variable(rule: pytest.MonkeyPatch) -> None:
    rule.setenv(discovery.ENV_DEVICE, "bogus")
    with pytest.raises(NoDevice, match=r"\$VNPU_DEVICE='bogus'"):
        discovery.resolve()


# Every tool with no device named, as a user runs it: the same rule, the same one line.
TOOLS = {
    "accel info": ["-m", "libaccel.tools.cli", "info"],
    "accel submit": ["-m", "libaccel.tools.cli", "submit", "copy.s", "--bo", "src=64", "--bo", "dst=64:w"],
    "accel run": ["-m", "libaccel.tools.cli", "run", "add.tflite"],
    "delegate_teflon.run": ["-m", "delegate_teflon.run", "add.tflite", "--runs", "1"],
    "libaccel.demos.demo": ["-m", "libaccel.demos.demo"],
}


@pytest.mark.skipif(bool(discovery.list_devices()), reason="a kernel device here: the tools take it")
@pytest.mark.parametrize("tool", TOOLS)
def test_every_tool_takes_the_shim_and_says_so(tool: str, tmp_path: Path) -> None:
    (tmp_path / "add.tflite").write_bytes(gen.elementwise_model("ADD", (1, 4, 4, 4), None, "NONE", 1))
    (tmp_path / "copy.s").write_text(COPY)
    env = {k: v for k, v in os.environ.items() if k != discovery.ENV_DEVICE}
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run(
        [sys.executable, *TOOLS[tool]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr.count(SHIM_NOTICE) == 1, r.stderr
