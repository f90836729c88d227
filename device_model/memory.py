"""System memory as the device sees it: a flat guest-physical address space.

The device model never owns the memory it works on. Under QEMU it is the
guest's RAM, shared through ``memory-backend-file`` in /dev/shm (a guest page
at guest-physical address P sits at file offset P, see docs/device_model.md);
under libaccel's shim backend it is an anonymous mapping the shim allocates
"physical" pages from. Both look the same to the MMU: ``view(pa, size)``
returns a writable, zero-copy memoryview.
"""

from __future__ import annotations

import mmap
import os
from typing import Protocol, runtime_checkable


class PhysicalAddressError(ValueError):
    """An access outside system memory; ``pa`` and ``size`` describe it."""

    def __init__(self, pa: int, size: int, limit: int) -> None:
        self.pa = pa
        self.size = size
        super().__init__(f"physical range [{pa:#x}, {pa + size:#x}) is outside system memory [0, {limit:#x})")


@runtime_checkable
class SystemMemory(Protocol):
    """Guest-physical memory: ``size`` bytes starting at physical address 0."""

    size: int

    def view(self, pa: int, size: int) -> memoryview:
        """A writable, zero-copy view of [pa, pa + size); PhysicalAddressError outside."""
        ...


class _MappedMemory:
    """Shared implementation over one mmap object."""

    size: int
    _map: mmap.mmap
    _mv: memoryview

    def view(self, pa: int, size: int) -> memoryview:
        if pa < 0 or size < 0 or pa + size > self.size:
            raise PhysicalAddressError(pa, size, self.size)
        return self._mv[pa : pa + size]

    def close(self) -> None:
        """Unmap. Fails with BufferError while views handed out are still alive."""
        self._mv.release()
        self._map.close()

    def __enter__(self) -> _MappedMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AnonymousMemory(_MappedMemory):
    """Anonymous private memory of ``size`` bytes, zero-filled.

    The kernel touches pages lazily, so a large "RAM" costs only what is used.
    """

    def __init__(self, size: int) -> None:
        if size <= 0 or size % mmap.PAGESIZE:
            raise ValueError(f"memory size {size} must be a positive multiple of {mmap.PAGESIZE}")
        self.size = size
        self._map = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._mv = memoryview(self._map)

    def __repr__(self) -> str:
        return f"AnonymousMemory(size={self.size:#x})"


class MemfdMemory(_MappedMemory):
    """Shared memory of ``size`` bytes, zero-filled, that another process can map too.

    An anonymous mapping cannot be handed to a child process after exec; a memfd can: pass
    ``fd`` (``subprocess.Popen(pass_fds=...)``) and map it there with ``MemfdMemory(size, fd)``.
    The device model's core worker processes (device_model.core_worker) map the shim's RAM so.
    """

    def __init__(self, size: int, fd: int | None = None) -> None:
        if size <= 0 or size % mmap.PAGESIZE:
            raise ValueError(f"memory size {size} must be a positive multiple of {mmap.PAGESIZE}")
        self.size = size
        if fd is None:
            fd = os.memfd_create("vnpu-ram", os.MFD_CLOEXEC)
            os.ftruncate(fd, size)
        elif os.fstat(fd).st_size < size:
            raise ValueError(f"memfd {fd} has {os.fstat(fd).st_size} bytes, wanted {size}")
        self.fd = fd
        self._map = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self._mv = memoryview(self._map)

    def close(self) -> None:
        super().close()
        os.close(self.fd)

    def __repr__(self) -> str:
        return f"MemfdMemory(size={self.size:#x}, fd={self.fd})"


class FileMemory(_MappedMemory):
    """A shared mapping of a RAM backing file (QEMU's ``memory-backend-file``).

    ``size`` defaults to the file's size; the file must be at least that big
    (QEMU creates it when it starts, so start QEMU first or pass the size it
    will use and create the file yourself).
    """

    def __init__(self, path: str | os.PathLike[str], size: int | None = None) -> None:
        self.path = os.fspath(path)
        fd = os.open(self.path, os.O_RDWR)
        try:
            file_size = os.fstat(fd).st_size
            if size is None:
                size = file_size
            if size <= 0 or size > file_size:
                raise ValueError(f"{self.path}: wanted {size} bytes, the file has {file_size}")
            self.size = size
            self._map = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._mv = memoryview(self._map)

    def __repr__(self) -> str:
        return f"FileMemory({self.path!r}, size={self.size:#x})"
