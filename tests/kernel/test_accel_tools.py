"""The accel CLI on vnpu.ko: trace of a Python (libaccel) program, a delegate run and a C program, submit,
state.

`accel trace` interposes libc's ioctl(), so it needs real ioctls: the kernel device.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from kernel_helpers import accel_nodes
from trace_helpers import build_uapi_program, trace_in_process

from uapi import bindings
from vnpu_common import config

PY_PROGRAM = """
import errno
import numpy as np
from libaccel import Device, Job, JobBo
from firmware_tools.asm import assemble

with Device.open("kernel") as dev:
    src, dst = dev.create_bo(4096), dev.create_bo(4096)
    src.write(bytes(range(64)))
    stream = assemble(
        "TENSOR slot=0 dtype=INT8 va=src n=1 h=1 w=1 c=64 stride_c=1\\n"
        "TENSOR slot=1 dtype=INT8 va=dst n=1 h=1 w=1 c=64 stride_c=1\\n"
        "COPY src=0 dst=1\\nEND\\n",
        symbols={"src": src.va, "dst": dst.va},
    )
    cmd = dev.create_bo_with(stream, read_only=True)
    dev.submit(Job(cmd, len(stream), [JobBo(src), JobBo(dst, read=False, write=True)]))
    dst.wait(timeout=10).raise_for_status()
    assert dst.read(64) == bytes(range(64))
    try:
        dev.bo_info(999)
    except OSError as e:
        assert e.errno == errno.ENOENT
"""


def _by_name(events: list[dict], name: str) -> list[dict]:
    return [e for e in events if e["ioctl"] == name]


# One traced command runs the C program, then one Python process with PY_PROGRAM and a delegate run
# (a small conv through libteflon.so in tflite_runtime, once, without the BUILTIN_REF comparison),
# traced by the test process itself (libaccel.tools.trace.run, what `accel trace --json` runs): under TCG
# every interpreter start and its imports cost seconds. The CLI around it is tested on the host
# (tests/libaccel/test_trace.py).
DELEGATE_PART = """
from delegate_teflon import run
code = run.main([{model!r}, "--device", "kernel", "--runs", "0", "--no-compare", "--log-level", "quiet"])
assert code == 0, code
"""


def _is_the_bad_info(event: dict) -> bool:
    return event["ioctl"] == "DRM_IOCTL_VNPU_BO_INFO" and event["in"]["handle"] == 999


@dataclass
class Traced:
    code: int  # the traced command's exit status
    c: list[dict] | None  # the C program's events (None: no gcc here)
    python: list[dict]  # PY_PROGRAM's, up to its bad BO_INFO
    delegate: list[dict]  # the delegate run's, after it


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Traced:
    if not accel_nodes():
        pytest.skip("no vnpu device")
    import modelgen

    tmp = tmp_path_factory.mktemp("trace")
    model = tmp / "conv.tflite"
    model.write_bytes(modelgen.conv2d_model((1, 8, 8, 8), 8, kernel=3, stride=1, padding="SAME", act="RELU"))
    script = tmp / "prog.py"
    script.write_text(textwrap.dedent(PY_PROGRAM) + DELEGATE_PART.format(model=str(model)))
    python = shlex.join([sys.executable, str(script)])
    exe = build_uapi_program("accel_tools_client.c", tmp) if shutil.which("gcc") else None
    command = f"{shlex.join([str(exe), accel_nodes()[0]])} && {python}" if exe else python
    code, events = trace_in_process(["sh", "-c", command], tmp / "trace.jsonl")
    # Each process's records come in its order; two processes' may interleave when the tracer lags.
    c = [e for e in events if e["comm"] == "prog"]
    rest = [e for e in events if e["comm"] != "prog"]
    split = next((i + 1 for i, e in enumerate(rest) if _is_the_bad_info(e)), len(rest))
    return Traced(code, c if exe else None, rest[:split], rest[split:])


def test_trace_of_a_libaccel_python_program(traced: Traced) -> None:
    assert traced.code == 0
    events = traced.python
    names = [e["ioctl"] for e in events]
    for name in ("DRM_IOCTL_VNPU_BO_CREATE", "DRM_IOCTL_VNPU_SUBMIT", "DRM_IOCTL_VNPU_BO_WAIT"):
        assert name in names, names
    assert all(e["path"] == accel_nodes()[0] for e in events)
    creates = _by_name(events, "DRM_IOCTL_VNPU_BO_CREATE")
    assert creates[0]["in"]["size"] == 4096 and creates[0]["ret"] == 0
    assert creates[0]["out"]["va"] >= bindings.DRM_VNPU_VA_START and creates[0]["out"]["handle"] > 0
    (submit,) = _by_name(events, "DRM_IOCTL_VNPU_SUBMIT")
    (job,) = submit["jobs"]
    src, dst = creates[0]["out"]["handle"], creates[1]["out"]["handle"]
    assert job["bo_list"] == [{"handle": src, "flags": "READ"}, {"handle": dst, "flags": "WRITE"}]
    disasm = job["stream"]["disasm"]
    assert disasm[0].startswith(f"TENSOR slot=0 dtype=INT8 va=bo{src} ")
    assert (
        disasm[2] == f"COPY src=0 dst=1  # 0x0080  src INT8[1,1,1,64]@bo{src} -> dst INT8[1,1,1,64]@bo{dst}"
    )
    (wait,) = _by_name(events, "DRM_IOCTL_VNPU_BO_WAIT")
    assert wait["out"]["job_status"] == 0
    bad = events[-1]
    assert _is_the_bad_info(bad) and (bad["ret"], bad["errno"]) == (-1, "ENOENT")


def test_trace_of_a_c_program(traced: Traced) -> None:
    if traced.c is None:
        pytest.skip("no gcc in this guest")
    assert traced.code == 0
    events = traced.c
    assert [e["ioctl"].removeprefix("DRM_IOCTL_VNPU_") for e in events] == [
        "GET_PARAM",
        "BO_CREATE",
        "BO_CREATE",
        "BO_INFO",
        "GET_PARAM",
        "SUBMIT",
        "BO_WAIT",
    ]
    assert all(e["path"] == accel_nodes()[0] for e in events)
    get, _, _, info, bad_pad, submit, wait = events
    assert get["in"]["param"] == bindings.DRM_VNPU_PARAM_FW_VERSION and get["out"]["value"] > 0
    assert (info["errno"], bad_pad["errno"]) == ("ENOENT", "EINVAL") and bad_pad["in"]["pad"] == 1
    (job,) = submit["jobs"]
    assert [line.split("  #")[0] for line in job["stream"]["disasm"][1:]] == ["FILL dst=0 value=5", "END"]
    assert wait["out"]["job_status"] == 0 and wait["time_us"] > 0


def test_trace_of_a_delegate_run(traced: Traced) -> None:
    """A model through libteflon.so in tflite_runtime: the delegate's ioctls, its stream disassembled."""
    assert traced.code == 0
    events = traced.delegate
    assert events and all(e["path"] == accel_nodes()[0] for e in events)
    submits = [e for e in _by_name(events, "DRM_IOCTL_VNPU_SUBMIT") if e["ret"] == 0]
    assert submits, [e["ioctl"] for e in events]
    disasm = [line for s in submits for job in s["jobs"] for line in job["stream"]["disasm"]]
    assert any(line.startswith("CONV2D ") for line in disasm), disasm
    assert disasm[-1].startswith("END")
    waits = _by_name(events, "DRM_IOCTL_VNPU_BO_WAIT") + _by_name(events, "DRM_IOCTL_SYNCOBJ_WAIT")
    assert waits and all(w["ret"] == 0 for w in waits)


def test_submit_and_session_on_the_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from libaccel.tools import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.bin").write_bytes(bytes(range(64)))
    (tmp_path / "copy.s").write_text(
        "TENSOR slot=0 dtype=INT8 va=src n=1 h=1 w=1 c=64 stride_c=1\n"
        "TENSOR slot=1 dtype=INT8 va=dst n=1 h=1 w=1 c=64 stride_c=1\nCOPY src=0 dst=1\nEND\n"
    )
    args = [
        "submit",
        "copy.s",
        "--device",
        "kernel",
        "--bo",
        "src=in.bin",
        "--bo",
        "dst=64",
        "--out",
        "dst=out.bin",
    ]
    assert cli.main(args) == 0
    assert (tmp_path / "out.bin").read_bytes() == bytes(range(64))
    (tmp_path / "bad.s").write_text(
        (tmp_path / "copy.s").read_text().replace("w=1 c=64 stride_c=1\nCOPY", "w=1 c=32 stride_c=1\nCOPY")
    )
    code = cli.main(
        [
            "session",
            "--device",
            "kernel",
            "-e",
            "bo create src in.bin",
            "-e",
            "submit bad.s --bo src --bo dst=64:w",
        ]
    )
    assert code == 3  # -EIO from the device: the job ran and failed


def test_state_shows_this_process_as_an_open_file(dev: object, capsys: pytest.CaptureFixture[str]) -> None:
    from libaccel.tools import cli

    assert cli.main(["state", "--json"]) == 0
    state = json.loads(capsys.readouterr().out)
    # Ready (firmware booted, queue served) whenever powered: runtime PM powers an idle device off.
    assert state["state"]["ready"] == state["state"]["powered"] and "jobs_submitted" in state["counters"]
    assert os.getpid() in [f["pid"] for f in state["files"]]
    assert cli.main(["state"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("vnpu debugfs: /sys/kernel/debug/accel/") and "\nfiles\n  CTX  PID" in out


# PY_PROGRAM, waiting for the test's go once its imports are done and the device is open: `accel trace -p`
# attaches in between.
ATTACH_PROGRAM = "import sys\n" + textwrap.dedent(PY_PROGRAM).replace(
    'with Device.open("kernel") as dev:\n',
    'with Device.open("kernel") as dev:\n    print("ready", flush=True)\n    sys.stdin.readline()\n',
)


def test_trace_attaches_to_a_running_libaccel_program(tmp_path: Path) -> None:
    """``accel trace -p PID`` (ptrace), attached once the program has the device open: the same decoded
    records as the interposer's, the SUBMIT's stream read through a duplicate of its fd, the -C summary."""
    if not accel_nodes():
        pytest.skip("no vnpu device")
    import subprocess

    from trace_helpers import json_events, trace_env

    scale = config.TIMEOUT_SCALE.get()
    (tmp_path / "prog.py").write_text(ATTACH_PROGRAM)
    target = subprocess.Popen(
        [sys.executable, str(tmp_path / "prog.py")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=trace_env(),
    )  # fmt: skip
    out = tmp_path / "trace.jsonl"
    cmd = [sys.executable, "-m", "libaccel.tools.cli", "trace", "-p", str(target.pid), "-C", "--json"]
    cmd += ["-o", str(out)]
    tracer = None
    try:
        assert target.stdout is not None and target.stdout.readline() == "ready\n"  # the device is open
        tracer = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=trace_env())
        assert tracer.stderr is not None
        line = tracer.stderr.readline()
        assert line.startswith(f"accel trace: attached to process {target.pid} ("), line
        assert target.stdin is not None
        target.stdin.write("go\n")
        target.stdin.flush()
        err = tracer.communicate(timeout=300 * scale)[1]
    finally:
        target.kill()
        if tracer is not None:
            tracer.kill()
    assert tracer.returncode == 0 and target.wait() == 0, err
    *events, last = json_events(out.read_text())
    names = [e["ioctl"] for e in events]
    assert names[:2] == ["DRM_IOCTL_VNPU_BO_CREATE"] * 2 and "DRM_IOCTL_VNPU_BO_WAIT" in names, names
    assert all(e["path"] == accel_nodes()[0] and e["pid"] == target.pid for e in events)
    creates = _by_name(events, "DRM_IOCTL_VNPU_BO_CREATE")
    src, dst = creates[0]["out"]["handle"], creates[1]["out"]["handle"]
    (submit,) = _by_name(events, "DRM_IOCTL_VNPU_SUBMIT")
    (job,) = submit["jobs"]
    assert job["bo_list"] == [{"handle": src, "flags": "READ"}, {"handle": dst, "flags": "WRITE"}]
    assert job["stream"]["disasm"][2].startswith("COPY src=0 dst=1  # 0x0080"), job
    assert _is_the_bad_info(events[-1]) and events[-1]["errno"] == "ENOENT"
    rows = {r["ioctl"]: r for r in last["summary"]["ioctls"]}
    assert rows["DRM_IOCTL_VNPU_BO_INFO"]["errors"] == 1 and rows["DRM_IOCTL_VNPU_SUBMIT"]["calls"] == 1
