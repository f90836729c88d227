"""The submission and completion queue entries as ``struct`` layouts, built from hw_layout's field
offsets: the one packing the device model (which reads submissions and writes completions) and
libaccel's shim (which writes submissions and reads completions) share. vnpu.ko reads the same
offsets from the generated vnpu_hw.h."""

from __future__ import annotations

import struct

from uapi import hw_layout as hw


def entry_struct(fields: list[tuple[int, str]], size: int) -> struct.Struct:
    """A little-endian struct of ``(offset, format code)`` fields in offset order, padded with zero
    bytes to ``size``; ValueError if the fields leave a hole or overlap."""
    fmt, pos = "<", 0
    for offset, code in fields:
        if offset != pos:
            raise ValueError(f"field at {offset:#x} does not follow the one ending at {pos:#x}")
        fmt += code
        pos += struct.calcsize("<" + code)
    if pos > size:
        raise ValueError(f"fields end at {pos:#x}, past the entry's {size:#x} bytes")
    return struct.Struct(fmt + (f"{size - pos}x" if size > pos else ""))


#: A whole submission entry: seqno, pt_root, cmd_va, cmd_size, flags, context, core; the rest zero.
SQE = entry_struct(
    [
        (hw.SQE_SEQNO, "Q"),
        (hw.SQE_PT_ROOT, "Q"),
        (hw.SQE_CMD_VA, "Q"),
        (hw.SQE_CMD_SIZE, "I"),
        (hw.SQE_FLAGS, "I"),
        (hw.SQE_CONTEXT, "I"),
        (hw.SQE_CORE, "I"),
    ],
    hw.SQ_ENTRY_SIZE,
)
#: A completion entry: seqno, status, core, fault VA, cycles.
CQE = entry_struct(
    [
        (hw.CQE_SEQNO, "Q"),
        (hw.CQE_STATUS, "i"),
        (hw.CQE_CORE, "I"),
        (hw.CQE_FAULT_VA, "Q"),
        (hw.CQE_CYCLES, "Q"),
    ],
    hw.CQ_ENTRY_SIZE,
)
