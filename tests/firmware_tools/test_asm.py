"""Assembler/disassembler: the text form round-trips and errors name the line."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firmware_tools import asm_cli
from firmware_tools.asm import AsmError, assemble, disassemble, disassemble_prefix
from uapi.isa import SPEC, Instruction, InstructionSpec, decode, encode

EXAMPLE = """\
# A 1x8x8x3 int8 tensor, then a copy of it.
TENSOR slot=0 dtype=INT8 va=0x100000 n=1 h=8 w=8 c=3 \\
    stride_n=192 stride_h=24 stride_w=3 stride_c=1 zero_point=-1
tensor slot=1 dtype=int8 va=0x101000 n=1 h=8 w=8 c=3 stride_n=192 \\
 stride_h=24 stride_w=3 stride_c=1  # lower case

COPY src=0 dst=1
CONV2D flags=HAS_BIAS|PER_CHANNEL input=0 filter=1 bias=2 quant=3 output=4 \\
    stride_h=1 stride_w=1 multiplier=0x40000000
END
"""


def test_example_encodes_like_uapi() -> None:
    raw = assemble(EXAMPLE)
    expected = b"".join(
        [
            encode(
                "TENSOR", slot=0, dtype=0, va=0x100000, n=1, h=8, w=8, c=3,
                stride_n=192, stride_h=24, stride_w=3, stride_c=1, zero_point=-1,
            ),
            encode(
                "TENSOR", slot=1, dtype=0, va=0x101000, n=1, h=8, w=8, c=3,
                stride_n=192, stride_h=24, stride_w=3, stride_c=1,
            ),
            encode("COPY", src=0, dst=1),
            encode(
                "CONV2D", flags=3, input=0, filter=1, bias=2, quant=3, output=4,
                stride_h=1, stride_w=1, multiplier=1 << 30,
            ),
            encode("END"),
        ]
    )  # fmt: skip
    assert raw == expected


def test_disassembly_has_offsets_and_symbols() -> None:
    text = disassemble(assemble(EXAMPLE))
    lines = text.splitlines()
    assert len(lines) == 5
    assert lines[0].startswith("TENSOR slot=0 dtype=INT8 va=0x100000 ") and lines[0].endswith("# 0x0000")
    assert "zero_point=-1" in lines[0]
    assert lines[1].endswith("# 0x0040") and lines[2].endswith("# 0x0080")
    assert lines[3].startswith("CONV2D flags=HAS_BIAS|PER_CHANNEL ")
    assert lines[4] == "END  # 0x00d8"
    assert assemble(text) == assemble(EXAMPLE)


_RANGES = {"u32": (0, 2**32 - 1), "i32": (-(2**31), 2**31 - 1), "u64": (0, 2**64 - 1)}


@st.composite
def instructions(draw: st.DrawFn) -> Instruction:
    spec: InstructionSpec = draw(st.sampled_from([i for i in SPEC.instructions if i.name != "END"]))
    flags = 0
    values: dict[str, int] = {}
    for f in spec.fields:
        if f.type == "flags":
            flags = values[f.name] = draw(st.sampled_from([0, *(SPEC.flags[a] for a in f.allowed)]))
    for f in spec.fields:
        if f.type == "flags":
            continue
        if f.is_operand:
            off = f.when is not None and not flags & SPEC.flags[f.when]
            values[f.name] = 0 if off else draw(st.integers(0, SPEC.slots - 1))
        elif f.name == "dtype":
            values[f.name] = draw(st.sampled_from([d.code for d in SPEC.dtypes.values()] + [7]))
        else:
            values[f.name] = draw(st.integers(*_RANGES[f.type]))
    return Instruction(spec.name, values)


@settings(max_examples=60, deadline=None)
@given(body=st.lists(instructions(), max_size=10))
def test_round_trip(body: list[Instruction]) -> None:
    raw = b"".join(encode(i.op, **i.fields) for i in body) + encode("END")
    text = disassemble(raw)
    assert assemble(text) == raw
    assert disassemble(assemble(text)) == text
    assert [i.op for i in decode(raw)] == [i.op for i in body] + ["END"]


@pytest.mark.parametrize(
    "source, line, message",
    [
        ("NOP\nFROB x=1\nEND", 2, "unknown instruction 'FROB'"),
        ("\n\nIRQ valu=1\nEND", 3, "IRQ has no field 'valu'"),
        ("IRQ value\nEND", 1, "expected field=value"),
        ("IRQ value=\nEND", 1, "expected field=value"),
        ("NOP\nIRQ value=abc\nEND", 2, "'abc' is not an integer"),
        ("IRQ value=1 value=2\nEND", 1, "given twice"),
        ("IRQ value=0x100000000\nEND", 1, "out of range for u32"),
        ("WAIT sem=0 value=-2147483649\nEND", 1, "out of range for i32"),
        ("TENSOR dtype=FLOAT32\nEND", 1, "unknown dtype 'FLOAT32'"),
        ("CONV2D flags=HAS_BIAS|FAST\nEND", 1, "unknown flag 'FAST'"),
        ("CONV2D flags=0x10\nEND", 1, "undefined bits"),
        ("CONV2D bias=1\nEND", 1, "bias must be 0 without flag HAS_BIAS"),
        ("# setup\nCOPY src=0 dst=16\nEND", 2, "slot 16 is not below 16"),
        ("NOP\nNOP", None, "does not end with END"),
        ("NOP\nEND\nNOP\n", 3, "8 bytes after END"),
    ],
)
def test_errors_name_the_line(source: str, line: int | None, message: str) -> None:
    with pytest.raises(AsmError) as e:
        assemble(source)
    assert e.value.line == line
    assert message in str(e.value)
    if line is not None:
        assert str(e.value).startswith(f"line {line}: ")


def test_backslash_in_a_comment_does_not_continue() -> None:
    assert assemble("NOP  # not continued \\\nEND\n") == encode("NOP") + encode("END")
    with pytest.raises(AsmError, match="line 2: unknown instruction 'value=1'"):
        assemble("IRQ  # \\\nvalue=1\nEND")


def test_fragment_without_end() -> None:
    assert assemble("NOP  # just one\n", require_end=False) == encode("NOP")
    with pytest.raises(AsmError, match="does not end with END"):
        assemble("NOP\n")


def test_flag_not_allowed_for_opcode() -> None:
    # ADD has no flags field at all; a flags= argument is an unknown field.
    with pytest.raises(AsmError, match="ADD has no field 'flags'"):
        assemble("ADD flags=HAS_BIAS\nEND")


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "prog.s"
    src.write_text(EXAMPLE)
    out = tmp_path / "prog.bin"
    assert asm_cli.main(["asm", str(src), "-o", str(out)]) == 0
    assert out.read_bytes() == assemble(EXAMPLE)
    capsys.readouterr()
    assert asm_cli.main(["disasm", str(out)]) == 0
    assert capsys.readouterr().out == disassemble(out.read_bytes())

    bad = tmp_path / "bad.s"
    bad.write_text("NOP\nJUMP\nEND\n")
    assert asm_cli.main(["asm", str(bad), "-o", str(tmp_path / "x.bin")]) == 1
    err = capsys.readouterr().err
    assert err == f"vnpu-asm: {bad}: line 2: unknown instruction 'JUMP'\n"
    (tmp_path / "bad.bin").write_bytes(b"\xff" * 8)
    assert asm_cli.main(["disasm", str(tmp_path / "bad.bin")]) == 1
    assert "unknown opcode 0xff" in capsys.readouterr().err
    assert asm_cli.main(["disasm", str(tmp_path / "missing.bin")]) == 1
    assert "No such file" in capsys.readouterr().err


def test_disassemble_prefix_of_a_broken_stream(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    good = assemble("IRQ value=7\nNOP\nEND\n")
    assert disassemble_prefix(good) == (disassemble(good), None)
    broken = good[:16] + b"\xee\0\x08\0" + bytes(4)
    text, err = disassemble_prefix(broken)
    assert text == "IRQ value=7  # 0x0000\nNOP  # 0x0008\n"
    assert err is not None and err.offset == 16 and "unknown opcode 0xee" in str(err)
    text, err = disassemble_prefix(good + encode("NOP"))
    assert text == disassemble(good) and err is not None and "8 bytes after END" in str(err)
    path = tmp_path / "broken.bin"
    path.write_bytes(broken)
    assert asm_cli.main(["disasm", str(path)]) == 1
    out = capsys.readouterr()
    assert out.out == "IRQ value=7  # 0x0000\nNOP  # 0x0008\n"
    assert out.err == f"vnpu-asm: {path}: at byte 16: unknown opcode 0xee\n"
