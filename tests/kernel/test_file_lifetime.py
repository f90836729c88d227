"""What a file's close, an import and SUBMIT promise when another file's job holds them up.

- close() returns at once whatever the file's jobs wait for (another file's held job, through an
  in-syncobj or a shared dma-buf), and those jobs never run;
- an import carries the strictest of its exporter's rights (docs/uapi.md, "dma-buf");
- SUBMIT copies a stream only after the jobs that write its command BO have ended.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import gc
import mmap
import os
import struct
import threading
import time
from collections.abc import Iterator

import driver_knobs
import numpy as np
import pytest
from dmabuf_sources import DMA_HEAP_SYSTEM, heap_fd
from kernel_helpers import INT32, copy_stream, end, fill_stream, vector

from uapi.isa import encode

PAGE = 4096
# The held job's timeout: far longer than close() may take, so a close that waits for it shows.
HELD_TIMEOUT_MS = 60_000
CLOSE_LIMIT_S = 10.0


def _ioc(direction: int, nr: int, size: int) -> int:
    return (direction << 30) | (size << 16) | (ord("d") << 8) | nr


# struct drm_syncobj_handle { __u32 handle; __u32 flags; __s32 fd; __u32 pad; }
SYNCOBJ_HANDLE_TO_FD = _ioc(3, 0xC1, 16)
SYNCOBJ_FD_TO_HANDLE = _ioc(3, 0xC2, 16)
# struct drm_prime_handle { __u32 handle; __u32 flags; __s32 fd; }
PRIME_HANDLE_TO_FD = _ioc(3, 0x2D, 12)


class HeldJob:
    """A job of ``dev`` that WAITs on a semaphore, then runs ``then`` (stream bytes), until released."""

    def __init__(self, dev, then: bytes, bos: list, out_syncobj: int = 0) -> None:
        from libaccel import Job, JobBo

        self.sem = dev.create_bo(PAGE)
        stream = vector(15, self.sem.va, 1, INT32) + encode("WAIT", sem=15, value=1) + then
        self.cmd = dev.create_bo_with(stream, read_only=True)
        dev.submit(Job(self.cmd, len(stream), [JobBo(self.sem), *bos], out_syncobj=out_syncobj))

    def release(self) -> None:
        self.sem.array(np.int32, 1)[0] = 1
        self.sem.sync(for_device=True)


@pytest.fixture
def held_timeout() -> Iterator[int]:
    with driver_knobs.job_timeout("kernel", HELD_TIMEOUT_MS) as ms:
        yield ms


def _move_syncobj(src, dst, handle: int) -> int:
    """``handle`` of file ``src`` as a syncobj of file ``dst`` (through a syncobj fd)."""
    arg = bytearray(struct.pack("IIiI", handle, 0, -1, 0))
    fcntl.ioctl(src.backend.fileno(), SYNCOBJ_HANDLE_TO_FD, arg, True)
    fd = struct.unpack("IIiI", arg)[2]
    try:
        arg = bytearray(struct.pack("IIiI", 0, 0, fd, 0))
        fcntl.ioctl(dst.backend.fileno(), SYNCOBJ_FD_TO_HANDLE, arg, True)
    finally:
        os.close(fd)
    return struct.unpack("IIiI", arg)[0]


def _close_file(dev, bos: list) -> float:
    """Seconds until the file is released: its BOs closed, their CPU mappings dropped, its fd closed."""
    t0 = time.monotonic()
    for bo in bos:
        bo.close()
    gc.collect()
    dev.close()
    return time.monotonic() - t0


@pytest.mark.parametrize("through", ["in_syncobj", "dma_buf"])
def test_close_does_not_wait_for_another_files_held_job(held_timeout, dev, through: str) -> None:
    """File B's job waits on file A's held job; closing B returns at once and B's job never runs."""
    from libaccel import Device, Job, JobBo

    target = dev.create_bo(PAGE)  # A's; B's job would write 9 into it
    shared_in = dev.create_bo(PAGE)  # A's held job writes it (the dma-buf dependency)
    syncobj = dev.create_syncobj()
    held = HeldJob(
        dev,
        vector(1, shared_in.va, 64) + encode("FILL", dst=1, value=7) + end(),
        [JobBo(shared_in, write=True)],
        syncobj,
    )
    fds = [target.export_dmabuf(), shared_in.export_dmabuf()]
    other = Device.open("kernel")
    try:
        b_target, b_in = (other.import_dmabuf(fd) for fd in fds)
        stream = fill_stream(b_target.va, 64, 9)
        cmd = other.create_bo_with(stream, read_only=True)
        bos = [JobBo(b_target, read=False, write=True)]
        if through == "in_syncobj":
            waits_on = [_move_syncobj(dev, other, syncobj)]
        else:
            waits_on = []
            bos.append(JobBo(b_in))  # read after A's job writes it: an implicit dependency
        other.submit(Job(cmd, len(stream), bos, in_syncobjs=waits_on))
        took = _close_file(other, [b_target, b_in, cmd])
    finally:
        for fd in fds:
            os.close(fd)
        if not other.closed:
            other.close()
    assert took < CLOSE_LIMIT_S, f"close() took {took:.1f} s behind another file's held job"
    held.release()
    assert shared_in.wait(timeout=30).status == 0
    # The target's reservation holds B's job's fence: once it has signalled, B's job ended.
    target.wait(timeout=30)
    assert not target.array(np.int8, 64).any(), "the closed file's job ran"


@pytest.mark.parametrize("exported", ["read_only_bo", "fd_without_rdwr"])
def test_an_import_keeps_its_exporters_rights(dev, exported: str) -> None:
    """A device-read-only BO, or a dma-buf fd not open for writing, imports device-read-only: BO_INFO
    says so and a job that writes it is refused with -EACCES."""
    from libaccel import Device, Job, JobBo
    from libaccel.errors import AccelError

    bo = dev.create_bo(PAGE, read_only=exported == "read_only_bo")
    if exported == "read_only_bo":
        fd = bo.export_dmabuf()
    else:
        arg = bytearray(struct.pack("IIi", bo.handle, os.O_CLOEXEC, -1))
        fcntl.ioctl(dev.backend.fileno(), PRIME_HANDLE_TO_FD, arg, True)
        fd = struct.unpack("IIi", arg)[2]
    try:
        with Device.open("kernel") as other:
            imp = other.import_dmabuf(fd)
            assert imp.read_only, "BO_INFO does not report the import as device-read-only"
            s = fill_stream(imp.va, 64, 1)
            cmd = other.create_bo_with(s, read_only=True)
            with pytest.raises(AccelError) as exc:
                other.submit(Job(cmd, len(s), [JobBo(imp, write=True)]))
            assert exc.value.errno == errno.EACCES
            # Reading it stays allowed.
            out = other.create_bo(PAGE)
            c = copy_stream(imp.va, out.va, 64)
            other.submit(
                Job(other.create_bo_with(c, read_only=True), len(c), [JobBo(imp), JobBo(out, write=True)])
            )
            assert out.wait(timeout=30).status == 0
    finally:
        os.close(fd)


@pytest.mark.skipif(not DMA_HEAP_SYSTEM.exists(), reason="no /dev/dma_heap/system in this kernel")
def test_a_read_only_heap_buffer_imports_read_only(dev) -> None:
    """Another exporter's dma-buf opened read-only: the device may read it, never write it."""
    fd = heap_fd(PAGE, os.O_RDONLY | os.O_CLOEXEC)
    try:
        assert dev.import_dmabuf(fd).read_only
    finally:
        os.close(fd)


def test_submit_copies_the_stream_after_the_jobs_that_write_its_command_bo(held_timeout, dev) -> None:
    """A held job will copy a new stream into the command BO: SUBMIT waits for it and runs that one."""
    from libaccel import Job, JobBo

    out = dev.create_bo(PAGE)
    old, new = fill_stream(out.va, 64, 1), fill_stream(out.va, 64, 2)
    assert len(old) == len(new)
    cmd = dev.create_bo_with(old)
    source = dev.create_bo_with(new, read_only=True)
    then = vector(1, source.va, len(new)) + vector(2, cmd.va, len(new)) + encode("COPY", src=1, dst=2) + end()
    held = HeldJob(dev, then, [JobBo(source), JobBo(cmd, read=False, write=True)])
    errors: list[BaseException] = []

    def submit() -> None:
        try:
            dev.submit(Job(cmd, len(new), [JobBo(out, read=False, write=True)]))
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    t = threading.Thread(target=submit)
    t.start()
    t.join(timeout=2)
    assert t.is_alive(), "SUBMIT returned before the job that writes its command BO ended"
    held.release()
    t.join(timeout=60)
    assert not t.is_alive() and not errors, errors
    assert out.wait(timeout=30).status == 0
    assert (out.array(np.int8, 64) == 2).all(), "SUBMIT ran the stream as it was before the job wrote it"


def _raw_mmap(fd: int, offset: int) -> int:
    """mmap(2) one page of ``fd`` at ``offset``, read-only. Python's mmap.mmap keeps a dup of the fd,
    which would hold the file open by itself."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    addr = libc.mmap(None, PAGE, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
    assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
    return addr


def _munmap(addr: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    assert libc.munmap(addr, PAGE) == 0


@pytest.mark.parametrize("mapped", ["own_bo", "import"])
def test_what_a_cpu_mapping_holds_open(dev, mapped: str) -> None:
    """A mapping of a BO the file created holds the file open; a mapping of an import holds the dma-buf
    (dma_buf_mmap() maps the dma-buf's file), so the importing file is released while it lives, and
    the mapping still shows the exporter's pages."""
    from kernel_helpers import debugfs_counters, wait_until

    from libaccel import Device

    gc.collect()
    files = debugfs_counters()["files"]
    src = dev.create_bo(PAGE)
    src.write(b"\x05" * 64)
    fd = src.export_dmabuf()
    try:
        other = Device.open("kernel")
        # No libaccel mapping of its own (Python's mmap.mmap keeps a dup of the fd): the raw one only.
        bo = other.import_dmabuf(fd) if mapped == "import" else other.create_bo(PAGE)
        addr = _raw_mmap(other.backend.fileno(), bo.mmap_offset)
        assert debugfs_counters()["files"] == files + 1
        bo.close()
        del bo
        other.close()
    finally:
        os.close(fd)
    try:
        released = wait_until(lambda: debugfs_counters()["files"] == files, 5)
        assert released == (mapped == "import"), f"{mapped}: the file released: {released}"
        assert ctypes.string_at(addr, 64) == (b"\x05" if mapped == "import" else b"\x00") * 64
    finally:
        _munmap(addr)
    assert wait_until(lambda: debugfs_counters()["files"] == files, 10)


def test_a_caller_of_the_eight_byte_bo_sync_still_syncs_the_whole_bo(dev) -> None:
    """BO_SYNC grew an offset and a size: a caller built against the 8-byte struct (its own ioctl
    number) still gets the whole BO synced, as before, and the same errors."""
    from uapi import bindings as b

    old_number = (1 << 30) | (8 << 16) | (ord("d") << 8) | (b.DRM_COMMAND_BASE + b.DRM_VNPU_BO_SYNC)
    assert old_number != b.IOCTLS["DRM_IOCTL_VNPU_BO_SYNC"]
    bo = dev.create_bo(PAGE)
    fcntl.ioctl(dev.backend.fileno(), old_number, struct.pack("II", bo.handle, b.DRM_VNPU_BO_SYNC_FLAGS_MASK))
    with pytest.raises(OSError) as e:
        fcntl.ioctl(dev.backend.fileno(), old_number, struct.pack("II", 0xBAD, b.DRM_VNPU_BO_SYNC_FOR_CPU))
    assert e.value.errno == errno.ENOENT
