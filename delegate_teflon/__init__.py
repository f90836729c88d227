"""libteflon.so: the vnpu TFLite external delegate.

Load it like Mesa's Teflon::

    import delegate_teflon
    from tflite_runtime.interpreter import Interpreter, load_delegate   # or ai_edge_litert.interpreter

    delegate = load_delegate(delegate_teflon.library_path(), {"device": "shim", "log_level": "verbose"})
    interpreter = Interpreter(model_path="model.tflite", experimental_delegates=[delegate])

:func:`library_path` returns the library's absolute path: the one an installed wheel carries
(``delegate_teflon/libteflon.so``, built with the wheel), else, in a checkout, a build made on first
use into a cache directory keyed by its sources. docs/delegate.md describes the options and the
placement report.
"""

from __future__ import annotations

from pathlib import Path

from vnpu_common.cache import build_once, cache_root
from vnpu_common.cbuild import prebuilt, sweep

__all__ = ["PREBUILT", "default_build_dir", "library_path"]

# Where a wheel carries the library (setup.py builds it there); a checkout has none.
PREBUILT = Path(__file__).resolve().with_name("libteflon.so")


def default_build_dir() -> Path:
    """Where library_path() keeps the library: one directory per source hash, so edits rebuild."""
    from delegate_teflon.build import source_hash

    return cache_root() / f"teflon-{source_hash()}"


def library_path() -> str:
    """The absolute path of libteflon.so: the wheel's, else the cache's, built now if this version of
    the sources has no build yet."""
    if (path := prebuilt(PREBUILT)) is not None:
        return str(path)
    from delegate_teflon.build import LIBRARY_NAME, build

    def sweep_and_build(out_dir: Path) -> Path:
        sweep(out_dir)
        return build(out_dir)

    target = default_build_dir() / LIBRARY_NAME
    return str(build_once(target, sweep_and_build, "the TFLite delegate libteflon.so (once, ~2 s)").resolve())
