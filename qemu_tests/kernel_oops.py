"""The guest kernel's Oops, seen as it happens: a run whose kernel has oopsed stops instead of
waiting for its timeout.

An Oops in a test's system call kills that process (or leaves it in an uninterruptible sleep) and
the kernel goes on in an unknown state; pytest may then wait on a child that never returns, and the
harness only found out when its guest timeout (15 minutes and more) killed the guest. The guest
runner watches ``/dev/kmsg`` with :class:`KmsgWatch`; once an Oops-class report appears it gives
the running tests :data:`GRACE_S` to finish, then kills them and the run fails at once, saying
which report stopped it (the whole report is in the saved ``dmesg.txt``).

Oops-class: what leaves the kernel unusable or memory corrupt (an Oops, a BUG's NULL dereference or
page fault, ``kernel BUG at``, a general protection fault, a panic, a KASAN report). A WARNING, a
lockdep report or a soft lockup is not (under TCG on a busy host a vCPU can stall long enough for
the soft-lockup detector without anything being wrong): the run goes on and the splat count
reports it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time

GRACE_S = 30.0  # the tests' time to end on their own after an Oops, before they are killed
OOPS_EXIT = 70  # the runner's exit code when an Oops stopped the tests
_OOPS = re.compile(
    r"^(?:Oops\b|general protection fault|kernel BUG at |Kernel panic|"
    r"BUG: (?:kernel NULL pointer dereference|unable to handle|KASAN))"
)


def is_oops(message: str) -> bool:
    """Whether a kernel log message opens an Oops-class report."""
    return bool(_OOPS.match(message.strip()))


def messages(chunk: bytes) -> list[str]:
    """The messages of ``/dev/kmsg`` records (``prio,seq,usec,flags;message``, one per line; lines
    starting with a space continue the one before and are skipped)."""
    found = []
    for line in chunk.decode(errors="replace").splitlines():
        if not line or line.startswith(" "):
            continue
        _, sep, message = line.partition(";")
        if sep:
            found.append(message)
    return found


class KmsgWatch(threading.Thread):
    """Reads the kernel log from now on; :attr:`oops` is the first Oops-class message seen, and
    :attr:`seen_at` when (``time.monotonic``)."""

    def __init__(self, path: str = "/dev/kmsg") -> None:
        super().__init__(name="kmsg-watch", daemon=True)
        self.path = path
        self.oops: str | None = None
        self.seen_at = 0.0
        self.error: str | None = None  # why the log could not be read, if it could not

    def run(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError as e:
            self.error = str(e)
            return
        try:
            try:
                os.lseek(fd, 0, os.SEEK_END)  # the records from now on
            except OSError:
                pass  # not seekable (a pipe in the tests): read it from where it is
            while self.oops is None:
                try:
                    chunk = os.read(fd, 8192)
                except OSError as e:
                    if e.errno == 32:  # EPIPE: records were overwritten before being read; go on
                        continue
                    self.error = str(e)
                    return
                if not chunk:
                    return
                for message in messages(chunk):
                    if is_oops(message):
                        self.oops, self.seen_at = message.strip(), time.monotonic()
                        break
        finally:
            os.close(fd)


def wait_unless_oops(
    proc: subprocess.Popen, watch: KmsgWatch | None, grace: float = GRACE_S, poll: float = 0.5
) -> int:
    """``proc``'s exit code, or :data:`OOPS_EXIT` once ``grace`` seconds passed after an Oops with
    ``proc`` still running (its whole process group is killed: start it with
    ``start_new_session=True``)."""
    while True:
        try:
            return proc.wait(timeout=poll)
        except subprocess.TimeoutExpired:
            pass
        if watch is not None and watch.oops is not None and time.monotonic() - watch.seen_at >= grace:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            return OOPS_EXIT
