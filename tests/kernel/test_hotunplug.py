"""Unbinding the NPU under an open file with a job on the device: what a hot-unplug does.

Runs in the isolated pass (it takes the device away from every other file), before
test_lifecycle's final dmesg check, which then also covers this test's kernel log.
"""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path

import numpy as np
import pytest
from dmabuf_sources import UDMABUF, udmabuf_buffer
from kernel_helpers import accel_nodes, fill_stream, hang_stream, wait_until

from libaccel import fdinfo

pytestmark = pytest.mark.isolated

DRIVER = Path("/sys/bus/pci/drivers/vnpu")


def _write_once(path: Path, text: str) -> None:
    """One write(2): a buffered file would write again when it closes after an error."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _unplug_under_a_running_job(address: str) -> None:
    from libaccel import Device, Job, JobBo
    from libaccel.errors import NoDevice

    with Device.open("kernel") as dev:
        sem = dev.create_bo(4096)
        out = dev.create_bo(4096)
        s = hang_stream(sem.va, out.va)
        dev.submit(Job(dev.create_bo_with(s, read_only=True), len(s), [JobBo(sem), JobBo(out, write=True)]))
        started = wait_until(lambda: fdinfo.read(dev.backend.fileno()).engine_ns() > 0, 10)
        assert started, "the job never started"
        # CPU mappings made now stay valid after the unplug (a new mmap is refused then).
        sem_view, out_view = sem.array(np.int32, 1), out.array(np.int8, 4096)
        # An import held across the unplug: its DMA mapping goes with the binding (DMA-API debug
        # reports one that outlives it), the attachment with the file.
        # A udmabuf where the kernel has it, else another vnpu file's BO (the debug kernel has none).
        imported = udmabuf_buffer(4096) if UDMABUF.exists() else None
        if imported is not None:
            imported.view[:4] = b"vnpu"
            dev.import_dmabuf(imported.fd)
        else:
            exporter = Device.open("kernel")
            fd = exporter.create_bo(4096).export_dmabuf()
            dev.import_dmabuf(fd)
            os.close(fd)

        _write_once(DRIVER / "unbind", address)
        assert not (DRIVER / address).exists()
        assert wait_until(lambda: not accel_nodes(), 10)
        # The file stays open, and every ioctl says the device is gone.
        with pytest.raises(NoDevice):
            dev.get_param("DEVICE_ID")
        with pytest.raises(fdinfo.FdInfoError, match="no drm-driver"):
            fdinfo.read(dev.backend.fileno())
        # The reset at unbind stopped the job: releasing its WAIT now runs nothing.
        sem_view[0] = 1
        time.sleep(0.2)
        assert out_view[0] == 0
        del sem_view, out_view
        for bo in (sem, out):
            with pytest.raises(NoDevice):
                bo.close()
        if imported is not None:
            assert bytes(imported.view[:4]) == b"vnpu"  # the exporter's pages are untouched
            imported.close()
        else:
            exporter.close()
    # Closing the last file tears the scheduler down.


def test_unbind_with_an_open_file_and_a_running_job_then_rebind() -> None:
    from libaccel import Device, Job, JobBo

    gc.collect()
    address = Path("/sys/class/accel/accel0/device").resolve().name
    try:
        _unplug_under_a_running_job(address)
        gc.collect()  # the BOs' CPU mappings hold the file open until they go
    finally:
        if not (DRIVER / address).exists():
            _write_once(DRIVER / "bind", address)
    assert wait_until(lambda: bool(accel_nodes()), 10)
    with Device.open("kernel") as dev:
        out = dev.create_bo(4096)
        s = fill_stream(out.va, 4096, 13)
        dev.submit(Job(dev.create_bo_with(s, read_only=True), len(s), [JobBo(out, write=True)]))
        assert out.wait(timeout=30).status == 0
        assert (out.array(np.int8, 4096) == 13).all()
