"""DRM usage stats in /proc/self/fdinfo/<fd>: the keys, per-file busy time and memory."""

from __future__ import annotations

import errno
import time

import driver_knobs
import numpy as np
import pytest
from kernel_helpers import fill_stream, hang_stream

from libaccel.tools import fdinfo


def _stats(dev) -> fdinfo.FdInfo:
    return fdinfo.read(dev.backend.fileno())


def _run_fills(dev, out, count: int) -> None:
    from libaccel import Job, JobBo

    s = fill_stream(out.va, out.size, 5)
    cmd = dev.create_bo_with(s, read_only=True)
    for _ in range(count):
        dev.submit(Job(cmd, len(s), [JobBo(out, write=True)]))
    assert out.wait(timeout=30).status == 0
    cmd.close()


def test_keys_busy_time_and_memory_grow(dev) -> None:
    from libaccel import Device

    before = _stats(dev)
    assert before.driver == "vnpu"
    assert before.client_id is not None
    assert before.pdev is not None and before.pdev.count(":") == 2
    assert set(before.engines) == {"npu"}
    # Its cores are identical engines: drm-usage-stats' capacity says how many.
    assert before.other.get("drm-engine-capacity-npu") == str(dev.params.num_cores)
    # Without objects DRM core prints no resident/purgeable keys: it asks objects whether they can tell
    # (and 7.2 no active key either, which 6.12 prints regardless).
    assert set(before.memory) == {"memory"}
    assert {"total", "shared"} <= set(before.memory["memory"]) <= {"total", "shared", "active"}
    assert before.memory_bytes("total") == 0

    out = dev.create_bo(256 << 10)
    after_bo = _stats(dev)
    # 6.12 prints active and purgeable with any object; 7.2 active only while an object is busy, and
    # purgeable only for objects that could be purged.
    keys = {"total", "shared", "active", "resident", "purgeable"}
    assert {"total", "shared", "resident"} <= set(after_bo.memory["memory"]) <= keys
    # BO_CREATE pins the pages: the new BO is counted in total and resident at once.
    assert after_bo.memory_bytes("total") - before.memory_bytes("total") == out.size
    assert after_bo.memory_bytes("resident") - before.memory_bytes("resident") == out.size
    assert after_bo.engine_ns() == before.engine_ns()

    with Device.open("kernel") as other:
        idle = _stats(other)
        assert idle.client_id != before.client_id
        _run_fills(dev, out, 8)
        busy = _stats(dev)
        # Eight jobs ran: the device was busy for them, and only this file is charged.
        assert busy.engine_ns() > after_bo.engine_ns()
        assert _stats(other).engine_ns() == idle.engine_ns() == 0
        assert busy.jobs is not None and busy.jobs - (after_bo.jobs or 0) >= 8
        assert _stats(other).jobs == idle.jobs == 0
    assert (out.array(np.int8, out.size) == 5).all()

    out.close()
    assert _stats(dev).memory_bytes("total") == before.memory_bytes("total")


def test_running_job_counts_while_it_runs(long_job_timeout, dev) -> None:
    """A job still on the device is charged while it runs, so a monitor sees a long job progress."""
    from libaccel import Job, JobBo

    sem = dev.create_bo(4096)
    out = dev.create_bo(4096)
    s = hang_stream(sem.va, out.va)
    dev.submit(Job(dev.create_bo_with(s, read_only=True), len(s), [JobBo(sem), JobBo(out, write=True)]))
    deadline = time.monotonic() + 10
    while (first := _stats(dev)).engine_ns() == 0:  # until the job is on the device
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.01)
    time.sleep(0.3)
    second = _stats(dev)
    assert second.engine_ns() - first.engine_ns() >= 250_000_000
    # The job's BOs are busy on the device: active memory.
    assert second.memory_bytes("active") >= sem.size + out.size

    sem.array(np.int32, 1)[0] = 1  # release the WAIT
    sem.sync(for_device=True)
    assert out.wait(timeout=30).status == 0
    done = _stats(dev)
    assert done.engine_ns() >= second.engine_ns()
    assert done.memory_bytes("active") == 0


def test_a_lone_files_jobs_stay_on_one_core(dev) -> None:
    """One file's jobs, each waited for: the same core every time (vnpu_job_pick_core())."""
    from libaccel import Job, JobBo

    before = _stats(dev)
    cores = dev.params.num_cores
    assert sorted(before.jobs_by_core) == list(range(cores))
    out = dev.create_bo(4096)
    s = fill_stream(out.va, 64, 3)
    cmd = dev.create_bo_with(s, read_only=True)
    for _ in range(20):
        dev.submit(Job(cmd, len(s), [JobBo(out, write=True)]))
        assert out.wait(timeout=30).status == 0
    ran = {c: n - before.jobs_by_core[c] for c, n in _stats(dev).jobs_by_core.items()}
    assert sum(ran.values()) == 20
    # drm_sched_pick_best() alone would alternate between the cores of an idle device.
    assert sorted(ran.values())[-1] == 20, f"jobs by core: {ran}"
    cmd.close()
    out.close()


def test_core_mask_confines_new_jobs_to_its_cores(dev) -> None:
    """debugfs core_mask: new jobs go only to the cores it names; a mask naming no core, or a core
    the device lacks, is refused."""
    from libaccel import Job, JobBo

    cores = dev.params.num_cores
    if cores < 2:
        pytest.skip("one core: nothing to confine")
    files = driver_knobs.core_mask_files()
    if not files:
        pytest.skip("vnpu.ko has no debugfs core_mask")
    assert int(files[0].read_text(), 0) == (1 << cores) - 1  # every core at probe
    for bad in ("0", hex(1 << cores)):
        with pytest.raises(OSError) as e:
            files[0].write_text(bad)
        assert e.value.errno == errno.EINVAL
    out = dev.create_bo(4096)
    s = fill_stream(out.va, 64, 4)
    cmd = dev.create_bo_with(s, read_only=True)
    last = cores - 1
    for mask, core in ((1 << last, last), (1, 0)):
        before = _stats(dev).jobs_by_core
        with driver_knobs.core_mask(mask):
            for _ in range(6):
                dev.submit(Job(cmd, len(s), [JobBo(out, write=True)]))
                assert out.wait(timeout=30).status == 0
        ran = {c: n - before[c] for c, n in _stats(dev).jobs_by_core.items()}
        assert ran[core] == 6 and sum(ran.values()) == 6, f"mask {mask:#x}: jobs by core {ran}"
    cmd.close()
    out.close()
