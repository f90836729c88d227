"""MMU walks, faults and the page-table writer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from device_model.memory import AnonymousMemory, FileMemory, PhysicalAddressError
from device_model.mmu import VA_LIMIT, Mmu, MmuFault
from device_model.page_tables import AddressSpace, OutOfMemory, PageAllocator
from uapi import hw_layout as hw

from .helpers import Machine


def test_memory_views_are_zero_copy_and_bounded(tmp_path) -> None:
    mem = AnonymousMemory(1 << 16)
    mem.view(100, 4)[:] = b"abcd"
    assert bytes(mem.view(98, 8)) == b"\0\0abcd\0\0"
    with pytest.raises(PhysicalAddressError):
        mem.view((1 << 16) - 2, 4)
    path = tmp_path / "ram"
    path.write_bytes(bytes(1 << 16))
    fm = FileMemory(path)
    fm.view(0x1234, 3)[:] = b"xyz"
    del fm
    assert path.read_bytes()[0x1234:0x1237] == b"xyz"  # shared with the file, like QEMU's RAM


def test_gather_scatter_across_discontiguous_pages() -> None:
    m = Machine()
    pages = m.allocator.alloc_pages(3)
    other = m.allocator.alloc_pages(2)
    va = (1 << hw.L1_SHIFT) - 2 * hw.PAGE_SIZE  # straddles an L1 boundary
    m.space.map(va, [pages[2], other[1], pages[0], other[0], pages[1]])
    mmu = Mmu(m.memory, m.space.root)
    data = np.random.default_rng(0).integers(0, 256, size=5 * hw.PAGE_SIZE - 300, dtype=np.uint8)
    mmu.scatter(va + 123, data)
    assert (Mmu(m.memory, m.space.root).gather(va + 123, data.size) == data).all()
    assert bytes(m.memory.view(pages[2] + 123, 4)) == data[:4].tobytes()
    assert bytes(m.memory.view(other[1], 4)) == data[hw.PAGE_SIZE - 123 :][:4].tobytes()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=12), st.integers(0, 4095), st.data())
def test_fault_names_first_bad_page(mapped: list[bool], offset: int, data) -> None:
    m = Machine(4 << 20)
    base = 0x40_0000
    for i, ok in enumerate(mapped):
        if ok:
            m.space.map(base + i * hw.PAGE_SIZE, [m.allocator.alloc_page()])
    start = base + offset
    size = data.draw(st.integers(1, len(mapped) * hw.PAGE_SIZE - offset))
    first_page = offset // hw.PAGE_SIZE
    last_page = (offset + size - 1) // hw.PAGE_SIZE
    bad = [i for i in range(first_page, last_page + 1) if not mapped[i]]
    mmu = Mmu(m.memory, m.space.root)
    if bad:
        with pytest.raises(MmuFault) as e:
            mmu.gather(start, size)
        assert e.value.va == max(start, base + bad[0] * hw.PAGE_SIZE)
        assert not e.value.write
    else:
        assert mmu.gather(start, size).size == size


def test_read_only_page_faults_on_write_only() -> None:
    m = Machine()
    va = m.buffer(2 * hw.PAGE_SIZE, writable=True)
    ro = m.space.unmap(va + hw.PAGE_SIZE, 1)
    m.space.map(va + hw.PAGE_SIZE, ro, writable=False)
    mmu = Mmu(m.memory, m.space.root)
    mmu.gather(va, 2 * hw.PAGE_SIZE)  # reads are fine
    with pytest.raises(MmuFault) as e:
        mmu.scatter(va + 10, bytes(2 * hw.PAGE_SIZE - 20))
    assert e.value.va == va + hw.PAGE_SIZE and e.value.write
    assert "not writable" in str(e.value)
    assert not m.read(va, 16).any()  # nothing was written before the fault was found
    with pytest.raises(MmuFault):
        mmu.gather(va + hw.PAGE_SIZE, 4, write=True)


def test_out_of_va_range_faults() -> None:
    m = Machine()
    last = VA_LIMIT - hw.PAGE_SIZE
    m.space.map(last, [m.allocator.alloc_page()])
    mmu = Mmu(m.memory, m.space.root)
    assert mmu.gather(last, hw.PAGE_SIZE).size == hw.PAGE_SIZE
    with pytest.raises(MmuFault) as e:
        mmu.gather(last + 8, hw.PAGE_SIZE)
    assert e.value.va == VA_LIMIT
    with pytest.raises(MmuFault) as e:
        mmu.gather(VA_LIMIT + 5, 1)
    assert e.value.va == VA_LIMIT + 5 and "VA space" in str(e.value)


def test_pte_pointing_outside_memory_faults() -> None:
    m = Machine(1 << 20)
    va = m.buffer(hw.PAGE_SIZE)
    l1 = np.frombuffer(m.memory.view(m.space.root, hw.PAGE_SIZE), dtype="<u8")
    l2 = np.frombuffer(
        m.memory.view(int(l1[va >> hw.L1_SHIFT]) & hw.PTE_ADDR_MASK, hw.PAGE_SIZE), dtype="<u8"
    )
    l2[(va >> hw.PAGE_SHIFT) % hw.PT_ENTRIES] = (1 << 30) | hw.PTE_VALID | hw.PTE_READ
    with pytest.raises(MmuFault, match="outside system memory"):
        Mmu(m.memory, m.space.root).gather(va, 1)


def test_walks_are_cached_per_job() -> None:
    m = Machine()
    va = m.buffer(hw.PAGE_SIZE, b"A" * hw.PAGE_SIZE)
    mmu = Mmu(m.memory, m.space.root)
    assert mmu.gather(va, 1).tobytes() == b"A"
    m.space.unmap(va, 1)
    assert mmu.gather(va, 1).tobytes() == b"A"  # the job's snapshot still maps it
    with pytest.raises(MmuFault):
        Mmu(m.memory, m.space.root).gather(va, 1)  # a new job sees the new tables


def test_page_table_writer_bookkeeping() -> None:
    mem = AnonymousMemory(64 * hw.PAGE_SIZE)
    alloc = PageAllocator(mem)
    space = AddressSpace(mem, alloc)
    pages = alloc.alloc_pages(4)
    space.map(0x20_0000, pages, writable=False)
    assert space.lookup(0x20_1000) == pages[1] | hw.PTE_VALID | hw.PTE_READ
    with pytest.raises(ValueError, match="already mapped"):
        space.map(0x20_3000, alloc.alloc_pages(2))
    with pytest.raises(ValueError, match="not page aligned"):
        space.map(0x20_0001, pages[:1])
    with pytest.raises(ValueError, match="VA space"):
        space.map(VA_LIMIT, pages[:1])
    in_use = alloc.pages_in_use
    assert space.unmap(0x20_0000, 4) == pages
    assert alloc.pages_in_use == in_use - 1  # the now-empty L2 table was freed
    with pytest.raises(ValueError, match="not mapped"):
        space.unmap(0x20_0000, 1)
    space.destroy()
    with pytest.raises(OutOfMemory):
        alloc.alloc_pages(1000)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(["rw", "ro", "none", "outside"]), min_size=1, max_size=12),
    st.integers(0, 4095),
    st.booleans(),
    st.data(),
)
def test_small_walk_matches_the_numpy_walk(kinds: list[str], offset: int, write: bool, data) -> None:
    """Ranges of up to SMALL_RANGE_PAGES take the plain-Python walk: same runs, same faults."""
    m = Machine(4 << 20)
    base = (1 << hw.L1_SHIFT) - 3 * hw.PAGE_SIZE  # crosses an L1 boundary
    pages = m.allocator.alloc_pages(len(kinds))
    pages[len(pages) // 2 :] = pages[len(pages) // 2 :][::-1]  # some contiguous runs, some breaks
    for i, kind in enumerate(kinds):
        va = base + i * hw.PAGE_SIZE
        if kind in ("rw", "ro"):
            m.space.map(va, [pages[i]], writable=kind == "rw")
        elif kind == "outside":  # a PTE pointing past the end of system memory
            m.space.map(va, [pages[i]])
            l1 = int(np.frombuffer(m.memory.view(m.space.root, 4096), "<u8")[va >> hw.L1_SHIFT])
            entry_pa = (l1 & hw.PTE_ADDR_MASK) + ((va >> hw.PAGE_SHIFT) % hw.PT_ENTRIES) * 8
            pte = int.from_bytes(m.memory.view(entry_pa, 8), "little")
            outside = (pte & ~hw.PTE_ADDR_MASK) | (m.memory.size & hw.PTE_ADDR_MASK)
            m.memory.view(entry_pa, 8)[:] = outside.to_bytes(8, "little")
    start = base + offset
    size = data.draw(st.integers(1, len(kinds) * hw.PAGE_SIZE - offset))

    def outcome(small_pages: int) -> object:
        import device_model.mmu as mmu_module

        saved = mmu_module.SMALL_RANGE_PAGES
        mmu_module.SMALL_RANGE_PAGES = small_pages
        try:
            return Mmu(m.memory, m.space.root).translate_range(start, size, write)
        except MmuFault as e:
            return (e.va, e.write, e.reason)
        finally:
            mmu_module.SMALL_RANGE_PAGES = saved

    assert outcome(1 << 20) == outcome(0)
