"""The shim's file side: one open "file" and its ioctl handlers, as vnpu_drv.c and vnpu_gem.c are.

A :class:`ShimBackend` holds the GEM handle table, the syncobj table and a private device address
space with its own page tables in system memory (BO VAs from DRM_VNPU_VA_START), checks every
argument with the errnos the header documents, checks command streams
(:mod:`libaccel.backends.stream_check`) and hands jobs to the device side (:mod:`.device`).
"""

from __future__ import annotations

import errno
import os
import struct
import threading
from typing import Any

import numpy as np

from device_model.page_tables import AddressSpace
from libaccel.backends import Backend
from libaccel.backends.shim.device import (
    DRIVER_NAME,
    DRIVER_VERSION,
    GUARD,
    JOB_V1_SIZE,
    MAX_BO_SIZE,
    MAX_IN_SYNCOBJS,
    MAX_JOB_BOS,
    MAX_JOB_SIZE,
    MAX_JOB_STRUCT_SIZE,
    SYNCOBJ_WAIT_FLAGS,
    Errno,
    ExtentAllocator,
    Fence,
    ShimBo,
    ShimDevice,
    ShimJob,
    _now,
    _page_round,
    shared_device,
)
from libaccel.backends.stream_check import BoRange, StreamRejected, check_stream
from libaccel.errors import DeviceClosed, from_errno
from libaccel.job import Job, PreparedSubmit
from uapi import bindings as b
from uapi import hw_layout as hw
from uapi import isa
from uapi.bindings import ffi, ioctl_name
from vnpu_common import probe

# cffi's C-level calls for the ioctl argument's copy in and out (ffi's own wrappers cost a few
# microseconds of Python per ioctl), and each argument type's size.
_typeof = ffi._backend.typeof
_newp = ffi._backend.newp
_memmove = ffi._backend.memmove
_from_buffer = ffi._backend.from_buffer
_JOB_PTR = ffi.typeof("struct drm_vnpu_job *")
_JOB_BOS = ffi.typeof("struct drm_vnpu_job_bo[]")
_ARG_SIZES: dict[Any, int] = {}
# An ioctl number's direction bit "out" (asm-generic/ioctl.h: _IOC_READ << _IOC_DIRSHIFT): only
# then does the DRM core copy the argument back to userspace.
_IOC_OUT = 2 << 30
_FORKED_HINT = (
    "this shim device belongs to the parent process (the shim is one device per process): "
    "open the shim again in the child"
)
JOB_BO_SIZE = ffi.sizeof("struct drm_vnpu_job_bo")
# Command-stream copies a file keeps mapped for its next submissions (vnpu.ko pools its command
# buffers too): a repeated submission then maps, zeroes and frees nothing.
CMD_POOL = 4
# Streams a file remembers as checked against a BO list (cleared when its BO table changes).
CHECKED_STREAMS = 64
# Bytes read after SUBMIT's job array in the same read: room for 64 BO entries.
READ_AHEAD = 64 * JOB_BO_SIZE

# The largest array a user pointer may name: what kmalloc serves (KMALLOC_MAX_SIZE on x86-64); the
# kernel fails a bigger one with ENOMEM before it reads any of it.
MAX_USER_COPY = 4 << 20
_self_mem_fd = -1


def _self_mem() -> int:
    global _self_mem_fd
    if _self_mem_fd < 0:
        _self_mem_fd = os.open("/proc/self/mem", os.O_RDWR | os.O_CLOEXEC)
    return _self_mem_fd


def _forget_self_mem() -> None:
    """In a forked child: the inherited descriptor is the parent's memory (/proc/self is resolved
    when it is opened); the child opens its own on first use."""
    global _self_mem_fd
    if _self_mem_fd >= 0:
        os.close(_self_mem_fd)
        _self_mem_fd = -1


os.register_at_fork(after_in_child=_forget_self_mem)


def _user_range(addr: int, size: int, what: str) -> None:
    # NULL and the zero page fault, as does anything past the user half of the address space.
    if addr < hw.PAGE_SIZE or addr + size > 1 << 47:
        raise Errno(errno.EFAULT, f"{what} pointer {addr:#x} is not a valid user address")
    if size > MAX_USER_COPY:
        raise Errno(errno.ENOMEM, f"{what}: {size} bytes is more than the kernel allocates at once")


def copy_from_user(addr: int, size: int, what: str) -> bytes:
    """``size`` bytes at user address ``addr``; EFAULT (not SIGSEGV) where nothing is mapped.

    The shim's "user memory" is this process's: reading it through /proc/self/mem makes a bad
    pointer a failed read, as copy_from_user makes it in the kernel.
    """
    if size == 0:
        return b""
    _user_range(addr, size, what)
    try:
        data = os.pread(_self_mem(), size, addr)
    except OSError:
        data = b""
    if len(data) != size:
        raise Errno(errno.EFAULT, f"{what}: {size} bytes at {addr:#x} are not all readable")
    return data


def copy_from_user_ahead(addr: int, size: int, ahead: int, what: str) -> bytes:
    """:func:`copy_from_user` of ``size`` bytes, with up to ``ahead`` more bytes after them where
    those are readable: one read where the caller expects to need what follows (libaccel puts a
    job's BO list right after the job array). Only the first ``size`` bytes must be readable."""
    _user_range(addr, size, what)
    want = max(size, min(size + ahead, MAX_USER_COPY, (1 << 47) - addr))
    try:
        data = os.pread(_self_mem(), want, addr)
    except OSError:
        data = b""
    if len(data) < size:
        raise Errno(errno.EFAULT, f"{what}: {size} bytes at {addr:#x} are not all readable")
    return data


def read_user(read: tuple[int, bytes], addr: int, size: int, what: str) -> bytes:
    """``size`` bytes at ``addr``: out of ``read`` (an earlier read's address and bytes) when they
    lie in it, else :func:`copy_from_user`."""
    start, data = read
    if start <= addr and addr + size <= start + len(data):
        return data[addr - start : addr - start + size]
    return copy_from_user(addr, size, what)


def copy_to_user(addr: int, data: bytes, what: str) -> None:
    """Write ``data`` at user address ``addr``; EFAULT where it is not writable memory."""
    if not data:
        return
    _user_range(addr, len(data), what)
    try:
        written = os.pwrite(_self_mem(), data, addr)
    except OSError:
        written = 0
    if written != len(data):
        raise Errno(errno.EFAULT, f"{what}: {len(data)} bytes at {addr:#x} are not all writable")


class ShimBackend(Backend):
    """One open "file" of the shim device."""

    kind = "shim"
    path = "shim"

    def __init__(self, device: ShimDevice | None = None) -> None:
        try:
            self.dev = device or shared_device()
        except Errno as e:
            raise from_errno(e.errno, "open shim", e.detail) from None
        self.file_id = self.dev.new_file_id()
        self.aspace = AddressSpace(self.dev.memory, self.dev.pt_pages)
        va_size = self.dev.param(b.DRM_VNPU_PARAM_VA_SIZE)
        self.va = ExtentAllocator(b.DRM_VNPU_VA_START, va_size)
        self.bos: dict[int, ShimBo] = {}
        self.syncobjs: dict[int, Fence | None] = {}
        self._cmd_pool: list[tuple[int, int, int]] = []  # (pa, va, bytes) of finished jobs' copies
        # Job BO lists resolved and checked (by their bytes) and streams checked against them
        # (whether each WAITs): both valid until the BO table changes (_bos_changed).
        self._bo_lists: dict[bytes, tuple[list[tuple[ShimBo, int]], list[BoRange]]] = {}
        self._checked: dict[tuple[bytes, bytes], bool] = {}
        self.bo_changes = 0  # bumped with every change of the BO table (replayed jobs check it)
        self._closed = False
        self.last_core = 0  # the core of its last job: its next one goes there on a tie (ShimDevice)
        self._handlers = {
            b.IOCTLS["DRM_IOCTL_VERSION"]: self._version,
            b.IOCTLS["DRM_IOCTL_GEM_CLOSE"]: self._gem_close,
            b.IOCTLS["DRM_IOCTL_SYNCOBJ_CREATE"]: self._syncobj_create,
            b.IOCTLS["DRM_IOCTL_SYNCOBJ_DESTROY"]: self._syncobj_destroy,
            b.IOCTLS["DRM_IOCTL_SYNCOBJ_WAIT"]: self._syncobj_wait,
            b.IOCTLS["DRM_IOCTL_VNPU_GET_PARAM"]: self._get_param,
            b.IOCTLS["DRM_IOCTL_VNPU_BO_CREATE"]: self._bo_create,
            b.IOCTLS["DRM_IOCTL_VNPU_BO_INFO"]: self._bo_info,
            b.IOCTLS["DRM_IOCTL_VNPU_BO_WAIT"]: self._bo_wait,
            b.IOCTLS["DRM_IOCTL_VNPU_SUBMIT"]: self._submit,
            b.IOCTLS["DRM_IOCTL_VNPU_BO_SYNC"]: self._bo_sync,
            b.IOCTLS["DRM_IOCTL_PRIME_HANDLE_TO_FD"]: self._no_dmabuf,
            b.IOCTLS["DRM_IOCTL_PRIME_FD_TO_HANDLE"]: self._no_dmabuf,
        }

    # --- Backend interface ---------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed or self.dev.forked

    def _refuse(self, op: str) -> DeviceClosed:
        if self.dev.forked:
            return DeviceClosed(errno.EBADF, op, _FORKED_HINT)
        return DeviceClosed(errno.EBADF, op)

    def ioctl(self, request: int, arg: Any) -> None:
        if self._closed or self.dev.forked:
            raise self._refuse(ioctl_name(request))
        handler = self._handlers.get(request)
        try:
            if handler is None:
                raise Errno(errno.EINVAL, "not an ioctl of this device")
            # The kernel copies the argument in, and out when the ioctl's direction has "out"
            # (drm_ioctl); a handler that fails writes nothing back.
            ctype = _typeof(arg)
            size = _ARG_SIZES.get(ctype)
            if size is None:
                size = _ARG_SIZES[ctype] = ffi.sizeof(ctype.item)
            work = _newp(ctype, None)
            _memmove(work, arg, size)
            handler(work)
            if request & _IOC_OUT:
                _memmove(arg, work, size)
        except Errno as e:
            raise from_errno(e.errno, ioctl_name(request), detail=e.detail) from None

    def mmap(self, offset: int, size: int) -> memoryview:
        if self._closed or self.dev.forked:
            raise self._refuse("mmap")
        with self.dev.lock:
            bo = self.dev.mmap_table.get(offset)
            if bo is None or offset % hw.PAGE_SIZE or size <= 0 or size > bo.size:
                raise from_errno(errno.EINVAL, "mmap", "no BO at that mmap offset, or size beyond it")
            if bo.file is not self:
                raise from_errno(errno.EACCES, "mmap", "the BO belongs to another file")
            return self.dev.memory.view(bo.pa, size)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.dev.forked:  # the parent's file: nothing of it is this process's to free
            return
        self.dev.cancel_file_jobs(self)
        with self.dev.lock:
            for handle in list(self.bos):
                self.unref_bo(self.bos.pop(handle))
            self._bos_changed()
            for pa, _, alloc in self._cmd_pool:
                self.dev.data.free(pa, alloc)
            self._cmd_pool.clear()
            self.syncobjs.clear()
            self.aspace.destroy()

    # --- helpers ----------------------------------------------------------------------
    @staticmethod
    def _new_handle(table: dict[int, Any]) -> int:
        # idr_alloc(..., 1, 0): the lowest free id from 1.
        h = 1
        while h in table:
            h += 1
        return h

    def _lookup_bo(self, handle: int, err: int = errno.ENOENT) -> ShimBo:
        bo = self.bos.get(handle)
        if bo is None:
            raise Errno(err, f"no BO with handle {handle}")
        return bo

    def unref_bo(self, bo: ShimBo) -> None:
        """Drop one reference (call with the device lock held); the last one frees VA and memory."""
        bo.refs -= 1
        if bo.refs:
            return
        npages = bo.size // hw.PAGE_SIZE
        if self.aspace.root >= 0:
            self.aspace.unmap(bo.va, npages)
        self.va.free(bo.va, bo.size + GUARD)
        self.dev.data.free(bo.pa, bo.size)
        self.dev.mmap_table.pop(bo.mmap_offset, None)

    def _alloc_mapped(self, size: int, writable: bool) -> tuple[int, int]:
        """Contiguous zeroed memory mapped at a fresh VA, followed by an unmapped guard page: (pa, va)."""
        va = self.va.alloc(size + GUARD)
        if va is None:
            raise Errno(errno.ENOSPC, "the file's device address space is full")
        pa = self.dev.data.alloc(size)
        if pa is None:
            self.va.free(va, size + GUARD)
            raise Errno(errno.ENOMEM, "out of device memory")
        np.frombuffer(self.dev.memory.view(pa, size), dtype=np.uint8)[:] = 0
        self.aspace.map(va, range(pa, pa + size, hw.PAGE_SIZE), writable=writable)
        return pa, va

    def _bos_changed(self) -> None:
        self.bo_changes += 1
        self._bo_lists.clear()
        self._checked.clear()

    def _cmd_copy(self, alloc: int) -> tuple[int, int, int]:
        """A mapped, device-read-only copy area of ``alloc`` bytes: from the pool, or new."""
        for i, entry in enumerate(self._cmd_pool):
            if entry[2] == alloc:
                del self._cmd_pool[i]
                return entry
        pa, va = self._alloc_mapped(alloc, writable=False)
        return pa, va, alloc

    def free_cmd_copy(self, job: ShimJob) -> None:
        """A finished job's stream copy goes back to the file's pool (call with the device lock)."""
        if not job.cmd_alloc:  # a replayed job runs without one (replay.py)
            return
        if not self._closed and self.aspace.root >= 0 and len(self._cmd_pool) < CMD_POOL:
            self._cmd_pool.append((job.cmd_pa, job.cmd_va, job.cmd_alloc))
            return
        if self.aspace.root >= 0:
            self.aspace.unmap(job.cmd_va, job.cmd_alloc // hw.PAGE_SIZE)
        self.va.free(job.cmd_va, job.cmd_alloc + GUARD)
        self.dev.data.free(job.cmd_pa, job.cmd_alloc)

    # --- core DRM ioctls --------------------------------------------------------------
    def _version(self, a: Any) -> None:
        a.version_major, a.version_minor, a.version_patchlevel = DRIVER_VERSION
        for ptr_name, len_name, text in (
            ("name", "name_len", DRIVER_NAME),
            ("date", "date_len", "0"),
            ("desc", "desc_len", "vnpu NPU (shim)"),
        ):
            data = text.encode()
            n = min(int(getattr(a, len_name)), len(data))
            ptr = int(ffi.cast("uintptr_t", getattr(a, ptr_name)))
            if n and ptr:
                copy_to_user(ptr, data[:n], ptr_name)
            setattr(a, len_name, len(data))

    def _gem_close(self, a: Any) -> None:
        with self.dev.lock:
            bo = self._lookup_bo(a.handle, errno.EINVAL)
            del self.bos[a.handle]
            self._bos_changed()
            self.unref_bo(bo)

    def _syncobj_create(self, a: Any) -> None:
        if a.flags & ~b.DRM_SYNCOBJ_CREATE_SIGNALED:
            raise Errno(errno.EINVAL, f"unknown flags {a.flags:#x}")
        with self.dev.lock:
            h = self._new_handle(self.syncobjs)
            self.syncobjs[h] = Fence(signaled=True) if a.flags & b.DRM_SYNCOBJ_CREATE_SIGNALED else None
            a.handle = h

    def _syncobj_destroy(self, a: Any) -> None:
        if a.pad:
            raise Errno(errno.EINVAL, "pad is not zero")
        with self.dev.lock:
            if a.handle not in self.syncobjs:
                raise Errno(errno.EINVAL, f"no syncobj {a.handle}")
            del self.syncobjs[a.handle]

    def _syncobj_wait(self, a: Any) -> None:
        if a.flags & ~SYNCOBJ_WAIT_FLAGS:
            raise Errno(errno.EINVAL, f"unknown flags {a.flags:#x}")
        count = a.count_handles
        if count == 0:
            return
        raw = copy_from_user(a.handles, 4 * count, "handles")
        if count == 1:  # the usual wait: one fence, often signalled already
            fence = self.syncobjs.get(int.from_bytes(raw, "little"))
            if fence is not None and fence.signaled:
                if not a.flags & b.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL:
                    a.first_signaled = 0
                probe.mark("shim.woken")
                return
        handles = list(struct.unpack(f"<{count}I", raw))
        wait_all = bool(a.flags & b.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL)
        for_submit = bool(a.flags & b.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT)
        with self.dev.lock:
            for h in handles:
                if h not in self.syncobjs:
                    raise Errno(errno.ENOENT, f"no syncobj {h}")
            fences: list[Fence | None] = [self.syncobjs[h] for h in handles]
            if not for_submit and any(f is None for f in fences):
                raise Errno(errno.EINVAL, "a syncobj has no fence (use WAIT_FOR_SUBMIT)")
            # Woken by the fences waited on (or, for one without a fence yet, by a submit), as a
            # dma_fence callback wakes its waiter: no other job's completion wakes this thread.
            waiter = threading.Condition(self.dev.lock)
            watched: list[Fence] = []
            try:
                while True:
                    for i, h in enumerate(handles):
                        if fences[i] is None:
                            fences[i] = self.syncobjs.get(h)
                    done = [f is not None and f.signaled for f in fences]
                    if all(done) if wait_all else any(done):
                        if not wait_all:
                            a.first_signaled = done.index(True)
                        probe.mark("shim.woken")
                        return
                    left = a.timeout_nsec - _now()
                    if left <= 0:
                        raise Errno(errno.ETIME, "timeout")
                    for f in fences:
                        if f is not None and not f.signaled and f not in watched:
                            f.waiters.append(waiter)
                            watched.append(f)
                    if any(f is None for f in fences):
                        self.dev.submit_waiters.add(waiter)
                    waiter.wait(left / 1e9)
            finally:
                self.dev.submit_waiters.discard(waiter)
                for f in watched:
                    if waiter in f.waiters:
                        f.waiters.remove(waiter)

    # --- vnpu ioctls ------------------------------------------------------------------
    def _get_param(self, a: Any) -> None:
        if a.pad:
            raise Errno(errno.EINVAL, "pad is not zero")
        a.value = self.dev.param(a.param)

    def _bo_create(self, a: Any) -> None:
        if a.flags & ~b.DRM_VNPU_BO_FLAGS_MASK:
            raise Errno(errno.EINVAL, f"unknown flags {a.flags:#x}")
        if a.handle or a.mmap_offset or a.va:
            raise Errno(errno.EINVAL, "output fields are not zero")
        if a.size == 0:
            raise Errno(errno.EINVAL, "size is zero")
        if a.size > MAX_BO_SIZE:
            raise Errno(errno.E2BIG, f"size {a.size} exceeds {MAX_BO_SIZE}")
        size = _page_round(a.size)
        with self.dev.lock:
            pa, va = self._alloc_mapped(size, writable=not a.flags & b.DRM_VNPU_BO_DEVICE_READ_ONLY)
            bo = ShimBo(self, size, a.flags, pa, va, 0)
            bo.mmap_offset = self.dev.alloc_mmap_offset(bo)
            h = self._new_handle(self.bos)
            self.bos[h] = bo
            self._bos_changed()
        a.size, a.handle, a.mmap_offset, a.va = size, h, bo.mmap_offset, va

    def _bo_info(self, a: Any) -> None:
        if a.pad:
            raise Errno(errno.EINVAL, "pad is not zero")
        with self.dev.lock:
            bo = self._lookup_bo(a.handle)
            a.size, a.flags, a.pad2, a.mmap_offset, a.va = bo.size, bo.flags, 0, bo.mmap_offset, bo.va

    def _bo_wait(self, a: Any) -> None:
        if a.pad or a.pad2 or a.job_status or a.fault_va:
            raise Errno(errno.EINVAL, "pad or output fields are not zero")
        with self.dev.lock:
            bo = self._lookup_bo(a.handle)
            if bo.pending:
                waiter = threading.Condition(self.dev.lock)  # woken when the BO's last job ends
                try:
                    while bo.pending:
                        left = a.timeout_ns - _now()
                        if left <= 0:
                            raise Errno(errno.ETIME, "timeout")
                        if waiter not in bo.waiters:
                            bo.waiters.append(waiter)
                        waiter.wait(left / 1e9)
                finally:
                    if waiter in bo.waiters:
                        bo.waiters.remove(waiter)
            a.job_status = bo.last_status
            a.fault_va = bo.last_fault_va
        probe.mark("shim.woken")

    def _no_dmabuf(self, a: Any) -> None:
        raise Errno(
            errno.EOPNOTSUPP,
            "the shim shares no memory with other devices: dma-buf import and export need the kernel backend",
        )

    def _bo_sync(self, a: Any) -> None:
        if not a.flags or a.flags & ~b.DRM_VNPU_BO_SYNC_FLAGS_MASK:
            raise Errno(errno.EINVAL, f"flags {a.flags:#x} are not 1..{b.DRM_VNPU_BO_SYNC_FLAGS_MASK:#x}")
        with self.dev.lock:
            bo = self._lookup_bo(a.handle)
        size = a.size or max(bo.size - a.offset, 0)
        if a.offset >= bo.size or size > bo.size - a.offset:
            raise Errno(errno.EINVAL, f"range {a.offset}+{a.size} is not inside the BO's {bo.size} bytes")
        # The shim's device works on the very memory the CPU maps: nothing to copy either way.

    def _submit(self, a: Any) -> None:
        probe.mark("shim.ioctl")
        if a.flags or a.pad:
            raise Errno(errno.EINVAL, "flags or pad is not zero")
        if not 1 <= a.job_count <= b.DRM_VNPU_MAX_JOBS_PER_SUBMIT:
            raise Errno(errno.EINVAL, f"job_count {a.job_count} is not 1..{b.DRM_VNPU_MAX_JOBS_PER_SUBMIT}")
        if not JOB_V1_SIZE <= a.job_struct_size <= MAX_JOB_STRUCT_SIZE or a.job_struct_size % 8:
            raise Errno(errno.EINVAL, f"job_struct_size {a.job_struct_size} is not supported")
        raw_jobs = []
        size = a.job_struct_size
        # The job array and what follows it (usually the BO lists) in one read.
        window = copy_from_user_ahead(a.jobs, a.job_count * size, READ_AHEAD, "jobs")
        for i in range(a.job_count):
            raw = window[i * size : (i + 1) * size]
            if size > JOB_V1_SIZE:
                if any(raw[JOB_V1_SIZE:]):
                    raise Errno(errno.EINVAL, f"job {i}: bytes past the known struct are not zero")
                raw = raw[:JOB_V1_SIZE]
            raw_jobs.append(_from_buffer(_JOB_PTR, raw, False))  # a view of the copy
        with self.dev.lock:
            # Validate every job before queueing any: all or none.
            checked = [self._check_job(i, j, (a.jobs, window)) for i, j in enumerate(raw_jobs)]
            copies: list[tuple[int, int, int]] = []
            try:
                for _, stream, _, _, _ in checked:
                    pa, va, alloc = self._cmd_copy(_page_round(len(stream)))
                    copies.append((pa, va, alloc))
                    self.dev.memory.view(pa, len(stream))[:] = stream
            except Errno:
                for pa, va, alloc in copies:
                    self.aspace.unmap(va, alloc // hw.PAGE_SIZE)
                    self.va.free(va, alloc + GUARD)
                    self.dev.data.free(pa, alloc)
                raise
            # A lone job that cannot block (no WAIT) may run in this thread (ShimDevice.queue_job).
            here = len(checked) == 1 and not checked[0][4]
            for (bos, stream, in_fences, out_handle, _), copy in zip(checked, copies, strict=True):
                core = self._queue(bos, len(stream), copy, in_fences, out_handle, here)
        if here and core is not None:
            probe.mark("shim.queued")
            self.dev.run_here(core)
        probe.mark("shim.submitted")

    def _check_job(
        self, i: int, j: Any, read: tuple[int, bytes]
    ) -> tuple[list[tuple[ShimBo, int]], bytes, list[Fence], int, bool]:
        """The job's BOs, its stream's copy, its in-fences, its out-syncobj and whether it WAITs."""
        p = f"job {i}: "
        if j.flags or j.pad:
            raise Errno(errno.EINVAL, p + "flags or pad is not zero")
        if j.cmd_size == 0 or j.cmd_size % 8 or j.cmd_offset % 8:
            raise Errno(errno.EINVAL, p + "cmd_size/cmd_offset zero or not 8-byte aligned")
        if j.cmd_size > MAX_JOB_SIZE:
            raise Errno(errno.EINVAL, p + f"cmd_size exceeds {MAX_JOB_SIZE}")
        if not 1 <= j.bo_count <= MAX_JOB_BOS:
            raise Errno(errno.EINVAL, p + f"bo_count {j.bo_count} is not 1..{MAX_JOB_BOS}")
        if j.in_syncobj_count > MAX_IN_SYNCOBJS:
            raise Errno(errno.EINVAL, p + f"more than {MAX_IN_SYNCOBJS} in-syncobjs")
        cmd_bo = self._lookup_bo(j.cmd_bo_handle)
        if j.cmd_offset + j.cmd_size > cmd_bo.size:
            raise Errno(errno.EINVAL, p + "command range is outside its BO")
        raw_bos = read_user(read, j.bos, j.bo_count * JOB_BO_SIZE, "bos")
        listed = self._bo_lists.get(raw_bos)
        if listed is None:
            listed = self._bo_list(p, raw_bos, j.bo_count)
        bos, ranges = listed
        in_fences: list[Fence] = []
        if j.in_syncobj_count:
            ins = struct.unpack(
                f"<{j.in_syncobj_count}I",
                read_user(read, j.in_syncobjs, 4 * j.in_syncobj_count, "in_syncobjs"),
            )
            for k in range(j.in_syncobj_count):
                if ins[k] not in self.syncobjs:
                    raise Errno(errno.ENOENT, p + f"no syncobj {ins[k]}")
                fence = self.syncobjs[ins[k]]
                if fence is None:
                    raise Errno(errno.EINVAL, p + f"syncobj {ins[k]} has no fence")
                in_fences.append(fence)
        if j.out_syncobj and j.out_syncobj not in self.syncobjs:
            raise Errno(errno.ENOENT, p + f"no syncobj {j.out_syncobj}")
        # Copy the stream before checking it, so userspace cannot change it afterwards.
        stream = bytes(self.dev.memory.view(cmd_bo.pa + j.cmd_offset, j.cmd_size))
        # Always checked, as vnpu.ko checks: the device MMU keeps a job to its file's memory, only
        # the check keeps it to the BOs it lists.
        waits = self._checked.get((stream, raw_bos))
        if waits is None:
            try:
                program = check_stream(stream, ranges)
            except StreamRejected as e:
                raise Errno(e.errno, p + str(e)) from None
            except isa.IsaError as e:
                raise Errno(errno.ENOEXEC, p + str(e)) from None
            waits = any(ins.op == "WAIT" for ins in program)
            if len(self._checked) >= CHECKED_STREAMS:
                self._checked.clear()
            self._checked[(stream, raw_bos)] = waits
        return bos, stream, in_fences, j.out_syncobj, waits

    def _bo_list(self, p: str, raw: bytes, count: int) -> tuple[list[tuple[ShimBo, int]], list[BoRange]]:
        """A job's BO list (its bytes) resolved and checked, remembered until the BO table changes."""
        arr = _from_buffer(_JOB_BOS, raw, False)
        bos: list[tuple[ShimBo, int]] = []
        seen: set[int] = set()
        for k in range(count):
            h, flags = arr[k].handle, arr[k].flags
            if flags == 0 or flags & ~b.DRM_VNPU_JOB_BO_FLAGS_MASK:
                raise Errno(errno.EINVAL, p + f"BO {h} has bad flags {flags:#x}")
            bo = self._lookup_bo(h)
            if h in seen:
                raise Errno(errno.EINVAL, p + f"BO {h} is listed twice")
            seen.add(h)
            if flags & b.DRM_VNPU_JOB_BO_WRITE and bo.flags & b.DRM_VNPU_BO_DEVICE_READ_ONLY:
                raise Errno(errno.EACCES, p + f"BO {h} is read-only but listed for writing")
            bos.append((bo, flags))
        listed = (bos, [BoRange(bo.va, bo.size, fl) for bo, fl in bos])
        if len(self._bo_lists) >= CHECKED_STREAMS:
            self._bo_lists.clear()
        self._bo_lists[raw] = listed
        return listed

    def _queue(
        self,
        bos: list[tuple[ShimBo, int]],
        cmd_size: int,
        copy: tuple[int, int, int],
        in_fences: list[Fence],
        out: int,
        here: bool = False,
    ) -> int | None:
        """Queue one checked job; the core to run it on in this thread, if any (ShimDevice.queue_job)."""
        deps = [f for f in in_fences if not f.signaled]
        # Implicit dependencies, as the BOs' reservations give them in vnpu.ko: a writer waits
        # for every earlier user of the BO, a reader for its earlier writers. (Jobs of this file
        # wait for each other anyway: a file's jobs run one at a time, in order.)
        for bo, flags in bos:
            for earlier in bo.pending:
                job = self.dev.jobs[earlier]
                if job.file is not self and (
                    flags & b.DRM_VNPU_JOB_BO_WRITE
                    or any(ebo is bo and ef & b.DRM_VNPU_JOB_BO_WRITE for ebo, ef in job.bos)
                ):
                    deps.append(job.out_fence)
        return self.dev.queue_job(self.new_job(bos, copy, cmd_size, out, deps), here)

    def new_job(
        self,
        bos: list[tuple[ShimBo, int]],
        copy: tuple[int, int, int],
        cmd_size: int,
        out: int,
        deps: list[Fence],
    ) -> ShimJob:
        """A checked job's fence (in syncobj ``out`` if not 0), seqno and references on its BOs
        (call with the device lock held): what a SUBMIT gives every job it queues."""
        pa, va, alloc = copy
        fence = Fence()
        if out:
            self.syncobjs[out] = fence
            for waiter in self.dev.submit_waiters:  # WAIT_FOR_SUBMIT waits for a fence to appear
                waiter.notify()
        seqno = self.dev.new_seqno()
        for bo, _ in bos:
            bo.refs += 1
            bo.pending.add(seqno)
        return ShimJob(seqno, self, bos, pa, va, alloc, cmd_size, fence, deps)

    def prepare_submit(self, job: Job, wait_handle: int, timeout: float) -> PreparedSubmit:
        """The shim replays a job it validated (:class:`.replay.ShimReplay`)."""
        from libaccel.backends.shim.replay import ShimReplay

        return ShimReplay(self, job, wait_handle, timeout)
