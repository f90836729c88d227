"""vnpu as a LiteRT NPU vendor: a compiler plugin and a dispatch library (docs/litert.md).

:func:`library_dir` builds both on first use (into a cache directory keyed by their sources) and
returns the directory holding ``libLiteRtCompilerPlugin_Vnpu.so`` and ``libLiteRtDispatch_Vnpu.so``,
the directory LiteRT's tools and its CompiledModel API take::

    import litert_vendor
    libs = litert_vendor.library_dir()
    # apply_plugin_main --cmd apply --model m.tflite --o m_npu.tflite --libs $libs --soc_manufacturer Vnpu
"""

from __future__ import annotations

from pathlib import Path

from vnpu_common.cache import build_once, cache_root

__all__ = ["default_build_dir", "library_dir"]


def default_build_dir() -> Path:
    """Where library_dir() keeps the libraries: one directory per source hash, so edits rebuild."""
    from litert_vendor.build import source_hash

    return cache_root() / f"litert-{source_hash()}"


def library_dir() -> str:
    """The absolute directory of both libraries, built now if these sources have no build yet."""
    from litert_vendor.build import build

    directory = default_build_dir()
    build_once(directory / "BUILD_ID", build)
    return str(directory.resolve())
