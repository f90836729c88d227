"""libaccel's exceptions: every errno the vnpu uapi returns, as a class.

Every ioctl failure raises a subclass of :class:`AccelError` (itself an
``OSError``, so ``errno`` is set as usual). The message names the ioctl, says
what the errno means for that ioctl, and what to do about it. A job that ran
and failed is a :class:`JobFault` carrying the job's status (a negative errno)
and, for an MMU fault, the faulting device VA.
"""

from __future__ import annotations

import errno as _errno
import os

ERESTARTSYS = 512  # kernel-internal; never seen by userspace, but a shim could leak it

# Per-ioctl hints: what an errno means for that ioctl and what to do.
_HINTS: dict[tuple[str, int], str] = {
    ("DRM_IOCTL_VNPU_GET_PARAM", _errno.EINVAL): "unknown parameter, or pad not zero",
    ("DRM_IOCTL_VNPU_BO_CREATE", _errno.EINVAL): "size is 0, unknown flags, or output fields not zeroed",
    ("DRM_IOCTL_VNPU_BO_CREATE", _errno.E2BIG): "size exceeds DRM_VNPU_PARAM_MAX_BO_SIZE; split the buffer",
    ("DRM_IOCTL_VNPU_BO_CREATE", _errno.ENOSPC): "this file's device address space is full; free BOs",
    ("DRM_IOCTL_VNPU_BO_INFO", _errno.ENOENT): "no BO with that handle in this file",
    ("DRM_IOCTL_VNPU_BO_WAIT", _errno.ENOENT): "no BO with that handle in this file",
    ("DRM_IOCTL_VNPU_BO_WAIT", _errno.ETIME): "the deadline passed before the BO's jobs finished",
    ("DRM_IOCTL_VNPU_BO_SYNC", _errno.ENOENT): "no BO with that handle in this file",
    ("DRM_IOCTL_PRIME_FD_TO_HANDLE", _errno.EOPNOTSUPP): "open the kernel backend to import dma-bufs",
    ("DRM_IOCTL_PRIME_HANDLE_TO_FD", _errno.EOPNOTSUPP): "open the kernel backend to export dma-bufs",
    ("DRM_IOCTL_PRIME_FD_TO_HANDLE", _errno.EINVAL): "the fd is not a dma-buf",
    ("DRM_IOCTL_PRIME_FD_TO_HANDLE", _errno.E2BIG): "the dma-buf is larger than DRM_VNPU_PARAM_MAX_BO_SIZE",
    ("DRM_IOCTL_VNPU_BO_SYNC", _errno.EINVAL): "flags must be DRM_VNPU_BO_SYNC_FOR_CPU and/or _FOR_DEVICE",
    ("DRM_IOCTL_VNPU_SUBMIT", _errno.EINVAL): (
        "bad job_count/job_struct_size/bo_count, non-zero flags or pad, misaligned or out-of-BO command "
        "range, or a BO listed twice; see docs/uapi.md"
    ),
    ("DRM_IOCTL_VNPU_SUBMIT", _errno.ENOENT): "a BO or syncobj handle does not exist in this file",
    (
        "DRM_IOCTL_VNPU_SUBMIT",
        _errno.ENOEXEC,
    ): "the command stream is malformed; disassemble it with vnpu-asm",
    ("DRM_IOCTL_VNPU_SUBMIT", _errno.EACCES): (
        "the command stream touches memory outside the listed BOs, or writes a BO listed read-only; "
        "list every BO the stream uses with the right direction"
    ),
    ("DRM_IOCTL_GEM_CLOSE", _errno.EINVAL): "no BO with that handle in this file",
    ("DRM_IOCTL_SYNCOBJ_DESTROY", _errno.EINVAL): "no syncobj with that handle, or pad not zero",
    (
        "DRM_IOCTL_SYNCOBJ_WAIT",
        _errno.EINVAL,
    ): "unknown flags, or a syncobj with no fence yet (use WAIT_FOR_SUBMIT)",
    ("DRM_IOCTL_SYNCOBJ_WAIT", _errno.ENOENT): "a syncobj handle does not exist in this file",
    ("DRM_IOCTL_SYNCOBJ_WAIT", _errno.ETIME): "the deadline passed before the fences signalled",
}


class AccelError(OSError):
    """Base of every libaccel error; ``errno`` is the positive errno, ``op`` the failing operation."""

    default_hint = ""

    def __init__(self, err: int, op: str, hint: str | None = None, detail: str = "") -> None:
        self.op = op
        self.hint = hint if hint is not None else (_HINTS.get((op, err)) or self.default_hint)
        self.detail = detail
        name = _errno.errorcode.get(err, str(err))
        text = f"{op} failed: {name} ({os.strerror(err)})"
        if detail:
            text += f": {detail}"
        if self.hint:
            text += f" ({self.hint})" if detail else f": {self.hint}"
        super().__init__(err, text)

    def __str__(self) -> str:
        return self.strerror or super().__str__()


class InvalidArgument(AccelError):
    default_hint = "an argument is out of range, or a pad/reserved field or flag bit is not zero"


class NoSuchObject(AccelError):
    default_hint = "the handle names no object of this file"


class TooBig(AccelError):
    default_hint = "the size exceeds the device's limit (see `accel info`)"


class NoSpace(AccelError):
    default_hint = "the device address space is full; close buffer objects first"


class OutOfMemory(AccelError):
    default_hint = "the system ran out of memory"


class AccessDenied(AccelError):
    default_hint = "the command stream touches memory outside the listed BOs"


class BadCommandStream(AccelError):
    default_hint = "the command stream is malformed"


class BadAddress(AccelError):
    default_hint = "a user pointer in the argument is invalid"


class Timeout(AccelError):
    default_hint = "the deadline passed first; retry with a later absolute deadline"


class Interrupted(AccelError):
    default_hint = "a signal arrived; retry the call"


class DeviceClosed(AccelError):
    default_hint = "the device was closed; open it again"


class NoDevice(AccelError):
    default_hint = "no vnpu device; load vnpu.ko in a QEMU guest, or use the shim (VNPU_DEVICE=shim)"


class NotSupported(AccelError):
    default_hint = "the device does not implement this ioctl; is it a vnpu accel node?"


class Busy(AccelError):
    default_hint = "the device is busy; retry"


class JobFault(AccelError):
    """A job ran and failed. ``status`` is its negative errno, ``fault_va`` the faulting VA (MMU fault)."""

    _WHAT = {
        -_errno.EFAULT: "the device MMU faulted (unmapped VA, or a write to a read-only page)",
        -_errno.EIO: "the device found a bad instruction or operand at run time",
        -_errno.ETIMEDOUT: "the job hung past the job timeout and the device was reset",
        -_errno.ECANCELED: "the job was cancelled by a reset or because its file was closed",
    }

    def __init__(self, status: int, fault_va: int = 0, op: str = "job") -> None:
        self.status = status
        self.fault_va = fault_va
        hint = self._WHAT.get(status, "the job failed")
        if status == -_errno.EFAULT:
            hint += f" at device VA {fault_va:#x}"
        super().__init__(-status, op, hint)


_BY_ERRNO: dict[int, type[AccelError]] = {
    _errno.EINVAL: InvalidArgument,
    _errno.ENOENT: NoSuchObject,
    _errno.E2BIG: TooBig,
    _errno.ENOSPC: NoSpace,
    _errno.ENOMEM: OutOfMemory,
    _errno.EACCES: AccessDenied,
    _errno.EPERM: AccessDenied,
    _errno.ENOEXEC: BadCommandStream,
    _errno.EFAULT: BadAddress,
    _errno.ETIME: Timeout,
    _errno.ETIMEDOUT: Timeout,
    _errno.EINTR: Interrupted,
    ERESTARTSYS: Interrupted,
    _errno.EBADF: DeviceClosed,
    _errno.ENODEV: NoDevice,
    _errno.ENXIO: NoDevice,
    _errno.ENOTTY: NotSupported,
    _errno.EOPNOTSUPP: NotSupported,
    _errno.EBUSY: Busy,
    _errno.EAGAIN: Busy,
}


def error_class(err: int) -> type[AccelError]:
    """The exception class for a positive errno."""
    return _BY_ERRNO.get(err, AccelError)


def from_errno(err: int, op: str, hint: str | None = None, detail: str = "") -> AccelError:
    """Build the exception for a positive errno returned by ``op`` (``detail``: what exactly was wrong)."""
    return error_class(err)(err, op, hint, detail)
