"""Stress (qemu_tests.stress): processes x threads of corpus models and raw streams, every output checked.

On the shim here; on vnpu.ko in the QEMU guest (VNPU_STRESS_SECONDS, default 20).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from qemu_tests import stress

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(bool(os.environ.get("VNPU_GUEST")), reason="host test (the shim)")
def test_stress_on_the_shim() -> None:
    s = stress.run("shim", seconds=4, procs=2, threads=2)
    assert not s.errors and s.mismatches == 0, s.errors
    assert s.model_invokes > 0 and s.stream_jobs > 50


@pytest.mark.skipif(not os.environ.get("VNPU_GUEST"), reason="runs on vnpu.ko in the QEMU guest")
def test_stress_on_vnpu_ko() -> None:
    seconds = os.environ.get("VNPU_STRESS_SECONDS", "20")
    r = subprocess.run(
        [sys.executable, "-m", "qemu_tests.stress", "--device", "kernel", "--seconds", seconds],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1200,
    )
    print(r.stdout, r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
