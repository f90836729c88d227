"""The device model is killed while a job is in flight: the guest's job times out, nothing hangs.

One QEMU boot (about a minute): the in-guest half is qemu_tests/device_model_killed.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from qemu_tests import preflight

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.boots_guest
@pytest.mark.skipif(
    not all(r.ok for r in preflight.check_host()),
    reason="host requirements missing: see python -m qemu_tests --check (./run.sh installs them)",
)
def test_killed_device_model_fails_the_job_and_the_guest_survives(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable, "-m", "qemu_tests", "--no-install", "--allow-kill-request",
            "--out", str(tmp_path), "--timeout", "300",
            "--exec", "python -m qemu_tests.device_model_killed",
        ],
        cwd=REPO, capture_output=True, text=True, timeout=420, check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert "killing the device model" in out, out[-4000:]
    assert "job 5: status 0" in out, out[-4000:]
    assert proc.returncode == 0, out[-4000:]
    assert "the in-flight job failed, the guest is alive" in out
