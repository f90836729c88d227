"""load_delegate on both runtimes: good options load, bad ones raise with the delegate's message,
and a model with nothing the NPU takes runs wholly on the CPU, equal to the reference kernels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import delegate_teflon
import modelgen as gen
from delegate_teflon import plugin


def test_library_path_is_absolute_and_built(lib_path: str) -> None:
    assert os.path.isabs(lib_path) and os.path.isfile(lib_path)
    assert delegate_teflon.library_path() == lib_path  # second call: the cached build


def test_loads_on_the_shim(interp_mod: Any, lib_path: str) -> None:
    delegate = interp_mod.load_delegate(lib_path, {"device": "shim", "log_level": "quiet"})
    assert delegate is not None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"device": "shim", "colour": "red"}, "unknown option 'colour'"),
        ({"device": "shim", "log_level": "loud"}, "log_level"),
        ({"device": "shim", "deny_ops": "CONV_2D,NOPE"}, "NOPE"),
        ({"device": "relative/path"}, "'device' = 'relative/path'"),
        ({"device": "/dev/accel/does-not-exist"}, "cannot open device"),
        ({"device": "shim", "placement_file": "/no/such/dir/p.json"}, "'placement_file'"),
    ],
)
def test_bad_options_raise(
    interp_mod: Any, lib_path: str, options: dict[str, str], message: str, capfd: pytest.CaptureFixture
) -> None:
    with pytest.raises(ValueError, match=message):
        interp_mod.load_delegate(lib_path, options)
    assert "vnpu delegate" not in capfd.readouterr().err  # said once: in the ValueError


def test_a_bad_vnpu_device_is_named_as_the_variable(
    interp_mod: Any, lib_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VNPU_DEVICE", "bogus")
    with pytest.raises(ValueError, match=r"cannot open the device: open \$VNPU_DEVICE='bogus' failed"):
        interp_mod.load_delegate(lib_path, {"log_level": "quiet"})


def test_nothing_supported_runs_on_cpu(
    runtime: str, interp_mod: Any, lib_path: str, capfd: pytest.CaptureFixture
) -> None:
    model = gen.conv2d_model((1, 6, 6, 3), 4, 3, 1, "SAME", True, "NONE", 11)
    inputs = gen.random_inputs(model, 1)
    delegate = interp_mod.load_delegate(lib_path, {"device": "shim", "deny_ops": "CONV_2D"})
    got = gen.run_reference(model, inputs, runtime, [delegate])
    want = gen.run_reference(model, inputs, runtime)
    assert all(g.tobytes() == w.tobytes() for g, w in zip(got, want, strict=True))
    err = capfd.readouterr().err
    assert "no node of this graph (1 nodes) can run on the NPU" in err
    record = plugin.last_prepare()
    assert record is not None and not any(p.npu for p in record.placements)


def test_verbose_placement_report(
    runtime: str, interp_mod: Any, lib_path: str, capfd: pytest.CaptureFixture
) -> None:
    model = gen.softmax_model((1, 10), 3)
    delegate = interp_mod.load_delegate(
        lib_path, {"device": "shim", "log_level": "verbose", "allow_ops": "CONV_2D,ADD"}
    )
    gen.run_reference(model, gen.random_inputs(model, 0), runtime, [delegate])
    err = capfd.readouterr().err
    assert "placement" in err and "0 of 1 nodes on the NPU" in err
    assert "SOFTMAX" in err and "CPU   (not in the allow_ops option)" in err


def test_placement_file(runtime: str, interp_mod: Any, lib_path: str, tmp_path: Path) -> None:
    """The placement_file option: the placement as JSON, every node with its reason."""
    model = gen.conv2d_model((1, 6, 6, 3), 4, 3, 1, "SAME", True, "NONE", 11)
    path = tmp_path / "placement.json"
    options = {"device": "shim", "log_level": "quiet", "placement_file": str(path)}
    gen.run_reference(
        model, gen.random_inputs(model, 0), runtime, [interp_mod.load_delegate(lib_path, options)]
    )
    doc = json.loads(path.read_text())
    assert doc["nodes"] == [{"node": 0, "op": "CONV_2D", "npu": True, "reason": ""}] and doc["runtime"]
    options["deny_ops"] = "CONV_2D"
    gen.run_reference(
        model, gen.random_inputs(model, 0), runtime, [interp_mod.load_delegate(lib_path, options)]
    )
    (node,) = json.loads(path.read_text())["nodes"]
    assert not node["npu"] and node["reason"] == "denied by the deny_ops option"


def test_quiet_prints_nothing(
    runtime: str, interp_mod: Any, lib_path: str, capfd: pytest.CaptureFixture
) -> None:
    model = gen.softmax_model((1, 10), 3)
    delegate = interp_mod.load_delegate(lib_path, {"device": "shim", "log_level": "quiet"})
    gen.run_reference(model, gen.random_inputs(model, 0), runtime, [delegate])
    assert "vnpu delegate" not in capfd.readouterr().err


# A script's interpreter and delegate are destroyed while Python exits: with the script's globals,
# or later, with the modules (here: held by a method of a module torn down late). The kernels' free
# must neither call into the delegate's Python, which cffi may no longer reach (it printed that
# def_extern() was not called), nor free the record Python's side still points to (the delegate's
# destroy wrote into it: a crash at exit).
_FREED_AT_EXIT = """
    import modelgen
    import {runtime}.interpreter as interp
    import delegate_teflon
    from libaccel.backends.shim import file as shim_file
    if {held_by_module}:
        shim_file.ShimBackend.kept_until_exit = lambda self: interpreter
    options = {{"device": "{device}", "log_level": "quiet"}}
    delegate = interp.load_delegate(delegate_teflon.library_path(), options)
    model = modelgen.fully_connected_model(1, 64, 32, seed=1)
    interpreter = interp.Interpreter(model_content=model, experimental_delegates=[delegate])
    interpreter.allocate_tensors()
    for _ in range(3):
        interpreter.invoke()
    print("invoked")
"""


@pytest.mark.parametrize("held_by_module", [False, True], ids=["globals", "held-by-a-module"])
def test_interpreter_freed_while_python_exits(runtime: str, test_device: str, held_by_module: bool) -> None:
    code = textwrap.dedent(
        _FREED_AT_EXIT.format(runtime=runtime, device=test_device, held_by_module=held_by_module)
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "invoked"
    assert result.stderr == ""
