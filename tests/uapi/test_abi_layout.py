"""The cffi bindings agree with what a C compiler makes of the uapi headers.

A C program compiled against uapi/drm/vnpu_accel.h (and the vendored drm.h)
prints sizeof and offsetof of every field of every vnpu struct and of the
core DRM structs libaccel uses, and every ioctl number; the test compares
each line with uapi.bindings.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from uapi import bindings

ROOT = Path(__file__).resolve().parents[2]
STRUCTS = list(bindings.VNPU_STRUCTS) + list(bindings.CORE_STRUCTS)


def _c_program() -> str:
    lines = [
        "#include <stddef.h>",
        "#include <stdio.h>",
        "#include <drm/vnpu_accel.h>",
        "int main(void) {",
    ]
    for s in STRUCTS:
        lines.append(f'  printf("sizeof {s} %zu\\n", sizeof(struct {s}));')
        for field, _ in bindings.ffi.typeof(f"struct {s}").fields:
            lines.append(f'  printf("offsetof {s}.{field} %zu\\n", offsetof(struct {s}, {field}));')
            lines.append(f'  printf("sizeof {s}.{field} %zu\\n", sizeof(((struct {s} *)0)->{field}));')
    for name in bindings.IOCTLS:
        lines.append(f'  printf("ioctl {name} %lu\\n", (unsigned long){name});')
    for name in bindings.CONSTANTS:
        if name.startswith(("DRM_VNPU_", "DRM_SYNCOBJ_")) or name == "DRM_COMMAND_BASE":
            lines.append(f'  printf("const {name} %lld\\n", (long long){name});')
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


def _python_lines() -> list[str]:
    ffi = bindings.ffi
    out = []
    for s in STRUCTS:
        t = ffi.typeof(f"struct {s}")
        out.append(f"sizeof {s} {ffi.sizeof(t)}")
        for field, f in t.fields:
            out.append(f"offsetof {s}.{field} {f.offset}")
            out.append(f"sizeof {s}.{field} {ffi.sizeof(f.type)}")
    for name, number in bindings.IOCTLS.items():
        out.append(f"ioctl {name} {number}")
    for name, value in bindings.CONSTANTS.items():
        if name.startswith(("DRM_VNPU_", "DRM_SYNCOBJ_")) or name == "DRM_COMMAND_BASE":
            out.append(f"const {name} {value}")
    return out


@pytest.fixture(scope="module")
def c_lines(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc is required to check the ABI layout (apt-get install gcc)")
    d = tmp_path_factory.mktemp("abi")
    src = d / "abi.c"
    src.write_text(_c_program())
    exe = d / "abi"
    # As userspace includes it: the installed headers (tools/headers_install.py), nothing defined.
    cmd = [gcc, "-Wall", "-Werror", "-I", str(ROOT / "uapi"), str(src), "-o", str(exe)]
    build = subprocess.run(cmd, capture_output=True, text=True)
    assert build.returncode == 0, f"gcc failed:\n{build.stderr}"
    return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()


def test_every_size_offset_ioctl_and_constant_matches_gcc(c_lines: list[str]) -> None:
    assert c_lines == _python_lines()


def test_covers_every_vnpu_struct_and_ioctl() -> None:
    assert set(bindings.VNPU_STRUCTS) >= {
        "drm_vnpu_get_param",
        "drm_vnpu_bo_create",
        "drm_vnpu_bo_info",
        "drm_vnpu_bo_wait",
        "drm_vnpu_job_bo",
        "drm_vnpu_job",
        "drm_vnpu_submit",
        "drm_vnpu_bo_sync",
    }
    for n in ("GET_PARAM", "BO_CREATE", "BO_INFO", "BO_WAIT", "SUBMIT", "BO_SYNC"):
        assert f"DRM_IOCTL_VNPU_{n}" in bindings.IOCTLS
    for n in bindings.DRM_CORE_IOCTLS:
        assert n in bindings.IOCTLS


def test_vnpu_structs_are_64bit_padded() -> None:
    # botching-up-ioctls: every struct a multiple of 8 bytes, so 32/64-bit userspace agree.
    for s in bindings.VNPU_STRUCTS:
        assert bindings.ffi.sizeof(f"struct {s}") % 8 == 0, s


def test_ioc_encoding_known_values() -> None:
    # Numbers libdrm has used for years: DRM_IOCTL_VERSION, DRM_IOCTL_GEM_CLOSE.
    assert bindings.IOCTLS["DRM_IOCTL_VERSION"] == 0xC0406400
    assert bindings.IOCTLS["DRM_IOCTL_GEM_CLOSE"] == 0x40086409
