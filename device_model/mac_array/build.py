"""Build the MAC array's C kernels with cffi: ``python -m device_model.mac_array.build [--out DIR]``.

A wheel carries the extension built (``device_model/mac_array/_vnpu_mac_array*.so``, by
``setup.py``), which an installed package loads and never compiles. In a checkout it is built on
first use into a cache directory keyed by a hash of everything that goes
into the binary (``mac-array-<hash>`` under ``$VNPU_CACHE_DIR``, else ``$XDG_CACHE_HOME/vnpu`` or
``~/.cache/vnpu``), so an edit rebuilds and hosts sharing the cache share the build. The binary is
portable across x86-64 CPUs: it is compiled for the baseline ISA, and the AVX2 and AVX-512 VNNI
kernels carry their own ``target(...)`` attributes and run only when the CPU reports those
features (``mac_cpu_isa``): the one binary holds the generic, AVX2 and AVX-512 VNNI variants, and
the CPU picks among them at run time. Running
this module builds now and prints the library's path, or the compiler's error.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import platform
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

import cffi

from vnpu_common.cache import build_once, cache_root, content_hash, publish
from vnpu_common.cbuild import WARNINGS, interface, prebuilt, staging, sweep
from vnpu_common.cli import OneLineArgumentParser, cli_main

MODULE_NAME = "_vnpu_mac_array"
PACKAGE_DIR = Path(__file__).resolve().parent
SOURCE_PATH = PACKAGE_DIR / "mac_array.c"
# -O3 for the vectoriser; no -march: the AVX2 and VNNI code is selected at run time, not at build time.
# cffi's generated wrappers leave parameters unused; mac_array.c turns that warning back on itself.
COMPILE_ARGS = ["-O3", "-std=gnu11", *WARNINGS, "-Wno-unused-parameter"]

# What a first use says on stderr while it builds (vnpu_common.cache.build_once).
ANNOUNCE = "the MAC array for this CPU (once, ~10 s)"

# The declarations cffi's cdef reads: mac_array.c's interface block.
CDEF = interface(SOURCE_PATH.read_text())


def source_hash() -> str:
    """A key over the C source, the declarations, the flags, cffi, Python and the machine type."""
    return content_hash(
        (
            SOURCE_PATH.read_text(),
            CDEF,
            " ".join(COMPILE_ARGS),
            cffi.__version__,
            sys.version,
            sysconfig.get_config_var("SOABI") or "",
            platform.machine(),
        )
    )


def default_build_dir() -> Path:
    return cache_root() / f"mac-array-{source_hash()}"


def _library_file(out_dir: Path) -> Path:
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return out_dir / f"{MODULE_NAME}{suffix}"


def installed() -> Path | None:
    """The extension a wheel carries beside this module, or None (a checkout)."""
    return prebuilt(_library_file(PACKAGE_DIR))


def build(out_dir: Path) -> Path:
    """Compile the extension into ``out_dir`` (atomically replaced) and return its path.

    Raises whatever the compiler step raises (``cffi.VerificationError`` with gcc's output)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = _library_file(out_dir)
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    ffi.set_source(MODULE_NAME, SOURCE_PATH.read_text(), extra_compile_args=COMPILE_ARGS)
    with staging(out_dir) as tmp:
        publish(Path(ffi.compile(tmpdir=str(tmp), verbose=False)), target)
    return target


def _sweep_and_build(out_dir: Path) -> Path:
    sweep(out_dir)
    return build(out_dir)


def ensure_built(out_dir: Path | None = None) -> Path:
    """The extension's path: the wheel's, else the cache's, built now (one builder at a time) if
    this source hash has none yet. ``out_dir`` names the cache directory (never the wheel's)."""
    if out_dir is None and (path := installed()) is not None:
        return path
    return build_once(_library_file(out_dir or default_build_dir()), _sweep_and_build, ANNOUNCE)


def load(path: Path) -> ModuleType:
    """Import the built extension from ``path`` (it has ``ffi`` and ``lib``)."""
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cli_main("python -m device_model.mac_array.build")
def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(
        prog="python -m device_model.mac_array.build",
        description="Build the vnpu device model's MAC array (C kernels).",
    )
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: the cache)")
    args = parser.parse_args(argv)
    path = build(args.out) if args.out else ensure_built()
    module = load(path)
    from . import ISA_NAMES

    isa = ISA_NAMES.get(module.lib.mac_cpu_isa(), "?")
    print(f"{path} (this CPU runs the {isa} kernels)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
