"""`accel` on the shim: list/info decoding, sessions with named BOs, submit, wait, exit codes."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from libaccel.tools import cli, decode
from libaccel.tools.session import hexdump
from uapi import bindings
from uapi.isa import SPEC
from vnpu_common.cli import ExitCode

ROOT = Path(__file__).resolve().parents[2]

COPY_S = """\
# dst = src, 64 int8 values
TENSOR slot=0 dtype=INT8 va=src n=1 h=1 w=1 c=64 stride_c=1
TENSOR slot=1 dtype=INT8 va=dst n=1 h=1 w=1 c=64 stride_c=1
COPY src=0 dst=1
END
"""
# COPY between tensors of different shapes: the device fails the job with -EIO at run time.
BAD_COPY_S = COPY_S.replace("va=dst n=1 h=1 w=1 c=64", "va=dst n=1 h=1 w=1 c=32")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.bin").write_bytes(bytes(range(64)))
    (tmp_path / "copy.s").write_text(COPY_S)
    (tmp_path / "bad.s").write_text(BAD_COPY_S)
    return tmp_path


def test_info_json_decodes_every_param_of_the_header(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "info", "--device", "shim", "--json")
    assert code == 0
    info = json.loads(out)
    enum = bindings.ffi.typeof("enum drm_vnpu_param").elements
    assert [p["param"] for p in info["params"]] == sorted(enum)
    by_name = {p["name"]: p for p in info["params"]}
    assert by_name["isa_version"]["value"] == SPEC.version
    assert by_name["isa_version"]["text"] == f"{SPEC.version_major}.{SPEC.version_minor}"
    caps = by_name["capabilities"]
    expected = [
        n[len("DRM_VNPU_CAP_") :] for n, bit in bindings.CONSTANTS.items() if n.startswith("DRM_VNPU_CAP_")
    ]
    assert sorted(caps["names"]) == sorted(
        n for n in expected if caps["value"] & bindings.CONSTANTS[f"DRM_VNPU_CAP_{n}"]
    )
    assert "READ_ONLY_BO" in caps["names"] and caps["text"].startswith(f"{caps['value']:#x} (")


def test_param_formats_follow_the_kernel_doc() -> None:
    p = {x.name: x for x in decode.params()}
    assert decode.format_param(p["fw_version"], 0x010203) == "1.2.3"
    assert decode.format_param(p["isa_version"], 0x0002_0001) == "2.1"
    assert decode.format_param(p["va_size"], 1 << 30) == "1 GiB (0x40000000)"
    assert decode.format_param(p["fw_build_id"], 0x71937E46) == "0000000071937e46"
    assert decode.capability_names(0b1 | 1 << 40) == ["READ_ONLY_BO", "0x10000000000"]
    assert decode.version_layout("as (major << 16) | (minor << 8) | patch") == [
        ("major", 16, 16),
        ("minor", 8, 8),
        ("patch", 0, 8),
    ]


def test_list_shim_is_a_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "list", "--device", "shim")
    assert code == 0
    header, row = out.splitlines()
    assert header.split() == ["DEVICE", "PCI", "DRIVER", "FIRMWARE", "BUILD", "ID", "ISA", "CORES"]
    assert row.startswith("shim ") and "(in-process shim)" in row
    assert row.split()[-1] == "2"  # the device model's default core count
    from firmware_tools.image import DEFAULT_IMAGE_PATH
    from uapi.firmware_format import parse_image

    assert f"{parse_image(DEFAULT_IMAGE_PATH.read_bytes()).build_id:016x}" in row.split()
    code, out, _ = run(capsys, "list", "--device", "shim", "--json")
    (record,) = json.loads(out)
    assert record["kind"] == "shim" and record["pci_slot"] is None


def test_list_without_devices(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """No device: the table form fails with a hint; the JSON form is an empty list (exit 0), the hint
    on stderr only."""
    monkeypatch.setattr(cli, "list_devices", lambda: [])
    code, out, err = run(capsys, "list")
    assert code == ExitCode.DEVICE and out == "" and "no vnpu devices" in err
    code, out, err = run(capsys, "list", "--json")
    assert code == 0 and json.loads(out) == [] and "no vnpu devices" in err


def test_submit_assembles_with_bo_names_and_writes_outputs(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys,
        "submit",
        "copy.s",
        "--device",
        "shim",
        "--bo",
        "src=in.bin",
        "--bo",
        "dst=64",
        "--out",
        "dst=out.bin",
    )
    assert (code, err) == (0, "")
    assert "job:      ok" in out and "fault_va: -" in out and "time:" in out
    assert "src:r@0x100000, dst:w@0x102000" in out  # each BO is followed by a guard page
    assert (files / "out.bin").read_bytes() == bytes(range(64))
    # without --out, a BO is listed for reading only: the kernel's stream check refuses the write
    code, _, err = run(capsys, "submit", "copy.s", "--device", "shim", "--bo", "src=in.bin", "--bo", "dst=64")
    assert code == ExitCode.DEVICE and err.startswith("accel: DRM_IOCTL_VNPU_SUBMIT failed: EACCES")
    code, out, _ = run(
        capsys, "submit", "copy.s", "--device", "shim", "--bo", "src=in.bin", "--bo", "dst=64:w", "--json"
    )
    record = json.loads(out)
    assert record["status"] == 0 and record["fault_va"] is None and record["time_ms"] > 0
    assert [(b["name"], b["mode"]) for b in record["bos"]] == [("src", "r"), ("dst", "w")]


def test_submit_failed_job_exits_3_with_the_status(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "submit", "bad.s", "--device", "shim", "--bo", "src=in.bin", "--bo", "dst=64:w", "--json"
    )
    assert code == 3
    assert json.loads(out)["status"] == -5  # -EIO


@pytest.mark.parametrize(
    "argv, message",
    [
        (["submit", "nope.s", "--bo", "src=in.bin"], "cannot read nope.s: no such file or directory"),
        (
            ["submit", "copy.s", "--bo", "src=in.bin"],
            "copy.s:3:29: TENSOR.va: unknown symbol 'dst' (known: src)",
        ),
        (["submit", "copy.s", "--bo", "src=missing.bin"], "--bo src=missing.bin: no such file"),
    ],
)
def test_bad_files_are_one_line_exit_4(
    files: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, *argv, "--device", "shim")
    assert code == ExitCode.BAD_FILE, err
    assert err.count("\n") == 1 and err.startswith("accel") and message in err, err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["submit", "copy.s", "--bo", "1x=4K"], "NAME must be an identifier"),
        (["submit", "copy.s", "--bo", "dst=64:x"], "the mode 'x' is not r, w or rw"),
        (["submit", "copy.s", "--bo", "src=in.bin", "--out", "dst=o.bin"], "no BO named 'dst'"),
        (["bo", "create", "a", "4K"], "run it in a session: accel session -e 'bo create a 4K'"),
        (["wait", "bo", "a"], "needs a device file that stays open"),
        (["frob"], "invalid choice: 'frob'"),
    ],
)
def test_usage_errors_are_one_line_exit_2(
    files: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    if argv[0] == "submit":
        argv = [*argv, "--device", "shim"]
    code, out, err = run(capsys, *argv)
    assert code == ExitCode.USAGE, err
    assert err.count("\n") == 1 and err.startswith("accel") and message in err, err


def test_session_script_keeps_bos_between_commands(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (files / "script").write_text(
        "bo create src in.bin\n"
        "bo create dst 64   # zero-filled\n"
        "\n"
        "submit copy.s --bo src --bo dst:w --syncobj done --no-wait\n"
        "wait syncobj done\n"
        "wait bo dst\n"
        "bo dump dst --dtype int8 --shape 4,16\n"
        "bo dump dst --out dst.npy --dtype int8 --shape 4,16\n"
        "bo list\n"
        "bo info dst\n"
        "bo close src\n"
        "bo list\n"
    )
    code, out, err = run(capsys, "session", "script", "--device", "shim")
    assert (code, err) == (0, "")
    assert "done: signaled" in out
    assert "dst: int8[4, 16]\n[[ 0  1  2" in out
    assert np.array_equal(np.load(files / "dst.npy"), np.arange(64, dtype=np.int8).reshape(4, 16))
    listings = [line for line in out.splitlines() if line.startswith(("src ", "dst "))]
    assert [x.split()[0] for x in listings] == ["src", "dst", "dst"]
    assert "va:          0x102000..0x103000" in out  # after src and its guard page


def test_session_stops_at_the_first_failure_with_its_place(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys,
        "session",
        "--device",
        "shim",
        "-e",
        "bo create src in.bin",
        "-e",
        "submit bad.s --bo src --bo dst=64:w",
        "-e",
        "bo list",
    )
    assert code == 3
    assert "job:      failed: EIO" in out and "NAME" not in out  # bo list did not run
    code, out, err = run(
        capsys, "session", "--device", "shim", "--json", "--keep-going", "-e", "bo dump x", "-e", "bo list"
    )
    assert code == 2 and err == "accel: -e:1: no BO named 'x' in this session (BOs: none yet)\n"
    assert json.loads(out) == {"command": "bo list", "bos": []}


def test_bo_dump_hexdump_and_bounds(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "session",
        "--device",
        "shim",
        "-e",
        "bo create a in.bin",
        "-e",
        "bo dump a --offset 16 --length 20",
    )
    assert code == 0
    assert out.splitlines()[1:] == [
        "00000010  10 11 12 13 14 15 16 17  18 19 1a 1b 1c 1d 1e 1f  |................|",
        '00000020  20 21 22 23                                       | !"#|',
        "00000024",
    ]
    code, _, err = run(
        capsys,
        "session",
        "--device",
        "shim",
        "-e",
        "bo create a 16",
        "-e",
        "bo dump a --dtype int32 --shape 8",
    )
    assert code == 2 and "int32[8] needs 32 bytes; a has 16" in err
    assert hexdump(bytes(64)) == (
        "00000000  00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00  |................|\n*\n"
        "00000030  00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00  |................|\n00000040\n"
    )


# What vnpu_debugfs.c prints (its seq_printf formats), for the parser.
STATE = """status: 0x1
ready: 1
isa_version: 0x10001
caps: 0x7
sq head 12 tail 11
last seqno 12
"""
FILES = "# ctx pid bos bo_bytes jobs_in_flight\nctx 1 pid 1 bos 3 bo_bytes 12288 jobs_in_flight 0\n"


def test_state_parses_and_prints_debugfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from libaccel.tools import debugfs

    d = tmp_path / "accel" / "0000:00:04.0"
    d.mkdir(parents=True)
    (d / "state").write_text(STATE)
    (d / "counters").write_text("files: 1\nbos: 3\n")
    (d / "files").write_text(FILES)
    monkeypatch.setattr(debugfs, "DEBUGFS", tmp_path)
    code, out, _ = run(capsys, "state", "--json")
    assert code == 0
    state = json.loads(out)
    assert state["state"] == {
        "status": 1,
        "ready": 1,
        "isa_version": 0x10001,
        "caps": 7,
        "sq": {"head": 12, "tail": 11},
        "last_seqno": 12,
    }
    assert state["counters"] == {"files": 1, "bos": 3}
    assert state["files"] == [
        {
            "ctx": 1,
            "pid": 1,
            "bos": 3,
            "bo_bytes": 12288,
            "jobs_in_flight": 0,
            "command": state["files"][0]["command"],
        }
    ]
    code, out, _ = run(capsys, "state")
    assert "  caps         0x7 (READ_ONLY_BO, PER_CHANNEL_QUANT, RESET_RECOVERY)" in out
    assert "  isa_version  0x10001 (1.1)" in out and "  sq           head 12 tail 11" in out
    assert "  CTX  PID  BOS  BO_BYTES  JOBS_IN_FLIGHT  COMMAND" in out
    code, _, err = run(capsys, "state", "--device", "shim")
    assert code == ExitCode.DEVICE and "the shim has no debugfs" in err
    monkeypatch.setattr(debugfs, "DEBUGFS", tmp_path / "none")
    code, _, err = run(capsys, "state")
    assert code == ExitCode.DEVICE and "debugfs is not mounted" in err


def test_job_status_text_names_the_errno_and_fault_va() -> None:
    from libaccel.tools.session import status_text

    assert status_text(0) == "ok"
    assert status_text(-14, 0x101000).startswith("failed: EFAULT (the device MMU faulted")
    assert status_text(-14, 0x101000).endswith("at device VA 0x101000)")
    assert status_text(-5) == "failed: EIO (the device found a bad instruction or operand at run time)"
    assert status_text(None).startswith("unknown")


def test_session_help_lists_every_command() -> None:
    from libaccel.tools.session import command_parser, session_help

    text = session_help()
    parser = command_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert all(any(line.startswith(name) for line in text.splitlines()) for name in commands), text


def test_the_prompt_edits_lines_and_recalls_history(tmp_path: Path) -> None:
    """At a terminal, ``accel session`` reads lines with readline: the up arrow brings back the last
    command (here run twice: the second ``bo create`` of the same name is refused), ``help`` answers,
    and Ctrl-D ends the session, whose exit code is its worst command's (the refusal's, 2)."""
    import pty
    import select

    main, sub = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "libaccel.tools.cli", "session", "--device", "shim"],
        stdin=sub, stdout=sub, stderr=sub, env=env, cwd=tmp_path, close_fds=True,
    )  # fmt: skip
    os.close(sub)
    out = b""

    def read_until(marker: bytes, start: int = 0) -> int:
        """Read until ``marker`` appears at or after ``start``; the index just past it."""
        nonlocal out
        deadline = time.monotonic() + 240  # a loaded host starts a session slowly
        while (at := out.find(marker, start)) < 0:
            left = deadline - time.monotonic()
            assert left > 0, out
            if select.select([main], [], [], left)[0]:
                out += os.read(main, 4096)
        return at + len(marker)

    def answer_then_prompt(marker: bytes) -> None:
        # Type the next line only once readline waits at the prompt after the answer: a key sent
        # earlier reaches the tty in its cooked mode, where a Ctrl-D is no EOF for readline.
        read_until(b"accel> ", read_until(marker))
        time.sleep(0.2)

    try:
        read_until(b"accel> ")
        os.write(main, b"bo create a 4096\r")
        answer_then_prompt(b"a: handle 1")
        os.write(main, b"\x1b[A\r")  # up arrow: the same line again
        answer_then_prompt(b"exists")
        os.write(main, b"help\r")
        answer_then_prompt(b"wait bo NAME")
        os.write(main, b"\x04")  # Ctrl-D at an empty line
        assert proc.wait(timeout=240) == ExitCode.USAGE
    finally:
        proc.kill()
        os.close(main)
