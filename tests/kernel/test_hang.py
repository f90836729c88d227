"""A hung job (WAIT on a semaphore that never changes) times out, the device resets, later jobs run."""

from __future__ import annotations

import errno
import time

import numpy as np
import pytest
from kernel_helpers import fill_stream, hang_stream, job_timeout_files


def test_hang_times_out_and_device_recovers(short_job_timeout, dev) -> None:
    from libaccel import Job, JobBo

    timeout_s = dev.params.job_timeout_ms / 1000
    sem = dev.create_bo(4096)
    hung_out = dev.create_bo(4096)
    stream = hang_stream(sem.va, hung_out.va)
    cmd = dev.create_bo_with(stream, read_only=True)
    dev.submit(Job(cmd, len(stream), [JobBo(sem), JobBo(hung_out, write=True)]))

    # Another file's job queued behind the hang must still complete after the reset.
    from libaccel import Device

    with Device.open("kernel") as other:
        out2 = other.create_bo(4096)
        s2 = fill_stream(out2.va, 4096, 3)
        other.submit(Job(other.create_bo_with(s2, read_only=True), len(s2), [JobBo(out2, write=True)]))

        status = hung_out.wait(timeout=timeout_s + 30)
        assert status.status == -errno.ETIMEDOUT
        assert hung_out.array(np.int8, 1)[0] == 0  # the FILL after the WAIT never ran

        st2 = out2.wait(timeout=timeout_s + 30)
        # Queued behind the hung job, it had not started: the reset queues it again and it runs.
        assert st2.status == 0
        assert (out2.array(np.int8, 4096) == 3).all()

    # After the reset, new jobs on the same file succeed.
    out = dev.create_bo(4096)
    s = fill_stream(out.va, 4096, 9)
    dev.submit(Job(dev.create_bo_with(s, read_only=True), len(s), [JobBo(out, write=True)]))
    assert out.wait(timeout=30).status == 0
    assert (out.array(np.int8, 4096) == 9).all()


# The reset, the re-queue and, under TCG, a scheduler tick or two (qemu_tests.fault_inject's margin).
MARGIN_S = 1.5


def _ended(bo, slice_s: float) -> bool:
    """Whether the BO's jobs have ended, waiting at most ``slice_s`` for them."""
    from libaccel.errors import Timeout

    try:
        bo.wait(timeout=slice_s)
    except Timeout:
        return False
    return True


def test_submissions_every_half_timeout_do_not_stretch_a_hang(short_job_timeout, dev) -> None:
    """The timeout counts from when the hung job started, whatever is submitted after it: its own file
    and another file submit a job every T/2, and still the hang fails within T (plus a margin), and the
    other file's first job, submitted right behind the hang, ends within the same bound."""
    from libaccel import Device, Job, JobBo

    timeout_s = dev.params.job_timeout_ms / 1000
    sem = dev.create_bo(4096)
    hung_out = dev.create_bo(4096)
    stream = hang_stream(sem.va, hung_out.va)
    hung_cmd = dev.create_bo_with(stream, read_only=True)

    def fill_job(device, value: int):
        out = device.create_bo(4096)
        s = fill_stream(out.va, 4096, value)
        device.submit(Job(device.create_bo_with(s, read_only=True), len(s), [JobBo(out, write=True)]))
        return out

    with Device.open("kernel") as other:
        t0 = time.monotonic()
        dev.submit(Job(hung_cmd, len(stream), [JobBo(sem), JobBo(hung_out, write=True)]))
        other_first = fill_job(other, 5)
        followers = []
        hung_at = other_at = None
        next_submit = t0 + timeout_s / 2
        # Without the fix the hang would last until the last submission plus T: keep submitting for 3 T.
        while time.monotonic() < t0 + 3 * timeout_s + MARGIN_S and (hung_at is None or other_at is None):
            if time.monotonic() >= next_submit:
                followers += [(fill_job(dev, 6), 6), (fill_job(other, 8), 8)]
                next_submit += timeout_s / 2
            if hung_at is None and _ended(hung_out, 0.02):
                hung_at = time.monotonic() - t0
            if other_at is None and _ended(other_first, 0.02):
                other_at = time.monotonic() - t0

        assert hung_at is not None and hung_at <= timeout_s + MARGIN_S, (
            f"the hang ended after {hung_at} s (timeout {timeout_s} s, submissions every {timeout_s / 2} s)"
        )
        assert hung_out.wait(timeout=1).status == -errno.ETIMEDOUT
        assert other_at is not None and other_at <= timeout_s + MARGIN_S, (
            f"the other file waited {other_at} s"
        )
        assert other_first.wait(timeout=1).status == 0
        assert (other_first.array(np.int8, 4096) == 5).all()
        # The jobs behind the hang, its own file's included, were innocent: each ran once, exactly.
        for out, value in followers:
            assert out.wait(timeout=timeout_s + 30).status == 0
            assert (out.array(np.int8, 4096) == value).all()


def test_job_timeout_is_reported_and_bounded(short_job_timeout, dev) -> None:
    """GET_PARAM reports the timeout debugfs set; values outside 100..600000 ms are refused."""
    assert dev.params.job_timeout_ms == short_job_timeout
    for f in job_timeout_files():
        for bad in ("99", "600001", "0"):
            with pytest.raises(OSError) as exc:
                f.write_text(bad)
            assert exc.value.errno == errno.EINVAL
        assert f.read_text().strip() == str(short_job_timeout)
