"""Assembler/disassembler: the text form round-trips and errors name the line."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firmware_tools import asm_cli
from firmware_tools.asm import AsmError, assemble, disassemble, disassemble_prefix
from uapi.isa import SPEC, FieldSpec, Instruction, InstructionSpec, decode, encode
from vnpu_common.cli import ExitCode

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
    assert lines[0].startswith("TENSOR slot=0 dtype=INT8 va=0x100000 ")
    assert lines[0].endswith("  # 0x0000  INT8[1,8,8,3] 0x100000..0x1000c0 (192 B)")
    assert "zero_point=-1" in lines[0]
    assert "# 0x0040  INT8[1,8,8,3] 0x101000..0x1010c0 (192 B)" in lines[1]
    assert lines[2] == "COPY src=0 dst=1  # 0x0080  src INT8[1,8,8,3]@0x100000 -> dst INT8[1,8,8,3]@0x101000"
    assert lines[3].startswith("CONV2D flags=HAS_BIAS|PER_CHANNEL ")
    # Slots 2..4 were never defined by a TENSOR: the annotation says so (the kernel refuses it).
    assert lines[3].endswith(
        "input INT8[1,8,8,3]@0x100000, filter INT8[1,8,8,3]@0x101000, bias slot 2 (undefined), "
        "quant slot 3 (undefined) -> output slot 4 (undefined)"
    )
    assert lines[4] == "END  # 0x00d8"
    assert assemble(text) == assemble(EXAMPLE)
    assert disassemble(assemble(EXAMPLE), annotate=False).splitlines()[2] == "COPY src=0 dst=1  # 0x0080"


def test_symbols_name_device_addresses_both_ways() -> None:
    source = """\
TENSOR slot=0 dtype=INT8 va=input n=1 h=1 w=1 c=64 stride_c=1
TENSOR slot=1 dtype=INT8 va=output+0x40 n=1 h=1 w=1 c=64 stride_c=1
TENSOR slot=2 dtype=INT32 va=0x300000 n=1 h=1 w=1 c=1 stride_c=4
COPY src=0 dst=1
END
"""
    symbols = {"input": 0x100000, "output": 0x200000}
    raw = assemble(source, symbols=symbols)
    assert [i["va"] for i in decode(raw)[:3]] == [0x100000, 0x200040, 0x300000]
    regions = {"input": (0x100000, 4096), "output": (0x200000, 4096)}
    text = disassemble(raw, regions)
    lines = text.splitlines()
    assert " va=input " in lines[0] and lines[0].endswith("INT8[1,1,1,64] 0x100000..0x100040 (64 B) = input")
    assert " va=output+0x40 " in lines[1]
    assert " va=0x300000 " in lines[2]  # outside every region: stays a number
    assert lines[3].endswith("src INT8[1,1,1,64]@input -> dst INT8[1,1,1,64]@output+0x40")
    assert assemble(text, symbols=symbols) == raw
    with pytest.raises(AsmError) as e:
        assemble("TENSOR va=inptu+4\nEND", symbols=symbols)
    assert (e.value.line, e.value.column) == (1, 11)
    assert "unknown symbol 'inptu' (known: input, output)" in str(e.value)
    with pytest.raises(AsmError, match="'input' is not an integer"):
        assemble("TENSOR va=input\nEND")


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
def test_round_trip_binary_text_binary(body: list[Instruction]) -> None:
    raw = b"".join(encode(i.op, **i.fields) for i in body) + encode("END")
    text = disassemble(raw)
    assert assemble(text) == raw
    assert disassemble(assemble(text)) == text
    assert assemble(disassemble(raw, annotate=False)) == raw
    assert [i.op for i in decode(raw)] == [i.op for i in body] + ["END"]


def _spellings(f: FieldSpec, value: int) -> st.SearchStrategy[str]:
    """Every way the source may write ``value`` for field ``f``."""
    forms = [st.just(str(value))]
    if value >= 0:
        forms += [st.just(hex(value)), st.just(hex(value).upper().replace("0X", "0x")), st.just(bin(value))]
    if f.name == "dtype" and (d := SPEC.dtype_by_code(value)) is not None:
        forms += [st.just(d.name), st.just(d.name.lower())]
    if f.type == "flags" and value:
        names = [n for n, m in SPEC.flags.items() if value & m]
        forms += [st.permutations(names).map("|".join), st.just("|".join(n.lower() for n in names))]
    return st.one_of(forms)


@st.composite
def sources(draw: st.DrawFn) -> tuple[str, bytes]:
    """Source text in free form (case, field order, number bases, spacing, comments, continuations)."""
    body = draw(st.lists(instructions(), max_size=8)) + [Instruction("END", {})]
    lines = []
    for ins in body:
        fields = list(ins.spec.fields)
        shown = [f for f in draw(st.permutations(fields)) if ins[f.name] != 0 or draw(st.booleans())]
        words = [draw(st.sampled_from([ins.op, ins.op.lower(), ins.op.capitalize()]))]
        words += [
            f"{draw(st.sampled_from([f.name, f.name.upper()]))}={draw(_spellings(f, ins[f.name]))}"
            for f in shown
        ]
        text = ""
        for i, w in enumerate(words):
            sep = "" if i == 0 else draw(st.sampled_from([" ", "\t", "  ", " \\\n  "]))
            text += sep + w
        if draw(st.booleans()):
            text += "  # note: x=1 \\"
        lines.append(draw(st.sampled_from(["", "  "])) + text)
        if draw(st.booleans()):
            lines.append(draw(st.sampled_from(["", "# a comment", "   "])))
    expected = b"".join(encode(i.op, **i.fields) for i in body)
    return "\n".join(lines) + "\n", expected


@settings(max_examples=80, deadline=None)
@given(case=sources())
def test_round_trip_text_binary_text(case: tuple[str, bytes]) -> None:
    source, expected = case
    raw = assemble(source)
    assert raw == expected
    canonical = disassemble(raw)
    assert assemble(canonical) == raw  # text -> binary -> text -> the same binary
    assert disassemble(assemble(canonical)) == canonical  # and the canonical text is a fixed point


@pytest.mark.parametrize(
    "source, line, column, message",
    [
        ("NOP\nFROB x=1\nEND", 2, 1, "unknown instruction 'FROB'"),
        ("\n\n  IRQ valu=1\nEND", 3, 7, "IRQ has no field 'valu'"),
        ("IRQ value\nEND", 1, 5, "expected field=value"),
        ("IRQ value=\nEND", 1, 5, "expected field=value"),
        ("NOP\nIRQ value=abc\nEND", 2, 11, "'abc' is not an integer"),
        ("IRQ value=1 value=2\nEND", 1, 13, "given twice"),
        ("IRQ value=0x100000000\nEND", 1, 5, "out of range for u32"),
        ("WAIT sem=0 value=-2147483649\nEND", 1, 12, "out of range for i32"),
        ("TENSOR dtype=FLOAT32\nEND", 1, 14, "unknown dtype 'FLOAT32'"),
        ("CONV2D flags=HAS_BIAS|FAST\nEND", 1, 14, "unknown flag 'FAST'"),
        ("CONV2D flags=0x10\nEND", 1, 8, "undefined bits"),
        ("CONV2D output=1 bias=1\nEND", 1, 17, "bias must be 0 without flag HAS_BIAS"),
        ("# setup\nCOPY src=0 dst=16\nEND", 2, 12, "slot 16 is not below 16"),
        ("COPY src=0 \\\n     dst=x\nEND", 2, 10, "'x' is not an integer"),
        ("NOP\nNOP", None, None, "does not end with END"),
        ("NOP\nEND\n\tNOP\n", 3, 2, "8 bytes after END"),
    ],
)
def test_errors_name_line_and_column(source: str, line: int | None, column: int | None, message: str) -> None:
    with pytest.raises(AsmError) as e:
        assemble(source)
    assert (e.value.line, e.value.column) == (line, column)
    assert message in str(e.value)
    if line is not None:
        assert str(e.value).startswith(f"line {line}, column {column}: ")


def test_backslash_in_a_comment_does_not_continue() -> None:
    assert assemble("NOP  # not continued \\\nEND\n") == encode("NOP") + encode("END")
    with pytest.raises(AsmError, match="line 2, column 1: unknown instruction 'value=1'"):
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
    assert asm_cli.main(["asm", str(bad), "-o", str(tmp_path / "x.bin")]) == ExitCode.BAD_FILE
    err = capsys.readouterr().err
    assert err == f"vnpu-asm: {bad}:2:1: unknown instruction 'JUMP'\n"
    (tmp_path / "bad.bin").write_bytes(b"\xff" * 8)
    assert asm_cli.main(["disasm", str(tmp_path / "bad.bin")]) == ExitCode.BAD_FILE
    assert "unknown opcode 0xff" in capsys.readouterr().err
    assert asm_cli.main(["disasm", str(tmp_path / "missing.bin")]) == ExitCode.BAD_FILE
    assert (
        capsys.readouterr().err
        == f"vnpu-asm: cannot read {tmp_path / 'missing.bin'}: no such file or directory\n"
    )
    # The output path is checked before the source is read: the message blames it, not the source.
    assert asm_cli.main(["asm", str(bad), "-o", str(tmp_path / "no" / "x.bin")]) == ExitCode.BAD_FILE
    no = tmp_path / "no"
    assert capsys.readouterr().err == (
        f"vnpu-asm: -o: cannot write {no / 'x.bin'}: no such directory {no}; create it first\n"
    )


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
    assert asm_cli.main(["disasm", str(path)]) == ExitCode.BAD_FILE
    out = capsys.readouterr()
    assert out.out == "IRQ value=7  # 0x0000\nNOP  # 0x0008\n"
    assert out.err == f"vnpu-asm: {path}: at byte 16: unknown opcode 0xee\n"
