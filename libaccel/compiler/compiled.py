"""CompiledPartition: one job's compiled code, and its serialization (the compile cache's file format).

:func:`~libaccel.compiler.lower.compile_partition` makes one, the compile cache
(:mod:`libaccel.compiler.cache`) and LiteRT's bytecode store it, and
:class:`~libaccel.compiler.runner.PartitionRunner` loads it. The serialized form, little-endian::

    offset      size  field
    0           8     magic b"VNPUCP01" (the last two digits are the format's version)
    8           8     header length H
    16          H     header, UTF-8 JSON: compiler and ISA versions, node indices, relocations
                      ([byte offset, region] pairs), arena size, I/O bindings, stats, the sizes below
    16+H        S     the command stream (TENSOR va fields hold region offsets until relocated)
    16+H+S      W     the weights

A file of another format (magic) or another ``COMPILER_VERSION`` is refused with a ValueError naming
it, which the cache treats as a miss: it recompiles and rewrites the file.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO

import numpy as np

from libaccel.compiler.relocation import Relocation

COMPILER_VERSION = "1.16.0"  # bump whenever the generated code (or which nodes are supported) can change


@dataclass(frozen=True)
class IoBinding:
    """Where a partition input or output lives in the arena (a dense tensor of ``shape`` at ``offset``).

    ``exclusive``: no other tensor of the partition ever uses these bytes, so every stream address
    inside them is this tensor's, and a runner may move the tensor to another buffer by rebasing
    those addresses (:class:`~libaccel.compiler.relocation.Moved`)."""

    index: int
    offset: int
    shape: tuple[int, ...]
    dtype: str
    exclusive: bool = False

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


class WeightsFile:
    """A cached partition's weights left in the cache file, read straight into a BO on upload.

    The file stays open from :meth:`CompiledPartition.from_file` on, so a cache entry replaced or
    removed meanwhile does not matter. Uploading this way puts the MBs of weights in the process
    once (in the BO) instead of twice (a bytes object, then the BO).
    """

    def __init__(self, file: BinaryIO, offset: int, size: int) -> None:
        self.file = file
        self.offset = offset
        self.size = size

    def __len__(self) -> int:
        return self.size

    def readinto(self, buffer: memoryview) -> None:
        """Fill ``buffer`` (exactly ``len(self)`` bytes) from the file."""
        view = memoryview(buffer).cast("B")
        if len(view) != self.size:
            raise ValueError(f"weights are {self.size} bytes, the buffer {len(view)}")
        done = 0
        while done < self.size:
            n = os.preadv(self.file.fileno(), [view[done:]], self.offset + done)
            if n <= 0:
                raise ValueError("compiled partition is truncated")
            done += n

    def read(self) -> bytes:
        out = bytearray(self.size)
        self.readinto(memoryview(out))
        return bytes(out)

    def close(self) -> None:
        self.file.close()


@dataclass
class CompiledPartition:
    """One job's worth of compiled code: what PartitionRunner loads and the compile cache stores."""

    isa_version: int
    node_indices: tuple[int, ...]
    stream: bytes  # command stream; TENSOR va fields hold region offsets until relocated
    relocations: tuple[Relocation, ...]  # the stream's region offsets the runner turns into VAs
    # The compiler's own buffer, a view of a serialized partition's bytes, or the cache file itself
    # (WeightsFile): MBs that are uploaded once, so never copied on the way.
    weights: bytes | bytearray | memoryview | WeightsFile
    arena_size: int
    inputs: tuple[IoBinding, ...]
    outputs: tuple[IoBinding, ...]
    stats: dict[str, Any] = field(default_factory=dict)

    def input(self, index: int) -> IoBinding:
        for b in self.inputs:
            if b.index == index:
                return b
        raise KeyError(f"tensor {index} is not an input of this partition")

    def output(self, index: int) -> IoBinding:
        for b in self.outputs:
            if b.index == index:
                return b
        raise KeyError(f"tensor {index} is not an output of this partition")

    # --- serialization (the compile cache's file format) -----------------------------------
    MAGIC = b"VNPUCP01"

    def to_bytes(self) -> bytes:
        return b"".join(self.to_chunks())

    def to_chunks(self) -> tuple[bytes | bytearray | memoryview, ...]:
        """The serialized form in pieces (header, stream, weights), to write without joining them."""
        header = {
            "compiler_version": COMPILER_VERSION,
            "isa_version": self.isa_version,
            "node_indices": list(self.node_indices),
            "relocations": [r.to_json() for r in self.relocations],
            "arena_size": self.arena_size,
            "inputs": [asdict(b) for b in self.inputs],
            "outputs": [asdict(b) for b in self.outputs],
            "stats": self.stats,
            "stream_size": len(self.stream),
            "weights_size": len(self.weights),
        }
        raw = json.dumps(header).encode()
        weights = self.weights.read() if isinstance(self.weights, WeightsFile) else self.weights
        return self.MAGIC + struct.pack("<Q", len(raw)) + raw, self.stream, weights

    @classmethod
    def _header(cls, head: bytes) -> dict:
        if head[:8] != cls.MAGIC:
            raise ValueError("not a compiled vnpu partition (bad magic)")
        (n,) = struct.unpack_from("<Q", head, 8)
        return {"header_size": 16 + n}

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> CompiledPartition:
        mv = memoryview(data)
        start = cls._header(bytes(mv[:16]))["header_size"]
        h = json.loads(bytes(mv[16:start]))
        stream = bytes(mv[start : start + h["stream_size"]])
        # The weights stay a view of ``data`` (MBs; uploaded once, then dropped with it).
        weights = mv[start + h["stream_size"] : start + h["stream_size"] + h["weights_size"]]
        if len(weights) != h["weights_size"]:
            raise ValueError("compiled partition is truncated")
        return cls._from_header(h, stream, weights)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> CompiledPartition:
        """A serialized partition read from ``path`` without its weights: they stay in the file
        (:class:`WeightsFile`) until the runner reads them into the weights BO."""
        f = open(path, "rb")  # noqa: SIM115 - WeightsFile keeps it open until the upload
        try:
            start = cls._header(f.read(16))["header_size"]
            h = json.loads(f.read(start - 16))
            stream = f.read(h["stream_size"])
            offset = start + h["stream_size"]
            if len(stream) != h["stream_size"] or os.fstat(f.fileno()).st_size != offset + h["weights_size"]:
                raise ValueError("compiled partition is truncated")
            return cls._from_header(h, stream, WeightsFile(f, offset, h["weights_size"]))
        except BaseException:
            f.close()
            raise

    @classmethod
    def _from_header(
        cls, h: dict, stream: bytes, weights: bytes | memoryview | WeightsFile
    ) -> CompiledPartition:
        if h["compiler_version"] != COMPILER_VERSION:
            raise ValueError(f"compiled by compiler {h['compiler_version']}, this is {COMPILER_VERSION}")

        def io(d: dict) -> IoBinding:
            # No ``exclusive`` key (a partition serialized without it): the tensor stays in the arena.
            return IoBinding(
                d["index"], d["offset"], tuple(d["shape"]), d["dtype"], d.get("exclusive", False)
            )

        return cls(
            isa_version=h["isa_version"],
            node_indices=tuple(h["node_indices"]),
            stream=stream,
            relocations=tuple(Relocation.from_json(r) for r in h["relocations"]),
            weights=weights,
            arena_size=h["arena_size"],
            inputs=tuple(io(d) for d in h["inputs"]),
            outputs=tuple(io(d) for d in h["outputs"]),
            stats=h["stats"],
        )
