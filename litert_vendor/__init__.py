"""vnpu as a LiteRT NPU vendor: a compiler plugin and a dispatch library (docs/litert.md).

:func:`library_dir` returns the directory holding ``libLiteRtCompilerPlugin_Vnpu.so`` and
``libLiteRtDispatch_Vnpu.so``, the directory LiteRT's tools and its CompiledModel API take: the one an
installed wheel carries (``litert_vendor/lib/``, built with the wheel), else, in a checkout, a build
made on first use into a cache directory keyed by their sources::

    import litert_vendor
    libs = litert_vendor.library_dir()
    # apply_plugin_main --cmd apply --model m.tflite --o m_npu.tflite --libs $libs --soc_manufacturer Vnpu
"""

from __future__ import annotations

from pathlib import Path

from vnpu_common.cache import build_once, cache_root
from vnpu_common.cbuild import prebuilt

__all__ = ["DISPATCH_LIBRARY", "PLUGIN_LIBRARY", "PREBUILT", "default_build_dir", "library_dir"]

PLUGIN_LIBRARY = "libLiteRtCompilerPlugin_Vnpu.so"
DISPATCH_LIBRARY = "libLiteRtDispatch_Vnpu.so"  # built second: its presence means both are there
# Where a wheel carries both libraries (setup.py builds them there); a checkout has none.
PREBUILT = Path(__file__).resolve().with_name("lib")


def default_build_dir() -> Path:
    """Where library_dir() keeps the libraries: one directory per source hash, so edits rebuild."""
    from litert_vendor.build import source_hash

    return cache_root() / f"litert-{source_hash()}"


def library_dir() -> str:
    """The absolute directory of both libraries: the wheel's, else the cache's, built now if these
    sources have no build yet."""
    if prebuilt(PREBUILT / DISPATCH_LIBRARY) is not None:
        return str(PREBUILT)
    from litert_vendor.build import build

    directory = default_build_dir()
    build_once(directory / "BUILD_ID", build)
    return str(directory.resolve())
