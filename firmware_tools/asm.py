"""Command-stream assembler and disassembler: a text form of the vnpu ISA.

One instruction per line: the mnemonic, then ``field=value`` pairs in any order;
fields left out are zero. ``#`` starts a comment; a line ending in a backslash
continues on the next. Values are integers in any Python base syntax (``42``,
``-1``, ``0x100000``, ``0b101``); ``dtype`` also takes a dtype name (``INT8``), and
``flags`` takes flag names joined by ``|`` (``HAS_BIAS|PER_CHANNEL``).
Mnemonics, dtype and flag names are case-insensitive. Example::

    # out = in, an 8x8x3 int8 tensor copied to a second buffer
    TENSOR slot=0 dtype=INT8 va=0x100000 n=1 h=8 w=8 c=3 stride_n=192 stride_h=24 stride_w=3 stride_c=1
    TENSOR slot=1 dtype=INT8 va=0x101000 n=1 h=8 w=8 c=3 stride_n=192 stride_h=24 stride_w=3 stride_c=1
    COPY src=0 dst=1
    END

**Symbols.** Device addresses are only known once buffers exist, so the assembler
takes a table of symbols (``accel submit`` passes each BO's name and device VA).
Any integer field may then be ``NAME``, ``NAME+N`` or ``NAME-N`` (``va=input+0x40``);
symbol names are case-sensitive. The disassembler, given the BOs' address ranges,
prints addresses inside them the same way, so its output assembles back to the same
bytes with the same table.

**Errors** (:class:`AsmError`) carry the 1-based source line and column of the token
at fault. The disassembler annotates each line (after the byte offset, in the comment,
so it does not change what the text assembles to) with the tensor each slot holds:
dtype, shape and device address range.

The encoding and every check come from ``uapi.isa`` (and so from ``uapi/vnpu_isa.toml``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from uapi.isa import SPEC, FieldSpec, Instruction, IsaError, decode, decode_one, encode, tensor_extent

# Fields the disassembler prints in hex: addresses and Q31 fixed-point multipliers.
_HEX_FIELDS = {"va"}
_HEX_SUFFIXES = ("multiplier",)
# Fields that hold a device address: printed symbolically when a region contains them.
_ADDRESS_FIELDS = {"va"}
_SYMBOL = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)(?:([+-])(.+))?")


class AsmError(ValueError):
    """An assembly error at 1-based ``line`` and ``column`` (None when not tied to a place)."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        self.message = message
        self.line = line
        self.column = column
        super().__init__(message if line is None else f"line {line}, column {column or 1}: {message}")


@dataclass(frozen=True)
class Token:
    """A whitespace-separated word of the source and where it starts."""

    text: str
    line: int
    column: int


@dataclass(frozen=True)
class SourceInstruction:
    """One parsed instruction: the instruction and where it came from."""

    instruction: Instruction
    line: int
    column: int = 1
    field_columns: Mapping[str, int] = field(default_factory=dict)  # field -> column of its name=value

    def column_of(self, error: IsaError) -> int:
        """The column of the field an encoder error names (``OP.field ...``), else the mnemonic's."""
        m = re.match(rf"(?:at byte \d+: )?{self.instruction.op}\.(\w+)", str(error))
        return self.field_columns.get(m.group(1), self.column) if m else self.column


def _parse_int(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise ValueError(f"{text!r} is not an integer") from None


def _resolve(text: str, symbols: Mapping[str, int] | None) -> int:
    """An integer literal, or ``NAME[+|-N]`` from ``symbols``."""
    try:
        return int(text, 0)
    except ValueError:
        pass
    m = _SYMBOL.fullmatch(text)
    if m is None or not symbols:
        raise ValueError(f"{text!r} is not an integer" + ("" if symbols or m is None else " (no symbols)"))
    name, sign, rest = m.groups()
    if name not in symbols:
        raise ValueError(f"unknown symbol {name!r} (known: {', '.join(sorted(symbols))})")
    offset = _parse_int(rest) if sign else 0
    return symbols[name] + (offset if sign != "-" else -offset)


def _parse_value(f: FieldSpec, text: str, op: str, symbols: Mapping[str, int] | None) -> int:
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
        return _resolve(text, symbols)
    except ValueError:
        if f.name == "dtype":
            raise ValueError(f"unknown dtype {text!r} (known: {', '.join(SPEC.dtypes)})") from None
        raise


def _tokens(text: str, line: int, column0: int = 1) -> list[Token]:
    return [Token(m.group(), line, column0 + m.start()) for m in re.finditer(r"\S+", text)]


def _logical_lines(text: str) -> list[list[Token]]:
    """Token lists of the source's logical lines (a line ending in a backslash continues)."""
    out: list[list[Token]] = []
    pending: list[Token] | None = None
    for n, line in enumerate(text.splitlines(), start=1):
        code = line.split("#", 1)[0].rstrip()
        continued = code.endswith("\\")
        tokens = _tokens(code[:-1] if continued else code, n)
        acc = (pending or []) + tokens
        pending = None
        if continued:
            pending = acc
        elif acc:
            out.append(acc)
    if pending:
        out.append(pending)
    return out


def _parse_tokens(tokens: list[Token], symbols: Mapping[str, int] | None) -> SourceInstruction:
    head, *args = tokens
    try:
        spec = SPEC.by_name(head.text.upper())
    except IsaError:
        raise AsmError(f"unknown instruction {head.text!r}", head.line, head.column) from None
    values: dict[str, int] = {}
    columns: dict[str, int] = {}
    for arg in args:
        name, eq, value = arg.text.partition("=")
        if not eq or not name or not value:
            raise AsmError(f"expected field=value, got {arg.text!r}", arg.line, arg.column)
        name = name.lower()
        try:
            f = spec.field(name)
        except KeyError:
            known = ", ".join(f.name for f in spec.fields) or "none"
            raise AsmError(
                f"{spec.name} has no field {name!r} (fields: {known})", arg.line, arg.column
            ) from None
        if name in values:
            raise AsmError(f"field {name!r} given twice", arg.line, arg.column)
        try:
            values[name] = _parse_value(f, value, spec.name, symbols)
        except ValueError as e:
            raise AsmError(f"{spec.name}.{name}: {e}", arg.line, arg.column + len(name) + 1) from None
        columns[name] = arg.column
    return SourceInstruction(Instruction(spec.name, values), head.line, head.column, columns)


def parse(text: str, symbols: Mapping[str, int] | None = None) -> list[SourceInstruction]:
    return [_parse_tokens(tokens, symbols) for tokens in _logical_lines(text)]


def assemble(text: str, require_end: bool = True, symbols: Mapping[str, int] | None = None) -> bytes:
    """Assemble source text into a command stream.

    ``symbols`` maps names (BO names) to integers (their device VAs) for fields written
    ``NAME`` or ``NAME+N``. With ``require_end`` (the default) the result must be a complete
    stream: it is decoded again, so it ends with exactly one END and nothing follows.
    Without it, fragments are allowed (each instruction is still fully checked).
    """
    chunks = []
    at: dict[int, SourceInstruction] = {}  # byte offset -> source, to report stream errors in place
    offset = 0
    for src in parse(text, symbols):
        try:
            raw = encode(src.instruction.op, **src.instruction.fields)
        except IsaError as e:
            raise AsmError(str(e), src.line, src.column_of(e)) from None
        at[offset] = src
        chunks.append(raw)
        offset += len(raw)
    stream = b"".join(chunks)
    if require_end:
        try:
            decode(stream)
        except IsaError as e:
            src = at.get(e.offset or 0)
            raise AsmError(str(e), src.line if src else None, src.column if src else None) from None
    return stream


# --- disassembly -----------------------------------------------------------------------------------

Regions = Mapping[str, tuple[int, int]]  # name -> (device VA, size in bytes)


def symbolize(address: int, regions: Regions | None) -> str | None:
    """``NAME`` or ``NAME+0x..`` for an address inside one of ``regions``, else None."""
    for name, (start, size) in (regions or {}).items():
        if start <= address < start + max(size, 1):
            return name if address == start else f"{name}+{address - start:#x}"
    return None


def format_value(f: FieldSpec, value: int, regions: Regions | None = None) -> str:
    if f.type == "flags":
        names = [n for n, m in SPEC.flags.items() if value & m]
        rest = value & ~sum(SPEC.flags[n] for n in names)
        parts = names + ([f"{rest:#x}"] if rest else [])
        return "|".join(parts) if parts else "0"
    if f.name == "dtype" and (d := SPEC.dtype_by_code(value)) is not None:
        return d.name
    if f.name in _ADDRESS_FIELDS and (sym := symbolize(value, regions)) is not None:
        return sym
    if f.name in _HEX_FIELDS or f.name.endswith(_HEX_SUFFIXES):
        return f"{value:#x}"
    return str(value)


def format_instruction(ins: Instruction, regions: Regions | None = None) -> str:
    spec = ins.spec
    return " ".join(
        [spec.name] + [f"{f.name}={format_value(f, ins.fields[f.name], regions)}" for f in spec.fields]
    )


def describe_tensor(desc: Mapping[str, int], regions: Regions | None = None) -> str:
    """``INT8[1,2,2,4] 0x100000..0x100010 (16 B)`` for a TENSOR's fields (``= in`` inside a region)."""
    dtype = SPEC.dtype_by_code(desc["dtype"])
    shape = f"[{desc['n']},{desc['h']},{desc['w']},{desc['c']}]"
    name = dtype.name if dtype else f"dtype{desc['dtype']}"
    try:
        start, end = tensor_extent(desc)
    except IsaError as e:
        return f"{name}{shape} ({e})"
    text = f"{name}{shape} {start:#x}..{end:#x} ({end - start} B)"
    sym = symbolize(start, regions)
    return f"{text} = {sym}" if sym else text


class _Annotator:
    """Follows the TENSOR slots through a stream to say what each operand slot holds."""

    def __init__(self, regions: Regions | None) -> None:
        self.regions = regions
        self.slots: dict[int, Mapping[str, int]] = {}

    def _operand(self, slot: int) -> str:
        desc = self.slots.get(slot)
        if desc is None:
            return f"slot {slot} (undefined)"
        dtype = SPEC.dtype_by_code(desc["dtype"])
        name = dtype.name if dtype else f"dtype{desc['dtype']}"
        where = symbolize(desc["va"], self.regions) or f"{desc['va']:#x}"
        return f"{name}[{desc['n']},{desc['h']},{desc['w']},{desc['c']}]@{where}"

    def __call__(self, ins: Instruction) -> str:
        if ins.op == "TENSOR":
            self.slots[ins["slot"]] = ins.fields
            return describe_tensor(ins.fields, self.regions)
        flags = ins.fields.get("flags", 0)
        ins_parts, out_parts = [], []
        for f in ins.spec.operands:
            if f.when is not None and not flags & SPEC.flags[f.when]:
                continue
            (out_parts if f.type == "out" else ins_parts).append(f"{f.name} {self._operand(ins[f.name])}")
        if not ins_parts and not out_parts:
            return ""
        text = ", ".join(ins_parts)
        if out_parts:
            text = (text + " " if text else "") + "-> " + ", ".join(out_parts)
        return text


def _line(ins: Instruction, regions: Regions | None, annotator: _Annotator | None) -> str:
    note = annotator(ins) if annotator else ""
    return f"{format_instruction(ins, regions)}  # {ins.offset:#06x}" + (f"  {note}" if note else "")


def disassemble(
    stream: bytes | bytearray | memoryview, regions: Regions | None = None, annotate: bool = True
) -> str:
    """Disassemble a whole command stream (it must be valid) into source text.

    Each line ends with a comment giving the instruction's byte offset and (``annotate``)
    the tensors it uses. ``regions`` (name -> (VA, size)) prints addresses inside them as
    ``NAME+off``. Assembling the text (with the same names as symbols) gives back the
    same bytes.
    """
    annotator = _Annotator(regions) if annotate else None
    return "".join(_line(ins, regions, annotator) + "\n" for ins in decode(bytes(stream)))


def disassemble_prefix(
    stream: bytes | bytearray | memoryview, regions: Regions | None = None, annotate: bool = True
) -> tuple[str, IsaError | None]:
    """Disassemble as much of a possibly broken stream as decodes, for debugging.

    Returns the text of every instruction before the first problem, and that problem
    (None if the stream is valid). The text is what :func:`disassemble` would print.
    """
    data = bytes(stream)
    annotator = _Annotator(regions) if annotate else None
    lines = []
    offset = 0
    error: IsaError | None = None
    try:
        while offset < len(data):
            ins = decode_one(data, offset)
            lines.append(_line(ins, regions, annotator))
            offset += ins.spec.size
            if ins.op == "END":
                break
        decode(data)  # the whole-stream rules: END present, nothing after it
    except IsaError as e:
        error = e
    return "".join(line + "\n" for line in lines), error
