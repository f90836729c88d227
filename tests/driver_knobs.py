"""vnpu.ko's debug knobs as the tests turn them (module parameters under /sys/module/vnpu)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

VALIDATE_STREAMS = Path("/sys/module/vnpu/parameters/validate_streams")


@contextmanager
def stream_check_off() -> Iterator[None]:
    """The driver's SUBMIT-time command-stream check off while the body runs, so the device MMU is the
    last guard; the test skips on a vnpu.ko without the knob."""
    if not VALIDATE_STREAMS.exists():
        pytest.skip("vnpu.ko has no validate_streams module parameter")
    old = VALIDATE_STREAMS.read_text().strip()
    VALIDATE_STREAMS.write_text("0")
    try:
        yield
    finally:
        VALIDATE_STREAMS.write_text(old)
