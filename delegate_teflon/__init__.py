"""libteflon.so: the vnpu TFLite external delegate.

Load it like Mesa's Teflon::

    import delegate_teflon
    from tflite_runtime.interpreter import Interpreter, load_delegate   # or ai_edge_litert.interpreter

    delegate = load_delegate(delegate_teflon.library_path(), {"device": "shim", "log_level": "verbose"})
    interpreter = Interpreter(model_path="model.tflite", experimental_delegates=[delegate])

:func:`library_path` builds the library on first use (into a cache directory keyed by its sources)
and returns its absolute path. docs/delegate.md describes the options and the placement report.
"""

from __future__ import annotations

from pathlib import Path

from vnpu_common.cache import build_once, cache_root

__all__ = ["default_build_dir", "library_path"]


def default_build_dir() -> Path:
    """Where library_path() keeps the library: one directory per source hash, so edits rebuild."""
    from delegate_teflon.build import source_hash

    return cache_root() / f"teflon-{source_hash()}"


def library_path() -> str:
    """The absolute path of libteflon.so, built now if this version of the sources has no build yet."""
    from delegate_teflon.build import LIBRARY_NAME, build

    return str(build_once(default_build_dir() / LIBRARY_NAME, build).resolve())
