"""Build libteflon.so with cffi's embedding mode: ``python -m delegate_teflon.build [--out DIR]``.

The library is a thin C surface (``c/embedding_host.c``: the plugin entry points; ``c/prepared_invoke.c``:
the by-value registration call, dladdr, and the invoke Python prepared: copies, and the job's run,
libaccel's ``c/prepared_run.c``, compiled in)
whose logic is Python: the first call into it starts (or joins) the Python interpreter, imports
:mod:`delegate_teflon.plugin` and binds the callbacks. It includes the ioctl ABI's header,
``uapi/drm/vnpu_accel.h``, and ``c/teflon_abi.h``, whose interface block is also the cdef.

A checkout builds it on first use into the cache (:func:`delegate_teflon.library_path`); a wheel
carries it built as ``delegate_teflon/libteflon.so`` (``setup.py`` calls :func:`build`).
"""

from __future__ import annotations

import json
import os
import site
import sys
import sysconfig
from pathlib import Path

import cffi

from delegate_teflon import PREBUILT, abi
from uapi.bindings import HEADER_DIR
from vnpu_common.cache import content_hash, publish
from vnpu_common.cbuild import WARNINGS, staging
from vnpu_common.cli import OneLineArgumentParser, cli_main

LIBRARY_NAME = PREBUILT.name
MODULE_NAME = "_vnpu_teflon"
PACKAGE_ROOT = Path(__file__).resolve().parent.parent

# The Python the library is built with, baked in for hosts that have none (a C or C++ TFLite
# program): its home (the standard library; a venv's is its base installation) and its
# site-packages (a venv's own, with their .pth files: editable installs).
PYTHON_HOME = sys.base_prefix
SITE_DIRS = tuple(d for d in site.getsitepackages() if os.path.isdir(d))

# Runs inside the process that loaded libteflon.so, on the first call of an entry point. The
# directory that holds delegate_teflon goes on sys.path so a host that is not the project's Python
# still finds it: for the library a wheel carries (delegate_teflon/libteflon.so) the site-packages it
# sits in, found from the library's own path; for a build in the cache, the package root it was
# built from. A host without Python (sys._vnpu_teflon_embedded, set by c/embedding_host.c) also gets
# that site-packages' .pth files, or the build's.
INIT_CODE = f"""
import os, sys
from {MODULE_NAME} import ffi, lib
_here = os.path.dirname(ffi.string(lib.vnpu_object_of(ffi.cast("void *", ffi.addressof(lib, "vnpu_report"))))
                        .decode())
_installed = os.path.basename(_here) == "delegate_teflon"
_root = os.path.dirname(_here) if _installed else {str(PACKAGE_ROOT)!r}
if getattr(sys, "_vnpu_teflon_embedded", False):
    import site
    for _dir in [_root] if _installed else {SITE_DIRS!r}:
        if _dir not in sys.path:
            site.addsitedir(_dir)
if _root not in sys.path:
    sys.path.append(_root)
from delegate_teflon import plugin
plugin.install(ffi, lib)
"""

# cffi's generated code takes the callbacks' parameters it does not use; the rest of -Wextra stays.
COMPILE_ARGS = ["-O2", *WARNINGS, "-Wno-unused-parameter"]


def python_start_macros(label: str, flag: str) -> list[tuple[str, str]]:
    """python_start.c's macros: this Python's home, ``label`` (the library in messages) and ``flag``
    (the ``sys`` attribute the init code checks to know it runs embedded)."""
    return [
        ("VNPU_PYTHON_HOME", json.dumps(PYTHON_HOME)),
        ("VNPU_START_LABEL", json.dumps(label)),
        ("VNPU_START_FLAG", json.dumps(flag)),
    ]


def c_source() -> str:
    """The C files as one unit: cffi compiles set_source's text after its own prologue."""
    return "\n".join(path.read_text() for path in abi.SOURCES)


def make_ffi() -> cffi.FFI:
    ffi = cffi.FFI()
    ffi.cdef(abi.cdef())
    ffi.set_source(
        MODULE_NAME,
        c_source(),
        libraries=["dl", "pthread"],
        # "drm/vnpu_accel.h": the ioctl ABI; "teflon_abi.h": the TFLite ABI; "prepared_run.h"
        include_dirs=[str(HEADER_DIR.parent), *(str(d) for d in abi.INCLUDE_DIRS)],
        define_macros=python_start_macros("vnpu delegate", "_vnpu_teflon_embedded"),
        extra_compile_args=COMPILE_ARGS,
    )
    ffi.embedding_init_code(INIT_CODE)
    return ffi


def source_hash() -> str:
    """A key over everything that goes into the binary (sources, cffi and Python versions)."""
    return content_hash(
        (
            abi.cdef(),
            c_source(),
            *(path.read_text() for d in abi.INCLUDE_DIRS for path in sorted(d.glob("*.h"))),
            PYTHON_HOME,
            " ".join(COMPILE_ARGS),
            INIT_CODE,
            *(header.read_text() for header in sorted(HEADER_DIR.glob("*.h"))),
            cffi.__version__,
            sys.version,
            sysconfig.get_config_var("SOABI") or "",
        )
    )


def build(out_dir: Path, build_id: bool = True) -> Path:
    """Compile libteflon.so into ``out_dir`` (atomically replaced) and return its path; ``build_id``:
    also write the source hash beside it as ``BUILD_ID`` (a cache directory's record)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / LIBRARY_NAME
    with staging(out_dir) as tmp:
        ffi = make_ffi()
        publish(Path(ffi.compile(tmpdir=str(tmp), target=LIBRARY_NAME, verbose=False)), target)
    if build_id:
        (out_dir / "BUILD_ID").write_text(source_hash() + "\n")
    return target


@cli_main("python -m delegate_teflon.build")
def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(
        prog="python -m delegate_teflon.build",
        description="Build the vnpu TFLite external delegate (libteflon.so).",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output directory (default: the cache directory library_path() uses)",
    )
    where.add_argument(
        "--install",
        type=Path,
        metavar="PREFIX",
        default=None,
        help="install as PREFIX/lib/libteflon.so (where Mesa's package puts its Teflon)",
    )
    args = parser.parse_args(argv)
    from delegate_teflon import default_build_dir

    path = install(args.install) if args.install else build(args.out or default_build_dir())
    print(path)
    return 0


def install(prefix: Path) -> Path:
    """Build and install ``PREFIX/lib/libteflon.so``; it keeps the Python home and site-packages of
    the Python that ran this (baked in), so it works from any directory."""
    lib_dir = prefix / "lib"
    lib_dir.mkdir(parents=True, exist_ok=True)
    target = lib_dir / LIBRARY_NAME
    with staging(lib_dir) as tmp:
        os.replace(build(tmp), target)  # staging sits in lib_dir: a rename, never half a file
    return target


if __name__ == "__main__":
    raise SystemExit(main())
