"""The vnpu ISA, derived at import from ``vnpu_isa.toml``.

This module encodes and decodes command streams. It is generic: every
opcode, field and layout comes from the TOML description, so adding an
instruction there adds it here, in the generated C header and in the
kernel's validator table.
"""

from __future__ import annotations

import struct
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

SPEC_PATH = Path(__file__).with_name("vnpu_isa.toml")

HEADER_SIZE = 4
_FIELD_FORMATS = {"u32": "<I", "i32": "<i", "u64": "<Q", "in": "<I", "out": "<I", "flags": "<I"}
_FIELD_SIZES = {"u32": 4, "i32": 4, "u64": 8, "in": 4, "out": 4, "flags": 4}
_FIELD_RANGES = {
    "u32": (0, 2**32 - 1),
    "i32": (-(2**31), 2**31 - 1),
    "u64": (0, 2**64 - 1),
    "in": (0, 2**32 - 1),
    "out": (0, 2**32 - 1),
    "flags": (0, 2**32 - 1),
}


class IsaError(ValueError):
    """A malformed command stream or instruction; ``offset`` is its byte offset."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        self.offset = offset
        super().__init__(message if offset is None else f"at byte {offset}: {message}")


@dataclass(frozen=True)
class FieldSpec:
    """One field of an instruction: name, type and byte offset in the instruction."""

    name: str
    type: str
    offset: int
    size: int
    doc: str = ""
    when: str | None = None
    allowed: tuple[str, ...] = ()

    @property
    def is_operand(self) -> bool:
        return self.type in ("in", "out")


@dataclass(frozen=True)
class InstructionSpec:
    """The layout of one opcode."""

    name: str
    opcode: int
    size: int
    fields: tuple[FieldSpec, ...]
    doc: str = ""

    def field(self, name: str) -> FieldSpec:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no field {name!r}")

    @property
    def operands(self) -> tuple[FieldSpec, ...]:
        return tuple(f for f in self.fields if f.is_operand)


@dataclass(frozen=True)
class DType:
    name: str
    code: int
    size: int
    min: int
    max: int


@dataclass(frozen=True)
class IsaSpec:
    """The whole ISA description."""

    name: str
    version_major: int
    version_minor: int
    slots: int
    align: int
    dtypes: Mapping[str, DType]
    flags: Mapping[str, int]  # flag name -> bit mask
    instructions: tuple[InstructionSpec, ...]

    @property
    def version(self) -> int:
        """The version as GET_PARAM reports it: (major << 16) | minor."""
        return (self.version_major << 16) | self.version_minor

    def by_name(self, name: str) -> InstructionSpec:
        try:
            return self._by_name[name]
        except KeyError:
            raise IsaError(f"unknown instruction {name!r}") from None

    def by_opcode(self, opcode: int) -> InstructionSpec | None:
        return self._by_opcode.get(opcode)

    def dtype_by_code(self, code: int) -> DType | None:
        return self._dtype_by_code.get(code)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {i.name: i for i in self.instructions})
        object.__setattr__(self, "_by_opcode", {i.opcode: i for i in self.instructions})
        object.__setattr__(self, "_dtype_by_code", {d.code: d for d in self.dtypes.values()})


def _layout(fields: Iterable[Mapping], align: int) -> tuple[tuple[FieldSpec, ...], int]:
    offset = HEADER_SIZE
    out = []
    for f in fields:
        size = _FIELD_SIZES[f["type"]]
        offset = (offset + size - 1) // size * size
        out.append(
            FieldSpec(
                name=f["name"],
                type=f["type"],
                offset=offset,
                size=size,
                doc=f.get("doc", ""),
                when=f.get("when"),
                allowed=tuple(f.get("allowed", ())),
            )
        )
        offset += size
    return tuple(out), (offset + align - 1) // align * align


def load_spec(path: Path = SPEC_PATH) -> IsaSpec:
    """Parse the TOML description into an :class:`IsaSpec`."""
    raw = tomllib.loads(path.read_text())
    isa = raw["isa"]
    instructions = []
    for ins in raw["instruction"]:
        fields, size = _layout(ins["fields"], isa["align"])
        instructions.append(
            InstructionSpec(
                name=ins["name"], opcode=ins["opcode"], size=size, fields=fields, doc=ins.get("doc", "")
            )
        )
    return IsaSpec(
        name=isa["name"],
        version_major=isa["version_major"],
        version_minor=isa["version_minor"],
        slots=isa["slots"],
        align=isa["align"],
        dtypes={k: DType(name=k, **v) for k, v in raw["dtypes"].items()},
        flags={k: 1 << v["bit"] for k, v in raw["flags"].items()},
        instructions=tuple(instructions),
    )


SPEC = load_spec()


@dataclass(frozen=True)
class Instruction:
    """One decoded (or to-be-encoded) instruction: opcode name and field values."""

    op: str
    fields: Mapping[str, int] = field(default_factory=dict)
    offset: int = 0  # byte offset in the stream it was decoded from

    def __getitem__(self, name: str) -> int:
        return self.fields[name]

    @property
    def spec(self) -> InstructionSpec:
        return SPEC.by_name(self.op)


def _flag_mask(spec: InstructionSpec, f: FieldSpec) -> int:
    return sum(SPEC.flags[name] for name in f.allowed)


def _check_fields(spec: InstructionSpec, values: Mapping[str, int], offset: int | None) -> None:
    flags = values.get("flags", 0)
    for f in spec.fields:
        v = values[f.name]
        lo, hi = _FIELD_RANGES[f.type]
        if not lo <= v <= hi:
            raise IsaError(f"{spec.name}.{f.name}={v} is out of range for {f.type}", offset)
        if f.type == "flags" and v & ~_flag_mask(spec, f):
            raise IsaError(f"{spec.name}.flags has undefined bits {v & ~_flag_mask(spec, f):#x}", offset)
        if f.is_operand:
            if f.when is not None and not flags & SPEC.flags[f.when]:
                if v != 0:
                    raise IsaError(f"{spec.name}.{f.name} must be 0 without flag {f.when}", offset)
            elif v >= SPEC.slots:
                raise IsaError(f"{spec.name}.{f.name}: slot {v} is not below {SPEC.slots}", offset)


def encode(op: str, **values: int) -> bytes:
    """Encode one instruction. Missing fields default to 0; unknown ones raise."""
    spec = SPEC.by_name(op)
    names = {f.name for f in spec.fields}
    unknown = set(values) - names
    if unknown:
        raise IsaError(f"{op} has no field(s) {', '.join(sorted(unknown))}")
    full = {f.name: int(values.get(f.name, 0)) for f in spec.fields}
    _check_fields(spec, full, None)
    buf = bytearray(spec.size)
    struct.pack_into("<I", buf, 0, spec.opcode | (spec.size << 16))
    for f in spec.fields:
        struct.pack_into(_FIELD_FORMATS[f.type], buf, f.offset, full[f.name])
    return bytes(buf)


def encode_instruction(ins: Instruction) -> bytes:
    return encode(ins.op, **ins.fields)


def assemble(instructions: Iterable[Instruction]) -> bytes:
    """Encode a sequence of instructions into one command stream."""
    return b"".join(encode_instruction(i) for i in instructions)


def decode_one(stream: bytes | memoryview, offset: int = 0) -> Instruction:
    """Decode the instruction at ``offset``, checking every reserved bit."""
    mv = memoryview(stream)
    if offset % SPEC.align:
        raise IsaError("instruction is not 8-byte aligned", offset)
    if offset + HEADER_SIZE > len(mv):
        raise IsaError("truncated instruction header", offset)
    (header,) = struct.unpack_from("<I", mv, offset)
    opcode, reserved, size = header & 0xFF, (header >> 8) & 0xFF, header >> 16
    spec = SPEC.by_opcode(opcode)
    if spec is None:
        raise IsaError(f"unknown opcode {opcode:#04x}", offset)
    if reserved:
        raise IsaError(f"{spec.name}: reserved header bits are {reserved:#x}, not 0", offset)
    if size != spec.size:
        raise IsaError(f"{spec.name}: size {size} in header, expected {spec.size}", offset)
    if offset + size > len(mv):
        raise IsaError(f"{spec.name}: truncated ({len(mv) - offset} of {size} bytes)", offset)
    raw = bytes(mv[offset : offset + size])
    values = {}
    used = bytearray(size)
    used[:HEADER_SIZE] = b"\1" * HEADER_SIZE
    for f in spec.fields:
        (values[f.name],) = struct.unpack_from(_FIELD_FORMATS[f.type], raw, f.offset)
        used[f.offset : f.offset + f.size] = b"\1" * f.size
    for i, (byte, is_used) in enumerate(zip(raw, used, strict=True)):
        if byte and not is_used:
            raise IsaError(f"{spec.name}: reserved byte {i} is {byte:#x}, not 0", offset)
    _check_fields(spec, values, offset)
    return Instruction(spec.name, values, offset)


def decode(stream: bytes | memoryview) -> list[Instruction]:
    """Decode a whole command stream. It must end with exactly one END."""
    out = []
    offset = 0
    n = len(stream)
    while offset < n:
        ins = decode_one(stream, offset)
        out.append(ins)
        offset += ins.spec.size
        if ins.op == "END":
            if offset != n:
                raise IsaError(f"{n - offset} bytes after END", offset)
            return out
    raise IsaError("command stream does not end with END", offset)


def tensor_extent(desc: Mapping[str, int]) -> tuple[int, int]:
    """Byte range [start, end) of device VAs a TENSOR descriptor can touch."""
    dtype = SPEC.dtype_by_code(desc["dtype"])
    if dtype is None:
        raise IsaError(f"TENSOR: unknown dtype {desc['dtype']}")
    dims = (desc["n"], desc["h"], desc["w"], desc["c"])
    if min(dims) < 1:
        raise IsaError(f"TENSOR: dimensions {dims} must all be >= 1")
    strides = (desc["stride_n"], desc["stride_h"], desc["stride_w"], desc["stride_c"])
    last = sum((d - 1) * s for d, s in zip(dims, strides, strict=True))
    return desc["va"], desc["va"] + last + dtype.size
