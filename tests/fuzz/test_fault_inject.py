"""Device-model fault injection (device_model.faults) and the recovery campaign (qemu_tests.fault_inject).

On the shim here (its watchdog stands in for vnpu.ko's timeout); on vnpu.ko in the QEMU guest,
where the spec travels through the harness's shared control file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from device_model.faults import FaultInjector, FaultSpec, FaultSpecError
from qemu_tests import fault_inject
from tests.fuzz.guest import guest_only, host_only, run_on_vnpu_ko


def test_spec_is_checked() -> None:
    with pytest.raises(FaultSpecError, match="unknown fault kind 'melt'"):
        FaultSpec(kind="melt")
    with pytest.raises(FaultSpecError, match="bad fault spec"):
        FaultSpec(kind="hang", rate=2.0)
    with pytest.raises(FaultSpecError, match="bad fault spec"):
        FaultSpec.from_json('{"kind": "hang", "bogus": 1}')


def test_next_n_jobs_and_rate() -> None:
    inj = FaultInjector()
    inj.set(FaultSpec(kind="hang", count=2, seq=1))
    assert [inj.next_job() for _ in range(4)] == ["hang", "hang", None, None]
    inj.set(FaultSpec(kind="mmu_fault", rate=0.5, seq=2, seed=3))
    hits = sum(inj.next_job() == "mmu_fault" for _ in range(1000))
    assert 400 < hits < 600
    assert inj.injected["hang"] == 2 and inj.injected["mmu_fault"] == hits


def test_control_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    control = tmp_path / "faults.json"
    inj = FaultInjector(control)
    assert inj.next_job() is None  # no file: no faults
    fault_inject.ControlFile(control)(FaultSpec(kind="drop_irq", count=1, seq=1))
    assert inj.next_job() == "drop_irq"
    assert inj.next_job() is None
    # The same spec again with a new seq is a new request, however fast the writes follow each
    # other (same size, often within one tick of the file system's clock).
    for seq in range(2, 10):
        fault_inject.ControlFile(control)(FaultSpec(kind="drop_irq", count=1, seq=seq))
        assert inj.next_job() == "drop_irq", f"seq {seq}"
    status = (tmp_path / "faults.json.status.json").read_text()
    assert '"drop_irq": 9' in status


@pytest.fixture
def short_shim_timeout() -> Iterator[None]:
    from libaccel.backends.shim import shared_device

    dev = shared_device()
    old, dev.job_timeout_ms = dev.job_timeout_ms, 300
    try:
        yield
    finally:
        dev.job_timeout_ms = old
        if dev.npu.faults is not None:
            dev.npu.faults.set(FaultSpec())


@host_only
def test_campaign_on_the_shim(short_shim_timeout: None) -> None:
    stats = fault_inject.run("shim", rounds=1, seed=5)
    assert not stats.failures, stats.failures
    assert set(stats.injected) == {*fault_inject.ROUND_KINDS, "slow"}
    assert stats.recovered == stats.injected
    assert stats.longest < 0.3 + fault_inject.MARGIN_S


@guest_only
def test_campaign_on_vnpu_ko() -> None:
    run_on_vnpu_ko("fault_inject", "--rounds", "1", timeout=600)
