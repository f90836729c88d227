"""The device MMU: walks the two-level page tables of uapi.hw_layout.

A job's address space is described by an L1 table at ``pt_root`` (a
guest-physical address). VA bits [29:21] index the L1 table, whose valid
entries point at L2 tables; VA bits [20:12] index an L2 table, whose entries
map one 4 KiB page with PTE_READ / PTE_WRITE permissions.

One :class:`Mmu` serves one job: it snapshots every table it walks (the
kernel does not edit a file's tables while one of its jobs runs), so a
tensor spanning hundreds of pages costs one numpy slice per 2 MiB of VA, not
one walk per page.
"""

from __future__ import annotations

import numpy as np

from uapi import hw_layout as hw

from .memory import PhysicalAddressError, SystemMemory

VA_LIMIT = 1 << hw.VA_BITS
_L2_SPAN = hw.PT_ENTRIES  # pages one L2 table maps
_TABLE_BYTES = hw.PT_ENTRIES * 8
# Ranges of at most this many pages are walked in plain Python: for a command stream of a few
# KiB (an empty job's 8-byte END) numpy's per-call overhead costs more than the walk itself.
SMALL_RANGE_PAGES = 8


class MmuFault(Exception):
    """A device access the page tables do not allow.

    ``va`` is the first byte of the access that faulted: the start of the
    access, or the first byte of the first page (in address order) that is
    unmapped, lacks the needed permission, maps outside system memory, or
    lies beyond ``1 << VA_BITS``.
    """

    def __init__(self, va: int, write: bool, reason: str) -> None:
        self.va = va
        self.write = write
        self.reason = reason
        super().__init__(f"MMU fault on {'write' if write else 'read'} at VA {va:#x}: {reason}")


class Mmu:
    """Translates device VAs of one address space (one job)."""

    def __init__(self, memory: SystemMemory, pt_root: int) -> None:
        if pt_root % hw.PAGE_SIZE:
            raise ValueError(f"page-table root {pt_root:#x} is not page aligned")
        self.memory = memory
        self.pt_root = pt_root
        self._l1: np.ndarray | None = None
        self._l2: dict[int, np.ndarray | None] = {}

    # --- walking ----------------------------------------------------------
    def _table(self, pa: int) -> np.ndarray | None:
        """A snapshot of the page table at ``pa``, or None if it is outside memory."""
        try:
            return np.frombuffer(self.memory.view(pa, _TABLE_BYTES), dtype="<u8").copy()
        except PhysicalAddressError:
            return None

    def _l2_table(self, l1_index: int) -> np.ndarray | None:
        if l1_index not in self._l2:
            if self._l1 is None:
                self._l1 = self._table(self.pt_root)
                if self._l1 is None:
                    self._l1 = np.zeros(hw.PT_ENTRIES, dtype="<u8")
            entry = int(self._l1[l1_index])
            table = None
            if entry & hw.PTE_VALID:
                table = self._table(entry & hw.PTE_ADDR_MASK)
            self._l2[l1_index] = table
        return self._l2[l1_index]

    def _ptes(self, first_vpn: int, last_vpn: int) -> np.ndarray:
        """The L2 entries of pages [first_vpn, last_vpn]; 0 where no L2 table exists."""
        parts = []
        vpn = first_vpn
        while vpn <= last_vpn:
            l1, lo = divmod(vpn, _L2_SPAN)
            hi = min(_L2_SPAN, lo + last_vpn - vpn + 1)
            table = self._l2_table(l1)
            parts.append(table[lo:hi] if table is not None else np.zeros(hi - lo, dtype="<u8"))
            vpn += hi - lo
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def translate_range(self, va: int, size: int, write: bool = False) -> list[tuple[int, int]]:
        """Physical runs [(pa, length), ...] covering [va, va + size), checking permissions."""
        if size <= 0:
            return []
        if va < 0:
            raise MmuFault(va, write, "negative address")
        end = va + size
        in_range_end = min(end, VA_LIMIT)
        if va >= VA_LIMIT:
            raise MmuFault(va, write, f"beyond the {hw.VA_BITS}-bit VA space")
        first_vpn = va >> hw.PAGE_SHIFT
        last_vpn = (in_range_end - 1) >> hw.PAGE_SHIFT
        if last_vpn - first_vpn < SMALL_RANGE_PAGES:
            return self._translate_small(va, end, first_vpn, last_vpn, write)
        ptes = self._ptes(first_vpn, last_vpn)
        need = hw.PTE_VALID | (hw.PTE_WRITE if write else hw.PTE_READ)
        pas = ptes & np.uint64(hw.PTE_ADDR_MASK)
        bad = (ptes & np.uint64(need)) != need
        bad |= pas > np.uint64(self.memory.size - hw.PAGE_SIZE)
        if bad.any():
            i = int(np.argmax(bad))
            pte = int(ptes[i])
            if not pte & hw.PTE_VALID:
                reason = "unmapped page"
            elif (pte & need) != need:
                reason = "page is not writable" if write else "page is not readable"
            else:
                reason = f"page maps physical {pte & hw.PTE_ADDR_MASK:#x}, outside system memory"
            raise MmuFault(max(va, (first_vpn + i) << hw.PAGE_SHIFT), write, reason)
        if end > VA_LIMIT:
            raise MmuFault(VA_LIMIT, write, f"beyond the {hw.VA_BITS}-bit VA space")
        # Coalesce physically contiguous pages into runs.
        breaks = np.flatnonzero(np.diff(pas.astype(np.int64)) != hw.PAGE_SIZE) + 1
        starts = np.concatenate(([0], breaks))
        stops = np.concatenate((breaks, [len(pas)]))
        runs = []
        offset_in_page = va & (hw.PAGE_SIZE - 1)
        pos = va
        for s, e in zip(starts.tolist(), stops.tolist(), strict=True):
            run_pa = int(pas[s]) + (offset_in_page if s == 0 else 0)
            run_end_va = min(end, (first_vpn + e) << hw.PAGE_SHIFT)
            runs.append((run_pa, run_end_va - pos))
            pos = run_end_va
        return runs

    def _translate_small(
        self, va: int, end: int, first_vpn: int, last_vpn: int, write: bool
    ) -> list[tuple[int, int]]:
        """translate_range for a few pages, without numpy; the same runs and the same faults."""
        need = hw.PTE_VALID | (hw.PTE_WRITE if write else hw.PTE_READ)
        pa_limit = self.memory.size - hw.PAGE_SIZE
        runs: list[tuple[int, int]] = []
        pos = va
        for vpn in range(first_vpn, last_vpn + 1):
            l1, lo = divmod(vpn, _L2_SPAN)
            table = self._l2_table(l1)
            pte = int(table[lo]) if table is not None else 0
            pa = pte & hw.PTE_ADDR_MASK
            if (pte & need) != need or pa > pa_limit:
                if not pte & hw.PTE_VALID:
                    reason = "unmapped page"
                elif (pte & need) != need:
                    reason = "page is not writable" if write else "page is not readable"
                else:
                    reason = f"page maps physical {pa:#x}, outside system memory"
                raise MmuFault(max(va, vpn << hw.PAGE_SHIFT), write, reason)
            page_end = min(end, (vpn + 1) << hw.PAGE_SHIFT)
            start_pa = pa + (pos & (hw.PAGE_SIZE - 1))
            if runs and runs[-1][0] + runs[-1][1] == start_pa:  # physically contiguous: one run
                runs[-1] = (runs[-1][0], runs[-1][1] + page_end - pos)
            else:
                runs.append((start_pa, page_end - pos))
            pos = page_end
        if end > VA_LIMIT:
            raise MmuFault(VA_LIMIT, write, f"beyond the {hw.VA_BITS}-bit VA space")
        return runs

    # --- data movement ----------------------------------------------------
    def gather(self, va: int, size: int, write: bool = False) -> np.ndarray:
        """Copy [va, va + size) out as a uint8 array.

        ``write=True`` checks PTE_WRITE instead of PTE_READ: the command
        processor reads an output's extent before a strided write-back.
        """
        runs = self.translate_range(va, size, write)  # fault before allocating anything
        out = np.empty(size, dtype=np.uint8)
        pos = 0
        for pa, length in runs:
            out[pos : pos + length] = np.frombuffer(self.memory.view(pa, length), dtype=np.uint8)
            pos += length
        return out

    def scatter(self, va: int, data: np.ndarray | bytes | memoryview) -> None:
        """Write ``data`` (bytes or any contiguous array) to [va, va + len), checking PTE_WRITE.

        Permissions are checked for the whole range before any byte is written.
        """
        src = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
        src = np.ascontiguousarray(src).reshape(-1).view(np.uint8)
        pos = 0
        for pa, length in self.translate_range(va, src.size, write=True):
            np.frombuffer(self.memory.view(pa, length), dtype=np.uint8)[:] = src[pos : pos + length]
            pos += length
