"""The accel CLI and the errno -> exception mapping."""

from __future__ import annotations

import errno

import pytest

from libaccel import errors
from libaccel.tools import cli
from uapi.isa import SPEC
from vnpu_common.cli import ExitCode


def test_info_on_shim_prints_every_param(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["info", "--device", "shim"]) == 0
    out = capsys.readouterr().out
    for key in (
        "driver: vnpu",
        "device_id: 0x1",
        f"isa_version: {SPEC.version_major}.{SPEC.version_minor}",
        "fw_version:",
        "va_size:",
        "job_timeout_ms:",
    ):
        assert key in out


def test_info_on_missing_node_is_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["info", "--device", "/dev/accel/does-not-exist"]) == ExitCode.DEVICE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("accel: ")


@pytest.mark.parametrize(
    "err, cls",
    [
        (errno.EINVAL, errors.InvalidArgument),
        (errno.ENOENT, errors.NoSuchObject),
        (errno.E2BIG, errors.TooBig),
        (errno.ENOSPC, errors.NoSpace),
        (errno.EACCES, errors.AccessDenied),
        (errno.ENOEXEC, errors.BadCommandStream),
        (errno.ETIME, errors.Timeout),
        (errno.ETIMEDOUT, errors.Timeout),
        (errno.EBADF, errors.DeviceClosed),
        (errno.EFAULT, errors.BadAddress),
    ],
)
def test_errno_classes(err: int, cls: type[errors.AccelError]) -> None:
    e = errors.from_errno(err, "DRM_IOCTL_VNPU_SUBMIT")
    assert isinstance(e, cls) and isinstance(e, OSError) and e.errno == err
    assert "DRM_IOCTL_VNPU_SUBMIT" in str(e)


def test_job_fault_names_the_va() -> None:
    e = errors.JobFault(-errno.EFAULT, 0x141000)
    assert e.status == -errno.EFAULT and e.fault_va == 0x141000 and "0x141000" in str(e)
