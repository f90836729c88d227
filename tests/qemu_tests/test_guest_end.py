"""Every way a guest run ends says why: guest_end.diagnose on what the harness saw, and the
harness's report of it."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from qemu_tests import guest_end, harness, kernel_oops
from qemu_tests.guest_end import diagnose

BOOTED = (
    "[guest    24.6s] NPU PCI device at 0000:00:0a.0\n[guest    28.2s] vnpu.ko loaded, /dev/accel/accel0\n"
)


def test_a_passing_run_is_ok() -> None:
    end = diagnose(0, BOOTED + "1 passed\n")
    assert end.ok and end.kind == "ok"


def test_the_guest_commands_failure_names_its_exit_code_and_quotes_its_output() -> None:
    console = BOOTED + "".join(f"line {i}\n" for i in range(30)) + "FAILED tests/x.py::test_y\n"
    end = diagnose(1, console)
    assert end.kind == "command"
    assert "the guest command failed (exit code 1)" in end.headline
    assert end.details[-1] == "FAILED tests/x.py::test_y" and len(end.details) == guest_end.TAIL


def test_vngs_255_after_the_command_started_says_the_exit_code_never_came_back() -> None:
    end = diagnose(255, BOOTED + "[guest    30.0s] exec: python -m x\n")
    assert end.kind == "command" and "without passing its command's exit code back" in end.headline


def test_qemu_failing_to_start_quotes_qemus_error() -> None:
    console = "qemu-system-x86_64: -chardev socket,path=/tmp/s.sock,id=vnpu-ivs: Failed to connect\n"
    end = diagnose(1, console)
    assert end.kind == "qemu"
    assert end.headline.startswith("QEMU failed (exit code 1): qemu-system-x86_64: -chardev")


def test_an_empty_console_says_the_guest_never_started() -> None:
    end = diagnose(255, "")
    assert end.kind == "no start"
    assert "never started its command and printed nothing (vng exit code 255)" in end.headline


def test_results_in_the_shared_directory_mean_the_command_ran_whatever_the_console_says() -> None:
    """The debug kernel's guest prints nothing vng captures: its test results tell it ran."""
    end = diagnose(1, "", ran=True)
    assert end.kind == "command" and "the guest command failed (exit code 1)" in end.headline


def test_a_guest_that_never_reached_its_command_quotes_what_it_printed() -> None:
    end = diagnose(1, "Traceback (most recent call last):\nvirtme_ng.utils.Error: no busybox\n")
    assert end.kind == "no start" and end.details[-1] == "virtme_ng.utils.Error: no busybox"


def test_a_kernel_panic_quotes_the_kernels_line() -> None:
    console = (
        "[    1.200000] VFS: Cannot open root device\n"
        "[    1.210000] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)\n"
    )
    end = diagnose(255, console)
    assert end.kind == "kernel panic"
    assert end.headline == "the guest kernel panicked: " + console.splitlines()[1].split("] ", 1)[1]


def test_a_test_that_prints_a_panic_line_is_not_a_panic() -> None:
    end = diagnose(1, BOOTED + "E   assert 'Kernel panic - not syncing' in log\n")
    assert end.kind == "command"


def test_a_timeout_is_told_apart_from_a_command_that_exits_124() -> None:
    end = diagnose(124, BOOTED, timed_out=True, timeout=900)
    assert end.kind == "timeout"
    assert "ran past its 900 s limit (host time) and was killed while its command ran" in end.headline
    assert diagnose(124, "", timed_out=True, timeout=60).headline.endswith(
        "killed before its command started; it printed nothing"
    )
    assert diagnose(124, BOOTED).kind == "command"


def test_the_device_model_dying_names_its_status_and_quotes_its_log() -> None:
    log = "2026-12-01 INFO QEMU connected as peer 1\nTraceback (most recent call last):\nMemoryError\n"
    end = diagnose(1, BOOTED, model_rc=-signal.SIGSEGV, model_log=log)
    assert end.kind == "device model"
    assert end.headline.startswith("the device model died (killed by SIGSEGV); guest exit code 1")
    assert end.details[-1] == "MemoryError"
    # Killed because the guest asked for it (a test of the driver's timeouts): not the cause.
    assert diagnose(0, BOOTED, model_rc=-signal.SIGKILL, model_killed_on_request=True).ok


def test_an_oops_stop_is_named() -> None:
    assert diagnose(kernel_oops.OOPS_EXIT, BOOTED).kind == "oops"


@pytest.mark.parametrize(
    ("rc", "words"),
    [(0, "exit code 0"), (3, "exit code 3"), (-9, "killed by SIGKILL"), (None, "no exit status")],
)
def test_exit_status_in_words(rc: int | None, words: str) -> None:
    assert guest_end.exit_status(rc).startswith(words)


def test_the_harness_prints_the_verdict_with_host_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "console.log").write_text("")
    server = harness.DeviceModelProcess(tmp_path, tmp_path / "device_model.log")
    (tmp_path / "device_model.log").write_text("")
    end = harness.say_guest_end(harness.Clock(), tmp_path, harness.BootResult(255, False), 900, server, 0)
    out = capsys.readouterr().out.splitlines()
    assert end.kind == "no start"
    assert out[0].startswith("[host ") and out[0].endswith("guest: exit code 255; device model exit code 0")
    assert "never started its command and printed nothing" in out[1]
    assert f"console: {tmp_path / 'console.log'}" in out[-1]


def test_only_a_boot_that_printed_nothing_is_booted_again(tmp_path) -> None:  # noqa: ANN001
    from qemu_tests.harness import BootResult, boot_never_began

    console = tmp_path / "console.log"
    console.write_text("")
    assert boot_never_began(BootResult(255, False), console)
    assert not boot_never_began(BootResult(1, False), console)  # the command's own failure
    assert not boot_never_began(BootResult(255, True), console)  # a timeout
    console.write_text("[    0.000000] Linux version 6.12\n")
    assert not boot_never_began(BootResult(255, False), console)  # it printed: it ran, or said why
