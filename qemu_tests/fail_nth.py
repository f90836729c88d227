"""Fault injection in the kernel's allocations, one call at a time, as syzkaller does it (fail-nth).

    python -m qemu_tests.fail_nth --device kernel [--json fail_nth.json] [--only DRM_IOCTL_VNPU_SUBMIT]
    python -m qemu_tests --kernel debug --suites tests/fuzz/test_fail_nth.py     # from the host

For every ioctl the stack uses (the vnpu ones and the DRM core ones libaccel calls, plus PRIME
export and import and the open of the node), the same call is made again and again with a fault
armed in ``/proc/thread-self/fail-nth``: writing N there makes the N-th allocation of this thread
fail (a slab or page allocation; Documentation/fault-injection/fault-injection.rst). N runs from
1 up until the call succeeds with nothing injected: the failure would have come after its last
allocation. After every call:

* the call returned 0 or an errno documented for it (uapi/drm/vnpu_accel.h's "Errors:" for the
  vnpu ioctls, :data:`CORE_ERRNOS` for the DRM core ones), ENOMEM always;
* after a failure nothing changed: vnpu.ko's debugfs counters (qemu_tests.leak_check) equal their
  values before the call (a failed BO_CREATE leaves no BO, a failed SUBMIT no job, and its
  out-syncobj no fence; the one thing a failed SUBMIT may leave is its command buffer in the file's
  pool, which the next SUBMIT must reuse), the process has no new file descriptor after a failed
  export, the importing file no BO after a failed import;
* after a success the result works (the BO is there, the job wrote its bytes);
* once the call's objects are released the counters are back at their baseline, and at the end of
  each ioctl's series /proc/meminfo's unreclaimable slab and shmem are too;
* the kernel log shows no report (qemu_tests.matrix's splat finder).

The debugfs knobs make fail-nth reach every allocation, as syzkaller sets them: failslab and
fail_page_alloc with ``ignore-gfp-wait=N`` (else GFP_KERNEL allocations are never failed),
fail_page_alloc with ``ignore-gfp-highmem=N`` and ``min-order=0`` (else single pages never are),
``verbose=2`` without rate limit (each injected failure prints its stack, from which the figures
name the allocation that failed). With CONFIG_FAULT_INJECTION_STACKTRACE_FILTER the failures are
also limited to allocations with a frame of the DRM stack's modules (drm, drm_shmem_helper,
gpu_sched, vnpu) on their stack, so that the Python interpreter's own page faults and mmaps
between the write to fail-nth and the ioctl never take the fault. Every knob is put back at the end.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from libaccel import Device, discovery
from libaccel.backends.kernel import KernelBackend
from libaccel.bo import BufferObject
from libaccel.errors import ERESTARTSYS, AccelError
from libaccel.job import Job, JobBo
from libaccel.tools import debugfs, fdinfo
from qemu_tests import leak_check
from qemu_tests.fault_inject import fill_stream
from qemu_tests.matrix import count_splats
from uapi.bindings import VNPU_HEADER, ffi
from vnpu_common.cli import OneLineArgumentParser, cli_main

FAIL_NTH = Path("/proc/thread-self/fail-nth")
DEBUGFS = debugfs.DEBUGFS
KMSG = Path("/dev/kmsg")
PROC_MODULES = Path("/proc/modules")
# The two fault attributes fail-nth draws on here, and how each is set for the run (syzkaller's
# settings, plus a stack for every injected failure and no rate limit on those stacks).
KNOBS: dict[str, dict[str, str]] = {
    "failslab": {"ignore-gfp-wait": "N", "verbose": "2", "verbose_ratelimit_interval_ms": "0"},
    "fail_page_alloc": {
        "ignore-gfp-wait": "N",
        "ignore-gfp-highmem": "N",
        "min-order": "0",
        "verbose": "2",
        "verbose_ratelimit_interval_ms": "0",
    },
}
# The modules whose text bounds the stack-trace filter: an allocation is failed only when one of
# their functions is on its stack (every allocation an ioctl on the node makes has drm_ioctl there).
STACK_MODULES = ("drm", "drm_shmem_helper", "gpu_sched", "vnpu")
# A call still failing (or still taking injected faults) at this N is reported: no ioctl here
# allocates anywhere near this often.
MAX_N = 400
# Seconds a job may take on a checking kernel under TCG (the guest's timeout_ms is 30 s there).
JOB_WAIT_S = 120.0
BO_SIZE = 16 * 4096 + 4096  # several pages, so that the sg table and page tables have entries

# The DRM core ioctls' errnos: drm.h documents none, these are what 6.12's drm_gem.c, drm_prime.c,
# drm_syncobj.c and drm_ioctl.c return for the call with valid arguments or a failed allocation
# (and, for the import, what docs/uapi.md adds for vnpu's).
CORE_ERRNOS: dict[str, frozenset[int]] = {
    "open": frozenset({errno.ENODEV, errno.ENXIO}),
    "DRM_IOCTL_VERSION": frozenset({errno.EFAULT}),
    "DRM_IOCTL_GEM_CLOSE": frozenset({errno.EINVAL}),
    "DRM_IOCTL_PRIME_HANDLE_TO_FD": frozenset({errno.EINVAL, errno.ENOENT, errno.EMFILE, errno.ENODEV}),
    # docs/uapi.md, "dma-buf": a vnpu import is a BO of the importing file, with its limits.
    "DRM_IOCTL_PRIME_FD_TO_HANDLE": frozenset(
        {errno.EINVAL, errno.EBADF, errno.ENOENT, errno.ENODEV, errno.E2BIG, errno.ENOSPC}
    ),
    "DRM_IOCTL_SYNCOBJ_CREATE": frozenset({errno.EINVAL}),
    "DRM_IOCTL_SYNCOBJ_DESTROY": frozenset({errno.EINVAL}),
    "DRM_IOCTL_SYNCOBJ_WAIT": frozenset({errno.EINVAL, errno.ENOENT, errno.ETIME, errno.EFAULT}),
}
# A wait may be interrupted by a signal (ERESTARTSYS itself must never reach userspace).
WAIT_ERRNOS = frozenset({errno.EINTR, errno.EAGAIN})
WAITS = ("DRM_IOCTL_VNPU_BO_WAIT", "DRM_IOCTL_SYNCOBJ_WAIT")
_ERRNO_BY_NAME = {name: number for number, name in errno.errorcode.items()} | {"ERESTARTSYS": ERESTARTSYS}


def documented_errnos(header: str) -> dict[str, frozenset[int]]:
    """Each vnpu ioctl's errnos from the "Errors:" paragraph of its argument struct's kernel-doc."""
    out: dict[str, frozenset[int]] = {}
    for block in re.findall(r"/\*\*(.*?)\*/", header, re.S):
        ioctl = re.search(r"argument of (DRM_IOCTL_\w+)", block)
        errors = re.search(r"Errors:(.*)", block, re.S)
        if ioctl and errors:
            names = re.findall(r"-(E[A-Z0-9]+)", errors[1])
            out[ioctl[1]] = frozenset(_ERRNO_BY_NAME[n] for n in names if n in _ERRNO_BY_NAME)
    return out


def allowed_errnos(name: str, header: str | None = None) -> frozenset[int]:
    """What call ``name`` may fail with under fault injection: its documented errnos and ENOMEM."""
    documented = documented_errnos(VNPU_HEADER.read_text() if header is None else header)
    allowed = documented.get(name, CORE_ERRNOS.get(name, frozenset())) | {errno.ENOMEM}
    return allowed | WAIT_ERRNOS if name in WAITS else allowed


def errno_name(err: int) -> str:
    return "ERESTARTSYS" if err == ERESTARTSYS else errno.errorcode.get(err, str(err))


def unavailable() -> str | None:
    """Why fail-nth cannot run on this kernel, or None when it can."""
    if not FAIL_NTH.exists():
        return f"no {FAIL_NTH}: this kernel lacks CONFIG_FAULT_INJECTION (Debian's do; use --kernel debug)"
    if not (DEBUGFS / "failslab").is_dir():
        return (
            f"no {DEBUGFS / 'failslab'}: this kernel lacks CONFIG_FAILSLAB or CONFIG_FAULT_INJECTION_DEBUG_FS"
        )
    return None


# --- the kernel's side: fail-nth, the knobs, the log ----------------------------------------------
class FailNth:
    """``/proc/thread-self/fail-nth`` of the thread that opens it (it must also make the calls)."""

    def __init__(self, path: Path = FAIL_NTH) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)

    def arm(self, n: int) -> None:
        """Fail this thread's ``n``-th allocation from now on (counted by every fault attribute)."""
        os.write(self.fd, str(n).encode())

    def disarm(self) -> bool:
        """Stop injecting; whether the armed failure was injected (the count read 0)."""
        left = int(os.pread(self.fd, 32, 0).decode().strip() or "0")
        os.write(self.fd, b"0")
        return left == 0

    def close(self) -> None:
        os.close(self.fd)


class NoFailNth(FailNth):
    """Nothing armed: every call once, as on a kernel without fault injection (``--dry-run``)."""

    def __init__(self) -> None:
        self.fd = -1

    def arm(self, n: int) -> None:
        pass

    def disarm(self) -> bool:
        return False

    def close(self) -> None:
        pass


def module_span(text: str, names: Iterable[str] = STACK_MODULES) -> tuple[int, int] | None:
    """The address range from the lowest to the highest end of modules ``names`` (/proc/modules).

    Each module's line gives its text's base address and its whole size; the range from the
    lowest base to the highest base + size holds the text of every one of them. None when one is
    not loaded or the addresses are hidden (kptr_restrict: all zero).
    """
    wanted = set(names)
    spans: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[0] in wanted and fields[5].startswith("0x"):
            base = int(fields[5], 16)
            spans[fields[0]] = (base, base + int(fields[1]))
    if set(spans) != wanted or not all(base for base, _ in spans.values()):
        return None
    return min(b for b, _ in spans.values()), max(e for _, e in spans.values())


class Knobs:
    """The failslab/ and fail_page_alloc/ settings for the run; :meth:`restore` puts the old ones back."""

    def __init__(self, root: Path = DEBUGFS) -> None:
        self.root = root
        self.saved: list[tuple[Path, str]] = []
        self.span: tuple[int, int] | None = None

    def _set(self, path: Path, value: str) -> None:
        old = path.read_text().strip()
        self.saved.append((path, old))
        path.write_text(value)

    def apply(self, modules_text: str | None = None, stack_filter: bool = True) -> None:
        for attr, knobs in KNOBS.items():
            for name, value in knobs.items():
                if (self.root / attr / name).exists():
                    self._set(self.root / attr / name, value)
        if not stack_filter or not (self.root / "failslab" / "require-start").exists():
            return
        text = PROC_MODULES.read_text() if modules_text is None else modules_text
        self.span = module_span(text)
        if self.span is None:
            return
        for attr in KNOBS:
            if (self.root / attr / "require-start").exists():
                self._set(self.root / attr / "require-start", hex(self.span[0]))
                self._set(self.root / attr / "require-end", hex(self.span[1]))

    def restore(self) -> None:
        while self.saved:
            path, old = self.saved.pop()
            try:
                path.write_text(old)
            except OSError as e:
                print(f"fail_nth: cannot restore {path} to {old}: {e}", file=sys.stderr)


class Kmsg:
    """The kernel log from now on, record by record (/dev/kmsg, without blocking)."""

    def __init__(self, path: Path = KMSG) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        os.lseek(self.fd, 0, os.SEEK_END)

    def read(self) -> list[str]:
        """The lines logged since the last read (a record with newlines gives several)."""
        lines: list[str] = []
        while True:
            try:
                record = os.read(self.fd, 8192)
            except BlockingIOError:
                return lines
            except BrokenPipeError:  # records overwritten before they were read: go on with the next
                continue
            if not record:
                return lines
            lines += parse_kmsg_record(record.decode(errors="replace"))

    def close(self) -> None:
        os.close(self.fd)


def parse_kmsg_record(record: str) -> list[str]:
    """One /dev/kmsg record (``prio,seq,usec,flags;text`` and `` KEY=value`` lines) as log lines."""
    _, sep, rest = record.partition(";")
    if not sep:
        return []
    text = rest.split("\n", 1)[0]
    text = re.sub(r"\\x([0-9a-f]{2})", lambda m: chr(int(m[1], 16)), text)
    return text.split("\n")


# A reliable frame of a stack dump ("? " marks the unwinder's guesses, which are left out).
_FRAME = re.compile(r"^\s*([\w.]+)\+(0x[0-9a-f]+)/0x[0-9a-f]+(?: \[(\w+)\])?")


@dataclass(frozen=True)
class Injection:
    """One failure the kernel reported injecting: the fault attribute, and where it hit."""

    attr: str  # failslab or fail_page_alloc
    site: str  # the innermost frame of a module (func+offset [module]), "?" when none was printed
    driver_frame: str  # the innermost vnpu.ko frame, "" when none
    frames: tuple[str, ...] = field(default=(), compare=False)  # the stack, innermost first


def injections(lines: list[str]) -> list[Injection]:
    """The injected failures a stretch of kernel log reports (``verbose`` >= 1), with their stacks."""
    out: list[Injection] = []
    i = 0
    while i < len(lines):
        if "FAULT_INJECTION: forcing a failure" not in lines[i]:
            i += 1
            continue
        attr, site, driver = "?", "?", ""
        frames: list[str] = []
        j = i + 1
        while j < len(lines) and "FAULT_INJECTION: forcing a failure" not in lines[j]:
            line = lines[j]
            if m := re.match(r"\s*name (\w+),", line):
                attr = m[1]
            elif m := _FRAME.match(line):
                frames.append(f"{m[1]}+{m[2]}" + (f" [{m[3]}]" if m[3] else ""))
                if m[3]:
                    site = frames[-1] if site == "?" else site
                    driver = frames[-1] if not driver and m[3] == "vnpu" else driver
            elif "</TASK>" in line:
                j += 1
                break
            j += 1
        out.append(Injection(attr, site, driver, tuple(frames)))
        i = j
    return out


# --- the driver's state ------------------------------------------------------------------------------
TOTALS = ("jobs_submitted", "cmdbufs_allocated_total")


def counters() -> dict[str, int]:
    """vnpu.ko's live-object counts (leak_check.LIVE_COUNTERS) and jobs_submitted, over its devices."""
    out = leak_check.live_counters()
    for path in sorted(debugfs.DEBUGFS.glob("accel/*/counters")):
        parsed = debugfs.parse(path.read_text())
        if isinstance(parsed, dict):
            for k in TOTALS:
                if isinstance(parsed.get(k), int):
                    out[k] = out.get(k, 0) + parsed[k]
    return out


def settle(
    want: dict[str, int], keys: Iterable[str] = leak_check.LIVE_COUNTERS
) -> dict[str, tuple[int, int]]:
    """Wait (up to leak_check.SETTLE_S) for the counters ``keys`` to equal ``want``; what still differs."""
    deadline = time.monotonic() + leak_check.SETTLE_S
    while True:
        now = counters()
        diff = {k: (want.get(k, 0), now.get(k, 0)) for k in keys if now.get(k, 0) != want.get(k, 0)}
        if not diff or time.monotonic() > deadline:
            return diff
        time.sleep(0.1)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def gem_close(dev: Device, handle: int) -> None:
    arg = ffi.new("struct drm_gem_close *")
    arg.handle = handle
    dev.ioctl("DRM_IOCTL_GEM_CLOSE", arg)


def _errno_of(call: Any) -> int:
    try:
        call()
    except AccelError as e:
        return e.errno or -1
    return 0


# --- the calls -----------------------------------------------------------------------------------------
class Case:
    """One call under fail-nth: ``setup`` makes what it needs, ``call`` is the call itself (what
    libaccel does for it), the checks look at the state after it, ``teardown`` releases everything.

    Each call is made on files opened for it (``files`` of them: ``dev``, then ``other``), so that
    what a file allocates on first use (its device page tables, its pool of command buffers) is
    allocated inside the call, where the injected failure can reach it.

    ``busy``: a job of the setup's is in flight during the call, so the counters of jobs and of
    what a job holds (its command buffer and its mapping) may move on their own meanwhile.
    """

    name = ""
    busy = False
    files = 1
    pooled: tuple[str, ...] = ()  # counters a failed call may raise by objects it pools for reuse
    dev: Device
    other: Device
    changed: dict[str, tuple[int, int]]  # the counters the failed call changed (before, after)

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._files: list[Device] = []

    def open_files(self) -> None:
        self._files = [Device(KernelBackend(self.ctx.node)) for _ in range(self.files)]
        if self._files:
            self.dev = self._files[0]
            self.other = self._files[-1]

    def close_files(self) -> None:
        for f in self._files:
            f.close()
        self._files = []

    def setup(self) -> None:
        pass

    def call(self) -> None:
        raise NotImplementedError

    def after_failure(self) -> list[str]:
        return []

    def after_success(self) -> list[str]:
        return []

    def teardown(self) -> None:
        pass


@dataclass
class Context:
    """What the cases share: the device node, and the value of the last FILL job."""

    node: str
    fill_value: int = 0

    def next_value(self) -> int:
        self.fill_value = self.fill_value % 119 + 1
        return self.fill_value


class Open(Case):
    name = "open"
    files = 0

    def setup(self) -> None:
        self.backend: KernelBackend | None = None

    def call(self) -> None:
        self.backend = KernelBackend(self.ctx.node)

    def teardown(self) -> None:
        if self.backend is not None:
            self.backend.close()

    def after_success(self) -> list[str]:
        assert self.backend is not None
        with Device(self.backend) as dev:  # the new file works (closed here: the teardown's job)
            self.backend = None
            return [] if dev.get_param("num_cores") >= 1 else ["the opened file reports no cores"]


class Version(Case):
    name = "DRM_IOCTL_VERSION"

    def call(self) -> None:
        self.result = self.dev.version()

    def after_success(self) -> list[str]:
        return [] if self.result[0] == "vnpu" else [f"VERSION names the driver {self.result[0]!r}"]


class GetParam(Case):
    name = "DRM_IOCTL_VNPU_GET_PARAM"

    def call(self) -> None:
        self.value = self.dev.get_param("num_cores")

    def after_success(self) -> list[str]:
        return [] if self.value >= 1 else [f"NUM_CORES is {self.value}"]


class BoCreate(Case):
    name = "DRM_IOCTL_VNPU_BO_CREATE"

    def setup(self) -> None:
        self.bo: BufferObject | None = None

    def call(self) -> None:
        self.bo = self.dev.create_bo(BO_SIZE)

    def after_success(self) -> list[str]:
        assert self.bo is not None
        info = self.dev.bo_info(self.bo.handle)
        self.bo.write(b"\xa5" * 64, offset=BO_SIZE - 64)
        ok = info.size == BO_SIZE and info.va == self.bo.va and self.bo.read(64, BO_SIZE - 64) == b"\xa5" * 64
        return [] if ok else ["the created BO's info or memory is wrong"]

    def teardown(self) -> None:
        if self.bo is not None:
            self.bo.close()


class BoInfo(Case):
    name = "DRM_IOCTL_VNPU_BO_INFO"

    def setup(self) -> None:
        self.bo = self.dev.create_bo(4096)

    def call(self) -> None:
        self.info = self.dev.bo_info(self.bo.handle)

    def after_success(self) -> list[str]:
        return [] if self.info.va == self.bo.va else ["BO_INFO gives another VA"]

    def teardown(self) -> None:
        self.bo.close()


class BoSync(Case):
    name = "DRM_IOCTL_VNPU_BO_SYNC"

    def setup(self) -> None:
        self.bo = self.dev.create_bo(4096)
        self.bo.write(b"\x5a" * 16)

    def call(self) -> None:
        self.bo.sync(for_cpu=True, for_device=True)

    def after_success(self) -> list[str]:
        return [] if self.bo.read(16) == b"\x5a" * 16 else ["BO_SYNC changed the BO's bytes"]

    def teardown(self) -> None:
        self.bo.close()


class FillJob:
    """A real small job: FILL of 4 KiB with a value, in its own output BO, read back afterwards."""

    def __init__(
        self, dev: Device, value: int, out_syncobj: int = 0, in_syncobjs: tuple[int, ...] = ()
    ) -> None:
        self.dev = dev
        self.value = value
        self.out = self.dev.create_bo(4096)
        stream = fill_stream(self.out.va, 4096, self.value)
        self.cmd = self.dev.create_bo_with(stream, read_only=True)
        self.job = Job(
            self.cmd,
            len(stream),
            [JobBo(self.cmd, read=True), JobBo(self.out, write=True)],
            in_syncobjs=in_syncobjs,
            out_syncobj=out_syncobj,
        )
        self.job.submit_args  # noqa: B018 - the structs are built now, not while the fault is armed

    def submit(self) -> None:
        self.dev.submit(self.job)

    def check(self) -> list[str]:
        status = self.out.wait(timeout=JOB_WAIT_S)
        if not status.ok:
            return [f"the job ended with status {status.status}"]
        got = self.out.read()
        wrong = sum(b != self.value for b in got)
        return [f"the job wrote {wrong} wrong bytes"] if wrong else []

    def close(self) -> None:
        self.cmd.close()
        try:
            self.out.wait(timeout=JOB_WAIT_S)  # nothing of the job outlives the case
        finally:
            self.out.close()


class BoWait(Case):
    name = "DRM_IOCTL_VNPU_BO_WAIT"
    busy = True

    def setup(self) -> None:
        self.job = FillJob(self.dev, self.ctx.next_value())
        self.job.submit()

    def call(self) -> None:
        self.status = self.job.out.wait(timeout=JOB_WAIT_S)

    def after_success(self) -> list[str]:
        return [f"BO_WAIT reports status {self.status.status}"] if not self.status.ok else self.job.check()

    def teardown(self) -> None:
        self.job.close()


class Submit(Case):
    """A real small job, with an in-syncobj and an out-syncobj, on a file that has run none yet.

    A failed SUBMIT hands the command buffer it got back to its file's pool, as a job that ended
    does (vnpu_cmdbuf.c): the live ``cmdbufs`` and its ``mappings`` may grow by that buffer, which
    the same SUBMIT made again must then reuse rather than allocate another.
    """

    name = "DRM_IOCTL_VNPU_SUBMIT"
    pooled = ("cmdbufs", "mappings", "cmdbufs_allocated_total")

    def setup(self) -> None:
        self.in_syncobj = self.dev.create_syncobj(signaled=True)
        self.out_syncobj = self.dev.create_syncobj()
        self.job = FillJob(
            self.dev, self.ctx.next_value(), out_syncobj=self.out_syncobj, in_syncobjs=(self.in_syncobj,)
        )

    def call(self) -> None:
        self.job.submit()

    def after_failure(self) -> list[str]:
        # No job: its out-syncobj never got a fence (a wait on it, without WAIT_FOR_SUBMIT, is EINVAL).
        problems = []
        err = _errno_of(lambda: self.dev.wait_syncobjs([self.out_syncobj], timeout=0))
        if err != errno.EINVAL:
            problems.append(f"after the failed SUBMIT its out-syncobj waits with {errno_name(err)}")
        # The file still works, and a buffer the failure pooled is what the next SUBMIT uses.
        pooled = self.changed.get("cmdbufs", (0, 0))
        allocated = counters().get("cmdbufs_allocated_total", 0)
        self.job.submit()
        problems += self.job.check()
        if pooled[1] > pooled[0] and counters().get("cmdbufs_allocated_total", 0) != allocated:
            problems.append(f"the failed SUBMIT left a command buffer the next one did not reuse: {pooled}")
        return problems

    def after_success(self) -> list[str]:
        problems = self.job.check()
        err = _errno_of(lambda: self.dev.wait_syncobjs([self.out_syncobj], timeout=JOB_WAIT_S))
        return problems + ([f"the job's out-syncobj waits with {errno_name(err)}"] if err else [])

    def teardown(self) -> None:
        self.job.close()
        self.dev.destroy_syncobj(self.in_syncobj)
        self.dev.destroy_syncobj(self.out_syncobj)


class GemClose(Case):
    name = "DRM_IOCTL_GEM_CLOSE"

    def setup(self) -> None:
        self.bo = self.dev.create_bo(4096)
        self.closed = False

    def call(self) -> None:
        self.bo.close()
        self.closed = True

    def after_failure(self) -> list[str]:
        err = _errno_of(lambda: self.dev.bo_info(self.bo.handle))
        return [] if err == 0 else [f"after the failed GEM_CLOSE the BO is gone (BO_INFO: {errno_name(err)})"]

    def after_success(self) -> list[str]:
        err = _errno_of(lambda: self.dev.bo_info(self.bo.handle))
        return [] if err == errno.ENOENT else [f"after GEM_CLOSE BO_INFO gives {errno_name(err)}"]

    def teardown(self) -> None:
        if not self.closed:  # libaccel marked it closed before its ioctl failed: close the handle here
            gem_close(self.dev, self.bo.handle)


class PrimeExport(Case):
    name = "DRM_IOCTL_PRIME_HANDLE_TO_FD"

    def setup(self) -> None:
        self.bo = self.dev.create_bo(4096)
        self.fd = -1
        self.fds = open_fds()

    def call(self) -> None:
        self.fd = self.bo.export_dmabuf()

    def after_failure(self) -> list[str]:
        now = open_fds()
        return [] if now == self.fds else [f"a failed export left {now - self.fds} more file descriptors"]

    def after_success(self) -> list[str]:
        # The exporting file's own import of it is the BO itself (DRM's per-file cache).
        handle = self.dev.import_dmabuf(self.fd).handle
        return (
            []
            if handle == self.bo.handle
            else [f"its dma-buf imports as handle {handle}, not {self.bo.handle}"]
        )

    def teardown(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.bo.close()


class PrimeImport(Case):
    """A BO's dma-buf imported into another file of the device: a BO of that file over the same pages."""

    name = "DRM_IOCTL_PRIME_FD_TO_HANDLE"
    files = 2

    def setup(self) -> None:
        self.bo = self.dev.create_bo(4096)
        self.fd = self.bo.export_dmabuf()
        self.imported: BufferObject | None = None

    def call(self) -> None:
        self.imported = self.other.import_dmabuf(self.fd)

    def _other_bytes(self) -> int:
        return fdinfo.read(self.other.backend.fileno()).memory_bytes("total")

    def after_failure(self) -> list[str]:
        held = self._other_bytes()
        return [] if held == 0 else [f"after a failed import the other file holds {held} bytes of BOs"]

    def after_success(self) -> list[str]:
        assert self.imported is not None
        # Its own VA in the other file, over the exporter's pages.
        self.bo.write(b"\x3c" * 32)
        same = self.imported.read(32) == b"\x3c" * 32
        ok = same and self.imported.va != 0 and self.imported.size == self.bo.size
        return [] if ok else [f"the imported BO {self.imported} does not show the exporter's pages"]

    def teardown(self) -> None:
        if self.imported is not None:
            self.imported.close()
        os.close(self.fd)
        self.bo.close()


class SyncobjCreate(Case):
    name = "DRM_IOCTL_SYNCOBJ_CREATE"

    def setup(self) -> None:
        self.handle = 0

    def call(self) -> None:
        self.handle = self.dev.create_syncobj()

    def teardown(self) -> None:
        if self.handle:
            self.dev.destroy_syncobj(self.handle)


class SyncobjWait(Case):
    name = "DRM_IOCTL_SYNCOBJ_WAIT"
    busy = True

    def setup(self) -> None:
        self.syncobj = self.dev.create_syncobj()
        self.job = FillJob(self.dev, self.ctx.next_value(), out_syncobj=self.syncobj)
        self.job.submit()

    def call(self) -> None:
        self.dev.wait_syncobjs([self.syncobj], timeout=JOB_WAIT_S, wait_for_submit=True)

    def after_success(self) -> list[str]:
        return self.job.check()

    def teardown(self) -> None:
        self.job.close()
        self.dev.destroy_syncobj(self.syncobj)


class SyncobjDestroy(Case):
    name = "DRM_IOCTL_SYNCOBJ_DESTROY"

    def setup(self) -> None:
        self.handle = self.dev.create_syncobj()
        self.destroyed = False

    def call(self) -> None:
        self.dev.destroy_syncobj(self.handle)
        self.destroyed = True

    def _exists(self) -> int:
        # A syncobj without a fence waits with EINVAL; a handle that names none, ENOENT.
        return _errno_of(lambda: self.dev.wait_syncobjs([self.handle], timeout=0))

    def after_failure(self) -> list[str]:
        err = self._exists()
        return (
            []
            if err == errno.EINVAL
            else [f"after a failed DESTROY the syncobj waits with {errno_name(err)}"]
        )

    def after_success(self) -> list[str]:
        err = self._exists()
        return [] if err == errno.ENOENT else [f"after DESTROY the handle waits with {errno_name(err)}"]

    def teardown(self) -> None:
        if not self.destroyed:
            self.dev.destroy_syncobj(self.handle)


CASES: tuple[type[Case], ...] = (
    Open,
    Version,
    GetParam,
    BoCreate,
    BoInfo,
    BoWait,
    BoSync,
    Submit,
    GemClose,
    PrimeExport,
    PrimeImport,
    SyncobjCreate,
    SyncobjWait,
    SyncobjDestroy,
)
NAMES = tuple(c.name for c in CASES)


# --- the run -------------------------------------------------------------------------------------------
@dataclass
class CaseStats:
    """One call's series: N = 1, 2, ... until it succeeded with nothing injected."""

    name: str
    calls: int = 0  # calls made with a fault armed
    injected: int = 0  # of them, calls in which the armed fault was injected
    failed: int = 0  # calls that returned an errno
    survived: int = 0  # injected, and the call still succeeded (a fallback, or an allocation it can spare)
    silent: int = 0  # injected into a __GFP_NOWARN allocation: no stack printed, site unknown
    clean_at: int = 0  # the N at which it succeeded with nothing injected (0: never)
    errnos: Counter[str] = field(default_factory=Counter)
    sites: Counter[str] = field(default_factory=Counter)  # where injected failures hit (module frame)
    driver_frames: Counter[str] = field(default_factory=Counter)  # the vnpu.ko frame under each
    splats: Counter[str] = field(default_factory=Counter)
    leaks: dict[str, tuple[int, int]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    series: list[dict[str, Any]] = field(default_factory=list)  # each call: N, errno, where it failed

    def to_json(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for k in ("errnos", "sites", "driver_frames", "splats"):
            d[k] = dict(d[k])
        d["leaks"] = {k: list(v) for k, v in self.leaks.items()}
        return d


# What a job in flight changes on its own: itself, and its command buffer and that buffer's mapping.
BUSY_COUNTERS = ("jobs", "jobs_on_device", "cmdbufs", "mappings")


def _checked(step: Any) -> list[str]:
    """A check or teardown step's problems; an errno it ran into is one too."""
    try:
        return step() or []
    except OSError as e:
        return [f"{step.__name__}: {e}"]


def run_case(case: Case, fail: FailNth, kmsg: Kmsg, max_n: int = MAX_N) -> CaseStats:
    """The series of one call: N = 1, 2, ... with every check after each call."""
    stats = CaseStats(case.name)
    allowed = allowed_errnos(case.name)
    start = time.monotonic()
    baseline = counters()
    memory = leak_check.Baseline.take()
    for n in range(1, max_n + 1):
        case.open_files()
        case.setup()
        before = counters()
        kmsg.read()  # what the setup logged is not this call's
        err = 0
        fail.arm(n)
        try:
            case.call()
        except OSError as e:  # libaccel's AccelError, or the open's own OSError
            err = e.errno or -1
        finally:
            injected = fail.disarm()
        log = kmsg.read()
        stats.calls += 1
        stats.injected += injected
        reported = injections(log)
        for inj in reported:
            stats.sites[inj.site] += 1
            if inj.driver_frame:
                stats.driver_frames[inj.driver_frame] += 1
        stats.silent += injected and not reported
        problems: list[str] = []
        if err:
            stats.failed += 1
            stats.errnos[errno_name(err)] += 1
            if err not in allowed:
                problems.append(f"failed with {errno_name(err)}, not one of its errnos")
            if not injected:
                problems.append(f"failed with {errno_name(err)} with no fault injected")
            after = counters()
            changed = {k: (before.get(k, 0), v) for k, v in after.items() if v != before.get(k, 0)}
            case.changed = dict(changed)
            for k in (*case.pooled, *(BUSY_COUNTERS if case.busy else ())):
                changed.pop(k, None)
            if changed:
                problems.append(f"the failed call changed the driver's counters: {changed}")
            problems += _checked(case.after_failure)
        else:
            stats.survived += injected
            problems += _checked(case.after_success)
        problems += _checked(case.teardown)
        case.close_files()
        left = settle(baseline)
        if left:
            problems.append(f"after the teardown the counters are not at their baseline: {left}")
        splats = count_splats("\n".join(log + kmsg.read()))
        if splats:
            stats.splats.update(splats)
            problems.append(f"kernel reports: {splats}")
        stats.problems += [f"N={n}: {p}" for p in problems]
        stats.series.append(
            {
                "n": n,
                "errno": errno_name(err) if err else "",
                "injected": injected,
                "reported": [asdict(i) for i in reported],
                "problems": problems,
            }
        )
        if not err and not injected:
            stats.clean_at = n
            break
    else:
        stats.problems.append(f"still failing or taking injected faults at N={max_n}")
    stats.leaks = memory.leaks()
    if stats.leaks:
        stats.problems.append(f"leaks over the series: {stats.leaks}")
    stats.seconds = time.monotonic() - start
    return stats


@contextmanager
def armed_kernel(stack_filter: bool = True, dry: bool = False) -> Iterator[Knobs]:
    """The fault knobs set for the run (none for a dry run), put back afterwards."""
    knobs = Knobs()
    try:
        if not dry:
            knobs.apply(stack_filter=stack_filter)
        yield knobs
    finally:
        knobs.restore()


def run(
    device: str = "kernel",
    only: Iterable[str] = (),
    max_n: int = MAX_N,
    stack_filter: bool = True,
    dry: bool = False,
) -> dict[str, Any]:
    """Every case (or those named in ``only``) in this thread; the figures as a dict.

    ``dry``: each call once with nothing armed, on any kernel (the cases' own checks).
    """
    reason = None if dry else unavailable()
    if reason:
        raise RuntimeError(reason)
    wanted = set(only)
    unknown = wanted - set(NAMES)
    if unknown:
        raise ValueError(f"no case {sorted(unknown)}; the cases are {', '.join(NAMES)}")
    results: list[CaseStats] = []
    node = discovery.resolve(device or "kernel")  # a kernel device: the shim has no fault injection
    with armed_kernel(stack_filter, dry) as knobs:
        ctx = Context(node)
        fail, kmsg = NoFailNth() if dry else FailNth(), Kmsg()
        try:
            for cls in CASES:
                if wanted and cls.name not in wanted:
                    continue
                stats = run_case(cls(ctx), fail, kmsg, max_n)
                print(summary_line(stats), flush=True)
                results.append(stats)
        finally:
            fail.close()
            kmsg.close()
    return {
        "kernel": os.uname().release,
        "dry_run": dry,
        "stack_filter": [hex(a) for a in knobs.span] if knobs.span else None,
        "cases": [s.to_json() for s in results],
        "calls": sum(s.calls for s in results),
        "injected": sum(s.injected for s in results),
        "problems": sum(len(s.problems) for s in results),
    }


def summary_line(s: CaseStats) -> str:
    errs = ", ".join(f"{k} {v}" for k, v in sorted(s.errnos.items())) or "none"
    return (
        f"fail_nth: {s.name}: {s.calls} calls, {s.injected} failures injected, {s.failed} failed "
        f"({errs}), {s.survived} succeeded despite one, clean at N={s.clean_at}; "
        f"{len(s.problems)} problems ({s.seconds:.0f} s)"
    )


def markdown_table(doc: dict[str, Any]) -> str:
    """The figures as the table docs/reliability.md carries."""
    rows = [
        "| call | calls made | failures injected | call failed (errno) | succeeded after an injected failure "
        "| first clean N | state lost, splats |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in doc["cases"]:
        errs = ", ".join(f"{k} {v}" for k, v in sorted(c["errnos"].items())) or "-"
        name = c["name"].removeprefix("DRM_IOCTL_")
        rows.append(
            f"| {name} | {c['calls']} | {c['injected']} | {c['failed']} ({errs}) "
            f"| {c['survived']} | {c['clean_at']} | {len(c['problems'])} |"
        )
    rows.append(
        f"| all | {doc['calls']} | {doc['injected']} | {sum(c['failed'] for c in doc['cases'])} | "
        f"{sum(c['survived'] for c in doc['cases'])} | | {doc['problems']} |"
    )
    return "\n".join(rows) + "\n"


@cli_main("python -m qemu_tests.fail_nth")
def main(argv: list[str] | None = None) -> int:
    p = OneLineArgumentParser(prog="python -m qemu_tests.fail_nth", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="kernel", help="kernel (default) or /dev/accel/accelN")
    p.add_argument("--only", nargs="*", default=[], metavar="CALL", help=f"only these: {' '.join(NAMES)}")
    p.add_argument(
        "--max-n", type=int, default=MAX_N, help="give up on a call at this N (default %(default)s)"
    )
    p.add_argument(
        "--no-stack-filter",
        action="store_true",
        help="fail allocations anywhere, not only under the DRM modules",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="each call once with nothing armed (any kernel): the cases' checks",
    )
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--markdown", action="store_true", help="print the figures as a Markdown table")
    args = p.parse_args(argv)
    if args.device == "shim":
        p.error("fail-nth injects into the kernel's allocations: it needs vnpu.ko, not the shim")
    try:
        doc = run(args.device, args.only, args.max_n, not args.no_stack_filter, args.dry_run)
    except (RuntimeError, ValueError, AccelError) as e:
        print(f"fail_nth: {e}", file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    if args.markdown:
        print(markdown_table(doc), end="")
    span = doc["stack_filter"]
    where = (
        f"allocations under {'..'.join(span)} ({', '.join(STACK_MODULES)})" if span else "every allocation"
    )
    print(
        f"fail_nth: {doc['calls']} calls, {doc['injected']} failures injected into {where} ({doc['kernel']})"
    )
    bad = [(c["name"], p) for c in doc["cases"] for p in c["problems"]]
    for name, problem in bad:
        print(f"fail_nth: FAIL: {name}: {problem}", file=sys.stderr)
    if bad:
        return 1
    print("fail_nth: every call returned 0 or one of its errnos, left nothing behind, and no kernel report")
    return 0


if __name__ == "__main__":
    sys.exit(main())
