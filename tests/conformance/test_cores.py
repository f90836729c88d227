"""Several NPU cores (DRM_VNPU_PARAM_NUM_CORES), on every backend.

Jobs of different files run at the same time on different cores, with exact
results; a file's own jobs still run one at a time, in submission order
(uapi/drm/vnpu_accel.h, struct drm_vnpu_job). The device-model default is 2
cores; a 1-core device skips the tests that need two.
"""

from __future__ import annotations

import errno
import threading
import time

import driver_knobs
import numpy as np
import pytest
from test_job_contract import PAGE, Stall, copy_stream, fill_stream

from libaccel import Device, Job, JobBo


def _need_cores(dev: Device, n: int) -> None:
    if dev.params.num_cores < n:
        pytest.skip(f"the device has {dev.params.num_cores} core(s), the test needs {n}")


def _fill(dev: Device, value: int, count: int = 64):
    out = dev.create_bo(PAGE)
    s = fill_stream(out.va, count, value)
    dev.submit(Job(dev.create_bo_with(s), len(s), [JobBo(out, read=False, write=True)]))
    return out


def test_num_cores_is_reported(device: Device) -> None:
    assert 1 <= device.params.num_cores <= 8


def test_another_files_job_runs_while_a_core_is_busy(device: Device, opener) -> None:
    _need_cores(device, 2)
    stall = Stall(device)
    stall.running()
    other = opener()
    out = _fill(other, 9)
    # A second core runs it now: on one core it would wait behind the stall.
    st = out.wait(timeout=stall.timeout_s / 2)
    assert st.status == 0
    assert (out.array(np.int8, 64) == 9).all()
    assert stall.marker.array(np.int8, 1)[0] == 1 and not stall.sem.array(np.int32, 1)[0]
    stall.release()
    assert stall.marker.wait(timeout=30).status == 0


def test_a_files_jobs_run_one_at_a_time_in_submission_order(device: Device) -> None:
    _need_cores(device, 2)
    stall = Stall(device)
    stall.running()
    # No BO or syncobj links these to the stall: only the file's order holds them back.
    outs = [_fill(device, v) for v in (5, 6)]
    time.sleep(min(0.5, stall.timeout_s / 4))
    for out in outs:
        assert not out.array(np.int8, 64).any(), "a job ran while its file's earlier job was running"
    stall.release()
    for v, out in zip((5, 6), outs, strict=True):
        assert out.wait(timeout=30).status == 0
        assert (out.array(np.int8, 64) == v).all()


def test_two_files_in_parallel_get_exact_results(device: Device, opener) -> None:
    """Two files submit from two threads at once; every output is its own input, byte for byte."""
    files = [device, opener()]
    rounds, size = 24, 3000
    failures: list[str] = []

    done: list[int] = []

    def client(dev: Device, seed: int) -> None:
        try:
            run(dev, seed)
        except Exception as e:  # a thread's exception would not fail the test by itself
            failures.append(f"file {seed}: {e!r}")

    def run(dev: Device, seed: int) -> None:
        rng = np.random.default_rng(seed)
        src, dst = dev.create_bo(PAGE), dev.create_bo(PAGE)
        s = copy_stream(src.va, dst.va, size)
        cmd = dev.create_bo_with(s)
        for i in range(rounds):
            data = rng.integers(-128, 128, size, dtype=np.int8)
            src.array(np.int8, size)[:] = data
            dev.submit(Job(cmd, len(s), [JobBo(src), JobBo(dst, read=False, write=True)]))
            st = dst.wait(timeout=30)
            if st.status or not (dst.array(np.int8, size) == data).all():
                failures.append(f"file {seed} round {i}: status {st.status}")
                return
        done.append(seed)

    threads = [threading.Thread(target=client, args=(dev, i)) for i, dev in enumerate(files)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not failures, failures
    assert not any(t.is_alive() for t in threads)
    assert sorted(done) == [0, 1]


def test_two_models_at_once_are_exact(device: Device, opener) -> None:
    """Two networks on two files, invoked from two threads at once, equal TFLite's reference kernels."""
    import modelgen as g
    from libaccel.compiler import PartitionRunner, compile_partition, graph_from_tflite

    models = [g.mobilenet_v1_model(96, 0.25, 10, seed=1), g.mobilenet_v2_model(64, 0.35, 10, seed=2)]
    files = [device, opener()]
    failures: list[str] = []
    checked: list[str] = []

    def client(dev: Device, model: bytes, name: str) -> None:
        try:
            run(dev, model, name)
        except Exception as e:  # a thread's exception would not fail the test by itself
            failures.append(f"{name}: {e!r}")

    def run(dev: Device, model: bytes, name: str) -> None:
        graph = graph_from_tflite(model)
        compiled = compile_partition(graph, [n.index for n in graph.nodes], dev.params.isa_version)
        inputs = g.random_inputs(model, seed=3)
        ref = g.run_reference(model, inputs)
        with PartitionRunner(dev, compiled) as runner:
            for i in range(3):
                out = runner.run(dict(zip(graph.inputs, inputs, strict=True)))
                for k, r in zip(graph.outputs, ref, strict=True):
                    differing = int(np.count_nonzero(out[k].reshape(r.shape) != r))
                    if differing:
                        failures.append(f"{name} invoke {i}: {differing} of {r.size} outputs differ")
        checked.append(name)

    threads = [
        threading.Thread(target=client, args=(dev, m, n))
        for dev, m, n in zip(files, models, ("mobilenet_v1", "mobilenet_v2"), strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    assert not failures, failures
    assert sorted(checked) == ["mobilenet_v1", "mobilenet_v2"]


def test_a_hang_resets_only_its_core(backend: str, device: Device, opener) -> None:
    """A job on another core is neither aborted nor run again by the hang's reset."""
    _need_cores(device, 2)
    # A short timeout, but the good job must outlive the hang's by half of it plus the wait below.
    with driver_knobs.job_timeout(backend, 2 * driver_knobs.SHORT_JOB_TIMEOUT_MS):
        _hang_beside_a_running_job(device, opener)


def _hang_beside_a_running_job(device: Device, opener) -> None:
    hung = Stall(opener())
    hung.running()
    # Half a timeout later: the hang's reset comes while this one still has time to run.
    time.sleep(hung.timeout_s / 2)
    good = Stall(device)
    good.running()  # both run at once: they are on different cores
    good.marker.array(np.int8, 1)[0] = 0  # a second run of the good job would set it again
    good.marker.sync(for_device=True)
    assert hung.marker.wait(timeout=hung.timeout_s * 5 + 10).status == -errno.ETIMEDOUT
    good.release()
    assert good.marker.wait(timeout=30).status == 0
    assert good.marker.array(np.int8, 1)[0] == 0, "the other core's job was run again"
