"""Large BOs: contiguous pages map as long DMA segments, and a job reaches every byte of them.

shmem hands out physically contiguous pages, which the DMA layer joins into segments longer than
PCI's default 64 KiB limit; vnpu.ko declares that its device takes any segment length. On a kernel
with DMA_API_DEBUG (the debug kernel) a missing declaration is a "DMA-API: ... mapping sg segment
longer than device claims to support" report at BO_CREATE, which this test looks for.
"""

from __future__ import annotations

import numpy as np
from kernel_helpers import dmesg, fill_stream

from libaccel import Device, Job, JobBo

SIZES = (256 << 10, 4 << 20, 16 << 20)


def test_large_bos_map_and_a_job_fills_every_byte() -> None:
    before = dmesg().count("DMA-API:")
    with Device.open("kernel") as dev:
        for i, size in enumerate(SIZES):
            out = dev.create_bo(size)
            s = fill_stream(out.va, size, 11 + i)
            cmd = dev.create_bo_with(s, read_only=True)
            dev.submit(Job(cmd, len(s), [JobBo(out, write=True)]))
            assert out.wait(timeout=60).status == 0
            data = out.array(np.int8, size)
            assert int(data[0]) == 11 + i and bool((data == 11 + i).all()), f"{size} bytes"
            del data
            out.close()
            cmd.close()
    reports = [line for line in dmesg().splitlines() if "DMA-API:" in line][before:]
    reports = [line for line in reports if "debugging enabled" not in line and "preallocated" not in line]
    assert not reports, "\n".join(reports)
