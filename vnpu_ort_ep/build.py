"""Build libvnpu_ort_ep.so with cffi's embedding mode: ``python -m vnpu_ort_ep.build [--out DIR]``.

The same mechanism as libteflon.so (delegate_teflon.build): a thin C surface whose logic is Python.
The exports ``CreateEpFactories`` / ``ReleaseEpFactory`` and every callback onnxruntime calls
(the OrtEpFactory, OrtEp and OrtNodeComputeInfo members) are cffi ``extern "Python"`` functions;
the first call starts (or joins) the Python interpreter and imports :mod:`vnpu_ort_ep.plugin`. The
ABI is the project's mirror of onnxruntime's headers, ``vnpu_ort_abi.h``. A wheel carries the
library built (``setup.py`` calls :func:`build`).
"""

from __future__ import annotations

import re
import sys
import sysconfig
from pathlib import Path

import cffi

from delegate_teflon.build import PACKAGE_ROOT
from vnpu_common.cache import content_hash, publish
from vnpu_common.cbuild import WARNINGS, staging, sweep
from vnpu_common.cli import OneLineArgumentParser, cli_main
from vnpu_ort_ep import LIBRARY_NAME

MODULE_NAME = "_vnpu_ort_ep"
HEADER = Path(__file__).resolve().parent / "vnpu_ort_abi.h"

INIT_CODE = f"""
import sys
_root = {str(PACKAGE_ROOT)!r}
if _root not in sys.path:
    sys.path.append(_root)
from {MODULE_NAME} import ffi, lib
from vnpu_ort_ep import plugin
plugin.install(ffi, lib)
"""

# The library's exports (onnxruntime looks them up by name after dlopen).
EXPORTS = r"""
OrtStatus *CreateEpFactories(const char *registered_name, const OrtApiBase *ort_api_base,
                             const OrtLogger *default_logger, OrtEpFactory **factories, size_t max_factories,
                             size_t *num_factories);
OrtStatus *ReleaseEpFactory(OrtEpFactory *factory);
"""

# What onnxruntime calls through the structs the library fills, implemented in Python.
CALLBACKS = r"""
extern "Python" const char *vnpu_factory_get_name(const OrtEpFactory *this_ptr);
extern "Python" const char *vnpu_factory_get_vendor(const OrtEpFactory *this_ptr);
extern "Python" uint32_t vnpu_factory_get_vendor_id(const OrtEpFactory *this_ptr);
extern "Python" const char *vnpu_factory_get_version(const OrtEpFactory *this_ptr);
extern "Python" bool vnpu_factory_is_stream_aware(const OrtEpFactory *this_ptr);
extern "Python" OrtStatus *vnpu_factory_validate_compiled_model(OrtEpFactory *this_ptr,
    const OrtHardwareDevice *const *devices, size_t num_devices, const char *compatibility_info,
    OrtCompiledModelCompatibility *model_compatibility);
extern "Python" OrtStatus *vnpu_factory_create_allocator(OrtEpFactory *this_ptr,
    const OrtMemoryInfo *memory_info,
    const OrtKeyValuePairs *allocator_options, OrtAllocator **allocator);
extern "Python" void vnpu_factory_release_allocator(OrtEpFactory *this_ptr, OrtAllocator *allocator);
extern "Python" OrtStatus *vnpu_factory_create_data_transfer(OrtEpFactory *this_ptr,
    OrtDataTransferImpl **data_transfer);
extern "Python" OrtStatus *vnpu_factory_create_sync_stream(OrtEpFactory *this_ptr,
    const OrtMemoryDevice *memory_device, const OrtKeyValuePairs *stream_options, OrtSyncStreamImpl **stream);
extern "Python" OrtStatus *vnpu_factory_get_supported_devices(OrtEpFactory *this_ptr,
    const OrtHardwareDevice *const *devices, size_t num_devices, OrtEpDevice **ep_devices,
    size_t max_ep_devices, size_t *num_ep_devices);
extern "Python" OrtStatus *vnpu_factory_create_ep(OrtEpFactory *this_ptr,
    const OrtHardwareDevice *const *devices,
    const OrtKeyValuePairs *const *ep_metadata_pairs, size_t num_devices,
    const OrtSessionOptions *session_options, const OrtLogger *logger, OrtEp **ep);
extern "Python" void vnpu_factory_release_ep(OrtEpFactory *this_ptr, OrtEp *ep);
extern "Python" const char *vnpu_ep_get_name(const OrtEp *this_ptr);
extern "Python" OrtStatus *vnpu_ep_get_capability(OrtEp *this_ptr, const OrtGraph *graph,
    OrtEpGraphSupportInfo *graph_support_info);
extern "Python" OrtStatus *vnpu_ep_compile(OrtEp *this_ptr, const OrtGraph **graphs,
    const OrtNode **fused_nodes,
    size_t count, OrtNodeComputeInfo **node_compute_infos, OrtNode **ep_context_nodes);
extern "Python" void vnpu_ep_release_node_compute_infos(OrtEp *this_ptr,
    OrtNodeComputeInfo **node_compute_infos,
    size_t num_node_compute_infos);
extern "Python" OrtStatus *vnpu_compute_create_state(OrtNodeComputeInfo *this_ptr,
    OrtNodeComputeContext *compute_context, void **compute_state);
extern "Python" OrtStatus *vnpu_compute(OrtNodeComputeInfo *this_ptr, void *compute_state,
    OrtKernelContext *kernel_context);
extern "Python" void vnpu_compute_release_state(OrtNodeComputeInfo *this_ptr, void *compute_state);
"""


# The library's own C (pinning itself in memory at load: see the file).
PIN_SOURCE = Path(__file__).resolve().parent / "ort_ep_pin.c"


def abi_cdef() -> str:
    """The mirror's declarations between its cdef markers, for cffi."""
    text = HEADER.read_text()
    match = re.search(r"/\* cdef begin \*/(.*?)/\* cdef end \*/", text, re.S)
    if match is None:
        raise RuntimeError(f"{HEADER}: no cdef begin/end markers")
    return match.group(1)


def make_ffi() -> cffi.FFI:
    ffi = cffi.FFI()
    ffi.cdef(abi_cdef() + CALLBACKS)
    ffi.embedding_api(EXPORTS)
    ffi.set_source(
        MODULE_NAME,
        PIN_SOURCE.read_text(),
        libraries=["dl"],
        include_dirs=[str(HEADER.parent)],
        # cffi's generated code has unused parameters; the rest of the warnings are errors.
        extra_compile_args=["-O2", *WARNINGS, "-Wno-unused-parameter"],
    )
    ffi.embedding_init_code(INIT_CODE)
    return ffi


def source_hash() -> str:
    """A key over everything that goes into the binary (sources, cffi and Python versions)."""
    return content_hash(
        (
            HEADER.read_text(),
            PIN_SOURCE.read_text(),
            EXPORTS,
            CALLBACKS,
            INIT_CODE,
            cffi.__version__,
            sys.version,
            sysconfig.get_config_var("SOABI") or "",
        )
    )


def build(out_dir: Path, build_id: bool = True) -> Path:
    """Compile libvnpu_ort_ep.so into ``out_dir`` (atomically replaced) and return its path;
    ``build_id``: also write the source hash beside it as ``BUILD_ID`` (a cache directory's record)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / LIBRARY_NAME
    sweep(out_dir)  # what an interrupted build left
    with staging(out_dir) as tmp:  # in the cache, not /tmp: a killed build leaves nothing there
        ffi = make_ffi()
        publish(Path(ffi.compile(tmpdir=str(tmp), target=LIBRARY_NAME, verbose=False)), target)
    if build_id:
        (out_dir / "BUILD_ID").write_text(source_hash() + "\n")
    return target


@cli_main("python -m vnpu_ort_ep.build")
def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(
        prog="python -m vnpu_ort_ep.build",
        description="Build libvnpu_ort_ep.so, vnpu's onnxruntime plugin EP.",
    )
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: library_path()'s)")
    args = parser.parse_args(argv)
    from vnpu_ort_ep import default_build_dir

    print(build(args.out or default_build_dir()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
