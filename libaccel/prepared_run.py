"""libvnpu_run.so: the run of a prepared job in C (``libaccel/c/prepared_run.c``), for the kernel backend.

:class:`libaccel.job.PreparedSubmit` runs its SUBMIT and BO_WAIT on an accel node through
``vnpu_prepared_run()``; libteflon.so compiles the same file in and calls it from its invoke, so the
restart rule, the deadline and the status read are written once. The library is plain C against
``uapi/drm/vnpu_accel.h``; cffi loads it in ABI mode with the uapi bindings' types, so the structs
libaccel built are passed as they are.

A wheel carries it built (``libaccel/libvnpu_run.so``, by ``setup.py``); a checkout builds it with
gcc on first use into the cache (``run-<hash>``), or, where the cache is read-only (the QEMU guest's
view of the host's), into a temporary directory. ``python -m libaccel.prepared_run`` builds it now and
prints its path.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import cffi

from uapi import bindings
from vnpu_common.cache import build_once, cache_root, content_hash
from vnpu_common.cbuild import PREPARED_RUN_C_DIR, WARNINGS, interface, prebuilt

C_DIR = PREPARED_RUN_C_DIR
SOURCE = C_DIR / "prepared_run.c"
HEADER = C_DIR / "prepared_run.h"
LIBRARY_NAME = "libvnpu_run.so"
PREBUILT = Path(__file__).resolve().with_name(LIBRARY_NAME)
COMPILE_ARGS = ["-shared", "-fPIC", "-O2", *WARNINGS]

# The header's constants, read from it (no library needed to interpret a result): the result of a
# failed job, the restart flag, and the two steps of a run.
_DEFINES = dict(re.findall(r"^#define (VNPU_RUN_\w+) (\d+)$", HEADER.read_text(), re.M))
JOB_FAILED = int(_DEFINES["VNPU_RUN_JOB_FAILED"])
RESTART = int(_DEFINES["VNPU_RUN_RESTART"])
SUBMIT = int(_DEFINES["VNPU_RUN_SUBMIT"])
WAIT = int(_DEFINES["VNPU_RUN_WAIT"])

__all__ = [
    "C_DIR",
    "JOB_FAILED",
    "LIBRARY_NAME",
    "RESTART",
    "SUBMIT",
    "WAIT",
    "build",
    "library",
    "library_path",
]


def source_hash() -> str:
    """A key over what goes into the binary: the C, its header, the uapi headers and the flags."""
    return content_hash(
        (
            SOURCE.read_bytes(),
            HEADER.read_bytes(),
            bindings.VNPU_HEADER.read_bytes(),
            bindings.DRM_HEADER.read_bytes(),
            " ".join(COMPILE_ARGS),
        )
    )


def build(out_dir: Path) -> Path:
    """Compile the library into ``out_dir`` with gcc (atomically replaced) and return its path.

    Raises RuntimeError naming the missing compiler or quoting the compiler's first error."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise RuntimeError(f"building {LIBRARY_NAME} needs gcc: apt-get install gcc")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / LIBRARY_NAME
    staged = out_dir / f".{LIBRARY_NAME}.{os.getpid()}"
    cmd = [gcc, *COMPILE_ARGS, "-I", str(bindings.HEADER_DIR.parent), "-I", str(C_DIR), str(SOURCE)]
    r = subprocess.run([*cmd, "-o", str(staged)], capture_output=True, text=True)
    if r.returncode != 0:
        errors = [line for line in r.stderr.splitlines() if "error" in line] or r.stderr.splitlines()
        raise RuntimeError(f"building {LIBRARY_NAME} failed: {(errors or ['no output'])[0]}")
    os.replace(staged, target)  # a concurrent loader never sees half a file
    return target


def library_path() -> Path:
    """The library's path: the wheel's, else the cache's, built now if this source has no build."""
    if (path := prebuilt(PREBUILT)) is not None:
        return path
    name = f"run-{source_hash()}"
    try:
        return build_once(cache_root() / name / LIBRARY_NAME, build)
    except OSError:  # a read-only cache: the guest's view of the host's
        return build_once(Path(tempfile.gettempdir()) / f"vnpu-{name}" / LIBRARY_NAME, build)


@functools.cache
def library() -> Any:
    """``vnpu_prepared_run`` and its constants, loaded once per process (built first if need be)."""
    ffi = cffi.FFI()
    ffi.include(bindings.ffi)  # the uapi structs: libaccel's cdata pass as they are
    ffi.cdef(interface(HEADER.read_text()))
    return ffi.dlopen(str(library_path()))


if __name__ == "__main__":
    try:
        print(library_path())
    except RuntimeError as e:
        print(f"libaccel.prepared_run: {e}", file=sys.stderr)
        raise SystemExit(1) from None
