"""The prepared invoke: from a kernel's second invoke on, libteflon.so's C runs it alone (the arena
copies, then SUBMIT and BO_WAIT on vnpu.ko, or one call into Python's submit on the shim), exact
with TFLite's reference kernels; Python's invoke takes over when the runtime moves a buffer, at
log_level=verbose, and reports C's failures as its own.

On the host the device is the shim; in the QEMU guest (VNPU_TEST_DEVICE=kernel) vnpu.ko, where C
makes the ioctls itself.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import modelgen as gen
from delegate_teflon import plugin
from device_model.faults import FaultSpec
from qemu_tests import fault_inject
from uapi.bindings import ffi as uapi_ffi

MODEL = gen.elementwise_model("ADD", (1, 6, 6, 8), None, "RELU", 21)
# Fault specs this module writes: distinct from any a previous run left in the guest's control file.
_SEQS = itertools.count(int(time.time()))


class Pair:
    """The model through the delegate and on TFLite's reference kernels alone, fed the same inputs."""

    def __init__(self, interp_mod: Any, lib_path: str, options: dict[str, str]) -> None:
        resolver = interp_mod.OpResolverType.BUILTIN_REF
        before = set(plugin.prepared_invokes())
        delegate = interp_mod.load_delegate(lib_path, options)
        self.npu = interp_mod.Interpreter(
            model_content=MODEL, experimental_delegates=[delegate], experimental_op_resolver_type=resolver
        )
        self.cpu = interp_mod.Interpreter(model_content=MODEL, experimental_op_resolver_type=resolver)
        for interp in (self.npu, self.cpu):
            interp.allocate_tensors()
        handles = sorted(set(plugin.prepared_invokes()) - before)
        assert len(handles) == 1, handles  # one NPU partition
        self.handle = handles[0]
        self.rng = np.random.default_rng(3)

    @property
    def kernel(self) -> Any:
        return plugin._kernels[self.handle]

    def c_invokes(self) -> int:
        return plugin.prepared_invokes()[self.handle]

    def invoke(self) -> None:
        """One invoke of both on fresh inputs; the outputs must be equal byte for byte."""
        for d in self.npu.get_input_details():
            x = self.rng.integers(-128, 128, d["shape"]).astype(d["dtype"])
            self.npu.set_tensor(d["index"], x)
            self.cpu.set_tensor(d["index"], x)
        self.npu.invoke()
        self.cpu.invoke()
        for d in self.npu.get_output_details():
            assert self.npu.get_tensor(d["index"]).tobytes() == self.cpu.get_tensor(d["index"]).tobytes()


@pytest.fixture
def pair(interp_mod: Any, lib_path: str, test_device: str) -> Iterator[Pair]:
    p = Pair(interp_mod, lib_path, {"device": test_device, "log_level": "quiet"})
    yield p
    del p.npu  # the kernels go with the interpreter, before the delegate


def test_invokes_after_the_first_run_in_c(pair: Pair, test_device: str) -> None:
    for _ in range(5):
        pair.invoke()
    assert pair.c_invokes() == 4  # the first invoke is Python's: it prepares the others
    partition = pair.kernel.partition
    assert (partition.fd >= 0) == (test_device == "kernel")  # C's own ioctls on vnpu.ko only


def test_a_moved_buffer_is_prepared_again(pair: Pair) -> None:
    pair.invoke()
    pair.invoke()
    assert pair.c_invokes() == 1
    # What C sees when the runtime moves the first input's buffer: not the one the copies were
    # made for. That invoke is Python's, which prepares the copies again; the next is C's.
    _, _, data = pair.kernel.prepared
    data[0] = uapi_ffi.cast("void *", 1)
    pair.invoke()
    assert pair.c_invokes() == 1
    pair.invoke()
    assert pair.c_invokes() == 2


def test_a_failed_submit_from_c_is_reported(pair: Pair) -> None:
    pair.invoke()
    pair.invoke()
    assert pair.c_invokes() == 1
    job = uapi_ffi.cast("struct drm_vnpu_job *", pair.kernel.runner.submit_arg.jobs)
    handle, job.cmd_bo_handle = job.cmd_bo_handle, 0x7FFFFFFF  # no such BO: SUBMIT refuses the job
    try:
        with pytest.raises(RuntimeError, match=r"vnpu delegate: invoke: .*DRM_IOCTL_VNPU_SUBMIT"):
            pair.npu.invoke()
    finally:
        job.cmd_bo_handle = handle
    assert pair.c_invokes() == 1
    pair.invoke()  # and the partition runs on
    assert pair.c_invokes() == 2


def test_verbose_invokes_stay_in_python(
    interp_mod: Any, lib_path: str, test_device: str, capfd: pytest.CaptureFixture
) -> None:
    pair = Pair(interp_mod, lib_path, {"device": test_device, "log_level": "verbose"})
    for _ in range(3):
        pair.invoke()
    assert pair.c_invokes() == 0
    assert f"NPU partition {pair.handle}: invoke 3 took" in capfd.readouterr().err
    del pair.npu


@pytest.fixture
def faults(test_device: str) -> Iterator[Callable[[FaultSpec], None]]:
    """Sets the device model's fault spec: vnpu.ko's through the harness's control file in the
    guest, the shim's device directly on the host (then as it was)."""
    if test_device == "kernel":
        control: Any = fault_inject.ControlFile()
        try:
            yield control
        finally:
            control(FaultSpec(seq=next(_SEQS)))
        return
    from libaccel.backends.shim import shared_device

    npu = shared_device().npu
    before = npu.faults
    control = fault_inject.ShimControl()
    try:
        yield control
    finally:
        npu.faults = before


def test_a_failed_job_is_reported(pair: Pair, faults: Callable[[FaultSpec], None]) -> None:
    """On vnpu.ko C reads the job's status from BO_WAIT and hands it to Python to report; on the
    shim Python's submit raises it. Either way the invoke fails with the job's fault, and the next
    one runs in C again."""
    pair.invoke()
    pair.invoke()
    assert pair.c_invokes() == 1
    faults(FaultSpec(kind="mmu_fault", count=1, seq=next(_SEQS)))
    with pytest.raises(RuntimeError, match=r"vnpu delegate: invoke: JobFault: .*the device MMU faulted"):
        pair.npu.invoke()
    assert pair.c_invokes() == 1
    pair.invoke()
    assert pair.c_invokes() == 2
