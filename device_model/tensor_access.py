"""A job's tensors in its device address space: the TENSOR descriptor, the translations of its
tensors to physical runs (kept across jobs while the page tables stay the same), and loads and
stores through the job's MMU, now or bound for the stream's next jobs (:class:`TensorAccess`).

The command processor's units compute on what :class:`TensorAccess` loads and store through it;
the binding cache (:mod:`.binding`) keeps its loaders and storers with the bound instructions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from uapi import hw_layout as hw
from uapi import isa

from . import mac_array
from .memory import PhysicalAddressError, SystemMemory
from .mmu import VA_LIMIT, Mmu

MAX_TENSOR_ELEMENTS = hw.MAX_TENSOR_ELEMENTS  # broadcast tensors could claim exabytes; firmware may lower it
NP_DTYPES = {"INT8": np.dtype("i1"), "UINT8": np.dtype("u1"), "INT32": np.dtype("<i4")}

Loader = Callable[[], np.ndarray]
Storer = Callable[[np.ndarray], None]


class JobError(Exception):
    """A job fails with -EIO; the message names the instruction and the problem."""


@dataclass(frozen=True)
class Tensor:
    """A decoded TENSOR descriptor."""

    dtype: str
    va: int
    shape: tuple[int, int, int, int]
    strides: tuple[int, int, int, int]
    zero_point: int

    @property
    def np_dtype(self) -> np.dtype:
        return NP_DTYPES[self.dtype]

    @cached_property  # a frozen dataclass: computed once per descriptor
    def extent(self) -> tuple[int, int]:
        last = sum((d - 1) * s for d, s in zip(self.shape, self.strides, strict=True))
        return self.va, self.va + last + self.np_dtype.itemsize

    @cached_property
    def dense(self) -> bool:
        """True if the elements tile [va, va + nbytes) in C order."""
        expected = []
        step = self.np_dtype.itemsize
        for d in reversed(self.shape):
            expected.append(step)
            step *= d
        return all(
            s == e or d == 1 for s, e, d in zip(self.strides, reversed(expected), self.shape, strict=True)
        )

    @classmethod
    def from_instruction(cls, ins: isa.Instruction, max_elements: int = MAX_TENSOR_ELEMENTS) -> Tensor:
        dtype = isa.SPEC.dtype_by_code(ins["dtype"])
        if dtype is None or dtype.name not in NP_DTYPES:
            raise JobError(f"TENSOR at byte {ins.offset}: unknown dtype {ins['dtype']}")
        try:
            isa.tensor_extent(ins.fields)
        except isa.IsaError as e:
            raise JobError(f"TENSOR at byte {ins.offset}: {e}") from None
        elements = ins["n"] * ins["h"] * ins["w"] * ins["c"]
        if elements > max_elements:
            raise JobError(f"TENSOR at byte {ins.offset}: {elements} elements, more than {max_elements}")
        return cls(
            dtype=dtype.name,
            va=ins["va"],
            shape=(ins["n"], ins["h"], ins["w"], ins["c"]),
            strides=(ins["stride_n"], ins["stride_h"], ins["stride_w"], ins["stride_c"]),
            zero_point=ins["zero_point"],
        )


class Translations:
    """Physical runs of one address space's tensors, kept across jobs while its page tables stay the same.

    A cached run depends on the L1 table at ``pt_root`` and the L2 tables its range goes
    through; each is remembered byte for byte. A job reuses the cache only if every remembered
    table is unchanged (a few 4 KiB compares), so a remap, unmap or permission change by the
    kernel drops it. Only successful translations are cached: faults are re-evaluated.
    """

    def __init__(self, memory: SystemMemory, pt_root: int) -> None:
        self.memory = memory
        self.pt_root = pt_root
        self.tables: dict[int, bytes] = {}  # table physical address -> its bytes when cached
        # The same tables for the C compare (mac_array's mac_equal, when the library is built): the
        # memory's address (with the array that keeps its view), and a C copy of the bytes.
        self._c_tables: list[tuple[Any, Any, np.ndarray]] = []
        self.runs: dict[tuple[int, int, bool], list[tuple[int, int]]] = {}
        # The binding cache's instructions per decoded stream (:func:`binding.stream_bindings`),
        # dropped with these translations.
        self.bindings: dict[int, tuple[object, dict[int, Any]]] = {}

    def _table(self, pa: int) -> bytes | None:
        try:
            return bytes(self.memory.view(pa, hw.PT_ENTRIES * 8))
        except PhysicalAddressError:
            return None

    def still_valid(self) -> bool:
        # Asked at every job: a C memcmp per table, else one loop over plain views (a helper call
        # and a generator per table cost more than the compares of the two or three 4 KiB tables).
        view, size = self.memory.view, hw.PT_ENTRIES * 8
        if self._c_tables:
            equal = _c_equal()[0]
            for at, content, _ in self._c_tables:
                if not equal(at, content, size):
                    return False
            return True
        try:
            for pa, content in self.tables.items():
                if bytes(view(pa, size)) != content:
                    return False
        except PhysicalAddressError:
            return False
        return True

    def remember(self, va: int, size: int) -> bool:
        """Record the tables [va, va + size) goes through; False if one cannot be read."""
        l1 = self.tables.get(self.pt_root) or self._table(self.pt_root)
        if l1 is None:
            return False
        self._keep(self.pt_root, l1)
        entries = np.frombuffer(l1, dtype="<u8")
        for index in range(va >> hw.L1_SHIFT, ((va + size - 1) >> hw.L1_SHIFT) + 1):
            pa = int(entries[index]) & hw.PTE_ADDR_MASK
            if pa not in self.tables:
                table = self._table(pa)
                if table is None:
                    return False
                self._keep(pa, table)
        return True

    def _keep(self, pa: int, content: bytes) -> None:
        if pa in self.tables:
            return
        self.tables[pa] = content
        equal, ffi = _c_equal()
        if equal is not None and len(self._c_tables) == len(self.tables) - 1:
            # An array over the table's view (no buffer export, as the bound units keep theirs).
            arr = np.frombuffer(self.memory.view(pa, len(content)), dtype=np.uint8)
            self._c_tables.append((ffi.cast("void *", arr.ctypes.data), ffi.new("char[]", content), arr))


_C_EQUAL: tuple[Any, Any] | None = None


def _c_equal() -> tuple[Any, Any]:
    """mac_array's ``mac_equal`` and its ffi, or (None, None) without the C library."""
    global _C_EQUAL
    if _C_EQUAL is None:
        mod = mac_array.library()
        _C_EQUAL = (mod.lib.mac_equal, mod.ffi) if mod is not None else (None, None)
    return _C_EQUAL


def overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two physical runs (pa, bytes) share a byte."""
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def saturated(t: Tensor, values: np.ndarray) -> np.ndarray:
    """``values`` (any integer array of t's shape) in t's dtype and shape, C-contiguous, saturated."""
    if values.dtype == t.np_dtype:  # the numerics already saturated to the output's dtype
        return np.ascontiguousarray(values).reshape(t.shape)
    info = np.iinfo(t.np_dtype)
    return np.clip(values, info.min, info.max).astype(t.np_dtype).reshape(t.shape)


class TensorAccess:
    """Loads and stores of a job's tensors through its MMU, with their physical runs kept in the
    address space's :class:`Translations` (the kernel does not edit a file's page tables while its
    job runs), and the same bound for the stream's next jobs (:meth:`loader`, :meth:`storer`)."""

    def __init__(self, memory: SystemMemory, pt_root: int, translations: Translations | None = None) -> None:
        self.memory = memory
        self.mmu = Mmu(memory, pt_root)
        self.translations = translations if translations is not None else Translations(memory, pt_root)

    def runs(self, va: int, size: int, write: bool) -> list[tuple[int, int]]:
        key = (va, size, write)
        cache = self.translations
        runs = cache.runs.get(key)
        if runs is None:
            runs = self.mmu.translate_range(va, size, write)  # raises MmuFault: never cached
            if va + size <= VA_LIMIT and cache.remember(va, size):
                cache.runs[key] = runs
        return runs

    def load(self, t: Tensor) -> np.ndarray:
        """The tensor's elements as a read-only [n, h, w, c] array.

        A tensor in one physically contiguous run is a view of system memory (no copy): the
        units read it while they compute, and every unit writes its output only after that.
        """
        start, end = t.extent
        runs = self.runs(start, end - start, False)
        if len(runs) == 1:
            raw: memoryview | np.ndarray = self.memory.view(runs[0][0], end - start)
        else:
            raw = self.mmu.gather(start, end - start)
        arr = np.ndarray(t.shape, dtype=t.np_dtype, buffer=raw, strides=t.strides)
        arr.flags.writeable = False
        return arr

    def store(self, t: Tensor, values: np.ndarray) -> None:
        """Write ``values`` (any integer array of t's shape) to the tensor, saturating to its dtype."""
        data = saturated(t, values)
        start, end = t.extent
        if t.dense:
            runs = self.runs(start, end - start, True)
            if len(runs) == 1:
                # np.copyto handles a source that overlaps the destination (an in-place COPY).
                dst = np.frombuffer(self.memory.view(runs[0][0], end - start), dtype=t.np_dtype)
                np.copyto(dst, data.reshape(-1))
            else:
                self.mmu.scatter(start, data)
            return
        # A strided tensor leaves gaps in its extent: read-modify-write them unchanged.
        raw = self.mmu.gather(start, end - start, write=True)
        np.ndarray(t.shape, dtype=t.np_dtype, buffer=raw, strides=t.strides)[...] = data
        self.mmu.scatter(start, raw)

    def cached_runs(self, t: Tensor, write: bool) -> list[tuple[int, int]] | None:
        start, end = t.extent
        return self.translations.runs.get((start, end - start, write))

    def loader(self, t: Tensor) -> Loader | None:
        """A function doing :meth:`load` of ``t`` with its translation looked up now; None if it
        was not kept (then the instruction stays unbound and translates every job).

        A tensor in one physical run is one read-only array over system memory made now and kept
        with the binding (it reads whatever memory holds when a job runs): a memory whose views
        are alive cannot be closed, so a processor's bindings must go before its memory does.
        """
        runs = self.cached_runs(t, False)
        if runs is None:
            return None
        view, size = self.memory.view, t.extent[1] - t.extent[0]
        shape, dtype, strides = t.shape, t.np_dtype, t.strides
        if len(runs) == 1:
            arr = np.ndarray(shape, dtype=dtype, buffer=view(runs[0][0], size), strides=strides)
            arr.flags.writeable = False
            return lambda: arr

        def gather() -> np.ndarray:
            raw = np.empty(size, dtype=np.uint8)
            pos = 0
            for pa, length in runs:
                raw[pos : pos + length] = np.frombuffer(view(pa, length), dtype=np.uint8)
                pos += length
            arr = np.ndarray(shape, dtype=dtype, buffer=raw, strides=strides)
            arr.flags.writeable = False
            return arr

        return gather

    def storer(self, t: Tensor) -> Storer | None:
        """A function doing :meth:`store` to a dense ``t`` with its translation looked up now; None
        for a strided tensor (a read-modify-write) or a translation that was not kept."""
        runs = self.cached_runs(t, True)
        if runs is None or not t.dense:
            return None
        # As in loader(): the destination's bytes, one array per physical run, kept with the binding.
        parts, pos = [], 0
        for pa, length in runs:
            parts.append((np.frombuffer(self.memory.view(pa, length), dtype=np.uint8), pos, pos + length))
            pos += length
        if len(parts) == 1:
            dst = parts[0][0]

            def store_one(values: np.ndarray) -> None:  # np.copyto handles a source overlapping dst
                np.copyto(dst, saturated(t, values).reshape(-1).view(np.uint8))

            return store_one

        def store(values: np.ndarray) -> None:
            data = saturated(t, values).reshape(-1).view(np.uint8)
            for part, begin, end in parts:
                np.copyto(part, data[begin:end])

        return store

    def physical_spans(
        self, operands: list[tuple[Tensor, bool]], strided_reads: bool = False
    ) -> list[tuple[int, int]] | None:
        """Each (tensor, written) operand's one physical run (pa, bytes) from the kept translations,
        or None if one is strided, lies in several runs or was not kept: a C unit bound to memory
        takes one dense run per operand (``strided_reads``: an operand it only reads may be strided,
        its run the extent)."""
        spans = []
        for t, write in operands:
            runs = self.cached_runs(t, write)
            if not (t.dense or (strided_reads and not write)) or runs is None or len(runs) != 1:
                return None
            spans.append(runs[0])
        return spans
