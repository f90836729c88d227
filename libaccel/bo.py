"""Buffer objects: GEM memory the NPU reads and writes, mapped into the CPU with no copy."""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

import numpy as np

from libaccel.errors import DeviceClosed
from libaccel.job import JobStatus, deadline_after  # JobStatus: BO_WAIT's answer, imported from here too
from uapi.bindings import (
    DRM_VNPU_BO_DEVICE_READ_ONLY,
    DRM_VNPU_BO_SYNC_FOR_CPU,
    DRM_VNPU_BO_SYNC_FOR_DEVICE,
    ffi,
)

if TYPE_CHECKING:
    from libaccel.device import Device


class BufferObject:
    """One BO of a :class:`~libaccel.device.Device`: handle, size, device VA, CPU mapping."""

    def __init__(self, device: Device, handle: int, size: int, flags: int, mmap_offset: int, va: int) -> None:
        self.device = device
        self.handle = handle
        self.size = size
        self.flags = flags
        self.mmap_offset = mmap_offset
        self.va = va
        self._map: memoryview | None = None
        self._closed = False

    def __repr__(self) -> str:
        return (
            f"BufferObject(handle={self.handle}, size={self.size:#x}, va={self.va:#x}, flags={self.flags:#x})"
        )

    @property
    def read_only(self) -> bool:
        return bool(self.flags & DRM_VNPU_BO_DEVICE_READ_ONLY)

    @property
    def closed(self) -> bool:
        return self._closed

    def map(self) -> memoryview:
        """The CPU mapping of the whole BO (created on first use, then reused)."""
        if self._closed:
            raise DeviceClosed(errno.EBADF, "mmap", f"BO {self.handle} was closed")
        if self._map is None:
            self._map = self.device.backend.mmap(self.mmap_offset, self.size)
        return self._map

    def array(self, dtype: np.typing.DTypeLike, shape: tuple[int, ...] | int, offset: int = 0) -> np.ndarray:
        """A numpy view of the BO's memory (no copy): writes go straight to the buffer."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        dt = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if offset < 0 or offset + count * dt.itemsize > self.size:
            raise ValueError(
                f"view of {count} x {dt} at offset {offset} exceeds BO {self.handle} of {self.size} bytes"
            )
        return np.frombuffer(self.map(), dtype=dt, count=count, offset=offset).reshape(shape)

    def write(self, data: bytes | bytearray | memoryview | np.ndarray, offset: int = 0) -> None:
        """Copy ``data`` into the BO at ``offset``."""
        raw = memoryview(np.ascontiguousarray(data)).cast("B") if isinstance(data, np.ndarray) else data
        n = len(memoryview(raw).cast("B"))
        if offset < 0 or offset + n > self.size:
            raise ValueError(f"{n} bytes at offset {offset} exceed BO {self.handle} of {self.size} bytes")
        self.map()[offset : offset + n] = memoryview(raw).cast("B")

    def read(self, size: int | None = None, offset: int = 0) -> bytes:
        size = self.size - offset if size is None else size
        return bytes(self.map()[offset : offset + size])

    def wait(self, timeout: float | None = 10.0, deadline_ns: int | None = None) -> JobStatus:
        """Wait for the BO's jobs (``timeout`` seconds, or an absolute ``deadline_ns``); their status.

        Raises :class:`~libaccel.errors.Timeout` when the deadline passes first.
        """
        if deadline_ns is None:
            deadline_ns = deadline_after(timeout if timeout is not None else 1e9)
        arg = ffi.new("struct drm_vnpu_bo_wait *")
        arg.handle = self.handle
        arg.timeout_ns = deadline_ns
        self.device.ioctl("DRM_IOCTL_VNPU_BO_WAIT", arg)
        return JobStatus(arg.job_status, arg.fault_va)

    def sync(self, for_cpu: bool = False, for_device: bool = False, offset: int = 0, size: int = 0) -> None:
        """BO_SYNC: make the CPU's and the device's view agree while a job that uses the BO runs.

        Jobs are synced at their start and end by the kernel; this is for memory shared with a running
        job: ``sync(for_cpu=True)`` before reading what it wrote, ``sync(for_device=True)`` after
        writing what it waits for. Only bytes ``offset .. offset + size`` (``size`` 0: to the end) are
        synced: with bounce buffering, ``for_device`` replaces the device's copy of that range, so
        sync just what the CPU wrote. A no-op where the device and the CPU share memory coherently.
        """
        arg = ffi.new("struct drm_vnpu_bo_sync *")
        arg.handle = self.handle
        arg.flags = (DRM_VNPU_BO_SYNC_FOR_CPU if for_cpu else 0) | (
            DRM_VNPU_BO_SYNC_FOR_DEVICE if for_device else 0
        )
        arg.offset = offset
        arg.size = size
        self.device.ioctl("DRM_IOCTL_VNPU_BO_SYNC", arg)

    def export_dmabuf(self) -> int:
        """PRIME_HANDLE_TO_FD: a dma-buf fd of this BO (close-on-exec, read-write), the caller's to close.

        Another device, or another vnpu file (``Device.import_dmabuf``), can import it; the pages stay
        while the fd or an import holds them, whatever becomes of this file.
        """
        arg = ffi.new("struct drm_prime_handle *")
        arg.handle = self.handle
        arg.flags = os.O_CLOEXEC | os.O_RDWR
        self.device.ioctl("DRM_IOCTL_PRIME_HANDLE_TO_FD", arg)
        return int(arg.fd)

    def close(self) -> None:
        """Release the handle (GEM_CLOSE). The CPU mapping stays valid until dropped, as with munmap."""
        if self._closed:
            return
        self._closed = True
        self._map = None
        if not self.device.closed:
            arg = ffi.new("struct drm_gem_close *")
            arg.handle = self.handle
            self.device.ioctl("DRM_IOCTL_GEM_CLOSE", arg)

    def __enter__(self) -> BufferObject:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
