"""Relocations: the command stream's device addresses that are region offsets until load.

The compiler does not know where the runner's buffer objects will be mapped, so every TENSOR
instruction's ``va`` holds an offset into a region (the weights or the arena) and the emitter
records a :class:`Relocation` for it; the runner adds each region's base VA once, at load
(:func:`relocate`). The compile cache stores them as :meth:`Relocation.to_json` pairs. A tensor no
other shares bytes with can also be moved out of its region at load (:class:`Moved`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from uapi import isa


class Region(IntEnum):
    """The buffer an offset in the stream points into (its value is what the cache file stores)."""

    WEIGHTS = 0
    ARENA = 1


_VA = isa.SPEC.by_name("TENSOR").field("va")
_VA_FORMAT = struct.Struct("<Q")
if _VA.type != "u64":
    raise ImportError(f"TENSOR.va is {_VA.type} in the ISA description; relocation patches a u64")


@dataclass(frozen=True)
class Relocation:
    """The TENSOR ``va`` field at byte ``at`` of the stream holds an offset into ``region``."""

    at: int
    region: Region

    @classmethod
    def tensor_va(cls, instruction: int, region: Region) -> Relocation:
        """The relocation of the TENSOR instruction that starts at byte ``instruction``."""
        return cls(instruction + _VA.offset, region)

    def to_json(self) -> list[int]:
        return [self.at, int(self.region)]

    @classmethod
    def from_json(cls, value: object) -> Relocation:
        """The inverse of :meth:`to_json`; a malformed value is a ValueError naming it."""
        if not (isinstance(value, list) and len(value) == 2 and all(type(v) is int for v in value)):
            raise ValueError(f"relocation {value!r} is not [byte offset, region]")
        at, region = value
        if at < 0:
            raise ValueError(f"relocation {value!r} has a negative byte offset")
        return cls(at, Region(region))


@dataclass(frozen=True)
class Moved:
    """The ``nbytes`` at ``offset`` of ``region`` live at device address ``va`` instead: a tensor
    moved out of its region (a partition's input read straight from a buffer of the caller's). Only
    a tensor no other tensor shares bytes with can move (``IoBinding.exclusive``)."""

    region: Region
    offset: int
    nbytes: int
    va: int


def relocate(
    stream: bytes,
    relocations: Iterable[Relocation],
    bases: Mapping[Region, int],
    moved: Sequence[Moved] = (),
) -> bytes:
    """``stream`` with each relocated ``va`` turned from a region offset into ``bases[region]`` + it,
    or, for an offset inside one of ``moved``, into that span's ``va`` + the offset within it.

    A relocation that does not point at a whole, aligned ``va`` field inside the stream is a
    ValueError (a corrupt compiled partition), as is an address beyond 64 bits.
    """
    out = bytearray(stream)
    field, align, end = _VA.offset, isa.SPEC.align, len(out) - _VA_FORMAT.size  # hoisted: hundreds a load
    for r in relocations:
        at = r.at
        if at < field or (at - field) % align or at > end:
            raise ValueError(
                f"relocation at byte {at} is not a TENSOR va field of the {len(out)}-byte stream"
            )
        (offset,) = _VA_FORMAT.unpack_from(out, at)
        va = bases[r.region] + offset
        for m in moved:
            if m.region == r.region and m.offset <= offset < m.offset + m.nbytes:
                va = m.va + offset - m.offset
                break
        if va >= 1 << 64:
            raise ValueError(f"relocation at byte {at}: {r.region.name} base + {offset:#x} exceeds 64 bits")
        _VA_FORMAT.pack_into(out, at, va)
    return bytes(out)
