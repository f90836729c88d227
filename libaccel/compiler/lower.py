"""compile_partition: a set of graph nodes -> one vnpu job (command stream + memory plan).

Memory model of a compiled partition (three buffer objects per job):

* **weights** (read-only): every constant the partition reads (filters,
  biases, constant operands) and tables the compiler makes (per-channel
  requantization, lookup tables), each 64-byte aligned; uploaded once when a
  :class:`~libaccel.compiler.runner.PartitionRunner` is created;
* **arena** (read/write): every non-constant tensor (partition inputs,
  intermediates, outputs), placed by lifetime: two tensors share bytes when
  no node needs both (greedy first-fit by size, the usual offline planner);
  a plan's scratch tensors (:class:`~libaccel.compiler.plan_common.Scratch`) are
  placed the same way, alive during their node only;
  RESHAPE aliases its input's bytes and costs no instruction;
* **command stream**: TENSOR descriptors and operations. Device addresses in
  the stream are offsets into the weights or arena; the runner adds the BOs'
  VAs through :attr:`CompiledPartition.relocations` once, at load.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO

import numpy as np

from libaccel.compiler import fusion, registry
from libaccel.compiler.emitter import ALIGN, Emitter, align_up
from libaccel.compiler.graph import Graph, OpNode, QuantParams, TensorInfo
from libaccel.compiler.plan_common import OpPlan, Unsupported
from uapi import isa

COMPILER_VERSION = "1.16.0"  # bump whenever the generated code (or which nodes are supported) can change


class CompileError(ValueError):
    """The partition cannot be compiled (an unsupported node, a bad node list, a wrong ISA version)."""


@dataclass(frozen=True)
class IoBinding:
    """Where a partition input or output lives in the arena (a dense tensor of ``shape`` at ``offset``)."""

    index: int
    offset: int
    shape: tuple[int, ...]
    dtype: str

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
    relocations: tuple[tuple[int, int], ...]  # (byte offset of a TENSOR va field, region)
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
            "relocations": [list(r) for r in self.relocations],
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
            return IoBinding(d["index"], d["offset"], tuple(d["shape"]), d["dtype"])

        return cls(
            isa_version=h["isa_version"],
            node_indices=tuple(h["node_indices"]),
            stream=stream,
            relocations=tuple((a, b) for a, b in h["relocations"]),
            weights=weights,
            arena_size=h["arena_size"],
            inputs=tuple(io(d) for d in h["inputs"]),
            outputs=tuple(io(d) for d in h["outputs"]),
            stats=h["stats"],
        )


# --- memory planning -------------------------------------------------------------------------
def plan_arena(sizes: dict[int, int], lifetimes: dict[int, tuple[int, int]]) -> tuple[dict[int, int], int]:
    """Offsets for buffers of ``sizes`` live over inclusive step ranges: overlapping lives never share bytes.

    Greedy by decreasing size, each at the lowest aligned offset that fits
    between the buffers already placed whose lifetimes intersect its own.
    """
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, first, last)
    offsets: dict[int, int] = {}
    for key in sorted(sizes, key=lambda k: (-sizes[k], lifetimes[k][0], k)):
        first, last = lifetimes[key]
        size = align_up(max(sizes[key], 1))
        busy = sorted((o, e) for o, e, f, la in placed if f <= last and first <= la)
        offset = 0
        for o, e in busy:
            if offset + size <= o:
                break
            offset = max(offset, e)
        offsets[key] = offset
        placed.append((offset, offset + size, first, last))
    total = max((e for _, e, _, _ in placed), default=0)
    return offsets, total


def scratch_tensors(
    graph: Graph, nodes: Sequence[OpNode], plans: Sequence[OpPlan]
) -> tuple[dict[int, TensorInfo], list[tuple[int, ...]]]:
    """The plans' scratch tensors as TensorInfos indexed past the graph's tensors, and each plan's indices."""
    first = max(graph.tensors, default=-1) + 1
    infos: dict[int, TensorInfo] = {}
    ids: list[tuple[int, ...]] = []
    for n, plan in zip(nodes, plans, strict=True):
        mine = []
        for k, s in enumerate(plan.scratch):
            index = first + len(infos)
            quant = QuantParams((1.0,), (s.zero_point,))
            infos[index] = TensorInfo(index, f"node{n.index}.scratch{k}", s.dtype, tuple(s.shape), quant)
            mine.append(index)
        ids.append(tuple(mine))
    return infos, ids


# --- the compiler entry point -------------------------------------------------------------------
def partition_io(graph: Graph, node_indices: Iterable[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(inputs, outputs) of a node set: non-constant tensors read but not produced inside it, and
    tensors produced inside it that a node outside reads or that are graph outputs."""
    inside = set(node_indices)
    nodes = [n for n in graph.nodes if n.index in inside]
    produced = {t for n in nodes for t in n.outputs}
    inputs: list[int] = []
    for n in nodes:
        for t in n.inputs:
            if t >= 0 and t not in produced and graph.tensors[t].data is None and t not in inputs:
                inputs.append(t)
    used_outside = {t for n in graph.nodes if n.index not in inside for t in n.inputs}
    outputs = [t for n in nodes for t in n.outputs if t in used_outside or t in graph.outputs]
    return tuple(inputs), tuple(outputs)


def compile_partition(
    graph: Graph,
    node_indices: Sequence[int],
    isa_version: int,
    outputs: Sequence[int] | None = None,
) -> CompiledPartition:
    """Compile ``node_indices`` of ``graph`` into one job for a device of ``isa_version``.

    ``isa_version`` is the device's DRM_VNPU_PARAM_ISA_VERSION ((major << 16) | minor;
    ``Device.params.isa_version``). ``outputs`` overrides which produced tensors
    the caller reads afterwards (default: those read outside the partition or
    graph outputs). Raises :class:`CompileError` naming the first node that
    cannot be lowered exactly. Partition inputs/outputs are
    :attr:`CompiledPartition.inputs`/``outputs`` (graph tensor indices and
    their arena placement).
    """
    if isa_version >> 16 != isa.SPEC.version_major:
        raise CompileError(
            f"device ISA {isa_version >> 16}.{isa_version & 0xFFFF} is not supported "
            f"(the compiler emits ISA {isa.SPEC.version_major}.x)"
        )
    wanted = list(dict.fromkeys(node_indices))
    known = {n.index for n in graph.nodes}
    missing = [i for i in wanted if i not in known]
    if missing:
        raise CompileError(f"nodes {missing} are not in the graph")
    if not wanted:
        raise CompileError("empty partition")
    nodes = [n for n in graph.nodes if n.index in set(wanted)]  # execution order
    plans = []
    for n in nodes:
        try:
            plans.append(registry.plan_node(graph, n))
        except Unsupported as e:
            raise CompileError(f"node {n.index} ({n.op}): {e}") from None
    p_inputs, p_outputs = partition_io(graph, wanted)
    if outputs is not None:
        produced = {t for n in nodes for t in n.outputs}
        bad = [t for t in outputs if t not in produced]
        if bad:
            raise CompileError(f"requested outputs {bad} are not produced by the partition")
        p_outputs = tuple(outputs)
    plans = fusion.fuse(graph, nodes, plans, set(p_outputs))

    # Storage: RESHAPE outputs alias their inputs; everything else non-constant gets arena bytes.
    root: dict[int, int] = {}

    def find(t: int) -> int:
        while t in root:
            t = root[t]
        return t

    for n, plan in zip(nodes, plans, strict=True):
        if plan.alias_of is not None:
            root[n.outputs[0]] = find(plan.alias_of)
    lifetimes: dict[int, tuple[int, int]] = {}

    def touch(t: int, step: int) -> None:
        if t < 0 or graph.tensors[t].data is not None:
            return
        r = find(t)
        lo, hi = lifetimes.get(r, (step, step))
        lifetimes[r] = (min(lo, step), max(hi, step))

    end = len(nodes)
    for t in p_inputs:
        touch(t, -1)
    for step, (n, plan) in enumerate(zip(nodes, plans, strict=True)):
        # A fused node's tensors are either internal to the pattern (never stored) or read, through
        # ``reads``, by the node that emits the pattern.
        for t in () if plan.fused else (*n.inputs, *n.outputs, *plan.reads):
            touch(t, step)
    for t in p_outputs:
        touch(t, end)
    scratch, scratch_ids = scratch_tensors(graph, nodes, plans)
    for step, ids in enumerate(scratch_ids):
        lifetimes.update((t, (step, step)) for t in ids)  # only while its node's instructions run
    sizes = {r: (scratch[r] if r in scratch else graph.tensors[r]).nbytes for r in lifetimes}
    offsets, arena_size = plan_arena(sizes, lifetimes)
    arena_offsets = {t: offsets[find(t)] for t in (*graph.tensors, *scratch) if find(t) in offsets}

    em = Emitter(graph, arena_offsets, scratch)
    for plan, ids in zip(plans, scratch_ids, strict=True):
        if plan.emit is not None:
            em.current_scratch = ids
            plan.emit(em)
    em._emit("END")

    def binding(t: int) -> IoBinding:
        info = graph.tensors[t]
        return IoBinding(t, arena_offsets[t], info.shape, info.dtype)

    return CompiledPartition(
        isa_version=isa_version,
        node_indices=tuple(n.index for n in nodes),
        stream=bytes(em.stream),
        relocations=tuple(em.relocations),
        weights=em.weights,  # the emitter's bytearray itself: no copy of the model's weights
        arena_size=max(arena_size, ALIGN),
        inputs=tuple(binding(t) for t in p_inputs),
        outputs=tuple(binding(t) for t in p_outputs),
        stats={
            "nodes": len(nodes),
            "instructions": em.counts,
            "stream_bytes": len(em.stream),
            "weights_bytes": len(em.weights),
            "arena_bytes": arena_size,
            "activation_bytes_unshared": sum(sizes.values()),
        },
    )
