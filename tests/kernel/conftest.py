"""Kernel-only tests: run in the QEMU guest against vnpu.ko (``python -m qemu_tests``).

Everything here skips cleanly where no vnpu accel device exists (on the host).
Tests marked ``isolated`` (module reload, the final dmesg check) need no other
open file of the device, so the guest runs them in a second pytest process.
"""

from __future__ import annotations

from collections.abc import Iterator

import driver_knobs
import pytest
from kernel_helpers import accel_nodes


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "isolated: needs the device unused by this process (module reload)")


def _have_vnpu() -> bool:
    if not accel_nodes():
        return False
    from libaccel import discovery

    return bool(discovery.list_devices())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _have_vnpu():
        return
    skip = pytest.mark.skip(reason="no vnpu device (/dev/accel/accel*): kernel tests run in the QEMU guest")
    for item in items:
        if "tests/kernel/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)


@pytest.fixture
def dev() -> Iterator[object]:
    from libaccel import Device

    with Device.open("kernel") as d:
        yield d


SHORT_JOB_TIMEOUT_MS = driver_knobs.SHORT_JOB_TIMEOUT_MS


@pytest.fixture
def short_job_timeout() -> Iterator[int]:
    """The job timeout set to SHORT_JOB_TIMEOUT_MS (debugfs job_timeout_ms) for the test, then restored."""
    with driver_knobs.job_timeout("kernel") as ms:
        yield ms


# For tests whose job must keep running while the test looks at it (fdinfo, accel top, a firmware
# reload): on a loaded host a TCG guest can take longer than the default 5 s to look.
LONG_JOB_TIMEOUT_MS = 60_000


@pytest.fixture
def long_job_timeout() -> Iterator[int]:
    """The job timeout set to LONG_JOB_TIMEOUT_MS for the test, then restored."""
    with driver_knobs.job_timeout("kernel", LONG_JOB_TIMEOUT_MS) as ms:
        yield ms
