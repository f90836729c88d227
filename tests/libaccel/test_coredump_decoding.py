"""`accel coredump` on real dumps vnpu.ko wrote in the QEMU guest (an MMU fault and a hang, captured
from tests/kernel/test_coredump.py's jobs), and on broken files."""

from __future__ import annotations

import errno
import json
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libaccel.tools.cli import main
from libaccel.tools.coredump import CoredumpError, parse, render, to_json, vnpu_dumps
from uapi import hw_layout as hw
from uapi.bindings import ffi
from vnpu_common.cli import ExitCode

DATA = Path(__file__).parent / "data"
FAULT = (DATA / "coredump_fault.bin").read_bytes()
HANG = (DATA / "coredump_hang.bin").read_bytes()


def test_fault_dump() -> None:
    d = parse(FAULT)
    assert d.version == 1 and d.unknown_sections == []
    assert d.job.status == -errno.EFAULT and d.job.fault_va == 0x102000 and d.job.cycles == 3
    assert [(b.va, b.size) for b in d.bos] == [(0x100000, 4096)]
    assert d.registers[hw.REG_MAGIC] == hw.MAGIC and d.registers[hw.REG_STATUS] == hw.STATUS_READY
    assert len(d.stream) == d.job.cmd_size == 0x98  # TENSOR, TENSOR, COPY, END


def test_hang_dump() -> None:
    d = parse(HANG)
    assert d.job.status == -errno.ETIMEDOUT and d.job.fault_va == 0
    assert d.job.cycles == d.registers[hw.REG_ABORT_CYCLES] == 3


def test_cli_marks_the_failing_instruction(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, data, op in (("f.bin", FAULT, "COPY"), ("h.bin", HANG, "WAIT")):
        (tmp_path / name).write_bytes(data)
        assert main(["coredump", str(tmp_path / name)]) == 0
        marked = [line for line in capsys.readouterr().out.splitlines() if line.startswith(">> ")]
        assert len(marked) == 1 and marked[0].startswith(f">> {op} "), marked
    assert main(["coredump", "--json", str(tmp_path / "f.bin")]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["job"]["status_name"] == "-EFAULT (MMU fault)"
    assert rec["disassembly"][rec["failing_instruction"]].startswith("COPY ")
    assert {r["name"] for r in rec["registers"]} >= {"SQ_HEAD", "SQ_TAIL", "CQ_HEAD", "CQ_TAIL", "REG_STATUS"}
    assert rec["bos"][0]["name"] == "bo0" and "bo0" in rec["disassembly"][0]


def test_every_truncation_is_a_clean_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for n in range(len(FAULT)):
        try:
            parse(FAULT[:n])
        except CoredumpError:
            continue
        # Cut inside the last section's padding only: what is left still decodes.
        assert n >= len(FAULT) - 8, n
    cut = tmp_path / "cut.bin"
    cut.write_bytes(FAULT[:100])
    assert main(["coredump", str(cut)]) == ExitCode.BAD_FILE
    err = capsys.readouterr().err
    assert err.startswith(f"accel: {cut}: truncated") and err.count("\n") == 1


def test_unknown_sections_are_skipped_and_bad_headers_refused() -> None:
    h = ffi.sizeof("struct drm_vnpu_coredump_header")
    data = bytearray(FAULT)
    struct.pack_into("<I", data, 12, struct.unpack_from("<I", data, 12)[0] + 1)  # section_count
    data += struct.pack("<II", 99, 3) + b"abc" + bytes(5)
    assert parse(bytes(data)).unknown_sections == [99]
    with pytest.raises(CoredumpError, match="not a vnpu coredump"):
        parse(b"XXXX" + FAULT[4:])
    with pytest.raises(CoredumpError, match="version 7"):
        parse(FAULT[:4] + struct.pack("<I", 7) + FAULT[8:])
    with pytest.raises(CoredumpError, match="no job section"):
        parse(FAULT[:12] + struct.pack("<I", 0) + FAULT[16:h])


def test_any_clock_renders() -> None:
    d = parse(FAULT[:16] + struct.pack("<Q", (1 << 64) - 1) + FAULT[24:])
    assert render(d).startswith("vnpu coredump v1, captured 2554-07-21 23:34:33 UTC")


def test_dump_listing_keeps_vnpu_and_skips_vanished_or_foreign(tmp_path: Path) -> None:
    """A devcd entry freed during the listing leaves a dangling link: it is skipped, not an error."""
    drivers = tmp_path / "drivers"
    for name in ("vnpu", "amdgpu"):
        (drivers / name).mkdir(parents=True)
    for i, target in enumerate(["vnpu", "amdgpu", None, "vnpu"]):
        dev = tmp_path / "devices" / f"d{i}"
        dev.mkdir(parents=True)
        if target is not None:
            (dev / "driver").symlink_to(drivers / target)
        (tmp_path / f"devcd{i}").mkdir()
        (tmp_path / f"devcd{i}" / "failing_device").symlink_to(dev)
    (tmp_path / "devcd3" / "failing_device").unlink()
    (tmp_path / "devcd3" / "failing_device").symlink_to(tmp_path / "devices" / "gone")
    assert vnpu_dumps(tmp_path) == [tmp_path / "devcd0" / "data"]


def test_no_dump_and_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert vnpu_dumps(tmp_path) == []
    assert main(["coredump", str(tmp_path / "missing.bin")]) == ExitCode.BAD_FILE
    assert "cannot read" in capsys.readouterr().err


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_damaged_dumps_decode_or_fail_cleanly(data: st.DataObject) -> None:
    dump = bytearray(data.draw(st.sampled_from([FAULT, HANG])))
    for _ in range(data.draw(st.integers(1, 8))):
        dump[data.draw(st.integers(0, len(dump) - 1))] = data.draw(st.integers(0, 255))
    try:
        d = parse(bytes(dump))
    except CoredumpError as e:
        assert str(e) and "\n" not in str(e)
        return
    render(d)
    json.dumps(to_json(d))


def test_a_closed_pipe_is_no_traceback() -> None:
    """`accel coredump | head -1`: the reader is gone before the output is written."""
    import subprocess
    import sys

    p = subprocess.Popen(
        [sys.executable, "-m", "libaccel.tools.cli", "coredump", str(DATA / "coredump_fault.bin")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.close()  # long before the interpreter has imported libaccel
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141 and err == "", err
