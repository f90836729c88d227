"""Build libteflon.so with cffi's embedding mode: ``python -m delegate_teflon.build [--out DIR]``.

The library is a thin C surface (the plugin entry points, the by-value registration call, dladdr,
and the invoke Python prepared: copies, SUBMIT and BO_WAIT) whose logic is Python: the first call
into it starts (or joins) the Python interpreter, imports :mod:`delegate_teflon.plugin` and binds
the callbacks. It includes the ioctl ABI's header, ``uapi/drm/vnpu_accel.h``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import site
import sys
import sysconfig
import tempfile
from pathlib import Path

import cffi

from delegate_teflon import abi
from uapi.bindings import HEADER_DIR
from vnpu_common.cache import content_hash, publish

LIBRARY_NAME = "libteflon.so"
MODULE_NAME = "_vnpu_teflon"
PACKAGE_ROOT = Path(__file__).resolve().parent.parent

# The Python the library is built with, baked in for hosts that have none (a C or C++ TFLite
# program): its home (the standard library; a venv's is its base installation) and its
# site-packages (a venv's own, with their .pth files: editable installs).
PYTHON_HOME = sys.base_prefix
SITE_DIRS = tuple(d for d in site.getsitepackages() if os.path.isdir(d))

# Runs inside the process that loaded libteflon.so, on the first call of an entry point. The package
# root goes on sys.path so a host that is not the project's Python still finds delegate_teflon; a
# host without Python (sys._vnpu_teflon_embedded, set by HOST_SOURCE) also gets the site-packages.
INIT_CODE = f"""
import sys
if getattr(sys, "_vnpu_teflon_embedded", False):
    import site
    for _dir in {SITE_DIRS!r}:
        if _dir not in sys.path:
            site.addsitedir(_dir)
_root = {str(PACKAGE_ROOT)!r}
if _root not in sys.path:
    sys.path.append(_root)
from {MODULE_NAME} import ffi, lib
from delegate_teflon import plugin
plugin.install(ffi, lib)
"""


def python_start_source(label: str, flag: str) -> str:
    """C for ``static int vnpu_start_python(void)``: start the Python this library was built for in a
    host that has none (a C or C++ program), or return 0 at once in a Python host. Errors land in
    ``vnpu_start_error``, prefixed with ``label``; ``sys.<flag>`` tells the init code it runs embedded.
    Every vnpu library built with cffi's embedding mode (libteflon.so, the LiteRT vendor libraries)
    starts Python this way."""
    return (
        r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define VNPU_PYTHON_HOME """
        + json.dumps(PYTHON_HOME)
        + r"""

static pthread_mutex_t vnpu_start_lock = PTHREAD_MUTEX_INITIALIZER;
static int vnpu_started;                 /* 0 not yet, 1 running, -1 failed */
static char vnpu_start_error[1024];

/* Python's own start, for a host that has none. */
static int vnpu_start_python(void)
{
    Dl_info info;
    PyConfig config;
    PyStatus status;
    const char *home = getenv("PYTHONHOME") ? getenv("PYTHONHOME") : VNPU_PYTHON_HOME;

    if (Py_IsInitialized())
        return 0;                        /* a Python host: the library joins its interpreter */
    /* A host that dlopen()s us RTLD_LOCAL loads libpython as our private dependency, but Python's
       extension modules (_cffi_backend, numpy) look up the Py* symbols globally: make them global. */
    if (!dladdr((void *)&Py_IsInitialized, &info) || !info.dli_fname ||
        !dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL)) {
        snprintf(vnpu_start_error, sizeof vnpu_start_error,
                 "LABEL: cannot make libpython's symbols global: %s", dlerror());
        return -1;
    }
    PyConfig_InitPythonConfig(&config);
    config.install_signal_handlers = 0;  /* the host's signals stay the host's */
    config.parse_argv = 0;
    status = PyConfig_SetBytesString(&config, &config.home, home);
    if (!PyStatus_Exception(status))
        status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status)) {
        snprintf(vnpu_start_error, sizeof vnpu_start_error,
                 "LABEL: cannot start Python (home %s): %s", home,
                 status.err_msg ? status.err_msg : "exit requested");
        return -1;
    }
    PySys_SetObject("FLAG", Py_True);
    PyEval_SaveThread();                 /* the callbacks take the GIL when they run */
    return 0;
}
""".replace("LABEL", label).replace("FLAG", flag)
    )


# The exported entry points. In a host without Python they first start the interpreter the library
# was built for; every failure on the way goes to stderr and to the host's report_error.
HOST_SOURCE = (
    python_start_source("vnpu delegate", "_vnpu_teflon_embedded")
    + r"""
TfLiteDelegate *tflite_plugin_create_delegate(char **options_keys, char **options_values,
                                              size_t num_options, void (*report_error)(const char *))
{
    pthread_mutex_lock(&vnpu_start_lock);
    if (vnpu_started == 0) {
        vnpu_started = vnpu_start_python() == 0 ? 1 : -1;
        if (vnpu_started == 1 && cffi_start_python() != 0) {
            snprintf(vnpu_start_error, sizeof vnpu_start_error,
                     "vnpu delegate: the delegate's Python code did not load (Python home %s; "
                     "the traceback is on stderr)", VNPU_PYTHON_HOME);
            vnpu_started = -1;
        }
    }
    pthread_mutex_unlock(&vnpu_start_lock);
    if (vnpu_started < 0) {
        fprintf(stderr, "%s\n", vnpu_start_error);
        if (report_error)
            report_error(vnpu_start_error);
        return NULL;
    }
    return vnpu_plugin_create(options_keys, options_values, num_options, report_error);
}

void tflite_plugin_destroy_delegate(TfLiteDelegate *delegate)
{
    if (delegate && vnpu_started > 0)
        vnpu_plugin_destroy(delegate);
}
"""
)


def make_ffi() -> cffi.FFI:
    ffi = cffi.FFI()
    ffi.cdef(abi.CDEF)
    ffi.set_source(
        MODULE_NAME,
        abi.C_SOURCE + HOST_SOURCE,
        libraries=["dl", "pthread"],
        include_dirs=[str(HEADER_DIR.parent)],  # "drm/vnpu_accel.h": the ioctl ABI
        extra_compile_args=["-O2", "-Wall"],
    )
    ffi.embedding_init_code(INIT_CODE)
    return ffi


def source_hash() -> str:
    """A key over everything that goes into the binary (sources, cffi and Python versions)."""
    return content_hash(
        (
            abi.CDEF,
            abi.C_SOURCE,
            abi.EXPORTS,
            HOST_SOURCE,
            INIT_CODE,
            *(header.read_text() for header in sorted(HEADER_DIR.glob("*.h"))),
            cffi.__version__,
            sys.version,
            sysconfig.get_config_var("SOABI") or "",
        )
    )


def build(out_dir: Path) -> Path:
    """Compile libteflon.so into ``out_dir`` (atomically replaced) and return its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / LIBRARY_NAME
    with tempfile.TemporaryDirectory(prefix="vnpu-teflon-build-") as tmp:
        ffi = make_ffi()
        publish(Path(ffi.compile(tmpdir=tmp, target=LIBRARY_NAME, verbose=False)), target)
    (out_dir / "BUILD_ID").write_text(source_hash() + "\n")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the vnpu TFLite external delegate (libteflon.so).")
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
    with tempfile.TemporaryDirectory(prefix="vnpu-teflon-install-") as tmp:
        built = build(Path(tmp))
        staged = lib_dir / f".{LIBRARY_NAME}.{os.getpid()}"
        shutil.copy2(built, staged)
        os.replace(staged, target)
    return target


if __name__ == "__main__":
    raise SystemExit(main())
