"""``accel trace -p PID``: the DRM ioctls of a running process, through ptrace.

The interposer (``trace_preload.c``) must be loaded when a program starts; a running process can
only be watched from outside. This module attaches to every thread of PID with ``PTRACE_SEIZE``
(``PTRACE_O_TRACESYSGOOD``, and ``PTRACE_O_TRACECLONE`` so threads it starts later are traced
too), stops it with ``PTRACE_INTERRUPT``, and resumes it with ``PTRACE_SYSCALL``, so each system
call stops it twice. At an ``ioctl`` entry (registers from ``PTRACE_GETREGS``: x86_64 only) whose
fd is ``/dev/accel/accel*`` or a DRM node (``/proc/PID/fd/N``), it copies the argument struct and
the arrays it points at with ``process_vm_readv``; at the exit, the struct again and the return
value. The result is the :class:`libaccel.tools.trace.Record` the interposer sends, so decoding,
filtering, the summary and :func:`libaccel.tools.trace.render` are shared.

Written with ctypes (no second C helper to build): a stop costs far more in the kernel's context
switches than in Python here. A SUBMIT's command stream is read as the interposer reads it (BO_INFO
of the command BO, then mmap) on a duplicate of the process's fd from ``pidfd_getfd``: the same DRM
file, so the same handles, whenever the BO was created and whether or not the process maps it.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import platform
import signal
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from libaccel.tools import decode
from libaccel.tools.session import UsageError
from libaccel.tools.trace import MAX_BLOB, Record, Sink
from uapi import bindings

PTRACE_CONT = 7
PTRACE_GETREGS = 12
PTRACE_DETACH = 17
PTRACE_SYSCALL = 24
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
PTRACE_LISTEN = 0x4208
PTRACE_O_TRACESYSGOOD = 0x1
PTRACE_O_TRACECLONE = 0x8
PTRACE_EVENT_CLONE = 3
PTRACE_EVENT_STOP = 128
WALL = 0x40000000  # __WALL: wait for every thread, not only the leader
SYS_IOCTL = 16  # x86_64
SYS_PIDFD_GETFD = 438
DRM_MAJOR = 226
ACCEL_MAJOR = 261
_IOC_READ = 2
_GROUP_STOP_SIGNALS = {signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU}

# struct user_regs_struct of x86_64 (asm/ptrace.h), in order.
_REG_NAMES = (
    "r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss "
    "fs_base gs_base ds es fs gs"
).split()


class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in _REG_NAMES]


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.restype = ctypes.c_long
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
# The kernel's ERESTART* codes: the call is redone (a new entry stop follows); its exit is not a result.
_RESTART = {512, 513, 514, 516}
_libc.syscall.restype = ctypes.c_long
_libc.process_vm_readv.restype = ctypes.c_ssize_t
_libc.process_vm_readv.argtypes = [
    ctypes.c_int,
    ctypes.POINTER(_IoVec),
    ctypes.c_ulong,
    ctypes.POINTER(_IoVec),
    ctypes.c_ulong,
    ctypes.c_ulong,
]


def _ptrace(request: int, tid: int, addr: int = 0, data: int = 0) -> int:
    """ptrace(2); an OSError (ProcessLookupError for ESRCH) when it fails."""
    ret = _libc.ptrace(request, tid, addr, data)
    if ret == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


def read_memory(pid: int, addr: int, length: int) -> bytes | None:
    """``length`` bytes at ``addr`` in ``pid``; None when they are not all readable (a bad pointer)."""
    if length == 0:
        return b""
    if addr == 0:
        return None
    buf = ctypes.create_string_buffer(length)
    local = _IoVec(ctypes.cast(buf, ctypes.c_void_p), length)
    remote = _IoVec(ctypes.c_void_p(addr), length)
    n = _libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    return buf.raw if n == length else None


# --- the refusal -----------------------------------------------------------------------------------

_YAMA = Path("/proc/sys/kernel/yama/ptrace_scope")


def refusal(pid: int, err: int, ptrace_scope: int | None, root: bool) -> str:
    """The one line saying why PTRACE_SEIZE of ``pid`` failed with ``err``, and what to do."""
    instead = "or start the program under the tracer instead: accel trace -- CMD"
    if err == errno.ESRCH:
        return f"trace: no process {pid}"
    if err != errno.EPERM:
        return f"trace: cannot attach to process {pid}: {os.strerror(err)}"
    head = f"trace: cannot attach to process {pid}: "
    if ptrace_scope == 3:
        return head + f"kernel.yama.ptrace_scope is 3 (no ptrace at all until reboot); {instead}"
    if ptrace_scope == 2 and not root:
        return head + f"kernel.yama.ptrace_scope is 2 (only root may attach): run it as root, {instead}"
    if ptrace_scope == 1 and not root:
        return head + (
            "kernel.yama.ptrace_scope is 1 (a process may trace only its own children): run it as root, "
            f"or allow it with 'sudo sysctl kernel.yama.ptrace_scope=0', {instead}"
        )
    return head + (
        "it belongs to another user, is already traced (a debugger, strace), or the kernel forbids it "
        f"(a container without CAP_SYS_PTRACE): run it as root, {instead}"
    )


def _ptrace_scope() -> int | None:
    try:
        return int(_YAMA.read_text())
    except (OSError, ValueError):
        return None  # no Yama: only the usual same-user rule


# --- which fds are a DRM device ----------------------------------------------------------------------


def is_drm_fd(path: str, rdev: int | None) -> bool:
    """An fd's link target (and, when it is a char device, its st_rdev) names the accel or DRM device."""
    if path.startswith(("/dev/accel/accel", "/dev/dri/")):
        return True
    return rdev is not None and os.major(rdev) in (DRM_MAJOR, ACCEL_MAJOR)


FdFilter = Callable[[str, int | None], bool]


def fd_target(pid: int, fd: int) -> tuple[str, int | None]:
    """``/proc/PID/fd/N``'s link and its char device number (None for a file or a vanished fd)."""
    link = f"/proc/{pid}/fd/{fd}"
    try:
        path = os.readlink(link)
        st = os.stat(link)
    except OSError:
        return "", None
    return path, st.st_rdev if stat.S_ISCHR(st.st_mode) else None


def drm_fds(pid: int) -> list[int]:
    try:
        fds = [int(n) for n in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return []
    return [fd for fd in fds if is_drm_fd(*fd_target(pid, fd))]


# --- the tracer ----------------------------------------------------------------------------------------


@dataclass
class _Pending:
    """An ioctl between its entry and exit stop."""

    record: Record
    arg: int
    version_in: dict[str, int] | None = None


@dataclass
class Attach:
    """The ptrace session of one process: its threads, their ioctls in flight, its BOs' mmap offsets."""

    pid: int
    sink: Sink
    fd_filter: FdFilter = is_drm_fd  # a test passes one that accepts /dev/null
    tids: set[int] = field(default_factory=set)
    pending: dict[int, _Pending] = field(default_factory=dict)
    exit_status: int | None = None

    # --- records

    def _entry(self, tid: int, regs: Regs) -> None:
        fd, request, arg = int(regs.rdi) & 0xFFFFFFFF, int(regs.rsi) & 0xFFFFFFFF, int(regs.rdx)
        fd = fd - (1 << 32) if fd >= 1 << 31 else fd
        _, type_, _, size = decode.split_request(request)
        if type_ != decode.DRM_TYPE:
            return
        path, rdev = fd_target(self.pid, fd)
        if not self.fd_filter(path, rdev):
            return
        rec = Record(self.pid, tid, fd, 0, 0, request, 0, 0)
        rec.blobs.append(("fd_path", 0, path.encode(), 0))
        rec.blobs.append(("comm", 0, _comm(self.pid).encode(), 0))
        pending = _Pending(rec, arg)
        if size:
            self._add_user(rec, "arg_in", 0, arg, size)
        name = decode.ioctl_name(request)
        if name == "DRM_IOCTL_VNPU_SUBMIT" and (s := _struct("drm_vnpu_submit", rec.blob("arg_in"))):
            self._add_submit(rec, fd, s)
        elif name == "DRM_IOCTL_SYNCOBJ_WAIT" and (w := _struct("drm_syncobj_wait", rec.blob("arg_in"))):
            if w["count_handles"]:
                self._add_user(rec, "syncobj_handles", 0, w["handles"], w["count_handles"] * 4)
        elif name == "DRM_IOCTL_VERSION":
            pending.version_in = _struct("drm_version", rec.blob("arg_in"))
        self.pending[tid] = pending
        rec.t_start_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)

    def _exit(self, tid: int, regs: Regs) -> None:
        pending = self.pending.pop(tid, None)
        if pending is None:
            return  # attached while this call was in flight: its entry was not seen
        rec = pending.record
        rec.t_end_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        ret = ctypes.c_longlong(regs.rax).value
        if -ret in _RESTART:
            return  # interrupted (a signal, our own PTRACE_INTERRUPT): the restarted call is recorded
        # The raw syscall returns -errno; show what the libc wrapper returns, as the interposer does.
        rec.ret, rec.err = (-1, -ret) if -4096 < ret < 0 else (ret, 0)
        direction, _, _, size = decode.split_request(rec.request)
        if rec.ret == 0 and size and direction & _IOC_READ:
            self._add_user(rec, "arg_out", 0, pending.arg, size)
        name = decode.ioctl_name(rec.request)
        d = decode.lookup_ioctl(rec.request)
        out = _struct(d.struct, rec.blob("arg_out")) if d and d.struct and d.size == size else None
        if out and name == "DRM_IOCTL_VERSION" and pending.version_in is not None:
            for key in ("name", "date", "desc"):
                length = min(pending.version_in[f"{key}_len"], out[f"{key}_len"])
                if out[key] and length:
                    self._add_user(rec, f"version_{key}", 0, out[key], length)
        self.sink.emit(rec)

    def _add_user(self, rec: Record, tag: str, index: int, addr: int, full: int) -> None:
        data = read_memory(self.pid, addr, min(full, MAX_BLOB))
        if data is None:
            rec.blobs.append(("error", 0, b"EFAULT: the pointer is not readable", 0))
        else:
            rec.blobs.append((tag, index, data, full))

    def _add_submit(self, rec: Record, fd: int, s: dict[str, int]) -> None:
        stride, count = s["job_struct_size"], s["job_count"]
        too_many = not 0 < count <= bindings.DRM_VNPU_MAX_JOBS_PER_SUBMIT
        if stride < bindings.ffi.sizeof("struct drm_vnpu_job") or too_many:
            return  # the driver refuses it (EINVAL); the struct alone says why
        raw = read_memory(self.pid, s["jobs"], stride * count)
        if raw is None:
            rec.blobs.append(("error", 0, b"EFAULT: the jobs pointer is not readable", 0))
            return
        rec.blobs.append(("jobs", 0, raw, len(raw)))
        for i, job in enumerate(decode.decode_array("drm_vnpu_job", raw, stride)):
            if job["bo_count"]:
                size = job["bo_count"] * bindings.ffi.sizeof("struct drm_vnpu_job_bo")
                self._add_user(rec, "job_bos", i, job["bos"], size)
            if job["in_syncobj_count"]:
                self._add_user(rec, "job_in_syncobjs", i, job["in_syncobjs"], job["in_syncobj_count"] * 4)
            if job["cmd_size"]:
                self._add_stream(rec, fd, i, job)

    def _add_stream(self, rec: Record, fd: int, index: int, job: dict[str, int]) -> None:
        """The job's stream, read as the interposer reads it: BO_INFO and mmap of the command BO, on a
        duplicate of the process's fd (pidfd_getfd: the same DRM file, so the same handles)."""
        try:
            data = _read_bo(
                self.pid, fd, job["cmd_bo_handle"], job["cmd_offset"], min(job["cmd_size"], MAX_BLOB)
            )
        except OSError as e:
            why = f"{e.strerror or e}".lower()
            rec.blobs.append(("error", 0, f"the command stream could not be read: {why}".encode(), 0))
        else:
            rec.blobs.append(("job_stream", index, data, job["cmd_size"]))

    # --- ptrace

    def seize(self) -> None:
        if platform.machine() != "x86_64":
            raise UsageError(f"trace -p reads x86_64 registers; this machine is {platform.machine()}")
        try:
            tids = sorted(int(t) for t in os.listdir(f"/proc/{self.pid}/task"))
        except OSError:
            raise UsageError(refusal(self.pid, errno.ESRCH, None, False)) from None
        options = PTRACE_O_TRACESYSGOOD | PTRACE_O_TRACECLONE
        for tid in tids:
            try:
                _ptrace(PTRACE_SEIZE, tid, 0, options)
            except OSError as e:
                if e.errno == errno.ESRCH and tid != self.pid:
                    continue  # a thread that ended meanwhile
                self.detach()
                raise UsageError(
                    refusal(self.pid, e.errno or 0, _ptrace_scope(), os.geteuid() == 0)
                ) from None
            self.tids.add(tid)
            _ptrace(PTRACE_INTERRUPT, tid)

    def loop(self) -> None:
        """Until every thread has exited."""
        while self.tids:
            try:
                tid, status = os.waitpid(-1, WALL)
            except ChildProcessError:
                return
            self._stopped(tid, status)

    def _stopped(self, tid: int, status: int) -> None:
        if os.WIFEXITED(status) or os.WIFSIGNALED(status):
            self.tids.discard(tid)
            self.pending.pop(tid, None)
            if tid == self.pid:
                self.exit_status = (
                    os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
                )
            return
        if not os.WIFSTOPPED(status):
            return
        self.tids.add(tid)  # a thread the process started: auto-attached by PTRACE_O_TRACECLONE
        sig, event = os.WSTOPSIG(status), status >> 16
        inject = 0
        try:
            if sig == signal.SIGTRAP | 0x80:
                self._syscall_stop(tid)
            elif event == PTRACE_EVENT_STOP and sig in _GROUP_STOP_SIGNALS:
                _ptrace(PTRACE_LISTEN, tid)  # stays stopped (kill -STOP) until SIGCONT, traced
                return
            elif event == 0:
                inject = sig  # a signal for the process: deliver it
            _ptrace(PTRACE_SYSCALL, tid, 0, inject)
        except ProcessLookupError:
            self.tids.discard(tid)  # killed meanwhile (SIGKILL needs no stop)

    def _syscall_stop(self, tid: int) -> None:
        regs = Regs()
        _ptrace(PTRACE_GETREGS, tid, 0, ctypes.addressof(regs))
        # At an entry stop rax holds -ENOSYS (strace's rule on x86_64); at an exit, the result.
        if ctypes.c_longlong(regs.rax).value == -errno.ENOSYS and tid not in self.pending:
            if regs.orig_rax == SYS_IOCTL:
                self._entry(tid, regs)
        elif tid in self.pending:
            self._exit(tid, regs)

    def detach(self) -> None:
        """Stop every thread, then let it go; it runs on untraced."""
        for tid in list(self.tids):
            try:
                _ptrace(PTRACE_INTERRUPT, tid)
            except ProcessLookupError:
                self.tids.discard(tid)
        while self.tids:
            try:
                tid, status = os.waitpid(-1, WALL)
            except ChildProcessError:
                return
            if not os.WIFSTOPPED(status):
                self.tids.discard(tid)
                continue
            sig, event = os.WSTOPSIG(status), status >> 16
            inject = sig if event == 0 and sig != signal.SIGTRAP | 0x80 else 0
            try:
                _ptrace(PTRACE_DETACH, tid, 0, inject)
            except ProcessLookupError:
                pass
            self.tids.discard(tid)


def _comm(pid: int) -> str:
    """The executable's name, as the interposer reports it (readlink /proc/self/exe)."""
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return "?"


def _struct(name: str, data: bytes | None) -> dict[str, int] | None:
    if not name or data is None:
        return None
    return decode.decode_struct(name, data)


def _read_bo(pid: int, fd: int, handle: int, offset: int, length: int) -> bytes:
    """``length`` bytes at ``offset`` of BO ``handle`` of ``pid``'s device file ``fd``."""
    pidfd = os.pidfd_open(pid)
    try:
        dup = _libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
        if dup < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
    finally:
        os.close(pidfd)
    try:
        info = bindings.ffi.new("struct drm_vnpu_bo_info *", {"handle": handle})
        fcntl.ioctl(dup, bindings.IOCTLS["DRM_IOCTL_VNPU_BO_INFO"], bindings.ffi.buffer(info), True)
        if offset + length > info.size:
            raise OSError(errno.ERANGE, "the command range lies outside its BO")
        with mmap.mmap(dup, info.size, mmap.MAP_SHARED, mmap.PROT_READ, offset=info.mmap_offset) as m:
            return m[offset : offset + length]
    finally:
        os.close(dup)


def attach(pid: int, sink: Sink, fd_filter: FdFilter = is_drm_fd) -> int:
    """Trace ``pid``'s DRM ioctls into ``sink`` until it exits or Ctrl-C; the process's exit status
    if it exited, else 0 (detached)."""
    session = Attach(pid, sink, fd_filter)
    session.seize()
    if not drm_fds(pid) and fd_filter is is_drm_fd:
        print(
            f"accel trace: process {pid} has no /dev/accel or DRM device open (a program on the shim makes "
            "no ioctls); tracing it until it opens one",
            file=sys.stderr,
        )
    print(f"accel trace: attached to process {pid} ({len(session.tids)} threads)", file=sys.stderr)
    try:
        session.loop()
    except KeyboardInterrupt:
        session.detach()
        print(f"accel trace: detached from process {pid}", file=sys.stderr)
    sink.finish()
    return session.exit_status if session.exit_status is not None else 0
