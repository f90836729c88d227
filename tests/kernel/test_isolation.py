"""Address-space isolation: a file's command stream can never reach another file's buffers."""

from __future__ import annotations

import errno

import numpy as np
import pytest
from kernel_helpers import copy_stream

SECRET = 0x5A
SIZE = 4096


def test_foreign_va_is_refused_or_faults() -> None:
    from libaccel import AccelError, Device, Job, JobBo

    with Device.open("kernel") as a, Device.open("kernel") as b:
        # A has three BOs, B one: A's last BO lies at a VA that B has not mapped.
        a_bos = [a.create_bo(SIZE) for _ in range(3)]
        secret = a_bos[-1]
        secret.write(bytes([SECRET]) * SIZE)
        out = b.create_bo(SIZE)
        assert secret.va != out.va
        stream = copy_stream(secret.va, out.va, SIZE)
        cmd = b.create_bo_with(stream, read_only=True)
        try:
            b.submit(Job(cmd, len(stream), [JobBo(out, write=True)]))
        except AccelError as e:
            assert e.errno == errno.EACCES, e
        else:
            status = out.wait(timeout=60)
            assert status.status == -errno.EFAULT
        assert not (out.array(np.uint8, SIZE) == SECRET).any()


def test_foreign_handle_is_unknown() -> None:
    from libaccel import AccelError, Device, Job, JobBo

    with Device.open("kernel") as a, Device.open("kernel") as b:
        foreign = [a.create_bo(SIZE) for _ in range(4)][-1]
        out = b.create_bo(SIZE)
        stream = copy_stream(out.va, out.va, 16)
        cmd = b.create_bo_with(stream, read_only=True)
        assert foreign.handle not in (out.handle, cmd.handle)
        with pytest.raises(AccelError) as info:
            b.submit(Job(cmd, len(stream), [JobBo(out, write=True), JobBo(foreign.handle)]))
        assert info.value.errno == errno.ENOENT
