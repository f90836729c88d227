"""The kernel backend: ioctls on /dev/accel/accelN through fcntl."""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import stat
from typing import TYPE_CHECKING, Any

from libaccel.backends import Backend
from libaccel.errors import DeviceClosed, NoDevice, from_errno
from uapi.bindings import ffi, ioctl_name
from vnpu_common.cli import os_error_words

if TYPE_CHECKING:
    from libaccel.job import Job, PreparedSubmit


def _not_a_node(path: str, what: str) -> NoDevice:
    return NoDevice(
        errno.ENODEV,
        f"open {path}",
        f"{what}, not a device node; give /dev/accel/accelN, 'kernel' (the first vnpu node) or 'shim'",
    )


class KernelBackend(Backend):
    """An open file of a vnpu accel node."""

    kind = "kernel"

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            raise NoDevice(errno.ENODEV, f"open {path}", "no such device node; is vnpu.ko loaded?") from None
        except PermissionError:
            raise from_errno(
                errno.EACCES, f"open {path}", "no permission on the node; add yourself to its group (render)"
            ) from None
        except IsADirectoryError:
            raise _not_a_node(path, "a directory") from None
        except OSError as e:  # a path through a file, ...: not a node at all
            raise _not_a_node(path, os_error_words(e)) from None
        mode = os.fstat(self._fd).st_mode
        if not stat.S_ISCHR(mode):
            self.close()
            raise _not_a_node(path, "a regular file" if stat.S_ISREG(mode) else "not a character device")

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def fileno(self) -> int:
        return self._fd

    def ioctl(self, request: int, arg: Any) -> None:
        if self._fd < 0:
            raise DeviceClosed(errno.EBADF, ioctl_name(request))
        # The struct is copied in and out in place; nested user pointers
        # (arrays) point at cffi-owned memory the kernel reads directly.
        buf = ffi.buffer(arg)
        try:
            fcntl.ioctl(self._fd, request, buf, True)
        except OSError as e:
            raise from_errno(e.errno, ioctl_name(request)) from None

    def prepare_submit(self, job: Job, wait_handle: int, timeout: float) -> PreparedSubmit:
        """``job``'s SUBMIT and BO_WAIT, each run one call of C's ``vnpu_prepared_run()`` on this file."""
        from libaccel.job import PreparedSubmit

        return PreparedSubmit(self, job, wait_handle, timeout, fd_run=True)

    def mmap(self, offset: int, size: int) -> memoryview:
        if self._fd < 0:
            raise DeviceClosed(errno.EBADF, "mmap")
        try:
            m = mmap.mmap(self._fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)
        except OSError as e:
            raise from_errno(e.errno, "mmap", "bad mmap offset or size; use BO_INFO's values") from None
        return memoryview(m)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
