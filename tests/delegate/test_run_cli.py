"""python -m delegate_teflon.run: a user's own .tflite file, the report, the comparison."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import modelgen as gen
from delegate_teflon import run
from vnpu_common.cli import ExitCode


@pytest.mark.parametrize("runtime", run.RUNTIMES)
def test_run_own_model(runtime: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "dw.tflite"
    path.write_bytes(gen.depthwise_conv2d_model((1, 10, 10, 6), 1, 3, 1, "SAME", True, "RELU6", 31))
    rc = run.main([str(path), "--runtime", runtime, "--runs", "1", "--option", "deny_ops=ADD"])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    assert "0 differing bytes" in out and "1 of 1 nodes on the NPU" in err


def test_bad_option_and_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "add.tflite"
    path.write_bytes(gen.elementwise_model("ADD", (1, 4, 4, 4), None, "NONE", 1))
    assert run.main([str(path), "--option", "speed=fast"]) == ExitCode.USAGE
    assert "unknown option 'speed'" in capsys.readouterr().err
    assert run.main([str(tmp_path / "missing.tflite")]) == ExitCode.BAD_FILE
    assert "cannot read" in capsys.readouterr().err


def test_accel_run_prints_the_same_timing_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``accel run --runs N`` and this runner time a .tflite model alike: the delegate's prepare,
    the first invoke, the median of the N after it."""
    from libaccel.tools import cli

    path = tmp_path / "add.tflite"
    path.write_bytes(gen.elementwise_model("ADD", (1, 4, 4, 4), None, "NONE", 1))
    line = re.compile(r"load \(delegate prepare \+ compile\): [\d.]+ ms; first invoke [\d.]+ ms; "
                      r"median of 2 invokes [\d.]+ ms \(min [\d.]+, p90 [\d.]+, p99 [\d.]+\)")  # fmt: skip
    for main in (lambda: run.main([str(path), "--runs", "2", "--log-level", "quiet"]),
                 lambda: cli.main(["run", str(path), "--runs", "2", "--device", "shim"])):  # fmt: skip
        assert main() == ExitCode.OK
        out = capsys.readouterr().out
        assert any(line.fullmatch(x) for x in out.splitlines()), out


def test_a_refused_delegate_is_its_own_reason_in_one_line() -> None:
    from libaccel.runtime.model import DelegateError, run_tflite

    model = gen.elementwise_model("ADD", (1, 4, 4, 4), None, "NONE", 1)
    with pytest.raises(DelegateError) as e:
        run_tflite(model, options={"colour": "red"})
    assert str(e.value).startswith("vnpu delegate: unknown option 'colour'") and "\n" not in str(e.value)
