"""The ioctl-level backend interface both libaccel backends implement.

A backend is what an open file of /dev/accel/accelN is: ``ioctl(request,
arg)`` with a cffi struct pointer (filled in place, errors raised as
:mod:`libaccel.errors` exceptions), ``mmap(offset, size)`` returning a
writable buffer, and ``close()``. :class:`libaccel.device.Device` is written
against this interface only, so the conformance suite exercises the uapi the
same way on the kernel and on the shim.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from libaccel.job import Job, PreparedSubmit


class Backend(ABC):
    """One open device file."""

    #: "kernel" or "shim"
    kind: str = ""
    #: the device node (or "shim")
    path: str = ""

    @abstractmethod
    def ioctl(self, request: int, arg: Any) -> None:
        """Issue ``request`` with ``arg``, a ``ffi.new("struct X *")`` the call may write back into.

        Raises the :mod:`libaccel.errors` class of the errno on failure, and
        :class:`libaccel.errors.DeviceClosed` after :meth:`close`.
        """

    @abstractmethod
    def mmap(self, offset: int, size: int) -> memoryview:
        """Map ``size`` bytes of the BO at mmap offset ``offset``; a writable, zero-copy view."""

    @abstractmethod
    def close(self) -> None:
        """Close the file: its BOs, syncobjs and address space go away. Idempotent."""

    @property
    @abstractmethod
    def closed(self) -> bool: ...

    def prepare_submit(self, job: Job, wait_handle: int, timeout: float) -> PreparedSubmit:
        """``job``'s SUBMIT and a BO_WAIT on its BO ``wait_handle``, to be made again and again
        (:class:`libaccel.job.PreparedSubmit`): here the two ioctls each time."""
        from libaccel.job import PreparedSubmit

        return PreparedSubmit(self, job, wait_handle, timeout)
