"""Every call the delegate makes into libaccel.compiler, in one place.

The compiler's entry points (``check_support``, ``compile_partition``, ``PartitionRunner``) are
looked up when first used, so the delegate still loads, and runs a model wholly on the CPU with a
clear reason, where the compiler is missing a piece.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from libaccel.compiler.graph import Graph, OpNode


class CompilerUnavailable(RuntimeError):
    """libaccel.compiler lacks an entry point the delegate needs."""


def _compiler_attr(name: str) -> Any:
    module = importlib.import_module("libaccel.compiler")
    try:
        return getattr(module, name)
    except AttributeError:
        raise CompilerUnavailable(f"libaccel.compiler has no {name}") from None


def check(graph: Graph, node: OpNode) -> tuple[bool, str]:
    """(runs on the NPU, why not) for one node, from the compiler's own support check."""
    try:
        check_support = _compiler_attr("check_support")
    except (CompilerUnavailable, ImportError) as e:
        return False, str(e)
    result = check_support(graph, node)
    return bool(result.supported), str(result.reason or "")


def compile_partition(graph: Graph, device: Any, cache_dir: Any) -> Any:
    """Compile ``graph`` (one partition) for ``device``; the compiler caches on disk in ``cache_dir``."""
    return _compiler_attr("compile_partition")(graph, device=device, cache_dir=cache_dir)


def make_runner(compiled: Any, device: Any) -> Any:
    return _compiler_attr("PartitionRunner")(compiled, device)


def run(runner: Any, inputs: dict[int, np.ndarray], outputs: dict[int, np.ndarray]) -> None:
    """One submit: read ``inputs`` (tensor index -> view of the runtime's buffer), fill ``outputs``."""
    runner.run(inputs, outputs)
