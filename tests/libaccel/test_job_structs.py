"""SUBMIT's C structs: laid out from a Job exactly, built once per job and reused."""

from __future__ import annotations

import numpy as np

from libaccel import Device, Job, JobBo
from libaccel.job import build_submit
from uapi.bindings import DRM_VNPU_JOB_BO_READ, DRM_VNPU_JOB_BO_WRITE, ffi
from uapi.isa import encode


def _read_u32s(address: int, count: int) -> list[int]:
    return list(ffi.cast("uint32_t *", address)[0:count])


def test_layout_of_two_jobs() -> None:
    jobs = [
        Job(7, 64, [JobBo(3), JobBo(4, read=False, write=True)], cmd_offset=8, out_syncobj=9),
        Job(5, 16, [JobBo(6, write=True)], in_syncobjs=[11, 12]),
    ]
    args = build_submit(jobs)
    assert args.submit.job_count == 2 and args.submit.job_struct_size == ffi.sizeof("struct drm_vnpu_job")
    c = ffi.cast("struct drm_vnpu_job *", args.submit.jobs)
    assert (c[0].cmd_bo_handle, c[0].cmd_offset, c[0].cmd_size, c[0].out_syncobj) == (7, 8, 64, 9)
    assert c[0].bo_count == 2 and c[0].in_syncobj_count == 0 and c[0].in_syncobjs == 0
    assert _read_u32s(c[0].bos, 4) == [3, DRM_VNPU_JOB_BO_READ, 4, DRM_VNPU_JOB_BO_WRITE]
    assert (c[1].cmd_bo_handle, c[1].cmd_size, c[1].bo_count, c[1].in_syncobj_count) == (5, 16, 1, 2)
    assert _read_u32s(c[1].bos, 2) == [6, DRM_VNPU_JOB_BO_READ | DRM_VNPU_JOB_BO_WRITE]
    assert _read_u32s(c[1].in_syncobjs, 2) == [11, 12]
    # One block: the job array, then the BO lists, then the in-syncobjs (the shim reads a job and
    # its BO list in one read).
    size = ffi.sizeof("struct drm_vnpu_job")
    assert c[0].bos == args.submit.jobs + 2 * size and c[1].bos == c[0].bos + 16
    assert c[1].in_syncobjs == c[1].bos + 8


def test_job_lists_are_frozen_so_cached_structs_cannot_go_stale() -> None:
    bos = [JobBo(3)]
    ins = [4]
    job = Job(1, 8, bos, in_syncobjs=ins)
    bos.append(JobBo(5))
    ins.append(6)
    assert job.bos == (JobBo(3),) and job.in_syncobjs == (4,)
    args = job.submit_args
    assert job.submit_args is args  # built once
    c = ffi.cast("struct drm_vnpu_job *", args.submit.jobs)
    assert c[0].bo_count == 1 and c[0].in_syncobj_count == 1


def test_a_job_submitted_again_runs_again() -> None:
    with Device.open("shim") as dev:
        out = dev.create_bo(4096)
        fence = dev.create_syncobj()
        values = []
        for value in (5, -7):
            stream = (
                encode("TENSOR", slot=0, dtype=0, va=out.va, n=1, h=1, w=1, c=64, stride_c=1)
                + encode("FILL", dst=0, value=value)
                + encode("END")
            )
            cmd = dev.create_bo_with(stream, read_only=True)
            job = Job(cmd, len(stream), [JobBo(out, read=False, write=True)], out_syncobj=fence)
            for _ in range(2):
                out.array(np.int8, 64)[:] = 0
                dev.submit(job)
                dev.wait_syncobjs([fence], timeout=30)
                values.append(int(out.array(np.int8, 64)[0]))
                assert (out.array(np.int8, 64) == value).all()
        assert values == [5, 5, -7, -7]
