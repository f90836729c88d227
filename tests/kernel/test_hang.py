"""A hung job (WAIT on a semaphore that never changes) times out, the device resets, later jobs run."""

from __future__ import annotations

import errno

import numpy as np
from kernel_helpers import fill_stream, hang_stream


def test_hang_times_out_and_device_recovers(dev) -> None:
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
