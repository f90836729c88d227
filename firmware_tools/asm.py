"""Command-stream assembler and disassembler: a text form of the vnpu ISA.

One instruction per line: the mnemonic, then ``field=value`` pairs in any order;
fields left out are zero. ``#`` starts a comment; a line ending in a backslash
continues on the next. Values are integers in any Python base syntax (``42``,
``-1``, ``0x100000``, ``0b101``); ``dtype`` also takes a dtype name (``INT8``), and
``flags`` takes flag names joined by ``|`` (``HAS_BIAS|PER_CHANNEL``).
Mnemonics and symbols are case-insensitive. Example::

    # out = in, an 8x8x3 int8 tensor copied to a second buffer
    TENSOR slot=0 dtype=INT8 va=0x100000 n=1 h=8 w=8 c=3 stride_n=192 stride_h=24 stride_w=3 stride_c=1
    TENSOR slot=1 dtype=INT8 va=0x101000 n=1 h=8 w=8 c=3 stride_n=192 stride_h=24 stride_w=3 stride_c=1
    COPY src=0 dst=1
    END

The encoding and every check come from ``uapi.isa`` (and so from ``uapi/vnpu_isa.toml``).
"""

from __future__ import annotations

from dataclasses import dataclass

from uapi.isa import SPEC, FieldSpec, Instruction, IsaError, decode, decode_one, encode

# Fields the disassembler prints in hex: addresses and Q31 fixed-point multipliers.
_HEX_FIELDS = {"va"}
_HEX_SUFFIXES = ("multiplier",)


class AsmError(ValueError):
    """An assembly error; ``line`` is the 1-based source line (None if not tied to one)."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.line = line
        super().__init__(message if line is None else f"line {line}: {message}")


@dataclass(frozen=True)
class SourceInstruction:
    """One parsed source line: the instruction and where it came from."""

    instruction: Instruction
    line: int


def _parse_int(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise ValueError(f"{text!r} is not an integer") from None


def _parse_value(f: FieldSpec, text: str, op: str) -> int:
    if f.type == "flags":
        total = 0
        for part in text.split("|"):
            part = part.strip()
            name = part.upper()
            if name in SPEC.flags:
                if name not in f.allowed:
                    raise ValueError(
                        f"{op} does not accept flag {name} (allowed: {', '.join(f.allowed) or 'none'})"
                    )
                total |= SPEC.flags[name]
            else:
                try:
                    total |= _parse_int(part)
                except ValueError:
                    raise ValueError(f"unknown flag {part!r}") from None
        return total
    if f.name == "dtype" and text.upper() in SPEC.dtypes:
        return SPEC.dtypes[text.upper()].code
    try:
        return _parse_int(text)
    except ValueError:
        if f.name == "dtype":
            raise ValueError(f"unknown dtype {text!r} (known: {', '.join(SPEC.dtypes)})") from None
        raise


def parse_line(text: str, line: int = 1) -> Instruction | None:
    """Parse one source line; None for a blank or comment-only line."""
    code = text.split("#", 1)[0].strip()
    if not code:
        return None
    mnemonic, *args = code.split()
    try:
        spec = SPEC.by_name(mnemonic.upper())
    except IsaError:
        raise AsmError(f"unknown instruction {mnemonic!r}", line) from None
    values: dict[str, int] = {}
    for arg in args:
        name, eq, value = arg.partition("=")
        if not eq or not name or not value:
            raise AsmError(f"expected field=value, got {arg!r}", line)
        name = name.lower()
        try:
            f = spec.field(name)
        except KeyError:
            known = ", ".join(f.name for f in spec.fields) or "none"
            raise AsmError(f"{spec.name} has no field {name!r} (fields: {known})", line) from None
        if name in values:
            raise AsmError(f"field {name!r} given twice", line)
        try:
            values[name] = _parse_value(f, value, spec.name)
        except ValueError as e:
            raise AsmError(f"{spec.name}.{name}: {e}", line) from None
    return Instruction(spec.name, values)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join lines ending in a backslash with the next; each keeps its first line number."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for n, line in enumerate(text.splitlines(), start=1):
        code = line.split("#", 1)[0].rstrip()
        if pending is not None:
            start, acc = pending
            pending = None
        else:
            start, acc = n, ""
        if code.endswith("\\"):
            pending = (start, acc + " " + code[:-1])
        else:
            out.append((start, acc + " " + line))
    if pending is not None:
        out.append(pending)
    return out


def parse(text: str) -> list[SourceInstruction]:
    out = []
    for n, line in _logical_lines(text):
        ins = parse_line(line, n)
        if ins is not None:
            out.append(SourceInstruction(ins, n))
    return out


def assemble(text: str, require_end: bool = True) -> bytes:
    """Assemble source text into a command stream.

    With ``require_end`` (the default) the result must be a complete stream: it is decoded
    again, so it ends with exactly one END and nothing follows. Without it, fragments are
    allowed (each instruction is still fully checked).
    """
    chunks = []
    lines_at: dict[int, int] = {}  # byte offset -> source line, to report stream errors by line
    offset = 0
    for src in parse(text):
        try:
            raw = encode(src.instruction.op, **src.instruction.fields)
        except IsaError as e:
            raise AsmError(str(e), src.line) from None
        lines_at[offset] = src.line
        chunks.append(raw)
        offset += len(raw)
    stream = b"".join(chunks)
    if require_end:
        try:
            decode(stream)
        except IsaError as e:
            raise AsmError(str(e), lines_at.get(e.offset or 0)) from None
    return stream


def format_value(f: FieldSpec, value: int) -> str:
    if f.type == "flags":
        names = [n for n, m in SPEC.flags.items() if value & m]
        rest = value & ~sum(SPEC.flags[n] for n in names)
        parts = names + ([f"{rest:#x}"] if rest else [])
        return "|".join(parts) if parts else "0"
    if f.name == "dtype" and (d := SPEC.dtype_by_code(value)) is not None:
        return d.name
    if f.name in _HEX_FIELDS or f.name.endswith(_HEX_SUFFIXES):
        return f"{value:#x}"
    return str(value)


def format_instruction(ins: Instruction) -> str:
    spec = ins.spec
    return " ".join([spec.name] + [f"{f.name}={format_value(f, ins.fields[f.name])}" for f in spec.fields])


def disassemble(stream: bytes | bytearray | memoryview) -> str:
    """Disassemble a whole command stream (it must be valid) into source text.

    Each line ends with a comment giving the instruction's byte offset; assembling the
    text gives back the same bytes.
    """
    lines = []
    for ins in decode(bytes(stream)):
        lines.append(f"{format_instruction(ins)}  # {ins.offset:#06x}")
    return "\n".join(lines) + "\n"


def disassemble_prefix(stream: bytes | bytearray | memoryview) -> tuple[str, IsaError | None]:
    """Disassemble as much of a possibly broken stream as decodes, for debugging.

    Returns the text of every instruction before the first problem, and that problem
    (None if the stream is valid). The text is what :func:`disassemble` would print.
    """
    data = bytes(stream)
    lines = []
    offset = 0
    error: IsaError | None = None
    try:
        while offset < len(data):
            ins = decode_one(data, offset)
            lines.append(f"{format_instruction(ins)}  # {ins.offset:#06x}")
            offset += ins.spec.size
            if ins.op == "END":
                break
        decode(data)  # the whole-stream rules: END present, nothing after it
    except IsaError as e:
        error = e
    return "".join(line + "\n" for line in lines), error
