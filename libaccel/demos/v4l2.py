"""V4L2 capture into dma-bufs: camera frames an NPU job can read in place (``Device.import_dmabuf``).

A :class:`Capture` opens a V4L2 capture node, sets a packed single-plane format, asks the driver
for MMAP buffers, exports each as a dma-buf (``VIDIOC_EXPBUF``), starts streaming and hands out
frames (:class:`Frame`: the buffer's index, its dma-buf fd, its CPU mapping, the sequence number).
``requeue(frame)`` gives a buffer back to the driver. Only what the zero-copy path needs is here:
one planar format family (packed RGB/YUV), MMAP memory, blocking dequeue.

The ioctl numbers and struct layouts are linux/videodev2.h's on 64-bit Linux (x86_64, aarch64).
"""

from __future__ import annotations

import errno
import fcntl
import glob
import mmap
import os
import select
import struct
from dataclasses import dataclass

_WRITE, _READ = 1, 2


def _ioc(direction: int, nr: int, size: int) -> int:
    return (direction << 30) | (size << 16) | (ord("V") << 8) | nr


# struct v4l2_capability: driver[16] card[32] bus_info[32] version capabilities device_caps reserved[3]
_CAPABILITY = struct.Struct("16s32s32sIII12x")
# struct v4l2_format: type, 4 bytes of padding, then the 200-byte union (v4l2_pix_format first).
_FORMAT = struct.Struct("I4x" + "IIIIIIIIIIII" + "152x")
# struct v4l2_requestbuffers: count type memory capabilities flags reserved[3]
_REQBUFS = struct.Struct("IIIIB3x")
# struct v4l2_buffer: index type bytesused flags field, pad, timestamp (2 x 8), timecode (16),
# sequence memory, m (offset, 8 bytes in the union), length reserved2 request_fd, pad
_BUFFER = struct.Struct("IIIII4x16x16xIIQIIi4x")
# struct v4l2_exportbuffer: type index plane flags fd reserved[11]
_EXPBUF = struct.Struct("IIIIi44x")

VIDIOC_QUERYCAP = _ioc(_READ, 0, _CAPABILITY.size)
VIDIOC_S_FMT = _ioc(_READ | _WRITE, 5, _FORMAT.size)
VIDIOC_REQBUFS = _ioc(_READ | _WRITE, 8, _REQBUFS.size)
VIDIOC_QUERYBUF = _ioc(_READ | _WRITE, 9, _BUFFER.size)
VIDIOC_QBUF = _ioc(_READ | _WRITE, 15, _BUFFER.size)
VIDIOC_EXPBUF = _ioc(_READ | _WRITE, 16, _EXPBUF.size)
VIDIOC_DQBUF = _ioc(_READ | _WRITE, 17, _BUFFER.size)
VIDIOC_STREAMON = _ioc(_WRITE, 18, 4)
VIDIOC_STREAMOFF = _ioc(_WRITE, 19, 4)

BUF_TYPE_VIDEO_CAPTURE = 1
MEMORY_MMAP = 1
FIELD_NONE = 1
CAP_VIDEO_CAPTURE = 0x00000001
CAP_STREAMING = 0x04000000


def fourcc(code: str) -> int:
    """A V4L2 pixel format code from its four characters, e.g. ``fourcc("RGB3")`` (packed RGB24)."""
    a, b, c, d = (ord(ch) for ch in code)
    return a | b << 8 | c << 16 | d << 24


class V4l2Error(OSError):
    """A V4L2 call failed; the message names the call and what to do."""


def _ioctl(fd: int, request: int, arg: bytes, what: str) -> bytearray:
    buf = bytearray(arg)
    try:
        fcntl.ioctl(fd, request, buf, True)
    except OSError as e:
        raise V4l2Error(e.errno, f"{what}: {os.strerror(e.errno)}") from None
    return buf


def capture_nodes(card: str | None = None) -> list[str]:
    """The ``/dev/video*`` nodes that capture and stream (optionally: whose card name starts so)."""
    found = []
    for path in sorted(glob.glob("/dev/video*")):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            caps = _CAPABILITY.unpack(_ioctl(fd, VIDIOC_QUERYCAP, bytes(_CAPABILITY.size), "VIDIOC_QUERYCAP"))
        except V4l2Error:
            continue
        finally:
            os.close(fd)
        name, device_caps = caps[1].rstrip(b"\0").decode(errors="replace"), caps[5]
        wanted = CAP_VIDEO_CAPTURE | CAP_STREAMING
        if device_caps & wanted == wanted and (card is None or name.startswith(card)):
            found.append(path)
    return found


@dataclass(frozen=True)
class PixFormat:
    """What the driver agreed to: sizes in pixels, ``bytesperline`` and ``sizeimage`` in bytes."""

    width: int
    height: int
    pixelformat: int
    bytesperline: int
    sizeimage: int


@dataclass
class Frame:
    """One filled buffer: its dma-buf fd (owned by the :class:`Capture`), CPU view and sequence number."""

    index: int
    dmabuf_fd: int
    view: mmap.mmap
    bytesused: int
    sequence: int


class Capture:
    """A streaming V4L2 capture whose buffers are dma-bufs."""

    def __init__(
        self, path: str, width: int, height: int, pixelformat: str = "RGB3", buffers: int = 4
    ) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        self._frames: list[Frame] = []
        self._streaming = False
        try:
            self.format = self._set_format(width, height, fourcc(pixelformat))
            self._setup_buffers(buffers)
            self._stream(True)
        except BaseException:
            self.close()
            raise

    def _set_format(self, width: int, height: int, pixelformat: int) -> PixFormat:
        arg = _FORMAT.pack(BUF_TYPE_VIDEO_CAPTURE, width, height, pixelformat, FIELD_NONE, *([0] * 8))
        got = _FORMAT.unpack(_ioctl(self.fd, VIDIOC_S_FMT, arg, "VIDIOC_S_FMT"))
        fmt = PixFormat(got[1], got[2], got[3], got[5], got[6])
        if fmt.pixelformat != pixelformat:
            raise V4l2Error(
                errno.EINVAL, f"{self.path} cannot capture {pixelformat:#x}; it offers {fmt.pixelformat:#x}"
            )
        return fmt

    def _setup_buffers(self, count: int) -> None:
        req = _REQBUFS.unpack(
            _ioctl(
                self.fd,
                VIDIOC_REQBUFS,
                _REQBUFS.pack(count, BUF_TYPE_VIDEO_CAPTURE, MEMORY_MMAP, 0, 0),
                "REQBUFS",
            )
        )
        for index in range(req[0]):
            buf = _BUFFER.unpack(_ioctl(self.fd, VIDIOC_QUERYBUF, _buffer(index), f"VIDIOC_QUERYBUF {index}"))
            offset, length = buf[7], buf[8]
            exp = _EXPBUF.unpack(
                _ioctl(
                    self.fd,
                    VIDIOC_EXPBUF,
                    _EXPBUF.pack(BUF_TYPE_VIDEO_CAPTURE, index, 0, os.O_RDWR | os.O_CLOEXEC, -1),
                    f"VIDIOC_EXPBUF {index}",
                )
            )
            view = mmap.mmap(
                self.fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=offset
            )
            self._frames.append(Frame(index, exp[4], view, 0, 0))
            _ioctl(self.fd, VIDIOC_QBUF, _buffer(index), f"VIDIOC_QBUF {index}")

    def _stream(self, on: bool) -> None:
        request = VIDIOC_STREAMON if on else VIDIOC_STREAMOFF
        _ioctl(
            self.fd,
            request,
            struct.pack("I", BUF_TYPE_VIDEO_CAPTURE),
            "VIDIOC_STREAM" + ("ON" if on else "OFF"),
        )
        self._streaming = on

    def next_frame(self, timeout: float = 10.0) -> Frame:
        """The next filled buffer (blocks up to ``timeout`` s); give it back with :meth:`requeue`."""
        if not select.select([self.fd], [], [], timeout)[0]:
            raise V4l2Error(
                errno.ETIMEDOUT, f"{self.path}: no frame in {timeout} s; is the source streaming?"
            )
        buf = _BUFFER.unpack(_ioctl(self.fd, VIDIOC_DQBUF, _buffer(0), "VIDIOC_DQBUF"))
        frame = self._frames[buf[0]]
        frame.bytesused, frame.sequence = buf[2], buf[5]
        return frame

    def requeue(self, frame: Frame) -> None:
        _ioctl(self.fd, VIDIOC_QBUF, _buffer(frame.index), f"VIDIOC_QBUF {frame.index}")

    def close(self) -> None:
        if self.fd < 0:
            return
        if self._streaming:
            self._stream(False)
        for frame in self._frames:
            frame.view.close()
            os.close(frame.dmabuf_fd)
        self._frames.clear()
        os.close(self.fd)
        self.fd = -1

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _buffer(index: int) -> bytes:
    return _BUFFER.pack(index, BUF_TYPE_VIDEO_CAPTURE, 0, 0, 0, 0, MEMORY_MMAP, 0, 0, 0, 0)
