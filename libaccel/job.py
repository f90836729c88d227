"""Jobs: what one DRM_IOCTL_VNPU_SUBMIT entry carries, and deadlines.

Timeouts in the uapi are absolute CLOCK_MONOTONIC nanoseconds, so a retried
wait never waits longer than asked; :func:`deadline_after` makes one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from uapi.bindings import DRM_VNPU_JOB_BO_READ, DRM_VNPU_JOB_BO_WRITE, ffi

if TYPE_CHECKING:
    from libaccel.bo import BufferObject


def monotonic_ns() -> int:
    """Now, on the clock the uapi's timeouts use."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def deadline_after(seconds: float) -> int:
    """The absolute CLOCK_MONOTONIC deadline ``seconds`` from now, in ns (0 or less: poll)."""
    return monotonic_ns() + int(seconds * 1e9)


@dataclass(frozen=True)
class JobBo:
    """One BO a job uses and how: read and/or write."""

    bo: BufferObject | int  # a BufferObject or a raw GEM handle
    read: bool = True
    write: bool = False

    @property
    def handle(self) -> int:
        return self.bo if isinstance(self.bo, int) else self.bo.handle

    @property
    def flags(self) -> int:
        return (DRM_VNPU_JOB_BO_READ if self.read else 0) | (DRM_VNPU_JOB_BO_WRITE if self.write else 0)


@dataclass(frozen=True)
class Job:
    """One job: a command stream in a BO, the BOs it touches, and its fences."""

    cmd_bo: BufferObject | int
    cmd_size: int
    bos: Sequence[JobBo]
    cmd_offset: int = 0
    in_syncobjs: Sequence[int] = field(default_factory=tuple)
    out_syncobj: int = 0

    @property
    def cmd_handle(self) -> int:
        return self.cmd_bo if isinstance(self.cmd_bo, int) else self.cmd_bo.handle


@dataclass
class SubmitArgs:
    """The cffi structs of one SUBMIT; ``keepalive`` holds the arrays the pointers point into."""

    submit: Any
    jobs: Any
    keepalive: list[Any]


def build_submit(jobs: Sequence[Job]) -> SubmitArgs:
    """Lay ``jobs`` out as struct drm_vnpu_submit + drm_vnpu_job[] + their arrays."""
    keep: list[Any] = []
    cjobs = ffi.new("struct drm_vnpu_job[]", len(jobs))
    for cj, job in zip(cjobs, jobs, strict=True):
        bos = ffi.new("struct drm_vnpu_job_bo[]", len(job.bos))
        for cb, jb in zip(bos, job.bos, strict=True):
            cb.handle = jb.handle
            cb.flags = jb.flags
        ins = ffi.new("uint32_t[]", list(job.in_syncobjs))
        keep += [bos, ins]
        cj.cmd_bo_handle = job.cmd_handle
        cj.cmd_offset = job.cmd_offset
        cj.cmd_size = job.cmd_size
        cj.bo_count = len(job.bos)
        cj.bos = int(ffi.cast("uintptr_t", bos)) if job.bos else 0
        cj.in_syncobjs = int(ffi.cast("uintptr_t", ins)) if job.in_syncobjs else 0
        cj.in_syncobj_count = len(job.in_syncobjs)
        cj.out_syncobj = job.out_syncobj
    submit = ffi.new("struct drm_vnpu_submit *")
    submit.jobs = int(ffi.cast("uintptr_t", cjobs)) if jobs else 0
    submit.job_count = len(jobs)
    submit.job_struct_size = ffi.sizeof("struct drm_vnpu_job")
    return SubmitArgs(submit, cjobs, keep)


def submit_jobs(device: Any, jobs: Sequence[Job]) -> None:
    """Submit ``jobs`` in one DRM_IOCTL_VNPU_SUBMIT: all are queued, or none (an exception says why)."""
    args = build_submit(jobs)
    device.ioctl("DRM_IOCTL_VNPU_SUBMIT", args.submit)
