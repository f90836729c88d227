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

import fcntl
import os
from pathlib import Path

__all__ = ["default_build_dir", "library_path"]


def _cache_root() -> Path:
    if os.environ.get("VNPU_CACHE_DIR"):
        return Path(os.environ["VNPU_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vnpu"


def default_build_dir() -> Path:
    """Where library_path() keeps the library: one directory per source hash, so edits rebuild."""
    from delegate_teflon.build import source_hash

    return _cache_root() / f"teflon-{source_hash()}"


def library_path() -> str:
    """The absolute path of libteflon.so, built now if this version of the sources has no build yet."""
    from delegate_teflon.build import LIBRARY_NAME, build

    out_dir = default_build_dir()
    target = out_dir / LIBRARY_NAME
    if not target.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        # One builder at a time; the others wait and then find the library in place.
        with open(out_dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not target.exists():
                build(out_dir)
    return str(target.resolve())
