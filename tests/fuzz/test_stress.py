"""Stress (qemu_tests.stress): processes x threads of corpus models and raw streams, every output checked.

On the shim here; on vnpu.ko in the QEMU guest (VNPU_STRESS_SECONDS, default 20).
"""

from __future__ import annotations

from qemu_tests import stress
from tests.fuzz.guest import guest_only, host_only, run_on_vnpu_ko
from vnpu_common import config


@host_only
def test_stress_on_the_shim() -> None:
    s = stress.run("shim", seconds=4, procs=2, threads=2)
    assert not s.errors and s.mismatches == 0, s.errors
    assert s.model_invokes > 0 and s.stream_jobs > 50


@guest_only
def test_stress_on_vnpu_ko() -> None:
    run_on_vnpu_ko("stress", "--seconds", str(config.STRESS_SECONDS.get()), timeout=1200)
