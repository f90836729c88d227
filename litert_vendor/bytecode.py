"""vnpu's LiteRT bytecode: one compiled partition as the compiler plugin emits it and the dispatch
library loads it (the payload of a DISPATCH_OP). Format version 1, little-endian::

    offset  size  field
    0       8     magic b"VNPULRT\\0"
    8       4     format version (1)
    12      4     header length H
    16      H     header, UTF-8 JSON: {"function": the DISPATCH_OP's function name,
                    "inputs": [tensor of each DISPATCH_OP input, in order], "outputs": [...],
                    "compiler_version": "1.16.0", "isa_version": (major << 16) | minor,
                    "partition_size": P, "partition_crc32": zlib.crc32 of the partition}
    16+H    P     the compiled partition: libaccel.compiler.compiled.CompiledPartition's serialization
                  (the compile cache's; magic VNPUCP01: streams, weights, relocations, arena plan)

The tensors are numbered as :mod:`litert_vendor.model_reader` numbers a partition's. A bytecode that
is truncated, corrupted, of another format version or compiler, or not vnpu's is refused with a
:class:`BytecodeError` naming the problem.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass

from libaccel.compiler.compiled import COMPILER_VERSION, CompiledPartition

MAGIC = b"VNPULRT\0"
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<8sII")


class BytecodeError(ValueError):
    """A bytecode the dispatch library cannot run, and why."""


@dataclass(frozen=True)
class Bytecode:
    """A parsed bytecode: the function's I/O order and its compiled partition."""

    function: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    compiled: CompiledPartition


def pack(
    function: str, inputs: tuple[int, ...], outputs: tuple[int, ...], compiled: CompiledPartition
) -> bytes:
    """The bytecode of ``compiled``, run as DISPATCH_OP function ``function`` with these I/O tensors."""
    partition = compiled.to_bytes()
    header = json.dumps(
        {
            "function": function,
            "inputs": list(inputs),
            "outputs": list(outputs),
            "compiler_version": COMPILER_VERSION,
            "isa_version": compiled.isa_version,
            "partition_size": len(partition),
            "partition_crc32": zlib.crc32(partition),
        }
    ).encode()
    return _PREFIX.pack(MAGIC, FORMAT_VERSION, len(header)) + header + partition


def unpack(data: bytes | memoryview) -> Bytecode:
    """Parse a bytecode (raises :class:`BytecodeError`)."""
    mv = memoryview(data).cast("B")
    if len(mv) < _PREFIX.size:
        raise BytecodeError(f"vnpu bytecode is {len(mv)} bytes, shorter than its {_PREFIX.size}-byte prefix")
    magic, version, header_size = _PREFIX.unpack_from(mv)
    if magic != MAGIC:
        raise BytecodeError(
            f"not vnpu bytecode (magic {bytes(magic)!r}, expected {MAGIC!r}): another vendor's?"
        )
    if version != FORMAT_VERSION:
        raise BytecodeError(
            f"vnpu bytecode format version {version}; this library reads version {FORMAT_VERSION}: "
            "compile the model again with this release's compiler plugin"
        )
    end = _PREFIX.size + header_size
    if len(mv) < end:
        raise BytecodeError(f"vnpu bytecode is truncated: {len(mv)} bytes, its header ends at {end}")
    try:
        h = json.loads(bytes(mv[_PREFIX.size : end]))
        function, inputs, outputs = str(h["function"]), tuple(h["inputs"]), tuple(h["outputs"])
        size, crc, compiler = int(h["partition_size"]), int(h["partition_crc32"]), str(h["compiler_version"])
    except (ValueError, KeyError, TypeError) as e:
        raise BytecodeError(f"vnpu bytecode header is corrupted ({type(e).__name__}: {e})") from None
    if compiler != COMPILER_VERSION:
        raise BytecodeError(
            f"vnpu bytecode was compiled by compiler {compiler}, this library runs {COMPILER_VERSION}: "
            "compile the model again"
        )
    partition = mv[end : end + size]
    if len(partition) != size:
        raise BytecodeError(f"vnpu bytecode is truncated: its partition has {len(partition)} of {size} bytes")
    if zlib.crc32(partition) != crc:
        raise BytecodeError("vnpu bytecode is corrupted: its partition's CRC-32 does not match the header's")
    try:
        compiled = CompiledPartition.from_bytes(bytes(partition))
    except (ValueError, KeyError, TypeError) as e:
        raise BytecodeError(f"vnpu bytecode's partition does not load: {e}") from None
    return Bytecode(function, inputs, outputs, compiled)
