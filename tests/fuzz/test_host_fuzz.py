"""Property fuzzing of the host-side parsers: only their documented exceptions, no crash, no hang.

Targets: the ISA decoder and encoder (uapi.isa), the assembler and disassembler
(firmware_tools.asm), the firmware image parser (uapi.firmware_format.parse_image) and the
``accel`` / ``vnpu-asm`` / ``vnpu-fw`` command lines. Budgets are small here; VNPU_FUZZ_SCALE
raises them (tests/fuzz/budget.py).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from firmware_tools import asm, asm_cli, fw_cli
from libaccel.tools import cli as accel_cli
from tests.fuzz.budget import budget
from uapi import firmware_format as fw_image
from uapi import isa
from uapi.isa import SPEC

ROOT = Path(__file__).resolve().parents[2]
FIRMWARE = ROOT / "firmware" / "vnpu" / "vnpu_fw.bin"
_FIELD_MAX = {"u32": 2**32 - 1, "u64": 2**64 - 1, "in": SPEC.slots - 1, "out": SPEC.slots - 1}


@st.composite
def instructions(draw: st.DrawFn) -> isa.Instruction:
    """A valid instruction of any opcode, every field drawn from its documented range."""
    spec = draw(st.sampled_from(SPEC.instructions))
    values: dict[str, int] = {}
    flags = 0
    for f in spec.fields:
        if f.type == "flags":
            flags = draw(st.sets(st.sampled_from(f.allowed))) if f.allowed else set()
            values[f.name] = sum(SPEC.flags[a] for a in flags)
        elif f.type == "i32":
            values[f.name] = draw(st.integers(-(2**31), 2**31 - 1))
        else:
            values[f.name] = draw(st.integers(0, _FIELD_MAX[f.type]))
    for f in spec.fields:
        if f.is_operand and f.when is not None and not values.get("flags", 0) & SPEC.flags[f.when]:
            values[f.name] = 0
    return isa.Instruction(spec.name, values)


@given(st.lists(instructions(), max_size=12))
@budget(150)
def test_encode_decode_disassemble_assemble_round_trip(program: list[isa.Instruction]) -> None:
    program = [i for i in program if i.op != "END"] + [isa.Instruction("END", {})]
    stream = isa.assemble(program)
    decoded = isa.decode(stream)
    assert [(i.op, dict(i.fields)) for i in decoded] == [(i.op, dict(i.fields)) for i in program]
    assert asm.assemble(asm.disassemble(stream)) == stream


@given(st.binary(max_size=512))
@budget(300)
def test_decoder_on_random_bytes(data: bytes) -> None:
    try:
        decoded = isa.decode(data)
    except isa.IsaError:
        pass
    else:
        assert isa.assemble(decoded) == data  # what decodes is exactly what re-encodes
    text, error = asm.disassemble_prefix(data)
    assert error is None or isinstance(error, isa.IsaError)
    assert isinstance(text, str)


@given(st.data())
@budget(200)
def test_decoder_on_mutated_valid_streams(data: st.DataObject) -> None:
    program = data.draw(st.lists(instructions(), min_size=1, max_size=6))
    stream = bytearray(isa.assemble([*program, isa.Instruction("END", {})]))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(stream) - 1))
        stream[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(stream)))
    with contextlib.suppress(isa.IsaError):
        isa.decode(bytes(stream[:cut]))


_ASM_WORDS = (
    [i.name for i in SPEC.instructions]
    + [f"{f.name}=" for i in SPEC.instructions for f in i.fields]
    + [
        "0",
        "1",
        "-1",
        "0x",
        "0xffffffffffffffff",
        "99999999999999999999999",
        "INT8",
        "|",
        ",",
        "\n",
        ";",
        "#",
        "  ",
    ]
)


@given(st.lists(st.one_of(st.sampled_from(_ASM_WORDS), st.text(max_size=8)), max_size=30))
@budget(300)
def test_assembler_on_random_text(words: list[str]) -> None:
    text = " ".join(words)
    try:
        asm.assemble(text)
    except asm.AsmError as e:
        assert e.message and "\n" not in e.message


# --- firmware images -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def firmware() -> bytes:
    return FIRMWARE.read_bytes()


def _parse(data: bytes) -> None:
    for check in (True, False):
        try:
            fw_image.parse_image(data, check_signature=check)
        except fw_image.FirmwareError as e:
            assert str(e) and "\n" not in str(e)


@given(st.binary(max_size=600))
@budget(200)
def test_firmware_parser_on_random_bytes(data: bytes) -> None:
    _parse(data)


@given(st.data())
@budget(200)
def test_firmware_parser_on_damaged_images(data: st.DataObject) -> None:
    image = bytearray(FIRMWARE.read_bytes())
    for _ in range(data.draw(st.integers(0, 6))):
        at = data.draw(st.integers(0, len(image) - 1))
        image[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(image)))
    _parse(bytes(image[:cut]))


# --- command lines ---------------------------------------------------------------------------------
def _run_cli(main: Callable[[list[str]], int], argv: list[str]) -> tuple[int, str]:
    """``main(argv)`` with an empty stdin (a command that reads it, ``accel session``, gets EOF)."""
    err = io.StringIO()
    stdin, sys.stdin = sys.stdin, io.StringIO()
    try:
        return _run_cli_captured(main, argv, err)
    finally:
        sys.stdin = stdin


def _run_cli_captured(main: Callable[[list[str]], int], argv: list[str], err: io.StringIO) -> tuple[int, str]:
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse's --help exits 0; anything else must not exit this way
            code = e.code if isinstance(e.code, int) else 1
    return code, err.getvalue()


def _check_cli(main: Callable[[list[str]], int], argv: list[str]) -> None:
    code, err = _run_cli(main, argv)
    assert isinstance(code, int), (argv, code)
    if code != 0:
        # One newline-terminated line (an argument's own \r or \x1e, echoed back, is not a new line).
        lines = err.strip("\n").split("\n")
        assert len(lines) == 1 and lines[0], (argv, code, err)
    assert "Traceback" not in err


_COMMON = ["--help", "-h", "--json", "", "-", "--", "x", "0", "-1", "0x10", "1M", "nonexistent.bin", "=", ":"]
_ACCEL = ["list", "info", "submit", "state", "session", "--device", "shim", "kernel", "/dev/null", "--bo",
          "a=in.bin", "a=in.bin:rw", "b=out.bin:w", "c=in.bin:q", "--timeout", "-e", "bo", "new", "wait",
          "stream.s", "--size", "4096"]  # fmt: skip
_ASM = ["asm", "disasm", "-o", "out.bin", "--fragment", "-D", "A=1", "A", "--region", "r=0x1000:4096",
        "r=1", "--no-annotate", "stream.s", "in.bin"]  # fmt: skip
_FW = ["build", "sign", "verify", "inspect", "-o", "fw.bin", "--key", "key.pem", "--version", "1.2.3",
       "1.2", "--disable-op", "CONV2D", "NOPE", "--build-tag", "t", "--check", "in.bin",
       "fw.toml"]  # fmt: skip


@pytest.fixture(scope="module")
def in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # Module-scoped: hypothesis runs many examples per test; files the CLIs write may pile up.
    tmp_path = tmp_path_factory.mktemp("cli")
    (tmp_path / "in.bin").write_bytes(bytes(range(64)))
    (tmp_path / "stream.s").write_text("FILL dst=0 value=1\nEND\n")
    (tmp_path / "fw.toml").write_text("[firmware]\nversion = 'x'\n")
    (tmp_path / "key.pem").write_text("not a key\n")
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(old)


def _argv(words: list[str]) -> st.SearchStrategy[list[str]]:
    return st.lists(st.one_of(st.sampled_from(words + _COMMON), st.text(max_size=6)), max_size=7)


@given(argv=_argv(_ACCEL))
@example(argv=["list", "\n", "x"])  # an argument with a newline, echoed back in the error
@budget(80)
def test_accel_cli_arguments(in_tmp: Path, argv: list[str]) -> None:
    assume("trace" not in argv)  # runs a program: not for random input
    _check_cli(accel_cli.main, argv)


@given(argv=_argv(_ASM))
@example(argv=["disasm", "asm", "\n", "asm"])  # an argument with a newline, echoed back in the error
@budget(80)
def test_vnpu_asm_cli_arguments(in_tmp: Path, argv: list[str]) -> None:
    _check_cli(asm_cli.main, argv)


@given(argv=_argv(_FW))
@example(argv=["inspect", "a", "\n", "b"])  # an argument with a newline, echoed back in the error
@budget(80)
def test_vnpu_fw_cli_arguments(in_tmp: Path, argv: list[str]) -> None:
    _check_cli(fw_cli.main, argv)
