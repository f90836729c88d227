"""The command-stream writer: the one object every op's plan (:class:`~libaccel.compiler.plan_common.OpPlan`)
emits through.

It sits below the op planners and the compiler entry point
(:mod:`libaccel.compiler.lower`): ops and their planner modules import it, it imports neither.
Every TENSOR descriptor it writes addresses a region offset and gets a
:class:`~libaccel.compiler.relocation.Relocation`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from libaccel.compiler.graph import Graph, TensorInfo
from libaccel.compiler.relocation import Region, Relocation
from uapi import isa

ALIGN = 64
_ISA_DTYPES = {"int8": "INT8", "uint8": "UINT8", "int32": "INT32"}


def align_up(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


def pad4(shape: Sequence[int]) -> tuple[int, int, int, int]:
    """``shape`` as the ISA's 4-D shape: leading 1s added (rank above 4 is a ValueError)."""
    if len(shape) > 4:
        raise ValueError(f"rank {len(shape)} > 4")
    s = (1,) * (4 - len(shape)) + tuple(shape)
    return s[0], s[1], s[2], s[3]


def dense_strides(shape: Sequence[int], itemsize: int) -> tuple[int, int, int, int]:
    s = [0, 0, 0, 0]
    step = itemsize
    for i in (3, 2, 1, 0):
        s[i] = step
        step *= shape[i]
    return s[0], s[1], s[2], s[3]


class Emitter:
    """Builds the command stream: TENSOR descriptors in 16 slots (reused LRU) and operations."""

    def __init__(
        self, graph: Graph, arena_offsets: dict[int, int], scratch: dict[int, TensorInfo] | None = None
    ) -> None:
        self.graph = graph
        self.arena_offsets = arena_offsets  # tensor index -> arena offset (aliases resolved)
        self.scratch_tensors = scratch or {}  # plans' scratch tensors, indexed past the graph's
        self.current_scratch: tuple[int, ...] = ()  # those of the plan being emitted
        self.stream = bytearray()
        self.relocations: list[Relocation] = []
        self.weights = bytearray()
        self.weight_offsets: dict[int, int] = {}
        self.slots: OrderedDict[tuple, int] = OrderedDict()  # descriptor -> slot, least recent first
        self.pinned: set[int] = set()
        self.counts: dict[str, int] = {}

    # --- data ---------------------------------------------------------------------------------
    def scratch(self, k: int) -> int:
        """The tensor index of the emitting plan's ``k``-th scratch tensor
        (:class:`~libaccel.compiler.plan_common.Scratch`)."""
        return self.current_scratch[k]

    def info(self, index: int) -> TensorInfo:
        """A graph tensor or a scratch tensor."""
        if index in self.scratch_tensors:
            return self.scratch_tensors[index]
        return self.graph.tensors[index]

    def _add_weight(self, data: bytes) -> int:
        offset = align_up(len(self.weights))
        self.weights.extend(b"\0" * (offset - len(self.weights)))
        self.weights.extend(data)
        return offset

    def _location(self, t: TensorInfo) -> tuple[Region, int]:
        if t.data is not None:
            if t.index not in self.weight_offsets:
                self.weight_offsets[t.index] = self._add_weight(np.ascontiguousarray(t.data).tobytes())
            return Region.WEIGHTS, self.weight_offsets[t.index]
        return Region.ARENA, self.arena_offsets[t.index]

    def tensor(
        self,
        index: int,
        shape: tuple[int, int, int, int] | None = None,
        broadcast_to: tuple[int, int, int, int] | None = None,
        origin: tuple[int, int, int, int] | None = None,
        strides: tuple[int, int, int, int] | None = None,
        dtype: str | None = None,
    ) -> int:
        """A slot describing graph tensor ``index``.

        ``shape`` reinterprets the dense tensor as that 4-D shape; ``origin``
        instead selects a ``shape`` block of the tensor's own 4-D layout
        starting at that element (concatenation, padding); ``broadcast_to``
        stretches size-1 dimensions with zero strides; ``strides`` (in
        elements, with ``origin``) views the tensor in any order (transpose,
        strided slice). ``dtype`` describes the tensor's bytes as elements of
        that type (an int64 tensor as pairs of int32 words; its own layout then
        has a last dimension that many times longer), in which shapes, origins
        and strides count.
        """
        t = self.info(index)
        region, offset = self._location(t)
        itemsize = t.itemsize if dtype is None else np.dtype(dtype).itemsize
        full = pad4(t.shape) if (origin is not None or shape is None) else shape
        if dtype is not None and (origin is not None or shape is None):
            full = (full[0], full[1], full[2], full[3] * (t.itemsize // itemsize))
        own = dense_strides(full, itemsize)
        view = shape if shape is not None else full
        if origin is not None:
            offset += sum(o * s for o, s in zip(origin, own, strict=True))
        if strides is not None:
            own = (
                strides[0] * itemsize,
                strides[1] * itemsize,
                strides[2] * itemsize,
                strides[3] * itemsize,
            )
        strides = own
        if broadcast_to is not None:
            strides = tuple(
                0 if d == 1 and b > 1 else s for d, b, s in zip(view, broadcast_to, strides, strict=True)
            )
            view = broadcast_to
        zp = t.quant.zero_point if t.quant is not None else 0
        return self._slot((dtype or t.dtype, region, offset, tuple(view), tuple(strides), zp))

    def const(self, array: np.ndarray, dtype: str, zero_point: int = 0) -> int:
        """A slot for a compiler-made constant (a 4-D array) placed in the weights (a uint8 filter
        made from a model's filter keeps its ``zero_point``)."""
        data = np.ascontiguousarray(array.astype(np.dtype(dtype)))
        offset = self._add_weight(data.tobytes())
        shape = data.shape
        strides = dense_strides(shape, data.itemsize)
        return self._slot((dtype, Region.WEIGHTS, offset, shape, strides, zero_point))

    def _slot(self, desc: tuple) -> int:
        if desc in self.slots:
            self.slots.move_to_end(desc)
            slot = self.slots[desc]
            self.pinned.add(slot)
            return slot
        used = set(self.slots.values())
        free = [s for s in range(isa.SPEC.slots) if s not in used]
        if free:
            slot = free[0]
        else:
            victim = next(d for d, s in self.slots.items() if s not in self.pinned)
            slot = self.slots.pop(victim)
        self.slots[desc] = slot
        self.pinned.add(slot)
        dtype, region, offset, shape, strides, zp = desc
        self.relocations.append(Relocation.tensor_va(len(self.stream), region))
        self._emit(
            "TENSOR",
            slot=slot,
            dtype=isa.SPEC.dtypes[_ISA_DTYPES[dtype]].code,
            va=offset,
            n=shape[0],
            h=shape[1],
            w=shape[2],
            c=shape[3],
            stride_n=strides[0],
            stride_h=strides[1],
            stride_w=strides[2],
            stride_c=strides[3],
            zero_point=zp,
        )
        return slot

    def _emit(self, op: str, **fields: int) -> None:
        self.stream += isa.encode(op, **fields)
        self.counts[op] = self.counts.get(op, 0) + 1

    def op(
        self,
        name: str,
        single_rounding: bool = False,
        flags: tuple[str, ...] = (),
        float_scale: bool = False,
        **fields: int | None,
    ) -> None:
        """Emit instruction ``name``; its flags field gets HAS_BIAS, PER_CHANNEL, SINGLE_ROUNDING and
        FLOAT_SCALE from the operands, ``single_rounding`` and ``float_scale``, plus the flags named
        in ``flags``."""
        spec = isa.SPEC.by_name(name)
        values = {k: v for k, v in fields.items() if v is not None}
        if any(f.name == "flags" for f in spec.fields):
            bits = 0
            for flag in flags:
                bits |= isa.SPEC.flags[flag]
            flags = ()
            if "bias" in values:
                bits |= isa.SPEC.flags["HAS_BIAS"]
            if "quant" in values:
                bits |= isa.SPEC.flags["PER_CHANNEL"]
            if single_rounding:
                bits |= isa.SPEC.flags["SINGLE_ROUNDING"]
            if float_scale:
                bits |= isa.SPEC.flags["FLOAT_SCALE"]
            values["flags"] = bits
        if flags:
            raise ValueError(f"{name} has no flags field for {list(flags)}")
        self._emit(name, **values)
        self.pinned.clear()
        # The op's output changed memory other slots may describe: the descriptors stay valid
        # (they are addresses, not contents), so nothing is invalidated.

    def end(self) -> None:
        """Close the stream with END, the job's last instruction (after every plan has emitted)."""
        self._emit("END")
