"""The command processor's caches (decoded streams, tensor translations kept between jobs) never
change what a job computes: a remap, unmap or permission change between jobs takes effect."""

from __future__ import annotations

import errno

import numpy as np

from device_model.command_processor import CommandProcessor, profile_jobs
from uapi import hw_layout as hw
from uapi import isa

from .helpers import Machine, program, tensor


def test_remap_unmap_and_permissions_between_jobs_take_effect() -> None:
    m = Machine()
    src = m.array(np.arange(16, dtype=np.int8))
    dst = m.buffer(16)
    stream = program(
        tensor(0, "INT8", src, (16,)), tensor(1, "INT8", dst, (16,)), isa.encode("COPY", src=0, dst=1)
    )
    cmd = m.buffer(len(stream), stream)
    cp = CommandProcessor(m.memory)
    assert cp.run(m.space.root, cmd, len(stream)).status == 0
    assert m.read(dst, 16).view(np.int8).tolist() == list(range(16))

    # Same VA, other physical page, other data: the second job must read the new page.
    m.space.unmap(src, 1)
    m.space.map(src, m.allocator.alloc_pages(1), writable=True)
    m.write(src, (np.arange(16, dtype=np.int8) * -1).tobytes())
    assert cp.run(m.space.root, cmd, len(stream)).status == 0
    assert m.read(dst, 16).view(np.int8).tolist() == [-i for i in range(16)]

    # The destination becomes read-only: the store faults instead of using the cached run.
    page = m.space.unmap(dst, 1)
    m.space.map(dst, page, writable=False)
    res = cp.run(m.space.root, cmd, len(stream))
    assert (res.status, res.fault_va) == (-errno.EFAULT, dst)

    # Unmapped source: a read fault at its VA.
    m.space.unmap(src, 1)
    res = cp.run(m.space.root, cmd, len(stream))
    assert (res.status, res.fault_va) == (-errno.EFAULT, src)


def test_same_stream_bytes_in_a_new_place_and_a_rewritten_stream() -> None:
    m = Machine()
    dst = m.buffer(hw.PAGE_SIZE)
    cp = CommandProcessor(m.memory)
    fill = program(tensor(0, "INT8", dst, (8,)), isa.encode("FILL", dst=0, value=7))
    for _ in range(2):  # the second run decodes from the cache
        m.write(dst, bytes(8))  # so the second pass must write the 7s itself
        cmd = m.buffer(len(fill), fill)
        assert cp.run(m.space.root, cmd, len(fill)).status == 0
        assert m.read(dst, 8).tolist() == [7] * 8
    other = program(tensor(0, "INT8", dst, (8,)), isa.encode("FILL", dst=0, value=-3))
    m.write(cmd, other)  # same length, rewritten in place
    assert cp.run(m.space.root, cmd, len(other)).status == 0
    assert m.read(dst, 8).view(np.int8).tolist() == [-3] * 8
    bad = program(tensor(0, "INT8", dst, (8,)), isa.encode("FILL", dst=5, value=1))
    m.write(cmd, bad)
    for _ in range(2):  # a cached failure fails the same way
        res = cp.run(m.space.root, cmd, len(bad))
        assert res.status == -errno.EIO and "slot 5" in res.error


def test_profile_jobs_collects_exactly_the_jobs_run_inside_its_block() -> None:
    m = Machine()
    dst = m.buffer(hw.PAGE_SIZE)
    cp = CommandProcessor(m.memory)
    fill = program(tensor(0, "INT8", dst, (8,)), isa.encode("FILL", dst=0, value=1))
    cmd = m.buffer(len(fill), fill)
    assert cp.run(m.space.root, cmd, len(fill)).status == 0  # before the block: not collected
    with profile_jobs(per_op=True) as profiles:
        assert cp.run(m.space.root, cmd, len(fill)).status == 0
    assert cp.run(m.space.root, cmd, len(fill)).status == 0  # after the block: not collected
    with profile_jobs() as totals:  # the job's time alone: no opcode is timed
        assert cp.run(m.space.root, cmd, len(fill)).status == 0
    assert len(profiles) == 1 and len(totals) == 1
    (p,) = profiles
    assert p.status == 0 and p.op_counts == {"TENSOR": 1, "FILL": 1} and p.seconds > 0
    (t,) = totals
    assert t.status == 0 and t.cycles == 3 and t.seconds > 0 and t.op_counts == {}


def test_a_prepared_job_runs_as_from_the_ring_until_its_page_tables_change() -> None:
    m = Machine()
    src = m.array(np.arange(16, dtype=np.int8))
    dst = m.buffer(16)
    stream = program(
        tensor(0, "INT8", src, (16,)), tensor(1, "INT8", dst, (16,)), isa.encode("COPY", src=0, dst=1)
    )
    cmd = m.buffer(len(stream), stream)
    cp = CommandProcessor(m.memory)
    assert cp.prepare(m.space.root, stream) is None  # never ran: nothing bound
    assert cp.run(m.space.root, cmd, len(stream)).status == 0
    prepared = cp.prepare(m.space.root, stream)
    assert prepared is not None and prepared.current()
    m.write(src, (np.arange(16, dtype=np.int8) * 3).tobytes())
    m.write(dst, bytes(16))
    ran = prepared.run()
    assert ran == cp.run(m.space.root, cmd, len(stream))  # the same result as a job from the ring
    assert m.read(dst, 16).view(np.int8).tolist() == [3 * i for i in range(16)]

    # The destination moves to another page: what was prepared is stale, and a job from the ring
    # (which prepares it again) writes the new page, not the old one.
    old = m.space.unmap(dst, 1)
    m.memory.view(old[0], 16)[:] = bytes([0x55]) * 16
    m.space.map(dst, m.allocator.alloc_pages(1), writable=True)
    assert not prepared.current()
    assert cp.run(m.space.root, cmd, len(stream)).status == 0
    assert bytes(m.memory.view(old[0], 16)) == bytes([0x55]) * 16
    assert m.read(dst, 16).view(np.int8).tolist() == [3 * i for i in range(16)]
    again = cp.prepare(m.space.root, stream)
    assert again is not None and again.current() and again is not prepared
