"""Writes device page tables into system memory (the kernel does this in C).

libaccel's shim backend plays the kernel's part in-process: it takes pages
from a :class:`PageAllocator` over an :class:`~device_model.memory.SystemMemory`
and builds one :class:`AddressSpace` per open file. The format is the one
device_model.mmu walks (see uapi/hw_layout.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

import numpy as np

from uapi import hw_layout as hw

from .memory import SystemMemory

VA_LIMIT = 1 << hw.VA_BITS


class OutOfMemory(MemoryError):
    """The page allocator has no free page left."""


class PageAllocator:
    """Hands out zeroed 4 KiB physical pages from [base, limit) of ``memory``.

    Freed pages are reused first; otherwise pages come from a bump pointer, so
    pages allocated together are usually physically contiguous (which keeps
    the MMU's runs long). Thread-safe.
    """

    def __init__(self, memory: SystemMemory, base: int = 0, limit: int | None = None) -> None:
        limit = memory.size if limit is None else limit
        if base % hw.PAGE_SIZE or limit % hw.PAGE_SIZE or not 0 <= base < limit <= memory.size:
            raise ValueError(f"bad page range [{base:#x}, {limit:#x}) for memory of {memory.size:#x} bytes")
        self.memory = memory
        self.base = base
        self.limit = limit
        self._next = base
        self._free: list[int] = []
        self._allocated: set[int] = set()
        self._lock = threading.Lock()

    @property
    def pages_in_use(self) -> int:
        return len(self._allocated)

    def alloc_page(self) -> int:
        return self.alloc_pages(1)[0]

    def alloc_pages(self, count: int) -> list[int]:
        """``count`` zeroed pages (physical addresses), all or nothing."""
        if count < 0:
            raise ValueError(f"negative page count {count}")
        with self._lock:
            available = len(self._free) + (self.limit - self._next) // hw.PAGE_SIZE
            if count > available:
                raise OutOfMemory(f"wanted {count} pages, {available} free")
            pages = []
            bump = min(count, (self.limit - self._next) // hw.PAGE_SIZE)
            # Prefer one fresh contiguous block when the request fits in it.
            if bump == count:
                pages = list(range(self._next, self._next + count * hw.PAGE_SIZE, hw.PAGE_SIZE))
                self._next += count * hw.PAGE_SIZE
            else:
                reuse = count - bump
                pages = self._free[-reuse:] if reuse else []
                del self._free[len(self._free) - reuse :]
                pages += list(range(self._next, self._next + bump * hw.PAGE_SIZE, hw.PAGE_SIZE))
                self._next += bump * hw.PAGE_SIZE
            self._allocated.update(pages)
        for pa in pages:
            self.memory.view(pa, hw.PAGE_SIZE)[:] = bytes(hw.PAGE_SIZE)
        return pages

    def free_pages(self, pages: Iterable[int]) -> None:
        with self._lock:
            pages = list(pages)
            for pa in pages:
                if pa not in self._allocated:
                    raise ValueError(f"page {pa:#x} is not allocated")
            for pa in pages:
                self._allocated.remove(pa)
                self._free.append(pa)

    def free_page(self, pa: int) -> None:
        self.free_pages([pa])


class AddressSpace:
    """One device address space: an L1 table plus L2 tables on demand.

    ``root`` is the physical address to put in a submission's SQE_PT_ROOT.
    L2 tables are freed when their last mapping goes away.
    """

    def __init__(self, memory: SystemMemory, allocator: PageAllocator) -> None:
        self.memory = memory
        self.allocator = allocator
        self.root = allocator.alloc_page()
        self._l2: dict[int, int] = {}  # L1 index -> L2 table PA
        self._l2_count: dict[int, int] = {}  # L1 index -> valid entries in it
        self._lock = threading.Lock()
        # Bumped by every map, unmap and destroy: what was worked out from the tables (a driver's
        # replayed job, libaccel.backends.shim.replay) holds while it is unchanged.
        self.changes = 0

    def _entries(self, pa: int) -> np.ndarray:
        return np.frombuffer(self.memory.view(pa, hw.PAGE_SIZE), dtype="<u8")

    @staticmethod
    def _check_range(va: int, npages: int) -> None:
        if va % hw.PAGE_SIZE:
            raise ValueError(f"VA {va:#x} is not page aligned")
        if va < 0 or npages < 0 or va + npages * hw.PAGE_SIZE > VA_LIMIT:
            raise ValueError(f"VA range {va:#x} + {npages} pages is outside the {hw.VA_BITS}-bit VA space")

    def map(self, va: int, pages: Sequence[int], writable: bool = True) -> None:
        """Map consecutive VA pages from ``va`` to the physical ``pages``.

        Raises ValueError if any target VA is already mapped (nothing is
        changed then).
        """
        self._check_range(va, len(pages))
        for pa in pages:
            if pa % hw.PAGE_SIZE or not 0 <= pa <= self.memory.size - hw.PAGE_SIZE:
                raise ValueError(f"physical page {pa:#x} is not a page of system memory")
        flags = hw.PTE_VALID | hw.PTE_READ | (hw.PTE_WRITE if writable else 0)
        vpn0 = va >> hw.PAGE_SHIFT
        with self._lock:
            self.changes += 1
            for i in range(len(pages)):
                if self._lookup(vpn0 + i) & hw.PTE_VALID:
                    raise ValueError(f"VA {(vpn0 + i) << hw.PAGE_SHIFT:#x} is already mapped")
            for i, pa in enumerate(pages):
                l1, l2 = divmod(vpn0 + i, hw.PT_ENTRIES)
                table = self._l2.get(l1)
                if table is None:
                    table = self.allocator.alloc_page()
                    self._l2[l1] = table
                    self._l2_count[l1] = 0
                    self._entries(self.root)[l1] = table | hw.PTE_VALID
                self._entries(table)[l2] = pa | flags
                self._l2_count[l1] += 1

    def unmap(self, va: int, npages: int) -> list[int]:
        """Unmap ``npages`` pages from ``va``; returns the physical pages that were mapped.

        Every page in the range must be mapped (ValueError otherwise, nothing changed).
        """
        self._check_range(va, npages)
        vpn0 = va >> hw.PAGE_SHIFT
        with self._lock:
            self.changes += 1
            ptes = [self._lookup(vpn0 + i) for i in range(npages)]
            for i, pte in enumerate(ptes):
                if not pte & hw.PTE_VALID:
                    raise ValueError(f"VA {(vpn0 + i) << hw.PAGE_SHIFT:#x} is not mapped")
            for i in range(npages):
                l1, l2 = divmod(vpn0 + i, hw.PT_ENTRIES)
                self._entries(self._l2[l1])[l2] = 0
                self._l2_count[l1] -= 1
                if self._l2_count[l1] == 0:
                    self._entries(self.root)[l1] = 0
                    self.allocator.free_page(self._l2.pop(l1))
                    del self._l2_count[l1]
        return [pte & hw.PTE_ADDR_MASK for pte in ptes]

    def _lookup(self, vpn: int) -> int:
        l1, l2 = divmod(vpn, hw.PT_ENTRIES)
        table = self._l2.get(l1)
        return 0 if table is None else int(self._entries(table)[l2])

    def lookup(self, va: int) -> int:
        """The raw L2 entry mapping ``va`` (0 if unmapped)."""
        self._check_range(va & ~(hw.PAGE_SIZE - 1), 1)
        with self._lock:
            return self._lookup(va >> hw.PAGE_SHIFT)

    def destroy(self) -> None:
        """Free every table page (not the mapped data pages)."""
        with self._lock:
            self.changes += 1
            self.allocator.free_pages([*self._l2.values(), self.root])
            self._l2.clear()
            self._l2_count.clear()
            self.root = -1
