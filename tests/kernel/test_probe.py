"""Probe ordering: what a bind survives. The NPU is unbound, the device model is told to misbehave at
the next probe (device_model.faults), and the NPU is bound again through sysfs.

Runs in the isolated pass (it takes the device away from every other file); each test checks the
kernel log it caused.
"""

from __future__ import annotations

import errno
import gc
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import numpy as np
import pytest
from driver_knobs import injected_fault
from kernel_helpers import (
    PCI_DRIVER,
    accel_nodes,
    bad_dmesg_lines,
    debugfs_counters,
    dmesg,
    fill_stream,
    hang_stream,
    log_mark,
    npu_address,
    wait_until,
    write_once,
)
from test_firmware import tampered_firmware

pytestmark = pytest.mark.isolated


@contextmanager
def unbound() -> Iterator[str]:
    """The NPU unbound while the body runs (it binds it, or not); bound again afterwards if it is not."""
    gc.collect()  # BOs' CPU mappings of earlier tests hold their files open
    address = npu_address()
    write_once(PCI_DRIVER / "unbind", address)
    assert wait_until(lambda: not accel_nodes(), 10)
    try:
        yield address
    finally:
        if not (PCI_DRIVER / address).exists():
            write_once(PCI_DRIVER / "bind", address)
        assert wait_until(lambda: bool(accel_nodes()), 10), dmesg()[-2000:]


def _fill_works(value: int) -> None:
    from libaccel import Device, Job, JobBo

    with Device.open("kernel") as dev:
        out = dev.create_bo(4096)
        s = fill_stream(out.va, 4096, value)
        dev.submit(Job(dev.create_bo_with(s, read_only=True), len(s), [JobBo(out, write=True)]))
        assert out.wait(timeout=30).status == 0
        assert (out.array(np.int8, 4096) == value).all()


def test_a_completion_interrupt_at_probe_completes_no_job() -> None:
    """The device raises its completion interrupt during the probe's first control command, with a
    completion of seqno 1 (the new binding's first job) on every core in its queue: the bind
    succeeds, and the first jobs, which wait on a semaphore, stay unfinished until it is released."""
    from libaccel import Device, Job, JobBo

    since = log_mark()
    with unbound() as address, injected_fault("kernel", "early_cq"):
        write_once(PCI_DRIVER / "bind", address)
    with Device.open("kernel") as a, Device.open("kernel") as b:
        held = []
        for dev in (a, b):  # two idle files: their jobs go to both cores
            sem, out = dev.create_bo(4096), dev.create_bo(4096)
            s = hang_stream(sem.va, out.va)
            dev.submit(
                Job(dev.create_bo_with(s, read_only=True), len(s), [JobBo(sem), JobBo(out, write=True)])
            )
            held.append((sem, out))
        time.sleep(1)
        assert debugfs_counters()["jobs_done"] == 0, "a phantom completion ended a job"
        for _, out in held:
            out.sync(for_cpu=True, size=1)
            assert out.array(np.int8, 1)[0] == 0
        for sem, _ in held:
            sem.array(np.int32, 1)[0] = 1
            sem.sync(for_device=True, size=4)
        for _, out in held:
            assert out.wait(timeout=30).status == 0
            assert out.array(np.int8, 1)[0] == 7
    assert bad_dmesg_lines(since) == []
    _fill_works(41)


@contextmanager
def _bad_cmd(_tmp_path: Path) -> Iterator[None]:
    with injected_fault("kernel", "bad_cmd"):
        yield


@pytest.mark.parametrize(
    ("refusal", "expected"),
    [
        # The first control command (POWER) answered with status 1, outside the device's contract:
        # EIO, not a positive value, which the PCI core would take for success.
        (_bad_cmd, errno.EIO),
        # BOOT refused (a flipped signature byte), with the firmware copy made and bus mastering on.
        (tampered_firmware, errno.ENOEXEC),
    ],
    ids=["bad-status", "refused-image"],
)
def test_a_probe_the_device_refuses_unwinds_and_the_device_binds_again(
    refusal: Callable[[Path], AbstractContextManager[None]], expected: int, tmp_path: Path
) -> None:
    """A bind the device refuses fails with a negative errno, leaves no node and no splat, and the
    next bind brings up a working device."""
    since = log_mark()
    with unbound() as address:
        with refusal(tmp_path), pytest.raises(OSError) as e:
            write_once(PCI_DRIVER / "bind", address)
        assert e.value.errno == expected, e.value
        assert not accel_nodes() and not (PCI_DRIVER / address).exists()
    assert bad_dmesg_lines(since) == []
    _fill_works(42)
