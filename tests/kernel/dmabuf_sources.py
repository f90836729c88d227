"""dma-buf exporters the Debian kernel already has, for the zero-copy tests: the system dma-heap and udmabuf.

Each returns a dma-buf fd the caller closes, plus a CPU view of its pages:

* :func:`heap_buffer`: ``DMA_HEAP_IOCTL_ALLOC`` on ``/dev/dma_heap/system`` (its own pages; the CPU maps
  the dma-buf fd and brackets its accesses with ``DMA_BUF_IOCTL_SYNC``);
* :func:`udmabuf_buffer`: a sealed memfd turned into a dma-buf by ``/dev/udmabuf`` (the memfd's pages:
  the CPU maps the memfd).

The ioctl numbers are the kernel's ``_IOWR``/``_IOW`` encodings of the uapi structs (linux/dma-heap.h,
linux/udmabuf.h, linux/dma-buf.h).
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

DMA_HEAP_SYSTEM = Path("/dev/dma_heap/system")
UDMABUF = Path("/dev/udmabuf")


def _ioc(direction: int, kind: str, nr: int, size: int) -> int:
    return (direction << 30) | (size << 16) | (ord(kind) << 8) | nr


_WRITE, _READ = 1, 2
# struct dma_heap_allocation_data { __u64 len; __u32 fd; __u32 fd_flags; __u64 heap_flags; }
DMA_HEAP_IOCTL_ALLOC = _ioc(_READ | _WRITE, "H", 0x0, 24)
# struct udmabuf_create { __u32 memfd; __u32 flags; __u64 offset; __u64 size; }
UDMABUF_CREATE = _ioc(_WRITE, "u", 0x42, 24)
UDMABUF_FLAGS_CLOEXEC = 0x01
# struct dma_buf_sync { __u64 flags; }
DMA_BUF_IOCTL_SYNC = _ioc(_WRITE, "b", 0, 8)
DMA_BUF_SYNC_RW, DMA_BUF_SYNC_START, DMA_BUF_SYNC_END = 3, 0, 4
F_ADD_SEALS, F_SEAL_SHRINK = 1033, 0x0002


@dataclass
class DmaBuf:
    """A dma-buf fd and a CPU mapping of the same pages; ``close()`` releases both."""

    fd: int
    view: mmap.mmap
    _extra_fd: int = -1

    def cpu_access(self, start: bool) -> None:
        """DMA_BUF_IOCTL_SYNC around CPU access (what a careful user of an exported buffer does)."""
        flags = DMA_BUF_SYNC_RW | (DMA_BUF_SYNC_START if start else DMA_BUF_SYNC_END)
        fcntl.ioctl(self.fd, DMA_BUF_IOCTL_SYNC, struct.pack("Q", flags))

    def close(self) -> None:
        self.view.close()
        os.close(self.fd)
        if self._extra_fd >= 0:
            os.close(self._extra_fd)


def heap_fd(size: int, fd_flags: int = os.O_RDWR | os.O_CLOEXEC) -> int:
    """A dma-buf fd of ``size`` bytes from the system dma-heap, opened with ``fd_flags``."""
    heap = os.open(DMA_HEAP_SYSTEM, os.O_RDONLY | os.O_CLOEXEC)
    try:
        arg = bytearray(struct.pack("QIIQ", size, 0, fd_flags, 0))
        fcntl.ioctl(heap, DMA_HEAP_IOCTL_ALLOC, arg, True)
    finally:
        os.close(heap)
    return struct.unpack("QIIQ", arg)[1]


def heap_buffer(size: int) -> DmaBuf:
    """``size`` bytes from the system dma-heap."""
    fd = heap_fd(size)
    return DmaBuf(fd, mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE))


def udmabuf_buffer(size: int) -> DmaBuf:
    """``size`` bytes (a multiple of the page size) of a sealed memfd, as a dma-buf."""
    memfd = os.memfd_create("vnpu-udmabuf", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
    os.ftruncate(memfd, size)
    fcntl.fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK)
    dev = os.open(UDMABUF, os.O_RDWR | os.O_CLOEXEC)
    try:
        # A mutable argument makes fcntl.ioctl return the call's result: the new dma-buf's fd.
        arg = bytearray(struct.pack("IIQQ", memfd, UDMABUF_FLAGS_CLOEXEC, 0, size))
        fd = fcntl.ioctl(dev, UDMABUF_CREATE, arg, True)
    finally:
        os.close(dev)
    view = mmap.mmap(memfd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    return DmaBuf(fd, view, memfd)


# vgem (drivers/gpu/drm/vgem, a module in Debian's kernel): a GEM device whose buffers carry fences
# that userspace signals, the kernel's own stand-in for another driver's jobs.
# struct drm_mode_create_dumb { __u32 height, width, bpp, flags; __u32 handle, pitch; __u64 size; }
_MODE_CREATE_DUMB = _ioc(_READ | _WRITE, "d", 0xB2, 32)
# struct drm_prime_handle { __u32 handle; __u32 flags; __s32 fd; }
_PRIME_HANDLE_TO_FD = _ioc(_READ | _WRITE, "d", 0x2D, 12)
# struct drm_vgem_fence_attach { __u32 handle, flags, out_fence, pad; }, struct drm_vgem_fence_signal
_VGEM_FENCE_ATTACH = _ioc(_READ | _WRITE, "d", 0x41, 16)
_VGEM_FENCE_SIGNAL = _ioc(_WRITE, "d", 0x42, 8)
_VGEM_FENCE_WRITE = 0x1


def vgem_card() -> Path | None:
    """The DRM card node of vgem (loaded with modprobe if need be), or None where there is no vgem."""
    import subprocess

    subprocess.run(["modprobe", "vgem"], capture_output=True, check=False)
    # vgem's card hangs off a platform device of its own name, with no driver bound to it.
    for name in sorted(Path("/sys/class/drm").glob("card[0-9]*")):
        if (name / "device").resolve().name == "vgem":
            return Path("/dev/dri") / name.name
    return None


class VgemBuffer:
    """A vgem buffer with an unsignalled write fence: a dma-buf whose reservation holds another driver's
    pending fence (it signals when :meth:`signal` is called, or after vgem's own 10 s timeout)."""

    def __init__(self, card: Path, size: int) -> None:
        self.card = os.open(card, os.O_RDWR | os.O_CLOEXEC)
        arg = bytearray(struct.pack("IIIIIIQ", 1, size // 4, 32, 0, 0, 0, 0))
        fcntl.ioctl(self.card, _MODE_CREATE_DUMB, arg, True)
        handle = struct.unpack("IIIIIIQ", arg)[4]
        arg = bytearray(struct.pack("IIII", handle, _VGEM_FENCE_WRITE, 0, 0))
        fcntl.ioctl(self.card, _VGEM_FENCE_ATTACH, arg, True)
        self.fence = struct.unpack("IIII", arg)[2]
        arg = bytearray(struct.pack("IIi", handle, os.O_RDWR | os.O_CLOEXEC, -1))
        fcntl.ioctl(self.card, _PRIME_HANDLE_TO_FD, arg, True)
        self.fd = struct.unpack("IIi", arg)[2]

    def signal(self) -> None:
        fcntl.ioctl(self.card, _VGEM_FENCE_SIGNAL, struct.pack("II", self.fence, 0))

    def close(self) -> None:
        os.close(self.fd)
        os.close(self.card)
