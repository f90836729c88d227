"""The ISA encoder/decoder (uapi/isa.py): round trips and every rejection, with the right byte offset."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uapi.isa import (
    SPEC,
    FieldSpec,
    Instruction,
    InstructionSpec,
    IsaError,
    assemble,
    decode,
    decode_one,
    encode,
    tensor_extent,
)

_RANGES = {"u32": (0, 2**32 - 1), "i32": (-(2**31), 2**31 - 1), "u64": (0, 2**64 - 1)}
NON_END = [i for i in SPEC.instructions if i.name != "END"]


def _allowed_mask(f: FieldSpec) -> int:
    return sum(SPEC.flags[a] for a in f.allowed)


@st.composite
def instructions(draw: st.DrawFn, spec: InstructionSpec | None = None) -> Instruction:
    """A random valid instruction (of ``spec``, or of any opcode but END)."""
    spec = spec or draw(st.sampled_from(NON_END))
    values: dict[str, int] = {}
    flags = 0
    for f in spec.fields:
        if f.type == "flags":
            mask = _allowed_mask(f)
            flags = draw(st.integers(0, mask).map(lambda v, m=mask: v & m))
            values[f.name] = flags
    for f in spec.fields:
        if f.type == "flags":
            continue
        if f.is_operand:
            if f.when is not None and not flags & SPEC.flags[f.when]:
                values[f.name] = 0
            else:
                values[f.name] = draw(st.integers(0, SPEC.slots - 1))
        else:
            values[f.name] = draw(st.integers(*_RANGES[f.type]))
    return Instruction(spec.name, values)


def _with_offsets(ins: list[Instruction]) -> list[Instruction]:
    out, off = [], 0
    for i in ins:
        out.append(Instruction(i.op, dict(i.fields), off))
        off += i.spec.size
    return out


@pytest.mark.parametrize("spec", SPEC.instructions, ids=lambda s: s.name)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_round_trip_every_opcode(spec: InstructionSpec, data: st.DataObject) -> None:
    ins = data.draw(instructions(spec))
    raw = encode(ins.op, **ins.fields)
    assert len(raw) == spec.size and len(raw) % SPEC.align == 0
    assert struct.unpack_from("<I", raw)[0] == spec.opcode | (spec.size << 16)
    back = decode_one(raw)
    assert back == Instruction(spec.name, dict(ins.fields), 0)
    assert encode(back.op, **back.fields) == raw


@settings(max_examples=60, deadline=None)
@given(body=st.lists(instructions(), max_size=12))
def test_stream_round_trip(body: list[Instruction]) -> None:
    stream = body + [Instruction("END")]
    raw = assemble(stream)
    decoded = decode(raw)
    assert decoded == _with_offsets(stream)
    assert assemble(decoded) == raw


# --- malformed streams: each raises IsaError at the offending instruction's byte offset ---


def _prefix(data: st.DataObject) -> bytes:
    return assemble(data.draw(st.lists(instructions(), max_size=4), label="prefix"))


def _raises_at(stream: bytes, offset: int, message: str) -> None:
    with pytest.raises(IsaError) as e:
        decode(stream)
    assert e.value.offset == offset, str(e.value)
    assert message in str(e.value)
    assert str(e.value).startswith(f"at byte {offset}: ")


END = encode("END")
DEFINED = {i.opcode for i in SPEC.instructions}


@settings(max_examples=25, deadline=None)
@given(data=st.data(), opcode=st.integers(0, 255).filter(lambda o: o not in DEFINED))
def test_unknown_opcode(data: st.DataObject, opcode: int) -> None:
    pre = _prefix(data)
    _raises_at(pre + struct.pack("<II", opcode | (8 << 16), 0) + END, len(pre), "unknown opcode")


@settings(max_examples=25, deadline=None)
@given(data=st.data(), spec=st.sampled_from(SPEC.instructions), size=st.integers(0, 0xFFFF))
def test_bad_size(data: st.DataObject, spec: InstructionSpec, size: int) -> None:
    if size == spec.size:
        size += 8
    pre = _prefix(data)
    bad = bytearray(encode(spec.name))
    struct.pack_into("<I", bad, 0, spec.opcode | (size << 16))
    _raises_at(pre + bytes(bad) + END, len(pre), f"size {size} in header, expected {spec.size}")


@settings(max_examples=25, deadline=None)
@given(data=st.data(), spec=st.sampled_from(SPEC.instructions), reserved=st.integers(1, 255))
def test_reserved_header_bits(data: st.DataObject, spec: InstructionSpec, reserved: int) -> None:
    pre = _prefix(data)
    bad = bytearray(encode(spec.name))
    bad[1] = reserved
    _raises_at(pre + bytes(bad) + END, len(pre), "reserved header bits")


def _padding_bytes(spec: InstructionSpec) -> list[int]:
    used = set(range(4))
    for f in spec.fields:
        used.update(range(f.offset, f.offset + f.size))
    return [i for i in range(spec.size) if i not in used]


PADDED = [s for s in SPEC.instructions if _padding_bytes(s)]


def test_tensor_has_interior_padding() -> None:
    # TENSOR's u64 va is 8-aligned after two u32s: bytes 12..15 are interior padding.
    assert set(range(12, 16)) <= set(_padding_bytes(SPEC.by_name("TENSOR")))


@settings(max_examples=40, deadline=None)
@given(data=st.data(), spec=st.sampled_from(PADDED), value=st.integers(1, 255))
def test_nonzero_padding_byte(data: st.DataObject, spec: InstructionSpec, value: int) -> None:
    pre = _prefix(data)
    ins = data.draw(instructions(spec))
    bad = bytearray(encode(ins.op, **ins.fields))
    pos = data.draw(st.sampled_from(_padding_bytes(spec)), label="padding byte")
    bad[pos] = value
    _raises_at(pre + bytes(bad) + END, len(pre), f"reserved byte {pos} is")


FLAGGED = [s for s in SPEC.instructions if any(f.type == "flags" for f in s.fields)]


@settings(max_examples=25, deadline=None)
@given(data=st.data(), spec=st.sampled_from(FLAGGED), bit=st.integers(0, 31))
def test_undefined_flag_bits(data: st.DataObject, spec: InstructionSpec, bit: int) -> None:
    flags_field = next(f for f in spec.fields if f.type == "flags")
    if (1 << bit) & _allowed_mask(flags_field):
        bit = 31
    pre = _prefix(data)
    bad = bytearray(encode(spec.name))
    struct.pack_into("<I", bad, flags_field.offset, 1 << bit)
    _raises_at(pre + bytes(bad) + END, len(pre), "undefined bits")
    with pytest.raises(IsaError, match="undefined bits"):
        encode(spec.name, flags=1 << bit)


CONDITIONAL = [(s, f) for s in SPEC.instructions for f in s.operands if f.when is not None]


@settings(max_examples=25, deadline=None)
@given(data=st.data(), case=st.sampled_from(CONDITIONAL), slot=st.integers(1, 2**32 - 1))
def test_operand_without_its_flag(
    data: st.DataObject, case: tuple[InstructionSpec, FieldSpec], slot: int
) -> None:
    spec, f = case
    pre = _prefix(data)
    bad = bytearray(encode(spec.name))
    struct.pack_into("<I", bad, f.offset, slot)
    _raises_at(pre + bytes(bad) + END, len(pre), f"{f.name} must be 0 without flag {f.when}")
    with pytest.raises(IsaError, match="without flag"):
        encode(spec.name, **{f.name: slot})
    # With the flag set, the same operand is accepted.
    assert decode_one(encode(spec.name, flags=SPEC.flags[f.when], **{f.name: slot % SPEC.slots}))


OPERANDS = [(s, f) for s in SPEC.instructions for f in s.operands]


@settings(max_examples=40, deadline=None)
@given(data=st.data(), case=st.sampled_from(OPERANDS), slot=st.integers(SPEC.slots, 2**32 - 1))
def test_slot_out_of_range(data: st.DataObject, case: tuple[InstructionSpec, FieldSpec], slot: int) -> None:
    spec, f = case
    pre = _prefix(data)
    ins = data.draw(instructions(spec))
    values = dict(ins.fields)
    if f.when is not None:
        values["flags"] |= SPEC.flags[f.when]
    bad = bytearray(encode(spec.name, **values))
    struct.pack_into("<I", bad, f.offset, slot)
    _raises_at(pre + bytes(bad) + END, len(pre), f"slot {slot} is not below {SPEC.slots}")


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_truncation(data: st.DataObject) -> None:
    pre = _prefix(data)
    last = data.draw(instructions())
    raw = encode(last.op, **last.fields)
    cut = data.draw(st.integers(1, len(raw) - 1), label="kept bytes")
    message = "truncated instruction header" if cut < 4 else "truncated"
    _raises_at(pre + raw[:cut], len(pre), message)


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_missing_end(data: st.DataObject) -> None:
    pre = _prefix(data)
    _raises_at(pre, len(pre), "does not end with END")


@settings(max_examples=25, deadline=None)
@given(data=st.data(), extra=st.lists(instructions(), min_size=1, max_size=3))
def test_trailing_bytes_after_end(data: st.DataObject, extra: list[Instruction]) -> None:
    pre = _prefix(data) + END
    tail = assemble(extra)
    _raises_at(pre + tail, len(pre), f"{len(tail)} bytes after END")
    _raises_at(pre + b"\0", len(pre), "1 bytes after END")


def test_misaligned_offset() -> None:
    with pytest.raises(IsaError, match="aligned") as e:
        decode_one(END + END, 4)
    assert e.value.offset == 4


def test_encode_rejects_bad_values() -> None:
    with pytest.raises(IsaError, match="unknown instruction"):
        encode("FROB")
    with pytest.raises(IsaError, match="no field"):
        encode("NOP", value=1)
    with pytest.raises(IsaError, match="out of range for u32"):
        encode("IRQ", value=2**32)
    with pytest.raises(IsaError, match="out of range for i32"):
        encode("WAIT", value=2**31)
    with pytest.raises(IsaError, match="out of range for u64"):
        encode("TENSOR", va=-1)


def test_tensor_extent() -> None:
    desc = dict(dtype=0, va=0x1000, n=1, h=2, w=3, c=4, stride_n=0, stride_h=12, stride_w=4, stride_c=1)
    assert tensor_extent(desc) == (0x1000, 0x1000 + 12 + 8 + 3 + 1)
    # Zero strides broadcast: the extent is one element.
    assert tensor_extent({**desc, "dtype": 2, "stride_h": 0, "stride_w": 0, "stride_c": 0}) == (
        0x1000,
        0x1004,
    )
    with pytest.raises(IsaError, match="dtype"):
        tensor_extent({**desc, "dtype": 99})
    with pytest.raises(IsaError, match=">= 1"):
        tensor_extent({**desc, "h": 0})
