"""Build libteflon.so with cffi's embedding mode: ``python -m delegate_teflon.build [--out DIR]``.

The library is a thin C surface (the plugin entry points, the by-value registration call, dladdr)
whose logic is Python: the first call into it starts (or joins) the Python interpreter, imports
:mod:`delegate_teflon.plugin` and binds the callbacks.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

import cffi

from delegate_teflon import abi

LIBRARY_NAME = "libteflon.so"
MODULE_NAME = "_vnpu_teflon"
PACKAGE_ROOT = Path(__file__).resolve().parent.parent

# Runs inside the process that loaded libteflon.so, on the first call of an exported function. The
# package root goes on sys.path so a host that is not the project's Python (a C++ TFLite binary)
# still finds delegate_teflon.
INIT_CODE = f"""
import sys
_root = {str(PACKAGE_ROOT)!r}
if _root not in sys.path:
    sys.path.append(_root)
from {MODULE_NAME} import ffi, lib
from delegate_teflon import plugin
plugin.install(ffi, lib)
"""


def make_ffi() -> cffi.FFI:
    ffi = cffi.FFI()
    ffi.cdef(abi.CDEF)
    ffi.embedding_api(abi.EXPORTS)
    ffi.set_source(MODULE_NAME, abi.C_SOURCE, libraries=["dl"], extra_compile_args=["-O2", "-Wall"])
    ffi.embedding_init_code(INIT_CODE)
    return ffi


def source_hash() -> str:
    """A key over everything that goes into the binary (sources, cffi and Python versions)."""
    h = hashlib.sha256()
    for part in (
        abi.CDEF,
        abi.C_SOURCE,
        abi.EXPORTS,
        INIT_CODE,
        cffi.__version__,
        sys.version,
        sysconfig.get_config_var("SOABI") or "",
    ):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def build(out_dir: Path) -> Path:
    """Compile libteflon.so into ``out_dir`` (atomically replaced) and return its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / LIBRARY_NAME
    with tempfile.TemporaryDirectory(prefix="vnpu-teflon-build-") as tmp:
        ffi = make_ffi()
        built = Path(ffi.compile(tmpdir=tmp, target=LIBRARY_NAME, verbose=False))
        staged = out_dir / f".{LIBRARY_NAME}.{os.getpid()}"
        shutil.copy2(built, staged)
        os.replace(staged, target)  # never expose a half-written library to a concurrent loader
    (out_dir / "BUILD_ID").write_text(source_hash() + "\n")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the vnpu TFLite external delegate (libteflon.so).")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output directory (default: the cache directory library_path() uses)",
    )
    args = parser.parse_args(argv)
    from delegate_teflon import default_build_dir

    path = build(args.out or default_build_dir())
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
