"""Build the LiteRT vendor libraries with cffi's embedding mode.

``python -m litert_vendor.build [--out DIR]``.

Two libraries in one directory, the way LiteRT looks for them (a wheel carries them built in
``litert_vendor/lib/``: ``setup.py`` calls :func:`build`):

* ``libLiteRtCompilerPlugin_Vnpu.so``: the compiler plugin (``apply_plugin_main --libs DIR``, the
  ``ai_edge_litert.aot`` backend ``vnpu``, or a CompiledModel's compiler plugin path);
* ``libLiteRtDispatch_Vnpu.so``: the dispatch library (``--dispatch_library_path DIR``, a
  CompiledModel's dispatch library path).

Each is a C surface (``litert_vendor/c/``, :mod:`litert_vendor.abi`) over Python: the first call
that needs Python starts it (in a C host such as ``apply_plugin_main``) or joins it (in a Python
host), as libteflon.so does.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

import cffi

from delegate_teflon.abi import PYTHON_START
from delegate_teflon.build import COMPILE_ARGS, PACKAGE_ROOT, SITE_DIRS, python_start_macros
from libaccel.compiler.compiled import COMPILER_VERSION
from litert_vendor import DISPATCH_LIBRARY, PLUGIN_LIBRARY, abi
from vnpu_common.cache import content_hash, publish
from vnpu_common.cbuild import staging, sweep
from vnpu_common.cli import OneLineArgumentParser, cli_main

SDK_VERSION = f"vnpu compiler {COMPILER_VERSION}"

# Runs in the process that loaded the library, at its first Python call (see delegate_teflon.build).
# The directory that holds litert_vendor goes on sys.path: for the libraries a wheel carries
# (litert_vendor/lib/) the site-packages they sit in, found from the library's own path; for a build
# in the cache, the package root it was built from. A host without Python (a C host such as
# apply_plugin_main: sys._vnpu_litert_embedded) also gets that site-packages' .pth files, or the
# build's site-packages.
_INIT_CODE = """
import os, sys
from {module} import ffi, lib
_here = os.path.dirname(ffi.string(lib.vnpu_library_file()).decode())
_installed = _here.endswith(os.path.join("litert_vendor", "lib"))
_root = os.path.dirname(os.path.dirname(_here)) if _installed else {root!r}
if getattr(sys, "_vnpu_litert_embedded", False):
    import site
    for _dir in [_root] if _installed else {sites!r}:
        if _dir not in sys.path:
            site.addsitedir(_dir)
if _root not in sys.path:
    sys.path.append(_root)
from litert_vendor import {python}
{python}.install(ffi, lib)
"""


def _parts(library: str) -> tuple[str, str, str, str]:
    """(cffi module name, cdef, C source, init code) of ``library``."""
    if library == PLUGIN_LIBRARY:
        module, python, callbacks, own = (
            "_vnpu_litert_plugin",
            "compiler_plugin",
            abi.PLUGIN_CALLBACKS,
            abi.PLUGIN_SOURCE,
        )
    elif library == DISPATCH_LIBRARY:
        module, python, callbacks, own = (
            "_vnpu_litert_dispatch",
            "dispatch",
            abi.DISPATCH_CALLBACKS,
            abi.DISPATCH_SOURCE,
        )
    else:
        raise ValueError(f"no LiteRT vendor library {library!r}: {PLUGIN_LIBRARY} or {DISPATCH_LIBRARY}")
    init = _INIT_CODE.format(sites=SITE_DIRS, root=str(PACKAGE_ROOT), module=module, python=python)
    cdef = abi.LITERT_CDEF + abi.RESULT_TYPES + callbacks
    # One unit after cffi's prologue: Python's start, then the library's entry points.
    source = "\n".join(path.read_text() for path in (PYTHON_START, abi.START_SOURCE, own))
    return module, cdef, source, init


def make_ffi(library: str) -> cffi.FFI:
    module, cdef, source, init = _parts(library)
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    ffi.set_source(
        module,
        source,
        libraries=["dl", "pthread"],
        include_dirs=[str(abi.INCLUDE_DIR), str(abi.C_DIR)],
        define_macros=[
            *python_start_macros("vnpu LiteRT vendor library", "_vnpu_litert_embedded"),
            *abi.macros(library, SDK_VERSION),
        ],
        extra_compile_args=COMPILE_ARGS,
    )
    ffi.embedding_init_code(init)
    return ffi


def source_hash() -> str:
    """A key over everything that goes into both binaries (sources, cffi and Python versions)."""
    parts: list[str] = []
    for library in (PLUGIN_LIBRARY, DISPATCH_LIBRARY):
        parts.extend(_parts(library))
    return content_hash(
        (
            *parts,
            abi.HEADER.read_text(),
            abi.VENDOR_HEADER.read_text(),
            repr([abi.macros(library, SDK_VERSION) for library in (PLUGIN_LIBRARY, DISPATCH_LIBRARY)]),
            " ".join(COMPILE_ARGS),
            cffi.__version__,
            sys.version,
            sysconfig.get_config_var("SOABI") or "",
        )
    )


def build(out_dir: Path, build_id: bool = True) -> Path:
    """Compile both libraries into ``out_dir`` (each atomically replaced); returns ``out_dir``.
    ``build_id``: also write the source hash beside them as ``BUILD_ID`` (a cache directory's record)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    sweep(out_dir)  # what an interrupted build left
    for library in (PLUGIN_LIBRARY, DISPATCH_LIBRARY):
        with staging(out_dir) as tmp:  # in out_dir, not /tmp: a killed build leaves nothing there
            built = make_ffi(library).compile(tmpdir=str(tmp), target=library, verbose=False)
            publish(Path(built), out_dir / library)
    if build_id:
        (out_dir / "BUILD_ID").write_text(source_hash() + "\n")
    return out_dir


@cli_main("python -m litert_vendor.build")
def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(
        prog="python -m litert_vendor.build",
        description="Build vnpu's LiteRT compiler plugin and dispatch library.",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output directory (default: the cache directory library_dir() uses)",
    )
    args = parser.parse_args(argv)
    from litert_vendor import default_build_dir

    print(build(args.out or default_build_dir()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
