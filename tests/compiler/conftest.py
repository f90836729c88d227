"""The repository root is importable for ``tests.compiler.helpers`` and ``bench`` (not installed packages)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from libaccel import Device  # noqa: E402
from vnpu_common import config  # noqa: E402

# The device the compiled jobs run on: the shim on the host; the QEMU harness sets "kernel" in the
# guest, so the op grid and the networks are checked on vnpu.ko too.
TEST_DEVICE = config.TEST_DEVICE.get()


@pytest.fixture(scope="module")
def dev() -> Iterator[Device]:
    with Device.open(TEST_DEVICE) as d:
        yield d
