"""libvnpu_ort_ep.so: vnpu as an onnxruntime plugin execution provider (``VnpuExecutionProvider``).

Register it with onnxruntime (1.32) and pick its device::

    import onnxruntime as ort
    import vnpu_ort_ep

    ort.register_execution_provider_library("vnpu", vnpu_ort_ep.library_path())
    device = next(d for d in ort.get_ep_devices() if d.ep_name == vnpu_ort_ep.EP_NAME)
    options = ort.SessionOptions()
    options.add_provider_for_devices([device], {"device": "shim"})
    session = ort.InferenceSession("model_qdq.onnx", options)

:func:`library_path` builds the library on first use (into a cache directory keyed by its sources)
and returns its absolute path. docs/onnx.md describes the options and what the EP claims.
"""

from __future__ import annotations

from pathlib import Path

from vnpu_common.cache import build_once, cache_root

__all__ = ["EP_NAME", "LIBRARY_NAME", "default_build_dir", "library_path"]

EP_NAME = "VnpuExecutionProvider"
LIBRARY_NAME = "libvnpu_ort_ep.so"


def default_build_dir() -> Path:
    """Where library_path() keeps the library: one directory per source hash, so edits rebuild."""
    from vnpu_ort_ep.build import source_hash

    return cache_root() / f"ort-ep-{source_hash()}"


def library_path() -> str:
    """The absolute path of libvnpu_ort_ep.so, built now if these sources have no build yet."""
    from vnpu_ort_ep.build import build

    return str(build_once(default_build_dir() / LIBRARY_NAME, build).resolve())
