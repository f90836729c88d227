"""vnpu.ko's debug knobs as the tests turn them (module parameters under /sys/module/vnpu, debugfs),
and the shim's counterparts where a test runs on either backend."""

from __future__ import annotations

import glob
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from libaccel.discovery import AUTOSUSPEND_GLOB

# vnpu.ko's job timeout per device, for jobs that start afterwards (100..600000 ms).
JOB_TIMEOUT_GLOB = "/sys/kernel/debug/accel/*/job_timeout_ms"
# What the hang tests wait for: long enough for any innocent job of theirs under TCG, short beside the
# defaults (vnpu.ko 5 s, the shim 2 s), so a hang costs about a second.
SHORT_JOB_TIMEOUT_MS = 1000


def job_timeout_files() -> list[Path]:
    """vnpu's debugfs ``job_timeout_ms`` file of each device."""
    return [Path(f) for f in sorted(glob.glob(JOB_TIMEOUT_GLOB))]


@contextmanager
def _knob(backend: str, ms: int, files: list[Path], missing: str, shim_attr: str) -> Iterator[int]:
    """``ms`` in every file of ``files`` ("kernel"; the test skips with ``missing`` if there is none),
    or in the shim's shared device's attribute ``shim_attr`` ("shim"), while the body runs; then the
    old values are back."""
    if backend == "kernel":
        if not files:
            pytest.skip(missing)
        old = [f.read_text().strip() for f in files]
        for f in files:
            f.write_text(str(ms))
        try:
            yield ms
        finally:
            for f, value in zip(files, old, strict=True):
                f.write_text(value)
    else:
        from libaccel.backends.shim import shared_device

        device = shared_device()
        previous = getattr(device, shim_attr)
        setattr(device, shim_attr, ms)
        try:
            yield ms
        finally:
            setattr(device, shim_attr, previous)


def job_timeout(backend: str, ms: int = SHORT_JOB_TIMEOUT_MS) -> AbstractContextManager[int]:
    """Jobs that start while the body runs time out after ``ms``, on either backend, then the old
    timeout is back: vnpu.ko's debugfs job_timeout_ms of every device ("kernel"; the test skips on a
    vnpu.ko without it), or the job timeout of the shim's shared device ("shim")."""
    missing = "vnpu.ko has no debugfs job_timeout_ms (mount debugfs; the guest suite does)"
    return _knob(backend, ms, job_timeout_files(), missing, "job_timeout_ms")


def autosuspend(backend: str, ms: int) -> AbstractContextManager[int]:
    """The runtime-PM autosuspend delay set to ``ms`` while the body runs, then restored: the standard
    power/autosuspend_delay_ms of every vnpu device ("kernel"), or the shim's shared device's ("shim")."""
    files = [Path(f) for f in sorted(glob.glob(AUTOSUSPEND_GLOB))]
    missing = "no vnpu device with runtime PM (power/autosuspend_delay_ms)"
    return _knob(backend, ms, files, missing, "autosuspend_ms")


@contextmanager
def injected_fault(backend: str, kind: str, count: int = 1) -> Iterator[None]:
    """The device model misbehaves on purpose (device_model.faults): its next ``count`` jobs get fault
    ``kind`` ("mmu_fault": -EFAULT at the job's command-stream VA, the job not run) while the body
    runs, then injection is off again. In the guest through the harness's control file ("kernel"; the
    test skips without one), on the shim's shared device directly ("shim"). The stream check, always
    on, leaves no other way to make a job of the uapi fault."""
    from device_model.faults import FaultSpec
    from qemu_tests.fault_inject import GUEST_CONTROL, ControlFile, shim_control

    if backend == "kernel":
        if not GUEST_CONTROL.parent.is_dir():
            pytest.skip(f"no fault-injection control directory {GUEST_CONTROL.parent} (the QEMU harness's)")
        control = ControlFile()
    else:
        control = shim_control()
    seq = time.monotonic_ns()
    control(FaultSpec(kind=kind, count=count, seq=seq))
    try:
        yield
    finally:
        control(FaultSpec(seq=seq + 1))


def core_mask_files() -> list[Path]:
    """vnpu.ko's debugfs ``core_mask`` of each device: the cores new jobs may be given, a bit each."""
    from libaccel.tools.debugfs import knob_files

    return knob_files("core_mask")


def core_mask(mask: int) -> AbstractContextManager[int]:
    """vnpu.ko gives new jobs only to the cores of ``mask`` while the body runs, then the old masks
    are back; the test skips on a vnpu.ko without the knob (kernel only: the shim has no mask)."""
    missing = "vnpu.ko has no debugfs core_mask (mount debugfs; the guest suite does)"
    return _knob("kernel", mask, core_mask_files(), missing, "")
