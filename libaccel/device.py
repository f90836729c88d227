"""Device: one open vnpu device file, on either backend."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from libaccel import discovery
from libaccel.backends import Backend
from libaccel.bo import BufferObject
from libaccel.errors import DeviceClosed
from libaccel.job import Job, deadline_after, submit_jobs
from uapi import bindings
from uapi.bindings import (
    DRM_SYNCOBJ_CREATE_SIGNALED,
    DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL,
    DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT,
    DRM_VNPU_BO_DEVICE_READ_ONLY,
    ffi,
)

# The types and request of the wait every job's caller makes, looked up once.
_U32_ARRAY = ffi.typeof("uint32_t[]")
_SYNCOBJ_WAIT = ffi.typeof("struct drm_syncobj_wait *")
_UINTPTR = ffi.typeof("uintptr_t")
_IOCTL_SYNCOBJ_WAIT = bindings.IOCTLS["DRM_IOCTL_SYNCOBJ_WAIT"]


@dataclass(frozen=True)
class DeviceParams:
    """Every DRM_VNPU_PARAM_* value (field name = parameter name in lower case)."""

    device_id: int
    device_revision: int
    isa_version: int
    fw_version: int
    va_size: int
    max_job_size: int
    max_job_bos: int
    max_bo_size: int
    capabilities: int
    job_timeout_ms: int
    max_in_syncobjs: int
    fw_build_id: int
    num_cores: int
    power_ups: int  # counters: a snapshot when read (get_param reads them afresh)
    powered_us: int

    @staticmethod
    def param_number(name: str) -> int:
        return bindings.CONSTANTS[f"DRM_VNPU_PARAM_{name.upper()}"]

    def describe(self) -> list[tuple[str, str]]:
        """(name, formatted value) pairs for humans."""
        out = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name in ("isa_version",):
                text = f"{v >> 16}.{v & 0xFFFF}"
            elif f.name == "fw_version":
                text = f"{v >> 16}.{(v >> 8) & 0xFF}.{v & 0xFF}"
            elif f.name == "fw_build_id":
                text = f"{v:016x}"
            elif f.name in ("device_id", "capabilities", "va_size", "max_bo_size"):
                text = f"{v:#x}"
            else:
                text = str(v)
            out.append((f.name, text))
        return out


class _OneSyncobjWait(threading.local):
    """A thread's SYNCOBJ_WAIT structs for one handle, built once and refilled for each wait:
    allocating them costs more than the shim's whole wait on a signalled syncobj."""

    def __init__(self) -> None:
        self.handle = ffi.new(_U32_ARRAY, 1)
        self.arg = ffi.new(_SYNCOBJ_WAIT)
        self.address = int(ffi.cast(_UINTPTR, self.handle))


class Device:
    """An open vnpu device: BOs, submission, syncobjs. Use as a context manager."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._params: DeviceParams | None = None
        self._one_wait = _OneSyncobjWait()

    @classmethod
    def open(cls, which: str | None = None, quiet: bool = False) -> Device:
        """Open ``which``: a node path, "shim", "kernel" or None: $VNPU_DEVICE, else the first kernel
        device, else the shim, said on stderr unless ``quiet`` (:func:`libaccel.discovery.resolve`)."""
        target = discovery.resolve(which, quiet)
        if target == discovery.SHIM:
            from libaccel.backends.shim import ShimBackend

            return cls(ShimBackend())
        from libaccel.backends.kernel import KernelBackend

        return cls(KernelBackend(target))

    # --- plumbing -------------------------------------------------------------
    @property
    def kind(self) -> str:
        return self.backend.kind

    @property
    def path(self) -> str:
        return self.backend.path

    @property
    def closed(self) -> bool:
        return self.backend.closed

    def ioctl(self, request: int | str, arg: Any) -> Any:
        """Raw ioctl by number or DRM_IOCTL_* name; returns ``arg`` (filled in)."""
        number = bindings.IOCTLS[request] if isinstance(request, str) else request
        self.backend.ioctl(number, arg)
        return arg

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Device({self.kind}, {self.path!r}{', closed' if self.closed else ''})"

    # --- parameters -----------------------------------------------------------
    def get_param(self, param: int | str) -> int:
        arg = ffi.new("struct drm_vnpu_get_param *")
        arg.param = DeviceParams.param_number(param) if isinstance(param, str) else param
        self.ioctl("DRM_IOCTL_VNPU_GET_PARAM", arg)
        return int(arg.value)

    @property
    def params(self) -> DeviceParams:
        """All parameters (read once, then cached: only the power counters change while the file is
        open, and a firmware reload's version; get_param reads one afresh)."""
        if self._params is None:
            values = {f.name: self.get_param(f.name) for f in dataclasses.fields(DeviceParams)}
            self._params = DeviceParams(**values)
        return self._params

    # --- buffer objects -------------------------------------------------------
    def create_bo(self, size: int, read_only: bool = False, flags: int | None = None) -> BufferObject:
        """A zero-filled BO of at least ``size`` bytes, mapped in this file's device address space."""
        arg = ffi.new("struct drm_vnpu_bo_create *")
        arg.size = size
        arg.flags = flags if flags is not None else (DRM_VNPU_BO_DEVICE_READ_ONLY if read_only else 0)
        self.ioctl("DRM_IOCTL_VNPU_BO_CREATE", arg)
        return BufferObject(self, arg.handle, arg.size, arg.flags, arg.mmap_offset, arg.va)

    def bo_info(self, handle: int) -> Any:
        arg = ffi.new("struct drm_vnpu_bo_info *")
        arg.handle = handle
        return self.ioctl("DRM_IOCTL_VNPU_BO_INFO", arg)

    def import_dmabuf(self, fd: int) -> BufferObject:
        """PRIME_FD_TO_HANDLE: a BO of this file over a dma-buf's pages, no copy (a camera frame, a
        dma-heap or udmabuf buffer, another file's exported BO). It gets its own device VA here, and jobs
        use it like any BO; ``fd`` stays the caller's. The shim cannot import (its device reaches only its
        own memory)."""
        arg = ffi.new("struct drm_prime_handle *")
        arg.fd = fd
        self.ioctl("DRM_IOCTL_PRIME_FD_TO_HANDLE", arg)
        info = self.bo_info(arg.handle)
        return BufferObject(self, arg.handle, info.size, info.flags, info.mmap_offset, info.va)

    def create_bo_with(self, data: bytes, read_only: bool = False) -> BufferObject:
        """A BO holding ``data``."""
        bo = self.create_bo(max(len(data), 1), read_only=read_only)
        bo.write(data)
        return bo

    # --- submission -----------------------------------------------------------
    def submit(self, jobs: Job | Sequence[Job]) -> None:
        """Queue one job or a list of jobs atomically (all or none)."""
        submit_jobs(self, [jobs] if isinstance(jobs, Job) else list(jobs))

    # --- syncobjs -------------------------------------------------------------
    def create_syncobj(self, signaled: bool = False) -> int:
        arg = ffi.new("struct drm_syncobj_create *")
        arg.flags = DRM_SYNCOBJ_CREATE_SIGNALED if signaled else 0
        self.ioctl("DRM_IOCTL_SYNCOBJ_CREATE", arg)
        return int(arg.handle)

    def destroy_syncobj(self, handle: int) -> None:
        arg = ffi.new("struct drm_syncobj_destroy *")
        arg.handle = handle
        self.ioctl("DRM_IOCTL_SYNCOBJ_DESTROY", arg)

    def wait_syncobjs(
        self,
        handles: Sequence[int],
        timeout: float | None = 10.0,
        deadline_ns: int | None = None,
        wait_all: bool = True,
        wait_for_submit: bool = False,
    ) -> int:
        """Wait for the syncobjs' fences; returns the index of the first signalled (wait_all=False).

        Raises :class:`~libaccel.errors.Timeout` (ETIME) when the deadline passes first.
        """
        if self.closed:
            raise DeviceClosed(9, "DRM_IOCTL_SYNCOBJ_WAIT")
        if len(handles) == 1:
            one = self._one_wait
            arg = one.arg
            one.handle[0] = handles[0]
            arg.handles = one.address
            arg.first_signaled = arg.pad = arg.deadline_nsec = 0
        else:
            arr = ffi.new(_U32_ARRAY, list(handles))
            arg = ffi.new(_SYNCOBJ_WAIT)
            arg.handles = int(ffi.cast(_UINTPTR, arr)) if handles else 0
        arg.count_handles = len(handles)
        arg.timeout_nsec = deadline_ns if deadline_ns is not None else deadline_after(timeout or 0.0)
        arg.flags = (DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL if wait_all else 0) | (
            DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT if wait_for_submit else 0
        )
        self.backend.ioctl(_IOCTL_SYNCOBJ_WAIT, arg)
        return int(arg.first_signaled)

    def version(self) -> tuple[str, tuple[int, int, int]]:
        """The driver's name and (major, minor, patchlevel) from DRM_IOCTL_VERSION."""
        name = ffi.new("char[]", 64)
        arg = ffi.new("struct drm_version *")
        arg.name = name
        arg.name_len = 64
        self.ioctl("DRM_IOCTL_VERSION", arg)
        n = min(int(arg.name_len), 64)
        return ffi.string(name, n).decode(), (arg.version_major, arg.version_minor, arg.version_patchlevel)


def checked_device(which: str | None) -> str:
    """What a model runner opens, checked before any work: ``which``, else the device rule's
    (:func:`libaccel.discovery.resolve`: $VNPU_DEVICE, else the first kernel device, else the shim).
    A node is opened and closed here, so a bad one is one line naming it (or the variable) and not
    the delegate's error inside the runtime's; a node path comes back absolute, as the delegate's
    'device' option takes it."""
    target = discovery.resolve(which)
    if target == discovery.SHIM:
        return target
    Device.open(target).close()
    return os.path.abspath(target)
