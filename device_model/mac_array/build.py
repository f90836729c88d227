"""Build the MAC array's C kernels with cffi: ``python -m device_model.mac_array.build [--out DIR]``.

The extension is built on first use into a cache directory keyed by a hash of everything that goes
into the binary (``mac-array-<hash>`` under ``$VNPU_CACHE_DIR``, else ``$XDG_CACHE_HOME/vnpu`` or
``~/.cache/vnpu``), so an edit rebuilds and hosts sharing the cache share the build. The binary is
portable across x86-64 CPUs: it is compiled for the baseline ISA, and the AVX2 and AVX-512 VNNI
kernels carry their own ``target(...)`` attributes and run only when the CPU reports those
features (``mac_cpu_isa``). Running
this module builds now and prints the library's path, or the compiler's error.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import platform
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

import cffi

from vnpu_common.cache import build_once, cache_root, content_hash, publish

MODULE_NAME = "_vnpu_mac_array"
SOURCE_PATH = Path(__file__).resolve().parent / "mac_array.c"
# -O3 for the vectoriser; no -march: the AVX2 and VNNI code is selected at run time, not at build time.
COMPILE_ARGS = ["-O3", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"]

CDEF = """
struct mac_layer {
    int64_t n, h, w, cin;
    int64_t kh, kw, cout;
    int64_t stride_h, stride_w, dil_h, dil_w, pad_top, pad_left;
    int64_t out_h, out_w;
    int64_t depth_multiplier;
    int64_t kpad;
    int64_t cout_pad;
    int32_t kind;
    int32_t wide;
    int32_t in_signed;
    int32_t out_signed;
    int32_t input_zp;
    int32_t output_zp;
    int32_t lo, hi;
    int32_t zp_byte_ok;
    int32_t simple_quant;
    const void *packed;
    const int32_t *bias;
    const int32_t *multiplier;
    const int32_t *shift;
    const int8_t *packed8;
    const int32_t *bias8;
    int64_t k4;
    const int32_t *rq;
    int64_t rq_n;
};
int mac_cpu_isa(void);
int mac_run(const struct mac_layer *L, const void *in, void *out, int isa);
int mac_equal(const void *a, const void *b, size_t n);
struct mac_check {
    const void *mem;
    const void *copy;
    size_t n;
};
int mac_run_checked(const struct mac_layer *L, const void *in, void *out, int isa,
                    const struct mac_check *checks, int nchecks);
struct mac_pool {
    int64_t n, h, w, c;
    int64_t fh, fw, sh, sw, pt, pl, oh, ow;
    int32_t lo, hi;
    int32_t average;
    int32_t in_signed;
};
int mac_pool(const struct mac_pool *P, const void *in, void *out);
void mac_lookup(const uint8_t *a, const uint8_t *b, const void *table, void *out, size_t n, int esize, int fa,
                int fb);
"""


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


def build(out_dir: Path) -> Path:
    """Compile the extension into ``out_dir`` (atomically replaced) and return its path.

    Raises whatever the compiler step raises (``cffi.VerificationError`` with gcc's output)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = _library_file(out_dir)
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    ffi.set_source(MODULE_NAME, SOURCE_PATH.read_text(), extra_compile_args=COMPILE_ARGS)
    with tempfile.TemporaryDirectory(prefix="vnpu-mac-array-build-") as tmp:
        publish(Path(ffi.compile(tmpdir=tmp, verbose=False)), target)
    return target


def ensure_built(out_dir: Path | None = None) -> Path:
    """The extension's path, built now (one builder at a time) if this source hash has none yet."""
    return build_once(_library_file(out_dir or default_build_dir()), build)


def load(path: Path) -> ModuleType:
    """Import the built extension from ``path`` (it has ``ffi`` and ``lib``)."""
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the vnpu device model's MAC array (C kernels).")
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
