"""libvnpu_ort_ep.so: vnpu as an onnxruntime plugin execution provider (``VnpuExecutionProvider``).

Register it with onnxruntime (1.32) and pick its device::

    import onnxruntime as ort
    import vnpu_ort_ep

    ort.register_execution_provider_library("vnpu", vnpu_ort_ep.library_path())
    device = next(d for d in ort.get_ep_devices() if d.ep_name == vnpu_ort_ep.EP_NAME)
    options = ort.SessionOptions()
    options.add_provider_for_devices([device], {"device": "shim"})
    session = ort.InferenceSession("model_qdq.onnx", options)

:func:`library_path` returns the library's absolute path: the one an installed wheel carries
(``vnpu_ort_ep/libvnpu_ort_ep.so``, built with the wheel), else, in a checkout, a build made on first
use into a cache directory keyed by its sources. docs/onnx.md describes the options and what the EP claims.
"""

from __future__ import annotations

from pathlib import Path

from vnpu_common.cache import build_once, cache_root
from vnpu_common.cbuild import prebuilt

__all__ = ["EP_NAME", "LIBRARY_NAME", "PREBUILT", "default_build_dir", "library_path"]

EP_NAME = "VnpuExecutionProvider"
LIBRARY_NAME = "libvnpu_ort_ep.so"
# Where a wheel carries the library (setup.py builds it there); a checkout has none.
PREBUILT = Path(__file__).resolve().with_name(LIBRARY_NAME)


def default_build_dir() -> Path:
    """Where library_path() keeps the library: one directory per source hash, so edits rebuild."""
    from vnpu_ort_ep.build import source_hash

    return cache_root() / f"ort-ep-{source_hash()}"


def library_path() -> str:
    """The absolute path of libvnpu_ort_ep.so: the wheel's, else the cache's, built now if these
    sources have no build yet."""
    if (path := prebuilt(PREBUILT)) is not None:
        return str(path)
    from vnpu_ort_ep.build import build

    return str(build_once(default_build_dir() / LIBRARY_NAME, build).resolve())
