"""Why a guest run ended: one verdict from what the harness saw.

The harness knows the guest's exit code (vng passes the guest command's through), whether its
timer killed the guest, the console (QEMU's and vng's own messages are on it too: the harness runs
vng with stderr on stdout) and the device model's exit status and log. :func:`diagnose` turns them
into one headline and the lines that back it, so a run never ends with a bare exit code.

Times: the harness's lines are host time since it started (``[host  12.3s]``); guest_run's are
the guest's uptime (``[guest  12.3s]``).
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field

from qemu_tests import kernel_oops

# guest_run's own lines (guest_run.say): once one is on the console the guest booted and its
# command started.
GUEST_RUN_MARK = "[guest "
# vng's exit code when the guest ended without passing its command's exit code back.
VNG_NO_EXIT_CODE = 255
# The kernel's own line (with its timestamp), not a test's output that quotes one.
PANIC = re.compile(r"^\[\s*\d+\.\d+\] (Kernel panic - not syncing.*)$", re.M)
QEMU_LINE = re.compile(r"^qemu(?:-system-\w+)?: .*", re.M)
TAIL = 10  # lines of the console or the device model's log quoted


@dataclass(frozen=True)
class GuestEnd:
    """The verdict on one guest run: ``kind`` names it, ``headline`` says it in one line and
    ``details`` are the lines (console or device model log) it rests on."""

    kind: str  # "ok", "timeout", "kernel panic", "oops", "device model", "qemu", "no start", "command"
    headline: str
    details: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


def exit_status(rc: int | None) -> str:
    """A process's exit status in words: ``exit code 3``, ``killed by SIGKILL``."""
    if rc is None:
        return "no exit status (still running when it was left)"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


def tail(text: str, n: int = TAIL) -> list[str]:
    """The last ``n`` non-blank lines of ``text``."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    return lines[-n:]


def diagnose(
    rc: int,
    console: str,
    *,
    timed_out: bool = False,
    timeout: float = 0.0,
    model_rc: int | None = 0,
    model_log: str = "",
    model_killed_on_request: bool = False,
    ran: bool = False,
) -> GuestEnd:
    """The verdict on a guest run: ``rc`` is vng's exit code, ``console`` what vng printed,
    ``model_rc``/``model_log`` the device model's exit status and log; ``ran``: the command left
    results in the shared directory (a kernel whose console vng does not capture prints nothing)."""
    started = ran or GUEST_RUN_MARK in console
    last = tail(console)
    if timed_out:
        where = "while its command ran" if started else "before its command started"
        return GuestEnd(
            "timeout",
            f"the guest ran past its {timeout:.0f} s limit (host time) and was killed {where}; "
            + ("its last output:" if last else "it printed nothing"),
            last,
        )
    panic = PANIC.search(console)
    if panic:
        return GuestEnd("kernel panic", f"the guest kernel panicked: {panic.group(1).strip()}", last)
    if rc == kernel_oops.OOPS_EXIT and started:
        return GuestEnd(
            "oops", "the guest kernel oopsed and the tests were stopped (dmesg.txt has the report)"
        )
    model_died = model_rc not in (0, None) and not model_killed_on_request
    if model_died:
        return GuestEnd(
            "device model",
            f"the device model died ({exit_status(model_rc)}); guest {exit_status(rc)}; its log ends:",
            tail(model_log) or ["(its log is empty)"],
        )
    if rc == 0:
        return GuestEnd("ok", "the guest command succeeded")
    if not started:
        qemu = QEMU_LINE.findall(console)
        if qemu:
            return GuestEnd("qemu", f"QEMU failed ({exit_status(rc)}): {qemu[-1].strip()}", last)
        if not last:
            return GuestEnd(
                "no start",
                f"the guest never started its command and printed nothing (vng {exit_status(rc)}): "
                "QEMU or vng failed before the guest's console opened",
            )
        return GuestEnd(
            "no start",
            f"the guest never started its command (vng {exit_status(rc)}); its output ends:",
            last,
        )
    if rc == VNG_NO_EXIT_CODE:
        return GuestEnd(
            "command",
            "the guest ended without passing its command's exit code back (vng's 255): it powered "
            "off or crashed while the command ran; its output ends:",
            last,
        )
    return GuestEnd("command", f"the guest command failed ({exit_status(rc)}); its output ends:", last)
