"""Conformance of the vnpu ioctl ABI (uapi/drm/vnpu_accel.h): every ioctl's success and error paths.

Written against the uapi only (raw structs through Device.ioctl), so the same
tests hold vnpu.ko (``--backend kernel``) and the shim to the header's contract.
"""

from __future__ import annotations

import errno
import time

import numpy as np
import pytest

from libaccel import Device, Job, JobBo, deadline_after, monotonic_ns
from libaccel.errors import (
    AccessDenied,
    BadCommandStream,
    DeviceClosed,
    InvalidArgument,
    NoSuchObject,
    Timeout,
    TooBig,
)
from libaccel.job import build_submit
from uapi import bindings as b
from uapi import isa
from uapi.bindings import ffi

PAGE = 4096
JOB_SIZE = ffi.sizeof("struct drm_vnpu_job")
INT8, INT32 = isa.SPEC.dtypes["INT8"].code, isa.SPEC.dtypes["INT32"].code


# --- stream helpers -----------------------------------------------------------
def tensor(slot: int, va: int, n: int, dtype: int = INT8) -> isa.Instruction:
    """A dense [1, 1, 1, n] tensor at ``va``."""
    size = 4 if dtype == INT32 else 1
    return isa.Instruction(
        "TENSOR",
        dict(slot=slot, dtype=dtype, va=va, n=1, h=1, w=1, c=n, stride_n=n * size, stride_h=n * size,
             stride_w=n * size, stride_c=size, zero_point=0),
    )  # fmt: skip


END = isa.Instruction("END", {})


def copy_stream(src_va: int, dst_va: int, n: int, dst_n: int | None = None) -> bytes:
    dst_tensor = tensor(1, dst_va, n if dst_n is None else dst_n)
    return isa.assemble([tensor(0, src_va, n), dst_tensor, isa.Instruction("COPY", dict(src=0, dst=1)), END])


def wait_stream(sem_va: int, value: int, dst_va: int) -> bytes:
    """Waits for the INT32 at sem_va to equal value, then fills 16 bytes at dst_va with 7."""
    return isa.assemble(
        [
            tensor(0, sem_va, 1, INT32),
            isa.Instruction("WAIT", dict(sem=0, value=value)),
            tensor(1, dst_va, 16),
            isa.Instruction("FILL", dict(dst=1, value=7)),
            END,
        ]
    )


def raw_job(cmd: int, cmd_size: int, bos: list[tuple[int, int]], **fields: int):
    """(struct drm_vnpu_job *, keepalive) with every field under the test's control."""
    arr = ffi.new("struct drm_vnpu_job_bo[]", max(len(bos), 1))
    for i, (h, fl) in enumerate(bos):
        arr[i].handle, arr[i].flags = h, fl
    job = ffi.new("struct drm_vnpu_job *")
    job.cmd_bo_handle, job.cmd_size, job.bo_count = cmd, cmd_size, len(bos)
    job.bos = int(ffi.cast("uintptr_t", arr))
    for k, v in fields.items():
        setattr(job, k, v)
    return job, arr


def submit_raw(
    dev: Device, job, count: int = 1, struct_size: int = JOB_SIZE, tail: bytes = b"", **fields: int
):
    """Submit ``count`` copies of ``job`` laid out with ``struct_size`` bytes each."""
    blob = bytearray(struct_size * count)
    for i in range(count):
        body = bytes(ffi.buffer(job))[: min(JOB_SIZE, struct_size)]
        blob[i * struct_size : i * struct_size + len(body)] = body
        if tail:
            blob[i * struct_size + JOB_SIZE : i * struct_size + JOB_SIZE + len(tail)] = tail
    mem = ffi.new("char[]", bytes(blob) or b"\0")
    s = ffi.new("struct drm_vnpu_submit *")
    s.jobs, s.job_count, s.job_struct_size = int(ffi.cast("uintptr_t", mem)), count, struct_size
    for k, v in fields.items():
        setattr(s, k, v)
    dev.ioctl("DRM_IOCTL_VNPU_SUBMIT", s)


R, W = b.DRM_VNPU_JOB_BO_READ, b.DRM_VNPU_JOB_BO_WRITE


@pytest.fixture
def copy_setup(device: Device):
    """src (64 bytes 0..63), dst, and a command BO holding a valid COPY stream."""
    src, dst = device.create_bo(PAGE), device.create_bo(PAGE)
    src.array(np.int8, 64)[:] = np.arange(64)
    stream = copy_stream(src.va, dst.va, 64)
    cmd = device.create_bo_with(stream)
    return src, dst, cmd, stream


# --- GET_PARAM -----------------------------------------------------------------
def test_get_param_every_parameter(device: Device) -> None:
    p = device.params
    assert p.device_id == 0x0001
    assert p.isa_version == isa.SPEC.version
    assert p.fw_version != 0
    assert p.va_size > b.DRM_VNPU_VA_START
    assert p.max_job_size >= PAGE and p.max_job_bos >= 1 and p.max_bo_size >= PAGE
    assert (
        p.capabilities
        & ~(b.DRM_VNPU_CAP_READ_ONLY_BO | b.DRM_VNPU_CAP_PER_CHANNEL_QUANT | b.DRM_VNPU_CAP_RESET_RECOVERY)
        == 0
    )
    assert p.job_timeout_ms > 0


def test_fw_build_id_names_the_booted_image(device: Device) -> None:
    from firmware_tools.image import DEFAULT_IMAGE_PATH
    from uapi.firmware_format import parse_image

    # Both backends boot the committed image: its digest's first 8 bytes, big-endian.
    assert device.params.fw_build_id == parse_image(DEFAULT_IMAGE_PATH.read_bytes()).build_id != 0


def test_get_param_unknown_and_pad(device: Device) -> None:
    a = ffi.new("struct drm_vnpu_get_param *")
    a.param = 1000
    with pytest.raises(InvalidArgument) as excinfo:
        device.ioctl("DRM_IOCTL_VNPU_GET_PARAM", a)
    assert excinfo.value.errno == errno.EINVAL
    a.param, a.pad = b.DRM_VNPU_PARAM_DEVICE_ID, 1
    with pytest.raises(InvalidArgument) as excinfo:
        device.ioctl("DRM_IOCTL_VNPU_GET_PARAM", a)
    assert excinfo.value.errno == errno.EINVAL


# --- BO_CREATE / BO_INFO / GEM_CLOSE / mmap ------------------------------------
def test_bo_create_rounds_maps_and_zero_fills(device: Device) -> None:
    a = device.create_bo(100)
    c = device.create_bo(3 * PAGE + 1)
    assert a.size == PAGE and c.size == 4 * PAGE
    assert a.handle != c.handle
    for bo in (a, c):
        assert b.DRM_VNPU_VA_START <= bo.va and bo.va + bo.size <= device.params.va_size
        assert bo.va % PAGE == 0
        assert not bo.array(np.uint8, bo.size).any()
    assert a.va + a.size <= c.va or c.va + c.size <= a.va
    a.array(np.uint8, 4)[:] = [1, 2, 3, 4]
    assert a.read(4) == b"\1\2\3\4"


def test_bo_create_errors(device: Device) -> None:
    def create(**fields: int) -> None:
        arg = ffi.new("struct drm_vnpu_bo_create *")
        arg.size = PAGE
        for k, v in fields.items():
            setattr(arg, k, v)
        device.ioctl("DRM_IOCTL_VNPU_BO_CREATE", arg)

    with pytest.raises(InvalidArgument) as excinfo:
        create(size=0)
    assert excinfo.value.errno == errno.EINVAL
    with pytest.raises(TooBig) as excinfo:
        create(size=device.params.max_bo_size + 1)
    assert excinfo.value.errno == errno.E2BIG
    with pytest.raises(InvalidArgument) as excinfo:
        create(flags=1 << 5)
    assert excinfo.value.errno == errno.EINVAL
    for out_field in ("handle", "mmap_offset", "va"):
        with pytest.raises(InvalidArgument) as excinfo:
            create(**{out_field: 1})
        assert excinfo.value.errno == errno.EINVAL


def test_bo_info_and_close(device: Device) -> None:
    bo = device.create_bo(PAGE, read_only=True)
    info = device.bo_info(bo.handle)
    assert (info.size, info.flags, info.mmap_offset, info.va, info.pad2) == (
        bo.size, b.DRM_VNPU_BO_DEVICE_READ_ONLY, bo.mmap_offset, bo.va, 0)  # fmt: skip
    a = ffi.new("struct drm_vnpu_bo_info *")
    a.handle, a.pad = bo.handle, 1
    with pytest.raises(InvalidArgument) as excinfo:
        device.ioctl("DRM_IOCTL_VNPU_BO_INFO", a)
    assert excinfo.value.errno == errno.EINVAL
    with pytest.raises(NoSuchObject) as excinfo:
        device.bo_info(0xDEAD)
    assert excinfo.value.errno == errno.ENOENT
    bo.close()
    with pytest.raises(NoSuchObject) as excinfo:
        device.bo_info(bo.handle)
    assert excinfo.value.errno == errno.ENOENT
    c = ffi.new("struct drm_gem_close *")
    c.handle = bo.handle
    with pytest.raises(InvalidArgument) as excinfo:  # the core GEM_CLOSE's errno for a bad handle
        device.ioctl("DRM_IOCTL_GEM_CLOSE", c)
    assert excinfo.value.errno == errno.EINVAL


def test_bos_are_private_to_their_file(device: Device, opener) -> None:
    other = opener()
    bo = device.create_bo(PAGE)
    with pytest.raises(NoSuchObject) as excinfo:  # "other" has no BOs: handles are per file
        other.bo_info(bo.handle)
    assert excinfo.value.errno == errno.ENOENT


# --- BO_WAIT -------------------------------------------------------------------
def test_bo_wait_idle_polls_successfully(device: Device) -> None:
    bo = device.create_bo(PAGE)
    assert bo.wait(deadline_ns=0).status == 0  # a deadline in the past polls


def test_bo_wait_errors(device: Device) -> None:
    bo = device.create_bo(PAGE)
    for field in ("pad", "pad2", "job_status", "fault_va"):
        a = ffi.new("struct drm_vnpu_bo_wait *")
        a.handle, a.timeout_ns = bo.handle, deadline_after(1)
        setattr(a, field, 1)
        with pytest.raises(InvalidArgument) as excinfo:
            device.ioctl("DRM_IOCTL_VNPU_BO_WAIT", a)
        assert excinfo.value.errno == errno.EINVAL
    a = ffi.new("struct drm_vnpu_bo_wait *")
    a.handle = 0xBAD
    with pytest.raises(NoSuchObject) as excinfo:
        device.ioctl("DRM_IOCTL_VNPU_BO_WAIT", a)
    assert excinfo.value.errno == errno.ENOENT


def test_bo_sync_directions_and_errors(device: Device) -> None:
    """BO_SYNC takes FOR_CPU and/or FOR_DEVICE on a BO of this file, nothing else. The CPU's bytes
    survive a round trip, FOR_DEVICE first (FOR_CPU first would bring the device's view back: under
    bounce buffering, the zeros of a BO no job has written)."""
    bo = device.create_bo(PAGE)
    bo.array(np.int8, 4)[:] = [1, 2, 3, 4]
    for flags in (
        b.DRM_VNPU_BO_SYNC_FOR_DEVICE,
        b.DRM_VNPU_BO_SYNC_FOR_CPU,
        b.DRM_VNPU_BO_SYNC_FLAGS_MASK,
    ):
        a = ffi.new("struct drm_vnpu_bo_sync *")
        a.handle, a.flags = bo.handle, flags
        device.ioctl("DRM_IOCTL_VNPU_BO_SYNC", a)
    assert list(bo.array(np.int8, 4)) == [1, 2, 3, 4]
    for flags in (0, b.DRM_VNPU_BO_SYNC_FLAGS_MASK + 1, 1 << 31):
        a = ffi.new("struct drm_vnpu_bo_sync *")
        a.handle, a.flags = bo.handle, flags
        with pytest.raises(InvalidArgument) as excinfo:
            device.ioctl("DRM_IOCTL_VNPU_BO_SYNC", a)
        assert excinfo.value.errno == errno.EINVAL
    a = ffi.new("struct drm_vnpu_bo_sync *")
    a.handle, a.flags = 0xBAD, b.DRM_VNPU_BO_SYNC_FOR_CPU
    with pytest.raises(NoSuchObject) as excinfo:
        device.ioctl("DRM_IOCTL_VNPU_BO_SYNC", a)
    assert excinfo.value.errno == errno.ENOENT


@pytest.mark.parametrize(
    ("offset", "size", "ok"),
    [
        (0, 0, True),  # the whole BO
        (100, 8, True),
        (PAGE - 1, 1, True),
        (0, PAGE, True),
        (PAGE - 8, 0, True),  # to the end
        (PAGE, 0, False),  # starts at the end
        (0, PAGE + 1, False),
        (8, PAGE, False),
        (1 << 63, 8, False),
        (8, (1 << 64) - 8, False),  # offset + size wraps
    ],
)
def test_bo_sync_range_lies_inside_the_bo(device: Device, offset: int, size: int, ok: bool) -> None:
    """BO_SYNC syncs ``offset .. offset + size`` (size 0: to the end); a range outside is -EINVAL."""
    bo = device.create_bo(PAGE)
    a = ffi.new("struct drm_vnpu_bo_sync *")
    a.handle, a.flags, a.offset, a.size = bo.handle, b.DRM_VNPU_BO_SYNC_FLAGS_MASK, offset, size
    if ok:
        device.ioctl("DRM_IOCTL_VNPU_BO_SYNC", a)
        return
    with pytest.raises(InvalidArgument) as excinfo:
        device.ioctl("DRM_IOCTL_VNPU_BO_SYNC", a)
    assert excinfo.value.errno == errno.EINVAL


def test_bo_wait_expired_timeout_then_completes(device: Device) -> None:
    sem, dst = device.create_bo(PAGE), device.create_bo(PAGE)
    stream = wait_stream(sem.va, 5, dst.va)
    cmd = device.create_bo_with(stream)
    device.submit(Job(cmd, len(stream), [JobBo(sem), JobBo(dst, read=False, write=True)]))
    with pytest.raises(Timeout) as excinfo:
        dst.wait(deadline_ns=monotonic_ns())
    assert excinfo.value.errno == errno.ETIME
    with pytest.raises(Timeout) as excinfo:
        dst.wait(timeout=0.05)
    assert excinfo.value.errno == errno.ETIME
    sem.array(np.int32, 1)[0] = 5  # release the device's WAIT from the CPU
    sem.sync(for_device=True)
    assert dst.wait(timeout=10).status == 0
    assert (dst.array(np.int8, 16) == 7).all()


def test_each_blocked_waiter_wakes_with_its_own_job(device: Device) -> None:
    """SYNCOBJ_WAITs and BO_WAITs blocked in other threads return when their own job completes,
    and only then; a WAIT_FOR_SUBMIT wait on a syncobj no job has yet returns once a job that
    signals it is submitted and done."""
    import threading

    sems = [device.create_bo(PAGE) for _ in range(2)]
    dsts = [device.create_bo(PAGE) for _ in range(2)]
    outs = [device.create_syncobj() for _ in range(2)]
    late = device.create_syncobj()
    for sem, dst, out in zip(sems, dsts, outs, strict=True):
        stream = wait_stream(sem.va, 5, dst.va)
        cmd = device.create_bo_with(stream)
        device.submit(
            Job(cmd, len(stream), [JobBo(sem), JobBo(dst, read=False, write=True)], out_syncobj=out)
        )
    results: dict[tuple[str, int], object] = {}

    started: list[threading.Event] = []

    def waiter(key: tuple[str, int], wait: object) -> threading.Thread:
        entered = threading.Event()
        started.append(entered)

        def run() -> None:
            entered.set()
            try:
                results[key] = wait()  # type: ignore[operator]
            except Exception as e:  # noqa: BLE001 - the test reports what the wait raised
                results[key] = e

        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t

    threads = {}
    for i in range(2):
        # (wait_syncobjs' return is an index only for wait_all=False: the wait returning is the result)
        threads["sync", i] = waiter(
            ("sync", i), lambda i=i: device.wait_syncobjs([outs[i]], timeout=20) and 0
        )
        threads["bo", i] = waiter(("bo", i), lambda i=i: dsts[i].wait(timeout=20).status)
    threads["submit", 0] = waiter(
        ("submit", 0), lambda: device.wait_syncobjs([late], timeout=20, wait_for_submit=True) and 0
    )
    assert all(e.wait(10) for e in started), "a waiter thread never started"
    time.sleep(0.2)  # room for a wait that does not block to return (it would show below)
    assert results == {} and all(t.is_alive() for t in threads.values()), results  # every one blocked
    for i in range(2):  # release the jobs one by one: the first job's waiters return, the second's wait
        sems[i].array(np.int32, 1)[0] = 5
        sems[i].sync(for_device=True)
        threads["sync", i].join(10)
        threads["bo", i].join(10)
        assert results.get(("sync", i)) == 0 and results.get(("bo", i)) == 0, results
        if i == 0:
            assert ("sync", 1) not in results and ("bo", 1) not in results  # job 1 still waits
    assert ("submit", 0) not in results
    stream = isa.encode("END")
    cmd = device.create_bo_with(stream, read_only=True)
    device.submit(Job(cmd, len(stream), [JobBo(dsts[0])], out_syncobj=late))
    threads["submit", 0].join(10)
    assert results.get(("submit", 0)) == 0, results


# --- SUBMIT: success, ordering, fences -----------------------------------------------
def test_submit_copy_and_syncobj(device: Device, copy_setup) -> None:
    src, dst, cmd, stream = copy_setup
    out = device.create_syncobj()
    device.submit(Job(cmd, len(stream), [JobBo(src), JobBo(dst, read=False, write=True)], out_syncobj=out))
    device.wait_syncobjs([out], timeout=10)
    st = dst.wait(timeout=10)
    assert st.status == 0 and st.fault_va == 0
    assert (dst.array(np.int8, 64) == np.arange(64)).all()
    device.destroy_syncobj(out)


def test_submit_chain_in_order_with_in_syncobjs(device: Device) -> None:
    a, bb, c = (device.create_bo(PAGE) for _ in range(3))
    a.array(np.int8, 64)[:] = -np.arange(64)
    s1 = copy_stream(a.va, bb.va, 64)
    s2 = copy_stream(bb.va, c.va, 64)
    cmd1, cmd2 = device.create_bo_with(s1), device.create_bo_with(s2)
    f1, f2 = device.create_syncobj(), device.create_syncobj()
    device.submit(Job(cmd1, len(s1), [JobBo(a), JobBo(bb, read=False, write=True)], out_syncobj=f1))
    device.submit(
        Job(cmd2, len(s2), [JobBo(bb), JobBo(c, read=False, write=True)], in_syncobjs=[f1], out_syncobj=f2)
    )
    device.wait_syncobjs([f1, f2], timeout=10)
    assert (c.array(np.int8, 64) == -np.arange(64)).all()


def test_submit_several_jobs_run_in_order(device: Device) -> None:
    # One SUBMIT, two jobs: the second reads what the first writes (BO dependency).
    a, bb, c = (device.create_bo(PAGE) for _ in range(3))
    a.array(np.int8, 64)[:] = np.arange(64) - 32
    s1, s2 = copy_stream(a.va, bb.va, 64), copy_stream(bb.va, c.va, 64)
    cmd1, cmd2 = device.create_bo_with(s1), device.create_bo_with(s2)
    device.submit(
        [
            Job(cmd1, len(s1), [JobBo(a), JobBo(bb, read=False, write=True)]),
            Job(cmd2, len(s2), [JobBo(bb), JobBo(c, read=False, write=True)]),
        ]
    )
    assert c.wait(timeout=10).status == 0
    assert (c.array(np.int8, 64) == np.arange(64) - 32).all()


def test_submit_with_larger_job_struct_and_zero_tail(device: Device, copy_setup) -> None:
    src, dst, cmd, stream = copy_setup
    job, keep = raw_job(cmd.handle, len(stream), [(src.handle, R), (dst.handle, W)])
    submit_raw(device, job, struct_size=JOB_SIZE + 16)
    assert dst.wait(timeout=10).status == 0
    assert (dst.array(np.int8, 64) == np.arange(64)).all()
    del keep


def test_submit_job_struct_size_errors(device: Device, copy_setup) -> None:
    src, dst, cmd, stream = copy_setup
    job, keep = raw_job(cmd.handle, len(stream), [(src.handle, R), (dst.handle, W)])
    with pytest.raises(InvalidArgument) as excinfo:
        submit_raw(device, job, struct_size=JOB_SIZE - 8)
    assert excinfo.value.errno == errno.EINVAL
    with pytest.raises(InvalidArgument) as excinfo:
        submit_raw(device, job, struct_size=JOB_SIZE + 16, tail=b"\0\0\0\0\0\0\0\0\1")
    assert excinfo.value.errno == errno.EINVAL
    del keep


def test_submit_header_errors(device: Device, copy_setup) -> None:
    src, dst, cmd, stream = copy_setup
    job, keep = raw_job(cmd.handle, len(stream), [(src.handle, R), (dst.handle, W)])
    for fields in ({"flags": 1}, {"pad": 1}):
        with pytest.raises(InvalidArgument) as excinfo:
            submit_raw(device, job, **fields)
        assert excinfo.value.errno == errno.EINVAL
    with pytest.raises(InvalidArgument) as excinfo:
        submit_raw(device, job, count=0)
    assert excinfo.value.errno == errno.EINVAL
    with pytest.raises(InvalidArgument) as excinfo:
        submit_raw(device, job, count=b.DRM_VNPU_MAX_JOBS_PER_SUBMIT + 1)
    assert excinfo.value.errno == errno.EINVAL
    del keep


@pytest.mark.parametrize(
    "fields, bos, exc, err",
    [
        ({"flags": 1}, None, InvalidArgument, errno.EINVAL),
        ({"pad": 1}, None, InvalidArgument, errno.EINVAL),
        ({"cmd_size": 0}, None, InvalidArgument, errno.EINVAL),
        ({"cmd_size": 12}, None, InvalidArgument, errno.EINVAL),
        ({"cmd_offset": 4}, None, InvalidArgument, errno.EINVAL),
        ({"cmd_offset": PAGE}, None, InvalidArgument, errno.EINVAL),  # range outside the BO
        ({"cmd_bo_handle": 0xBAD}, None, NoSuchObject, errno.ENOENT),
        ({"out_syncobj": 0xBAD}, None, NoSuchObject, errno.ENOENT),
        ({}, [], InvalidArgument, errno.EINVAL),  # bo_count 0
        ({}, "bad-handle", NoSuchObject, errno.ENOENT),
        ({}, "twice", InvalidArgument, errno.EINVAL),
        ({}, "no-flags", InvalidArgument, errno.EINVAL),
        ({}, "unknown-flags", InvalidArgument, errno.EINVAL),
    ],
)
def test_submit_job_errors(device: Device, copy_setup, fields, bos, exc, err) -> None:
    src, dst, cmd, stream = copy_setup
    good = [(src.handle, R), (dst.handle, W)]
    bo_list = (
        {
            None: good,
            "bad-handle": [*good, (0xBAD, R)],
            "twice": [*good, (src.handle, R)],
            "no-flags": [(src.handle, 0), (dst.handle, W)],
            "unknown-flags": [(src.handle, R | 8), (dst.handle, W)],
        }.get(bos, bos)
        if not isinstance(bos, list)
        else bos
    )
    job, keep = raw_job(cmd.handle, len(stream), bo_list)
    for k, v in fields.items():
        setattr(job, k, v)
    with pytest.raises(exc) as excinfo:
        submit_raw(device, job)
    assert excinfo.value.errno == err
    del keep
    # Nothing was queued: dst is untouched.
    assert dst.wait(deadline_ns=0).status == 0 and not dst.array(np.int8, 64).any()


def test_submit_too_many_bos_and_unknown_in_syncobj(device: Device, copy_setup) -> None:
    src, dst, cmd, stream = copy_setup
    job, keep = raw_job(cmd.handle, len(stream), [(src.handle, R), (dst.handle, W)])
    job.bo_count = device.params.max_job_bos + 1
    with pytest.raises(InvalidArgument) as excinfo:
        submit_raw(device, job)
    assert excinfo.value.errno == errno.EINVAL
    job.bo_count = 2
    ins = ffi.new("uint32_t[]", [0xBAD])
    job.in_syncobjs, job.in_syncobj_count = int(ffi.cast("uintptr_t", ins)), 1
    with pytest.raises(NoSuchObject) as excinfo:
        submit_raw(device, job)
    assert excinfo.value.errno == errno.ENOENT
    del keep


def test_submit_is_all_or_nothing(device: Device, copy_setup) -> None:
    src, dst, cmd, stream = copy_setup
    bad = copy_stream(src.va, dst.va + PAGE, 64)  # writes outside dst
    bad_cmd = device.create_bo_with(bad)
    args = build_submit(
        [
            Job(cmd, len(stream), [JobBo(src), JobBo(dst, read=False, write=True)]),
            Job(bad_cmd, len(bad), [JobBo(src), JobBo(dst, read=False, write=True)]),
        ]
    )
    with pytest.raises(AccessDenied) as excinfo:
        device.ioctl("DRM_IOCTL_VNPU_SUBMIT", args.submit)
    assert excinfo.value.errno == errno.EACCES
    assert dst.wait(deadline_ns=0).status == 0 and not dst.array(np.int8, 64).any()


# --- SUBMIT: command-stream checks -----------------------------------------------------
def test_stream_outside_listed_bos_is_eacces(device: Device, copy_setup) -> None:
    src, dst, cmd, _ = copy_setup
    unlisted = device.create_bo(PAGE)
    cases = [
        copy_stream(src.va, unlisted.va, 64),  # writes a BO of the file that is not listed
        copy_stream(src.va, dst.va + PAGE - 32, 64),  # straddles the end of dst
        copy_stream(src.va, 0x1000, 64),  # below DRM_VNPU_VA_START
    ]
    for s in cases:
        c = device.create_bo_with(s)
        with pytest.raises(AccessDenied) as excinfo:
            device.submit(Job(c, len(s), [JobBo(src), JobBo(dst, read=False, write=True)]))
        assert excinfo.value.errno == errno.EACCES


def test_stream_direction_is_checked(device: Device, copy_setup) -> None:
    src, dst, cmd, stream = copy_setup
    with pytest.raises(AccessDenied) as excinfo:  # dst listed read-only, but written
        device.submit(Job(cmd, len(stream), [JobBo(src), JobBo(dst)]))
    assert excinfo.value.errno == errno.EACCES
    with pytest.raises(AccessDenied) as excinfo:  # src listed write-only, but read
        device.submit(
            Job(cmd, len(stream), [JobBo(src, read=False, write=True), JobBo(dst, read=False, write=True)])
        )
    assert excinfo.value.errno == errno.EACCES


def test_write_to_read_only_bo_is_eacces(device: Device) -> None:
    ro, dst = device.create_bo(PAGE, read_only=True), device.create_bo(PAGE)
    s = copy_stream(dst.va, ro.va, 64)
    cmd = device.create_bo_with(s)
    with pytest.raises(AccessDenied) as excinfo:
        device.submit(Job(cmd, len(s), [JobBo(dst), JobBo(ro, read=False, write=True)]))
    assert excinfo.value.errno == errno.EACCES


@pytest.mark.parametrize(
    "mangle",
    [
        lambda s: s[:-8],  # no END
        lambda s: s + isa.encode("NOP"),  # bytes after END
        lambda s: b"\xee\0\x08\0" + b"\0" * 4 + s,  # unknown opcode
        lambda s: s[:1] + b"\1" + s[2:],  # reserved header bits
        lambda s: isa.assemble([isa.Instruction("COPY", dict(src=0, dst=1)), END]),  # slot used before TENSOR
    ],
)
def test_malformed_stream_is_enoexec(device: Device, copy_setup, mangle) -> None:
    src, dst, _, stream = copy_setup
    bad = mangle(stream)
    cmd = device.create_bo_with(bad)
    with pytest.raises(BadCommandStream) as excinfo:
        device.submit(Job(cmd, len(bad), [JobBo(src), JobBo(dst, read=False, write=True)]))
    assert excinfo.value.errno == errno.ENOEXEC


# --- job status --------------------------------------------------------------------
def test_runtime_bad_operand_reports_eio_through_bo_wait(device: Device, copy_setup) -> None:
    src, dst, _, _ = copy_setup
    s = copy_stream(src.va, dst.va, 64, dst_n=32)  # in bounds, but shapes differ: the device refuses
    cmd = device.create_bo_with(s)
    out = device.create_syncobj()
    device.submit(Job(cmd, len(s), [JobBo(src), JobBo(dst, read=False, write=True)], out_syncobj=out))
    device.wait_syncobjs([out], timeout=10)
    st = dst.wait(timeout=10)
    assert st.status == -errno.EIO
    assert src.wait(timeout=10).status == 0  # only BOs the job wrote carry its status
    # The next good job on the same BO clears it.
    good = copy_stream(src.va, dst.va, 64)
    cmd2 = device.create_bo_with(good)
    device.submit(Job(cmd2, len(good), [JobBo(src), JobBo(dst, read=False, write=True)]))
    assert dst.wait(timeout=10).status == 0


def test_mmu_fault_reports_efault_and_va(device: Device, mmu_fault_next_job) -> None:
    """A job the device faults (injected: -EFAULT at the job's command-stream VA, which lies in no BO
    of the file) ends with -EFAULT and that VA on the BOs it writes, and nowhere else."""
    src, dst = device.create_bo(PAGE), device.create_bo(PAGE)
    s = copy_stream(src.va, dst.va, 64)
    device.submit(Job(device.create_bo_with(s), len(s), [JobBo(src), JobBo(dst, read=False, write=True)]))
    st = dst.wait(timeout=30)
    assert st.status == -errno.EFAULT
    assert st.fault_va and not any(bo.va <= st.fault_va < bo.va + bo.size for bo in (src, dst))
    assert src.wait(timeout=10).status == 0  # only BOs the job wrote carry its status


def test_hung_job_times_out_and_device_recovers(short_job_timeout, device: Device, copy_setup) -> None:
    src, dst, cmd, stream = copy_setup
    sem, out = device.create_bo(PAGE), device.create_bo(PAGE)
    hang = wait_stream(sem.va, 1, out.va)  # nobody ever writes 1
    hcmd = device.create_bo_with(hang)
    t0 = time.monotonic()
    device.submit(Job(hcmd, len(hang), [JobBo(sem), JobBo(out, read=False, write=True)]))
    timeout_s = device.params.job_timeout_ms / 1000
    st = out.wait(timeout=timeout_s * 5 + 10)
    assert st.status == -errno.ETIMEDOUT
    assert time.monotonic() - t0 >= timeout_s * 0.9
    # The device was reset and serves the next job.
    device.submit(Job(cmd, len(stream), [JobBo(src), JobBo(dst, read=False, write=True)]))
    assert dst.wait(timeout=10).status == 0
    assert (dst.array(np.int8, 64) == np.arange(64)).all()


# --- syncobjs ----------------------------------------------------------------------
def test_syncobj_create_destroy_wait(device: Device) -> None:
    s = device.create_syncobj(signaled=True)
    assert device.wait_syncobjs([s], deadline_ns=0) == 0
    u = device.create_syncobj()
    with pytest.raises(InvalidArgument) as excinfo:  # no fence yet, and no WAIT_FOR_SUBMIT
        device.wait_syncobjs([u], timeout=0)
    assert excinfo.value.errno == errno.EINVAL
    with pytest.raises(Timeout) as excinfo:
        device.wait_syncobjs([u], deadline_ns=monotonic_ns(), wait_for_submit=True)
    assert excinfo.value.errno == errno.ETIME
    assert device.wait_syncobjs([u, s], timeout=1, wait_all=False, wait_for_submit=True) == 1
    with pytest.raises(NoSuchObject) as excinfo:
        device.wait_syncobjs([0xBAD], timeout=0)
    assert excinfo.value.errno == errno.ENOENT
    device.destroy_syncobj(s)
    with pytest.raises(InvalidArgument) as excinfo:
        device.destroy_syncobj(s)
    assert excinfo.value.errno == errno.EINVAL
    a = ffi.new("struct drm_syncobj_create *")
    a.flags = 1 << 7
    with pytest.raises(InvalidArgument) as excinfo:
        device.ioctl("DRM_IOCTL_SYNCOBJ_CREATE", a)
    assert excinfo.value.errno == errno.EINVAL
    d = ffi.new("struct drm_syncobj_destroy *")
    d.handle, d.pad = u, 1
    with pytest.raises(InvalidArgument) as excinfo:
        device.ioctl("DRM_IOCTL_SYNCOBJ_DESTROY", d)
    assert excinfo.value.errno == errno.EINVAL


def test_syncobj_wait_expired_timeout_on_pending_job(device: Device) -> None:
    sem, dst = device.create_bo(PAGE), device.create_bo(PAGE)
    s = wait_stream(sem.va, 3, dst.va)
    cmd = device.create_bo_with(s)
    out = device.create_syncobj()
    device.submit(Job(cmd, len(s), [JobBo(sem), JobBo(dst, read=False, write=True)], out_syncobj=out))
    with pytest.raises(Timeout) as excinfo:
        device.wait_syncobjs([out], deadline_ns=0)
    assert excinfo.value.errno == errno.ETIME
    sem.array(np.int32, 1)[0] = 3
    sem.sync(for_device=True)
    device.wait_syncobjs([out], timeout=10)


# --- closed device, other files -------------------------------------------------------
def test_closed_device_refuses_every_call(device: Device, opener) -> None:
    dev = opener()
    bo = dev.create_bo(PAGE)
    dev.close()
    assert dev.closed
    for call in (
        lambda: dev.get_param("device_id"),
        lambda: dev.create_bo(PAGE),
        lambda: dev.bo_info(bo.handle),
        lambda: dev.create_syncobj(),
    ):
        with pytest.raises(DeviceClosed) as excinfo:
            call()
        assert excinfo.value.errno == errno.EBADF
    # Other files of the device are unaffected.
    assert device.get_param("device_id") == 0x0001


def test_files_have_separate_address_spaces(device: Device, opener) -> None:
    other = opener()
    mine, theirs = device.create_bo(PAGE), other.create_bo(PAGE)
    mine.array(np.int8, 64)[:] = 1
    # A stream of "other" naming my BO's VA is outside *its* listed BOs.
    s = (
        copy_stream(theirs.va, mine.va, 64)
        if mine.va != theirs.va
        else copy_stream(theirs.va, mine.va + PAGE, 64)
    )
    cmd = other.create_bo_with(s)
    with pytest.raises(AccessDenied) as excinfo:
        other.submit(Job(cmd, len(s), [JobBo(theirs)]))
    assert excinfo.value.errno == errno.EACCES
