"""Builds address spaces, buffers and command streams for device-model tests."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import numpy as np

from device_model import numerics as nm
from device_model.memory import AnonymousMemory, MemfdMemory, SystemMemory
from device_model.mmu import Mmu
from device_model.page_tables import AddressSpace, PageAllocator
from uapi import hw_layout as hw
from uapi import isa

DTYPES = {"INT8": np.int8, "UINT8": np.uint8, "INT32": np.int32}
REQUANT_FIELDS = frozenset(f.name for f in fields(nm.Requant))


def split_requant(args: dict[str, Any]) -> tuple[nm.Requant, dict[str, Any]]:
    """A layer's keyword arguments as its :class:`numerics.Requant` record and the rest (geometry...)."""
    rq = nm.Requant(**{k: v for k, v in args.items() if k in REQUANT_FIELDS})
    return rq, {k: v for k, v in args.items() if k not in REQUANT_FIELDS}


class Machine:
    """System memory, a page allocator and one address space.

    ``shared``: memory a core worker process can map too (an Npu with ``core_processes``).
    """

    def __init__(
        self, size: int = 16 << 20, shared: bool = False, memory: SystemMemory | None = None
    ) -> None:
        if memory is None:
            memory = MemfdMemory(size) if shared else AnonymousMemory(size)
        self.memory = memory
        self.allocator = PageAllocator(self.memory, base=hw.PAGE_SIZE)  # keep PA 0 unused
        self.space = AddressSpace(self.memory, self.allocator)
        self.next_va = 0x10_0000

    def new_space(self) -> AddressSpace:
        """Another address space over the same memory (another file's, as vnpu.ko gives each)."""
        return AddressSpace(self.memory, self.allocator)

    def buffer(
        self,
        size: int,
        data: bytes | np.ndarray | None = None,
        writable: bool = True,
        space: AddressSpace | None = None,
    ) -> int:
        """Map a fresh buffer of ``size`` bytes (rounded to pages) in ``space`` (default: the machine's)
        and return its VA. VAs are never reused across spaces."""
        npages = -(-size // hw.PAGE_SIZE)
        va = self.next_va
        self.next_va += (npages + 1) * hw.PAGE_SIZE  # leave an unmapped guard page
        (space or self.space).map(va, self.allocator.alloc_pages(npages), writable=writable)
        if data is not None:
            self.write(va, data, space)
        return va

    def write(self, va: int, data: bytes | np.ndarray, space: AddressSpace | None = None) -> None:
        raw = data.tobytes() if isinstance(data, np.ndarray) else data
        mmu = Mmu(self.memory, (space or self.space).root)
        # write through the tables without the PTE_WRITE check (read-only buffers get data too)
        pos = 0
        for pa, length in mmu.translate_range(va, len(raw)):
            self.memory.view(pa, length)[:] = raw[pos : pos + length]
            pos += length

    def read(self, va: int, size: int, space: AddressSpace | None = None) -> np.ndarray:
        return Mmu(self.memory, (space or self.space).root).gather(va, size)

    def array(self, arr: np.ndarray, writable: bool = True) -> int:
        return self.buffer(arr.nbytes, np.ascontiguousarray(arr), writable)


def tensor(slot: int, dtype: str, va: int, shape: tuple[int, ...], zp: int = 0, strides=None) -> bytes:
    """A TENSOR instruction for a dense (or explicitly strided) NHWC tensor."""
    shape = (1,) * (4 - len(shape)) + tuple(shape)
    size = np.dtype(DTYPES[dtype]).itemsize
    if strides is None:
        strides = []
        step = size
        for d in reversed(shape):
            strides.insert(0, step)
            step *= d
    n, h, w, c = shape
    sn, sh, sw, sc = strides
    return isa.encode(
        "TENSOR", slot=slot, dtype=isa.SPEC.dtypes[dtype].code, va=va, n=n, h=h, w=w, c=c,
        stride_n=sn, stride_h=sh, stride_w=sw, stride_c=sc, zero_point=zp,
    )  # fmt: skip


def program(*parts: bytes) -> bytes:
    return b"".join(parts) + isa.encode("END")
