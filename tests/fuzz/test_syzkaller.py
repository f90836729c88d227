"""kernel/syzkaller/dev_accel_vnpu.txt describes every ioctl, struct and parameter of the uapi header.

syzkaller only fuzzes what its descriptions name, so a new ioctl, struct field or GET_PARAM
parameter added to uapi/drm/vnpu_accel.h without a description would go unfuzzed.
"""

from __future__ import annotations

import re
from pathlib import Path

from uapi.bindings import ffi

ROOT = Path(__file__).resolve().parents[2]
# Continuation lines joined: the ioctl defines are wrapped.
HEADER = (ROOT / "uapi" / "drm" / "vnpu_accel.h").read_text().replace("\\\n", " ")
DESCRIPTION = (ROOT / "kernel" / "syzkaller" / "dev_accel_vnpu.txt").read_text()


def described_structs() -> dict[str, list[str]]:
    """syzkaller struct name -> its field names, in order."""
    out = {}
    for name, body in re.findall(r"^(\w+) \{\n(.*?)^\}", DESCRIPTION, re.S | re.M):
        lines = [line for line in body.splitlines() if line.strip() and not line.startswith("#")]
        out[name] = [line.split()[0] for line in lines]
    return out


def test_every_ioctl_is_described() -> None:
    ioctls = re.findall(r"^#define (DRM_IOCTL_VNPU_\w+)\s", HEADER, re.M)
    assert len(ioctls) >= 5
    for name in ioctls:
        assert re.search(rf"^ioctl\${name}\(fd fd_vnpu, cmd const\[{name}\], ", DESCRIPTION, re.M), name


# The devcoredump format (read from sysfs, never passed to an ioctl) is not syzkaller's business.
COREDUMP_FORMAT = "drm_vnpu_coredump_"


def test_every_struct_is_described_field_by_field() -> None:
    structs = re.findall(r"^struct (drm_vnpu_\w+) \{", HEADER, re.M)
    ioctl_args = re.findall(r"^#define DRM_IOCTL_VNPU_\w+\s.*struct (\w+)\)", HEADER, re.M)
    assert not [s for s in ioctl_args if s.startswith(COREDUMP_FORMAT)]
    structs = [s for s in structs if not s.startswith(COREDUMP_FORMAT)]
    described = described_structs()
    assert len(ioctl_args) >= 5 and set(ioctl_args) <= set(structs)
    for name in structs:
        assert name in described, f"struct {name} has no syzkaller description"
        fields = [f for f, _ in ffi.typeof(f"struct {name}").fields]
        assert described[name] == fields, name


def test_every_parameter_and_flag_is_named() -> None:
    names = re.findall(r"^\s*(DRM_VNPU_PARAM_\w+) =", HEADER, re.M)
    names += ["DRM_VNPU_BO_DEVICE_READ_ONLY", "DRM_VNPU_JOB_BO_READ", "DRM_VNPU_JOB_BO_WRITE"]
    for name in names:
        assert re.search(rf"\b{name}\b", DESCRIPTION), name


def test_job_struct_size_matches_the_header() -> None:
    # The description states sizeof(struct drm_vnpu_job) as a literal (syzkaller has no sizeof).
    assert f"= {ffi.sizeof('struct drm_vnpu_job')}, " in DESCRIPTION
