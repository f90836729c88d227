"""One uapi conformance suite, run against each selected backend.

Select backends with ``--backend shim`` (default on the host), ``--backend
kernel`` (inside the QEMU guest, where ``python -m qemu_tests`` runs it), repeatable, or
with $VNPU_CONFORMANCE_BACKENDS="shim,kernel". ``kernel`` is skipped cleanly
when no vnpu /dev/accel node exists. Tests talk to the device only through
``Device.ioctl`` / ``mmap`` (the shared ioctl layer), so they hold the kernel
and the shim to the same contract.
"""

from __future__ import annotations

from collections.abc import Iterator

import driver_knobs
import pytest

from libaccel import Device
from libaccel.discovery import list_devices
from vnpu_common import config as vnpu_config

ENV = vnpu_config.CONFORMANCE_BACKENDS.name


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend",
        action="append",
        choices=("shim", "kernel"),
        help="backend(s) for tests/conformance (default: shim, or $VNPU_CONFORMANCE_BACKENDS)",
    )


def _backends(config: pytest.Config) -> list[str]:
    chosen = config.getoption("--backend", default=None)
    if chosen:
        return list(dict.fromkeys(chosen))
    return list(dict.fromkeys(vnpu_config.CONFORMANCE_BACKENDS.get()))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", _backends(metafunc.config), scope="session")


def open_device(backend: str) -> Device:
    if backend == "kernel":
        devices = list_devices()
        if not devices:
            pytest.skip("no vnpu device under /dev/accel (kernel backend runs inside the QEMU guest)")
        return Device.open(devices[0].node)
    return Device.open("shim")


@pytest.fixture
def device(backend: str) -> Iterator[Device]:
    dev = open_device(backend)
    try:
        yield dev
    finally:
        dev.close()


@pytest.fixture
def opener(backend: str) -> Iterator:
    """Opens more files of the same device; closes them at the end."""
    opened: list[Device] = []

    def _open() -> Device:
        d = open_device(backend)
        opened.append(d)
        return d

    yield _open
    for d in opened:
        d.close()


@pytest.fixture
def short_job_timeout(backend: str) -> Iterator[int]:
    """Jobs the test starts time out after driver_knobs.SHORT_JOB_TIMEOUT_MS on either backend (vnpu.ko's
    debugfs job_timeout_ms, the shim device's timeout), so a hang test waits about a second."""
    with driver_knobs.job_timeout(backend) as ms:
        yield ms


@pytest.fixture
def mmu_fault_next_job(backend: str) -> Iterator[None]:
    """The device faults the next job the test submits (-EFAULT at its command-stream VA), on either
    backend: the stream check, always on, leaves no other way to make a job fault."""
    with driver_knobs.injected_fault(backend, "mmu_fault"):
        yield
