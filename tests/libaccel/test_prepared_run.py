"""The run of a prepared job in C (libaccel/c/prepared_run.c, libvnpu_run.so): what it returns for
a file that is not a vnpu node and for a step it does not know, the header's constants as Python
reads them, and the exception libaccel builds from each kind of result. A run on vnpu.ko itself is
the conformance suite's (tests/conformance/test_prepared_submit.py, in the QEMU guest)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator

import pytest

from libaccel import prepared_run
from libaccel.backends.kernel import KernelBackend
from libaccel.errors import DeviceClosed, JobFault, NoSuchObject
from libaccel.job import Job, run_failure
from uapi.bindings import ffi


@pytest.fixture
def not_a_node() -> Iterator[KernelBackend]:
    """A kernel backend on /dev/null: a character device that knows no vnpu ioctl."""
    backend = KernelBackend(os.devnull)
    yield backend
    backend.close()


def _args() -> tuple[object, object, object]:
    submit = ffi.new("struct drm_vnpu_submit *")
    wait = ffi.new("struct drm_vnpu_bo_wait *")
    return submit, wait, ffi.new("int *")


def test_the_header_constants_are_the_library_s() -> None:
    lib = prepared_run.library()
    assert (lib.VNPU_RUN_JOB_FAILED, lib.VNPU_RUN_RESTART, lib.VNPU_RUN_SUBMIT, lib.VNPU_RUN_WAIT) == (
        prepared_run.JOB_FAILED,
        prepared_run.RESTART,
        prepared_run.SUBMIT,
        prepared_run.WAIT,
    )
    assert prepared_run.SUBMIT != prepared_run.WAIT


def test_a_failed_submit_is_its_negative_errno_at_the_submit_step(not_a_node: KernelBackend) -> None:
    submit, wait, step = _args()
    wait.timeout_ns = 1234
    result = prepared_run.library().vnpu_prepared_run(not_a_node.fileno(), submit, wait, 10**9, 0, step)
    assert (result, step[0]) == (-errno.ENOTTY, prepared_run.SUBMIT)
    assert wait.timeout_ns == 1234  # no wait was made: its deadline is not set


def test_a_resumed_run_makes_only_the_wait(not_a_node: KernelBackend) -> None:
    submit, wait, step = _args()
    step[0] = prepared_run.WAIT
    wait.timeout_ns = 1234  # the deadline of the run it resumes: kept
    result = prepared_run.library().vnpu_prepared_run(not_a_node.fileno(), submit, wait, 10**9, 0, step)
    assert (result, step[0], wait.timeout_ns) == (-errno.ENOTTY, prepared_run.WAIT, 1234)


def test_an_unknown_step_is_einval() -> None:
    submit, wait, step = _args()
    step[0] = 7
    assert prepared_run.library().vnpu_prepared_run(-1, submit, wait, 0, 0, step) == -errno.EINVAL


def test_prepared_submit_on_the_kernel_backend_raises_the_ioctl_s_error(not_a_node: KernelBackend) -> None:
    prepared = not_a_node.prepare_submit(Job(1, 64, []), 1, 1.0)
    with pytest.raises(OSError, match="DRM_IOCTL_VNPU_SUBMIT") as excinfo:
        prepared.run()
    assert excinfo.value.errno == errno.ENOTTY
    assert prepared.full_submits == 1
    not_a_node.close()
    with pytest.raises(DeviceClosed, match="DRM_IOCTL_VNPU_SUBMIT"):
        prepared.run()  # not an ioctl on whatever file now has the number


def test_each_result_becomes_the_exception_libaccel_raises() -> None:
    wait = ffi.new("struct drm_vnpu_bo_wait *")
    wait.job_status, wait.fault_va = -errno.EFAULT, 0x1000
    fault = run_failure(prepared_run.JOB_FAILED, prepared_run.WAIT, wait)
    assert isinstance(fault, JobFault) and (fault.status, fault.fault_va) == (-errno.EFAULT, 0x1000)
    assert "0x1000" in str(fault)
    missing = run_failure(-errno.ENOENT, prepared_run.SUBMIT, wait)
    assert isinstance(missing, NoSuchObject) and "DRM_IOCTL_VNPU_SUBMIT" in str(missing)
    late = run_failure(-errno.ETIME, prepared_run.WAIT, wait)
    assert late.errno == errno.ETIME and "DRM_IOCTL_VNPU_BO_WAIT" in str(late)
    assert "unknown result 5" in str(run_failure(5, prepared_run.WAIT, wait))
