"""The campaigns' two sides: the host runs them on the shim, the QEMU guest (where the harness sets
``VNPU_GUEST``) on vnpu.ko, as ``python -m qemu_tests.<campaign> --device kernel``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vnpu_common import config

ROOT = Path(__file__).resolve().parents[2]
IN_GUEST = bool(config.GUEST.get())

host_only = pytest.mark.skipif(IN_GUEST, reason="host test (the shim)")
guest_only = pytest.mark.skipif(not IN_GUEST, reason="runs on vnpu.ko in the QEMU guest")


def run_on_vnpu_ko(campaign: str, *args: str, timeout: float) -> None:
    """Run ``python -m qemu_tests.<campaign> --device kernel ARGS`` from the repository root; the
    test fails with the campaign's output unless it exits 0."""
    cmd = [sys.executable, "-m", f"qemu_tests.{campaign}", "--device", "kernel", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    print(r.stdout, r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
