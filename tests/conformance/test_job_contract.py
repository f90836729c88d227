"""The job contract of uapi/drm/vnpu_accel.h beyond single ioctls, on every backend.

What runs is the stream SUBMIT checked (a rewrite of the command BO afterwards
changes nothing), a reset fails only the hung job, closing a file cancels its
running job at once, the in-syncobj and job_struct_size limits, what a failed
job reports where, guard pages, GEM_CLOSE under a queued job, mmap's errors.

Several tests park a job on the device behind a "stall": a job that marks a
BO (so the test knows the device is running it) and then WAITs on a
semaphore the test releases. A file's jobs run one at a time in submission
order, so every job the stall's file submits after it waits behind it; to
hold back another file's job, every core runs a stall (``stall_every_core``).
"""

from __future__ import annotations

import errno
import gc
import time

import numpy as np
import pytest

from libaccel import BufferObject, Device, Job, JobBo
from libaccel.errors import AccessDenied, BadCommandStream, InvalidArgument
from uapi import bindings as b
from uapi.bindings import ffi
from uapi.isa import SPEC, encode

PAGE = 4096
INT8, INT32 = SPEC.dtypes["INT8"].code, SPEC.dtypes["INT32"].code
NOP, END = encode("NOP"), encode("END")
JOB_SIZE = ffi.sizeof("struct drm_vnpu_job")


def vector(slot: int, va: int, count: int, dtype: int = INT8) -> bytes:
    size = SPEC.dtype_by_code(dtype).size
    return encode("TENSOR", slot=slot, dtype=dtype, va=va, n=1, h=1, w=1, c=count, stride_c=size)


def fill_stream(va: int, count: int, value: int) -> bytes:
    return vector(0, va, count) + encode("FILL", dst=0, value=value) + END


def copy_stream(src_va: int, dst_va: int, count: int) -> bytes:
    return vector(0, src_va, count) + vector(1, dst_va, count) + encode("COPY", src=0, dst=1) + END


class Stall:
    """A job that sets ``marker[0] = 1``, then WAITs until the test releases it (or it times out)."""

    def __init__(self, dev: Device) -> None:
        self.dev = dev
        self.marker, self.sem = dev.create_bo(PAGE), dev.create_bo(PAGE)
        stream = (
            vector(0, self.marker.va, 1)
            + encode("FILL", dst=0, value=1)
            + vector(1, self.sem.va, 1, INT32)
            + encode("WAIT", sem=1, value=1)
            + END
        )
        bos = [JobBo(self.marker, read=False, write=True), JobBo(self.sem)]
        self.cmd = dev.create_bo_with(stream)
        self.timeout_s = dev.params.job_timeout_ms / 1000
        # The watchdog counts from the job's start, which comes after its submission: no timeout
        # of this stall can fire before ``submitted + timeout_s``.
        self.submitted = time.monotonic()
        dev.submit(Job(self.cmd, len(stream), bos))

    def running(self) -> None:
        """Return once the device runs the stall (it has set the marker)."""
        # It may start late on a busy host (its own timeout counts from its start): at least 10 s.
        deadline = time.monotonic() + max(self.timeout_s, 10)
        while True:
            # The running job writes the marker: BO_SYNC brings it to the CPU's pages (a no-op where
            # the device and the CPU share memory coherently).
            self.marker.sync(for_cpu=True)
            if self.marker.array(np.int8, 1)[0] == 1:
                return
            assert time.monotonic() < deadline, "the stall never started"
            time.sleep(0.002)

    def release(self) -> None:
        self.sem.array(np.int32, 1)[0] = 1
        self.sem.sync(for_device=True)  # the running job reads it

    def close_bos(self) -> None:
        """GEM_CLOSE the stall's BOs and drop their CPU mappings (each mapping holds the file open)."""
        for bo in (self.marker, self.sem, self.cmd):
            bo.close()
        gc.collect()


def stall_every_core(device: Device, opener) -> list[Stall]:
    """A running stall on each core: one per new file, each going to the least loaded core."""
    files = [opener() for _ in range(device.params.num_cores)]
    stalls = []
    for f in files:
        stalls.append(Stall(f))
        stalls[-1].running()
    return stalls


def padded(stream: bytes, size: int) -> bytes:
    """``stream`` with NOPs before it, ``size`` bytes in all: a well-formed stream of that size."""
    assert len(stream) <= size and (size - len(stream)) % len(NOP) == 0
    return NOP * ((size - len(stream)) // len(NOP)) + stream


def queue_copy(device: Device) -> tuple[Stall, BufferObject, BufferObject, BufferObject, bytes]:
    """A 64-byte COPY src -> dst (src holds 0..63) submitted behind a stall, so it has not run yet:
    (stall, src, dst, command BO, stream)."""
    stall = Stall(device)
    src, dst = device.create_bo(PAGE), device.create_bo(PAGE)
    src.array(np.int8, 64)[:] = np.arange(64)
    stream = copy_stream(src.va, dst.va, 64)
    cmd = device.create_bo_with(stream)
    device.submit(Job(cmd, len(stream), [JobBo(src), JobBo(dst, read=False, write=True)]))
    return stall, src, dst, cmd, stream


# --- what runs is what SUBMIT checked ---------------------------------------------------
def test_copy_rewritten_as_fill_after_submit_still_copies(device: Device) -> None:
    stall, _, dst, cmd, stream = queue_copy(device)
    cmd.write(padded(fill_stream(dst.va, 64, 0x55), len(stream)))
    stall.release()
    assert stall.marker.wait(timeout=30).status == 0
    assert dst.wait(timeout=30).status == 0
    assert (dst.array(np.int8, 64) == np.arange(64)).all()


def test_tensor_repointed_at_unlisted_bo_after_submit_leaves_it_untouched(device: Device) -> None:
    stall = Stall(device)
    dst, victim = device.create_bo(PAGE), device.create_bo(PAGE)
    stream = fill_stream(dst.va, 64, 7)
    cmd = device.create_bo_with(stream)
    device.submit(Job(cmd, len(stream), [JobBo(dst, read=False, write=True)]))
    rewritten = fill_stream(victim.va, 64, 7)  # the same stream but for the TENSOR's VA
    assert len(rewritten) == len(stream)
    cmd.write(rewritten)
    stall.release()
    assert dst.wait(timeout=30).status == 0
    assert (dst.array(np.int8, 64) == 7).all()
    assert victim.wait(timeout=30).status == 0
    assert not victim.array(np.int8, PAGE).any()


def test_bos_closed_while_their_job_is_queued_stay_alive_for_it(device: Device) -> None:
    stall, src, dst, cmd, _ = queue_copy(device)
    src.close()  # GEM_CLOSE of a listed BO and of the command BO: allowed
    cmd.close()
    stall.release()
    assert dst.wait(timeout=30).status == 0
    assert (dst.array(np.int8, 64) == np.arange(64)).all()


# --- reset and close ----------------------------------------------------------------------
def test_reset_fails_only_the_hung_job_another_files_queued_job_runs(
    short_job_timeout, device: Device, opener
) -> None:
    stalls = stall_every_core(device, opener)  # never released: they hang, one on every core
    stall = stalls[0]
    out = device.create_bo(PAGE)
    s = fill_stream(out.va, 64, 3)
    device.submit(Job(device.create_bo_with(s), len(s), [JobBo(out, read=False, write=True)]))
    for hung in stalls:
        assert hung.marker.wait(timeout=stall.timeout_s * 5 + 10).status == -errno.ETIMEDOUT
    # The innocent job had not started: it is queued again and runs once, with its own status.
    assert out.wait(timeout=stall.timeout_s * 5 + 10).status == 0
    assert (out.array(np.int8, 64) == 3).all()


def test_closing_a_file_cancels_its_running_job_at_once(device: Device, opener) -> None:
    stalls = stall_every_core(device, opener)  # never released; the job below waits behind one of them
    stall = stalls[0]
    out = device.create_bo(PAGE)
    s = fill_stream(out.va, 64, 3)
    device.submit(Job(device.create_bo_with(s), len(s), [JobBo(out, read=False, write=True)]))
    for closing in stalls:
        closing.close_bos()  # the file is released when its last mapping goes too
        closing.dev.close()
    st = out.wait(timeout=stall.timeout_s * 5 + 10)
    finished = time.monotonic()
    assert st.status == 0
    assert (out.array(np.int8, 64) == 3).all()
    # Without the cancel the job would run only after a stall's timeout, and none can fire before
    # the first stall's submission plus the job timeout: finishing earlier proves the cancel.
    first_timeout = min(x.submitted for x in stalls) + stall.timeout_s
    assert finished < first_timeout, f"finished {finished - first_timeout:.2f} s after a stall could time out"


# --- limits ----------------------------------------------------------------------------------
def _submit_with_in_syncobjs(dev: Device, handles: list[int]) -> tuple:
    dst = dev.create_bo(PAGE)
    s = fill_stream(dst.va, 64, 5)
    cmd = dev.create_bo_with(s)
    dev.submit(Job(cmd, len(s), [JobBo(dst, read=False, write=True)], in_syncobjs=handles))
    return dst, cmd


def test_in_syncobj_limit_from_the_header(device: Device) -> None:
    limit = device.params.max_in_syncobjs
    assert limit == b.DRM_VNPU_MAX_IN_SYNCOBJS
    handles = [device.create_syncobj(signaled=True) for _ in range(limit + 1)]
    dst, _ = _submit_with_in_syncobjs(device, handles[:limit])
    assert dst.wait(timeout=30).status == 0 and (dst.array(np.int8, 64) == 5).all()
    with pytest.raises(InvalidArgument) as e:
        _submit_with_in_syncobjs(device, handles)
    assert e.value.errno == errno.EINVAL


def test_in_syncobj_without_a_fence_is_einval(device: Device) -> None:
    empty = device.create_syncobj()
    with pytest.raises(InvalidArgument) as e:
        _submit_with_in_syncobjs(device, [empty])
    assert e.value.errno == errno.EINVAL


@pytest.mark.parametrize(
    "size, ok",
    [
        (JOB_SIZE + 4, False),  # not a multiple of 8
        (JOB_SIZE + 8, True),
        (b.DRM_VNPU_MAX_JOB_STRUCT_SIZE, True),
        (b.DRM_VNPU_MAX_JOB_STRUCT_SIZE + 8, False),
    ],
)
def test_job_struct_size_multiple_of_8_up_to_the_cap(device: Device, size: int, ok: bool) -> None:
    dst = device.create_bo(PAGE)
    s = fill_stream(dst.va, 64, 9)
    cmd = device.create_bo_with(s)
    bos = ffi.new("struct drm_vnpu_job_bo[1]")
    bos[0].handle, bos[0].flags = dst.handle, b.DRM_VNPU_JOB_BO_WRITE
    blob = ffi.new("char[]", size)
    job = ffi.cast("struct drm_vnpu_job *", blob)
    job.cmd_bo_handle, job.cmd_size, job.bo_count = cmd.handle, len(s), 1
    job.bos = int(ffi.cast("uintptr_t", bos))
    sub = ffi.new("struct drm_vnpu_submit *")
    sub.jobs, sub.job_count, sub.job_struct_size = int(ffi.cast("uintptr_t", blob)), 1, size
    if ok:
        device.ioctl("DRM_IOCTL_VNPU_SUBMIT", sub)
        assert dst.wait(timeout=30).status == 0 and (dst.array(np.int8, 64) == 9).all()
    else:
        with pytest.raises(InvalidArgument) as e:
            device.ioctl("DRM_IOCTL_VNPU_SUBMIT", sub)
        assert e.value.errno == errno.EINVAL


@pytest.mark.parametrize("field, value", [("dtype", 7), ("c", 0), ("n", 0)])
def test_tensor_with_unknown_dtype_or_empty_dim_is_enoexec(device: Device, field: str, value: int) -> None:
    dst = device.create_bo(PAGE)
    fields = dict(slot=0, dtype=INT8, va=dst.va, n=1, h=1, w=1, c=64, stride_c=1) | {field: value}
    s = encode("TENSOR", **fields) + encode("FILL", dst=0, value=1) + END
    with pytest.raises(BadCommandStream) as e:
        device.submit(Job(device.create_bo_with(s), len(s), [JobBo(dst, read=False, write=True)]))
    assert e.value.errno == errno.ENOEXEC


# --- where a failed job's status shows -------------------------------------------------------
def test_failed_job_signals_its_syncobj_and_reports_through_bo_wait(device: Device) -> None:
    src, dst = device.create_bo(PAGE), device.create_bo(PAGE)
    # COPY between tensors of different shapes: refused by the device at run time (-EIO).
    s = vector(0, src.va, 64) + vector(1, dst.va, 32) + encode("COPY", src=0, dst=1) + END
    out = device.create_syncobj()
    bos = [JobBo(src), JobBo(dst, read=False, write=True)]
    device.submit(Job(device.create_bo_with(s), len(s), bos, out_syncobj=out))
    device.wait_syncobjs([out], timeout=30)  # returns normally: the fence says "ended", not how
    st = dst.wait(timeout=30)
    assert st.status == -errno.EIO
    assert st.fault_va == 0  # fault_va is 0 for every status but -EFAULT


def test_a_stream_that_reaches_past_its_bo_is_refused(device: Device) -> None:
    """16 bytes from 8 before the BO's end reach into the page after it: SUBMIT refuses the stream
    (-EACCES). The device MMU's own guard page is tested from below, in the device model's tests
    (tests/device_model_tests/test_isolation.py), with streams nobody checked."""
    bo, dst = device.create_bo(PAGE), device.create_bo(PAGE)
    s = copy_stream(bo.va + PAGE - 8, dst.va, 16)
    with pytest.raises(AccessDenied) as excinfo:
        device.submit(Job(device.create_bo_with(s), len(s), [JobBo(bo), JobBo(dst, read=False, write=True)]))
    assert excinfo.value.errno == errno.EACCES


# --- mmap --------------------------------------------------------------------------------------
def test_mmap_errors(device: Device, opener) -> None:
    other = opener()
    bo = device.create_bo(2 * PAGE)
    theirs = other.create_bo(PAGE)
    with pytest.raises(AccessDenied) as e:  # another file's BO
        device.backend.mmap(theirs.mmap_offset, PAGE)
    assert e.value.errno == errno.EACCES
    for offset, size in (
        (bo.mmap_offset, 3 * PAGE),  # longer than the BO
        (bo.mmap_offset + PAGE, PAGE),  # inside the BO, not its start
        (bo.mmap_offset + 1024 * PAGE * PAGE, PAGE),  # no BO there
    ):
        with pytest.raises(InvalidArgument) as e:
            device.backend.mmap(offset, size)
        assert e.value.errno == errno.EINVAL, (offset, size)
    view = device.backend.mmap(bo.mmap_offset, PAGE)  # a prefix of a BO is fine
    view[0] = 1
    assert bo.array(np.int8, 1)[0] == 1
