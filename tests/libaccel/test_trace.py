"""`accel trace` on the host: the interposer and the decoder, without a vnpu device.

Ioctls of type 'd' on /dev/null fail with ENOTTY, which is enough to check that C programs
and CPython are both seen, that names and argument fields are decoded from the header,
that errno and the exit status come through, and that other ioctls are not reported.
tests/kernel/test_trace.py runs the same tool in the QEMU guest against vnpu.ko.
"""

from __future__ import annotations

import errno
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from trace_helpers import build_uapi_program, json_events, run_trace, trace_env

from libaccel.tools import trace
from uapi import bindings
from vnpu_common.cli import ExitCode

ROOT = Path(__file__).resolve().parents[2]


def _trace(argv: list[str], tmp_path: Path, json_mode: bool = True) -> tuple[int, list[dict] | str]:
    r, text = run_trace(argv, tmp_path / "trace.out", json_mode)
    return r.returncode, json_events(text) if json_mode else text


@pytest.fixture(scope="module")
def c_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.fail("gcc is required (apt-get install gcc)")
    return build_uapi_program("trace_host_client.c", tmp_path_factory.mktemp("c"))


def test_c_program_ioctls_are_named_decoded_with_errno(c_program: Path, tmp_path: Path) -> None:
    code, events = _trace([str(c_program)], tmp_path)
    assert code == 7  # the program's own exit status
    assert [e["ioctl"] for e in events] == ["DRM_IOCTL_VNPU_GET_PARAM", "DRM_IOCTL_VNPU_SUBMIT"]
    get, submit = events
    assert get["path"] == "/dev/null" and get["comm"] == "prog"
    assert get["in"] == {"param": bindings.DRM_VNPU_PARAM_MAX_JOB_BOS, "pad": 0, "value": 0}
    assert (get["ret"], get["errno"]) == (-1, "ENOTTY") and "out" not in get
    assert submit["in"]["jobs"] == 8 and submit["in"]["job_struct_size"] == bindings.ffi.sizeof(
        "struct drm_vnpu_job"
    )
    assert submit["jobs"] == [] and submit["notes"] == ["EFAULT: the jobs pointer is not readable"]


def test_human_output_is_one_line_per_ioctl(c_program: Path, tmp_path: Path) -> None:
    code, text = _trace([str(c_program)], tmp_path, json_mode=False)
    lines = text.splitlines()
    assert code == 7
    assert lines[0].startswith("[") and " prog] " in lines[0]
    assert (
        "DRM_IOCTL_VNPU_GET_PARAM(fd 3 /dev/null, {param=6 (DRM_VNPU_PARAM_MAX_JOB_BOS), pad=0, value=0})"
        in lines[0]
    )
    assert lines[0].endswith(" us>") and "= -1 ENOTTY (Inappropriate ioctl for device)" in lines[0]
    assert (
        lines[1].startswith("[")
        and "DRM_IOCTL_VNPU_SUBMIT(fd 3 /dev/null, {jobs=0x8, job_count=1," in lines[1]
    )
    assert lines[2] == "    note: EFAULT: the jobs pointer is not readable"


def test_python_program_and_its_child_processes_are_traced(tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text(
        textwrap.dedent(
            """
            import fcntl, os
            from uapi.bindings import IOCTLS, ffi
            fd = os.open("/dev/null", os.O_RDWR)
            arg = ffi.new("struct drm_vnpu_bo_info *")
            arg.handle = 42
            if os.fork() == 0:
                try:
                    fcntl.ioctl(fd, IOCTLS["DRM_IOCTL_GEM_CLOSE"], bytearray(8))
                finally:
                    os._exit(0)
            os.wait()
            try:
                fcntl.ioctl(fd, IOCTLS["DRM_IOCTL_VNPU_BO_INFO"], ffi.buffer(arg), True)
            except OSError as e:
                raise SystemExit(e.errno)
            """
        )
    )
    code, events = _trace([sys.executable, str(script)], tmp_path)
    assert code == 25  # ENOTTY, as the program's exit status
    assert [e["ioctl"] for e in events] == ["DRM_IOCTL_GEM_CLOSE", "DRM_IOCTL_VNPU_BO_INFO"]
    assert events[0]["pid"] != events[1]["pid"]
    assert events[1]["in"]["handle"] == 42 and events[1]["errno"] == "ENOTTY"


def test_a_missing_program_is_a_usage_error(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "libaccel.tools.cli", "trace", "--", str(tmp_path / "nope")],
        env=trace_env(),
        capture_output=True,
        text=True,
    )
    assert r.returncode == ExitCode.BAD_FILE and r.stderr.count("\n") == 1
    assert "cannot run" in r.stderr and "no such file or directory" in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "libaccel.tools.cli", "trace"], env=trace_env(), capture_output=True, text=True
    )
    assert r.returncode == 2 and "give the program to run" in r.stderr


def test_a_program_on_the_shim_is_told_the_shim_makes_no_ioctls() -> None:
    """``accel info --device shim`` reads the device without a syscall to a DRM node: the trace says why
    it is empty instead of printing nothing."""
    program = [sys.executable, "-m", "libaccel.tools.cli", "info", "--device", "shim"]
    r = subprocess.run(
        [sys.executable, "-m", "libaccel.tools.cli", "trace", "--", *program],
        env=trace_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (
        r.stderr.strip().splitlines()[-1].startswith("accel trace: the program made no DRM ioctl. The shim")
    )


def test_decoder_disassembles_a_submitted_stream() -> None:
    """A record as the interposer sends it for a SUBMIT, with the stream it read from the BO."""
    from firmware_tools.asm import assemble
    from uapi.bindings import ffi

    stream = assemble(
        "TENSOR slot=0 dtype=INT8 va=0x100000 n=1 h=1 w=1 c=8 stride_c=1\nFILL dst=0 value=3\nEND\n"
    )
    create = ffi.new("struct drm_vnpu_bo_create *", {"size": 4096})
    done = ffi.new(
        "struct drm_vnpu_bo_create *", {"size": 4096, "handle": 1, "mmap_offset": 1 << 32, "va": 0x100000}
    )
    job = ffi.new(
        "struct drm_vnpu_job *", {"cmd_bo_handle": 2, "cmd_size": len(stream), "bo_count": 1, "bos": 0x1234}
    )
    submit = ffi.new("struct drm_vnpu_submit *", {"jobs": 0x5678, "job_count": 1, "job_struct_size": 48})
    job_bo = ffi.new("struct drm_vnpu_job_bo *", {"handle": 1, "flags": bindings.DRM_VNPU_JOB_BO_WRITE})

    def message(request: int, blobs: list[tuple[int, int, bytes]]) -> bytes:
        out = trace._RECORD.pack(trace._MAGIC, 1, 100, 100, 3, 0, 0, len(blobs), request, 10, 20)
        for tag, index, data in blobs:
            out += trace._BLOB.pack(tag, index, len(data), 0, 0) + data + bytes(-len(data) % 8)
        return out

    decoder = trace.Decoder(0)
    bo = decoder.decode(
        trace.parse_message(
            message(
                bindings.IOCTLS["DRM_IOCTL_VNPU_BO_CREATE"],
                [(1, 0, bytes(ffi.buffer(create))), (2, 0, bytes(ffi.buffer(done)))],
            )
        )
    )
    # size did not change, but its kernel-doc says "out": it is shown
    assert bo["out"] == {"size": 4096, "handle": 1, "mmap_offset": 1 << 32, "va": 0x100000}
    event = decoder.decode(
        trace.parse_message(
            message(
                bindings.IOCTLS["DRM_IOCTL_VNPU_SUBMIT"],
                [
                    (1, 0, bytes(ffi.buffer(submit))),
                    (10, 0, bytes(ffi.buffer(job))),
                    (11, 0, bytes(ffi.buffer(job_bo))),
                    (13, 0, stream),
                ],
            )
        )
    )
    (j,) = event["jobs"]
    assert j["cmd_size"] == len(stream) and j["bo_list"] == [{"handle": 1, "flags": "WRITE"}]
    assert j["stream"]["disasm"][0].startswith("TENSOR slot=0 dtype=INT8 va=bo1 ")
    assert j["stream"]["disasm"][1] == "FILL dst=0 value=3  # 0x0040  -> dst INT8[1,1,1,8]@bo1"
    text = trace.render(event)
    assert "      bos: bo1:WRITE" in text and f"      stream ({len(stream)} bytes):" in text


# --- -c, -C and the ioctl filter -----------------------------------------------------------------------


def _cli(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "libaccel.tools.cli", "trace", *args],
        env=trace_env(), capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def test_c_prints_only_a_summary_table_as_strace_does(c_program: Path, tmp_path: Path) -> None:
    r = _cli(["-c", "-o", str(tmp_path / "out"), "--", str(c_program)])
    assert r.returncode == 7, r.stderr
    lines = (tmp_path / "out").read_text().splitlines()
    assert lines[0] == "% time     seconds  usecs/call     calls    errors ioctl"
    assert lines[1].startswith("------ -----------") and lines[-2] == lines[1]
    rows = {line.split()[-1]: line.split() for line in lines[2:-2]}
    assert set(rows) == {"GET_PARAM", "SUBMIT"}  # no per-call lines, and TCGETS is not DRM
    assert rows["SUBMIT"][3:5] == ["1", "1"]  # calls, errors
    total = lines[-1].split()
    assert total[0] == "100.00" and total[3:] == ["2", "2", "total"]
    assert abs(float(total[1]) - sum(float(r[1]) for r in rows.values())) < 2e-6


def test_c_json_is_one_summary_object_and_capital_c_keeps_the_calls(c_program: Path, tmp_path: Path) -> None:
    r = _cli(["-c", "--json", "-o", str(tmp_path / "out"), "--", str(c_program)])
    assert r.returncode == 7, r.stderr
    (only,) = json_events((tmp_path / "out").read_text())
    rows = only["summary"]["ioctls"]
    assert {row["ioctl"] for row in rows} == {"DRM_IOCTL_VNPU_GET_PARAM", "DRM_IOCTL_VNPU_SUBMIT"}
    assert all(row["calls"] == 1 and row["errors"] == 1 and row["avg_us"] >= 0 for row in rows)
    assert only["summary"]["total"]["calls"] == 2 and round(sum(row["percent"] for row in rows)) == 100
    r = _cli(["-C", "--json", "-o", str(tmp_path / "both"), "--", str(c_program)])
    events = json_events((tmp_path / "both").read_text())
    assert [e.get("ioctl") for e in events[:2]] == ["DRM_IOCTL_VNPU_GET_PARAM", "DRM_IOCTL_VNPU_SUBMIT"]
    assert "summary" in events[2]


@pytest.mark.parametrize("spec", ["SUBMIT", "trace=submit", "DRM_IOCTL_VNPU_SUBMIT,GEM_CLOSE"])
def test_the_ioctl_filter_keeps_only_the_named_ioctls(c_program: Path, tmp_path: Path, spec: str) -> None:
    r = _cli(["--json", "-e", spec, "-o", str(tmp_path / "out"), "--", str(c_program)])
    assert r.returncode == 7, r.stderr
    assert [e["ioctl"] for e in json_events((tmp_path / "out").read_text())] == ["DRM_IOCTL_VNPU_SUBMIT"]
    r = _cli(
        ["-c", "--ioctl", spec.removeprefix("trace="), "-o", str(tmp_path / "sum"), "--", str(c_program)]
    )
    rows = (tmp_path / "sum").read_text().splitlines()[2:-2]
    assert [row.split()[-1] for row in rows] == ["SUBMIT"]


def test_an_unknown_ioctl_name_is_one_line_listing_the_valid_ones(c_program: Path) -> None:
    r = _cli(["-e", "SUBMIT,WAIT", "--", str(c_program)])
    assert r.returncode == ExitCode.USAGE and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert (
        "unknown ioctl 'WAIT': did you mean BO_WAIT, SYNCOBJ_TIMELINE_WAIT, SYNCOBJ_WAIT, WAIT_VBLANK?"
        in r.stderr
    )
    assert "the vnpu ioctls are BO_CREATE, BO_INFO, BO_SYNC, BO_WAIT, GET_PARAM, SUBMIT" in r.stderr
    with pytest.raises(trace.UsageError, match="an empty ioctl name"):
        trace.parse_ioctl_filter("SUBMIT,")


def test_the_interposers_blob_limit_is_the_decoders() -> None:
    source = (ROOT / "libaccel" / "tools" / "trace_preload.c").read_text()
    assert re.search(r"^#\s*define MAX_BLOB \(64u \* 1024u\)$", source, re.M) and trace.MAX_BLOB == 64 * 1024


# --- -p PID: ptrace ------------------------------------------------------------------------------------

TARGET = """
import fcntl, os, sys, threading
from uapi.bindings import IOCTLS, ffi
fd = os.open("/dev/null", os.O_RDWR)
print("ready", flush=True)
sys.stdin.readline()
arg = ffi.new("struct drm_vnpu_bo_info *")
arg.handle = 42
def work():  # in a second thread: every thread of the process is traced
    for _ in range(3):
        try:
            fcntl.ioctl(fd, IOCTLS["DRM_IOCTL_VNPU_BO_INFO"], ffi.buffer(arg), True)
        except OSError:
            pass
t = threading.Thread(target=work)
t.start()
t.join()
try:
    fcntl.ioctl(fd, IOCTLS["DRM_IOCTL_GEM_CLOSE"], bytearray(8))
except OSError:
    pass
try:
    fcntl.ioctl(fd, 0x5401, bytearray(64))  # TCGETS: not DRM, not traced
except OSError:
    pass
"""

# libaccel.tools.trace_attach as `accel trace -p` runs it, with /dev/null counted as a DRM device (the host
# has none) and the JSON events on stdout.
TRACER = """
import sys, time
from libaccel.tools import trace, trace_attach
options = trace.Options(json_mode=True, summary=True)
sink = trace.Sink(sys.stdout, options, time.clock_gettime_ns(time.CLOCK_MONOTONIC))
sys.exit(trace_attach.attach(int(sys.argv[1]), sink, fd_filter=lambda path, rdev: path == "/dev/null"))
"""


def _target(tmp_path: Path) -> subprocess.Popen[str]:
    (tmp_path / "target.py").write_text(TARGET)
    t = subprocess.Popen(
        [sys.executable, str(tmp_path / "target.py")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=trace_env(),
    )  # fmt: skip
    assert t.stdout is not None and t.stdout.readline() == "ready\n"
    return t


def test_attach_traces_every_thread_of_a_running_process(tmp_path: Path) -> None:
    t = _target(tmp_path)
    tracer = subprocess.Popen(
        [sys.executable, "-c", TRACER, str(t.pid)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=trace_env(),
    )  # fmt: skip
    try:
        assert tracer.stderr is not None
        assert tracer.stderr.readline() == f"accel trace: attached to process {t.pid} (1 threads)\n"
        assert t.stdin is not None
        t.stdin.write("go\n")
        t.stdin.flush()
        out, err = tracer.communicate(timeout=120)
    finally:
        t.kill()
        tracer.kill()
    assert tracer.returncode == 0, err  # the target's own exit status
    *events, last = json_events(out)
    assert [e["ioctl"] for e in events] == ["DRM_IOCTL_VNPU_BO_INFO"] * 3 + ["DRM_IOCTL_GEM_CLOSE"]
    assert {e["pid"] for e in events} == {t.pid} and events[0]["tid"] != t.pid  # the worker thread
    assert events[0]["in"]["handle"] == 42 and events[0]["errno"] == "ENOTTY" and events[0]["ret"] == -1
    assert events[0]["path"] == "/dev/null" and events[0]["comm"].startswith("python")
    assert last["summary"]["total"] == {**last["summary"]["total"], "calls": 4, "errors": 4}


def test_attach_refusals_are_one_line_saying_why_and_what_to_do(tmp_path: Path) -> None:
    t = _target(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", TRACER, str(t.pid)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=trace_env(),
    )  # fmt: skip
    try:
        assert holder.stderr is not None and holder.stderr.readline().startswith("accel trace: attached")
        r = _cli(["-p", str(t.pid)])  # a second tracer: ptrace allows one
    finally:
        t.kill()
        holder.kill()
    assert r.returncode == ExitCode.USAGE and r.stderr.count("\n") == 1, r.stderr
    assert f"cannot attach to process {t.pid}: " in r.stderr and "already traced" in r.stderr
    r = _cli(["-p", "999999999"])
    assert (r.returncode, r.stderr) == (ExitCode.USAGE, "accel: trace: no process 999999999\n")
    for bad in (["-p", "x"], ["-p", "0"]):
        r = _cli(bad)
        assert r.returncode == ExitCode.USAGE and "not a process id" in r.stderr and r.stderr.count("\n") == 1
    r = _cli(["-p", "1", "--", "true"])
    assert r.returncode == ExitCode.USAGE and "not both" in r.stderr


def test_refusal_names_the_yama_scope_and_the_way_out() -> None:
    from libaccel.tools.trace_attach import refusal

    assert "ptrace_scope is 1 (a process may trace only its own children)" in refusal(
        5, errno.EPERM, 1, False
    )
    assert "sudo sysctl kernel.yama.ptrace_scope=0" in refusal(5, errno.EPERM, 1, False)
    assert "ptrace_scope is 2 (only root may attach)" in refusal(5, errno.EPERM, 2, False)
    assert "until reboot" in refusal(5, errno.EPERM, 3, True)
    assert "already traced" in refusal(5, errno.EPERM, 1, True)  # root: Yama is not why
    assert all("accel trace -- CMD" in refusal(5, errno.EPERM, s, False) for s in (None, 1, 2, 3))
    assert refusal(5, errno.ESRCH, None, False) == "trace: no process 5"


def test_a_stream_is_read_through_a_duplicate_of_the_process_fd() -> None:
    """pidfd_getfd gives the tracer the process's own open file; on /dev/null its BO_INFO is ENOTTY
    (on vnpu.ko: the BO, tests/kernel/test_accel_tools.py)."""
    from libaccel.tools.trace_attach import _read_bo

    proc = subprocess.Popen(["sleep", "30"], stdin=subprocess.DEVNULL)
    try:
        with pytest.raises(OSError) as e:
            _read_bo(proc.pid, 0, 1, 0, 16)
        assert e.value.errno == errno.ENOTTY
        with pytest.raises(OSError) as e:
            _read_bo(proc.pid, 99, 1, 0, 16)  # no such fd in the process
        assert e.value.errno == errno.EBADF
    finally:
        proc.kill()
        proc.wait()
