"""What the project's C builds share: the warning flags, the cdef block of a C file, the staging
directory a build writes in before its result is renamed into place, and the prebuilt copy a wheel
carries.

The C lives in ``.c``/``.h`` files beside the Python that builds it (``delegate_teflon/c/``,
``device_model/mac_array/mac_array.c``). A checkout compiles it on first use into the cache
(:mod:`vnpu_common.cache`); a wheel carries it compiled (``setup.py``), and an installed package
loads that copy and never compiles.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

# Every C file is built with these; a warning is a build error.
WARNINGS = ["-Wall", "-Wextra", "-Werror"]

INTERFACE_BEGIN = "/* --- interface: begin"
INTERFACE_END = "/* --- interface: end --- */"
STAGING_PREFIX = ".build-"
# libaccel's run of a prepared job (prepared_run.c/.h), which libvnpu_run.so and libteflon.so both
# compile: named here, below both packages, so the delegate's build needs no import of libaccel.
PREPARED_RUN_C_DIR = Path(__file__).resolve().parents[1] / "libaccel" / "c"

__all__ = ["INTERFACE_BEGIN", "INTERFACE_END", "WARNINGS", "interface", "prebuilt", "staging"]


def interface(source: str) -> str:
    """The block of a C file between its interface markers: the declarations cffi's cdef reads, so
    the structs and functions Python calls are written once (comments are cffi's to skip)."""
    try:
        start = source.index(INTERFACE_BEGIN)
        start = source.index("*/", start) + 2
        return source[start : source.index(INTERFACE_END, start)]
    except ValueError:
        raise ValueError(f"no {INTERFACE_BEGIN} ... {INTERFACE_END} block in the C source") from None


def prebuilt(path: Path) -> Path | None:
    """``path`` if the installed package carries it built (a wheel), else None (a checkout)."""
    return path if path.is_file() else None


@contextlib.contextmanager
def staging(out_dir: Path) -> Iterator[Path]:
    """A fresh directory inside ``out_dir`` for a compiler's intermediate files, removed afterwards.

    It sits beside the result, not in /tmp, so that a build killed half-way leaves its debris in the
    cache, where the next build in ``out_dir`` removes it (:func:`sweep`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=out_dir))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def sweep(out_dir: Path) -> None:
    """Remove what interrupted builds left in ``out_dir``. Call it holding the directory's build
    lock (:func:`vnpu_common.cache.build_once` does), so no live build's staging is touched."""
    for leftover in out_dir.glob(f"{STAGING_PREFIX}*"):
        shutil.rmtree(leftover, ignore_errors=True)
    for leftover in out_dir.glob(".*.[0-9]*"):  # publish()'s staged copies
        if leftover.is_file() and leftover.name.rsplit(".", 1)[-1].isdigit():
            leftover.unlink(missing_ok=True)
