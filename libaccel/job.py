"""Jobs: what one DRM_IOCTL_VNPU_SUBMIT entry carries, and deadlines.

Timeouts in the uapi are absolute CLOCK_MONOTONIC nanoseconds, so a retried
wait never waits longer than asked; :func:`deadline_after` makes one.

A :class:`Job` is immutable (its BO and syncobj lists become tuples), so the
C structs of its one-job SUBMIT are built once, on its first submission, and
reused: filling cffi structs costs tens of microseconds of Python per
submit on the host and ten times that in a QEMU guest under TCG, which
would be most of an empty job's round trip.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from libaccel import prepared_run
from libaccel.errors import AccelError, DeviceClosed, JobFault, from_errno
from uapi.bindings import DRM_VNPU_JOB_BO_READ, DRM_VNPU_JOB_BO_WRITE, IOCTLS, ffi, ioctl_name
from vnpu_common import probe

if TYPE_CHECKING:
    from libaccel.backends import Backend
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

    def __post_init__(self) -> None:
        # Tuples, so that a caller's list changed after construction cannot go stale in the cache below.
        object.__setattr__(self, "bos", tuple(self.bos))
        object.__setattr__(self, "in_syncobjs", tuple(self.in_syncobjs))

    @property
    def cmd_handle(self) -> int:
        return self.cmd_bo if isinstance(self.cmd_bo, int) else self.cmd_bo.handle

    @cached_property
    def submit_args(self) -> SubmitArgs:
        """This job alone as SUBMIT's structs; built on first use, then reused (see the module doc)."""
        return build_submit([self])


@dataclass
class SubmitArgs:
    """The cffi structs of one SUBMIT; ``keepalive`` holds the arrays the pointers point into."""

    submit: Any
    jobs: Any
    keepalive: list[Any]


_JOB_STRUCT_SIZE = ffi.sizeof("struct drm_vnpu_job")
_JOB_BO_SIZE = ffi.sizeof("struct drm_vnpu_job_bo")
_IOCTL_SUBMIT = IOCTLS["DRM_IOCTL_VNPU_SUBMIT"]
_IOCTL_BO_WAIT = IOCTLS["DRM_IOCTL_VNPU_BO_WAIT"]


def _address(cdata: Any) -> int:
    return int(ffi.cast("uintptr_t", cdata))


def build_submit(jobs: Sequence[Job]) -> SubmitArgs:
    """Lay ``jobs`` out as struct drm_vnpu_submit + drm_vnpu_job[] + their arrays.

    The job array, every job's BO list and then their in-syncobj arrays sit in one allocation,
    in that order: a driver that reads the user's memory by the call (the shim, through
    /proc/self/mem) then gets a job and its BO list in one read."""
    bo_bytes = sum(len(job.bos) for job in jobs) * _JOB_BO_SIZE
    total = len(jobs) * _JOB_STRUCT_SIZE + bo_bytes + sum(len(job.in_syncobjs) for job in jobs) * 4
    block = ffi.new("uint8_t[]", max(total, 1))  # zeroed, as the structs' padding must be
    base = _address(block)
    cjobs = ffi.cast("struct drm_vnpu_job *", block)
    bos_at = base + len(jobs) * _JOB_STRUCT_SIZE
    ins_at = bos_at + bo_bytes
    for i, job in enumerate(jobs):
        cj = cjobs[i]
        if job.bos:
            # An initializer list fills the array in C, not field by field in Python.
            bos = ffi.new("struct drm_vnpu_job_bo[]", [(jb.handle, jb.flags) for jb in job.bos])
            ffi.memmove(ffi.cast("void *", bos_at), bos, ffi.sizeof(bos))
            cj.bos = bos_at
            bos_at += ffi.sizeof(bos)
        if job.in_syncobjs:
            ins = ffi.new("uint32_t[]", list(job.in_syncobjs))
            ffi.memmove(ffi.cast("void *", ins_at), ins, ffi.sizeof(ins))
            cj.in_syncobjs = ins_at
            ins_at += ffi.sizeof(ins)
        cj.cmd_bo_handle = job.cmd_handle
        cj.cmd_offset = job.cmd_offset
        cj.cmd_size = job.cmd_size
        cj.bo_count = len(job.bos)
        cj.in_syncobj_count = len(job.in_syncobjs)
        cj.out_syncobj = job.out_syncobj
    submit = ffi.new("struct drm_vnpu_submit *")
    submit.jobs = base if jobs else 0
    submit.job_count = len(jobs)
    submit.job_struct_size = _JOB_STRUCT_SIZE
    return SubmitArgs(submit, cjobs, [block])


def submit_jobs(device: Any, jobs: Sequence[Job]) -> None:
    """Submit ``jobs`` in one DRM_IOCTL_VNPU_SUBMIT: all are queued, or none (an exception says why)."""
    # SUBMIT only reads its structs, so one job's cached structs serve every submission of it.
    args = jobs[0].submit_args if len(jobs) == 1 else build_submit(jobs)
    device.backend.ioctl(_IOCTL_SUBMIT, args.submit)


@dataclass(frozen=True)
class JobStatus:
    """What BO_WAIT reports: the last writer job's status (0 or a negative errno) and fault VA."""

    status: int
    fault_va: int = 0

    @property
    def ok(self) -> bool:
        return self.status == 0

    def error(self) -> JobFault | None:
        """The JobFault of a failed job; None when it succeeded."""
        return JobFault(self.status, self.fault_va, "DRM_IOCTL_VNPU_BO_WAIT") if self.status else None

    def raise_for_status(self) -> None:
        if (error := self.error()) is not None:
            raise error


def run_failure(result: int, step: int, wait: Any) -> AccelError:
    """The exception of a failed ``vnpu_prepared_run()`` (libaccel/c/prepared_run.h): ``result``
    is its return value (not 0), ``step`` where it stopped, ``wait`` its struct drm_vnpu_bo_wait."""
    if result == prepared_run.JOB_FAILED and (error := JobStatus(wait.job_status, wait.fault_va).error()):
        return error
    if result >= 0:
        return AccelError(errno.EPROTO, "vnpu_prepared_run", f"unknown result {result}")
    return from_errno(-result, ioctl_name(_IOCTL_SUBMIT if step == prepared_run.SUBMIT else _IOCTL_BO_WAIT))


class PreparedSubmit:
    """One job submitted again and again, each time followed by a BO_WAIT on one of its BOs (a
    compiled partition's invoke): :meth:`run` is the pair, raising what a failed job reports.

    :meth:`run` makes the two ioctls on structs built once (:attr:`submit_arg`, :attr:`wait_arg`):
    on an accel node (``fd_run``: the kernel backend) in C, ``vnpu_prepared_run()``
    (:mod:`libaccel.prepared_run`, which libteflon.so's invoke calls too), else through the
    backend's ``ioctl``. A backend may replay a job it validated instead (the shim:
    ``Backend.prepare_submit``), with the same fences, statuses and results. :attr:`full_submits`
    and :attr:`replays` count how each run went. One caller at a time."""

    def __init__(
        self, backend: Backend, job: Job, wait_handle: int, timeout: float, fd_run: bool = False
    ) -> None:
        self.backend = backend
        self.job = job
        self.timeout = timeout
        self.timeout_ns = int(timeout * 1e9)
        self.submit_arg = job.submit_args.submit
        self.wait_arg = ffi.new("struct drm_vnpu_bo_wait *")
        self.wait_arg.handle = wait_handle
        self.full_submits = 0
        self.replays = 0
        self._run = prepared_run.library().vnpu_prepared_run if fd_run else None
        self._step = ffi.new("int *")

    def run(self) -> None:
        """SUBMIT the job, then BO_WAIT on the wait BO; raises JobFault (or the ioctl's error)."""
        self.full_submits += 1
        if self._run is None:
            self.backend.ioctl(_IOCTL_SUBMIT, self.submit_arg)
            probe.mark("libaccel.wait")
            self.wait()
            return
        fd = self.backend.fileno()
        if fd < 0:
            raise DeviceClosed(errno.EBADF, ioctl_name(_IOCTL_SUBMIT))
        run, submit, wait, step = self._run, self.submit_arg, self.wait_arg, self._step
        step[0] = prepared_run.SUBMIT
        # Without VNPU_RUN_RESTART an interrupted ioctl comes back here, where Python runs the
        # signal's handler (which may raise: KeyboardInterrupt) before the run resumes at its step.
        while (result := run(fd, submit, wait, self.timeout_ns, 0, step)) == -errno.EINTR:
            pass
        if result:
            raise run_failure(result, step[0], self.wait_arg)

    def wait(self) -> None:
        """BO_WAIT on the wait BO until the job's deadline, through the backend's ``ioctl`` (the
        shim's); raises what the job reports."""
        wait = self.wait_arg
        wait.timeout_ns = deadline_after(self.timeout)
        wait.job_status = 0
        wait.fault_va = 0
        self.backend.ioctl(_IOCTL_BO_WAIT, wait)
        JobStatus(wait.job_status, wait.fault_va).raise_for_status()

    def close(self) -> None:
        """Let go of what a replay keeps (nothing here)."""
