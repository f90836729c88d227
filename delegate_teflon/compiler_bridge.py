"""Every call the delegate makes into libaccel.compiler, in one place.

The compiler's entry points (``check_support``, ``compile_partition``, ``PartitionRunner``) are looked
up when first used, from the package or the module that defines them, so the delegate still loads,
and runs a model wholly on the CPU with a clear reason, where the compiler lacks a piece.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from libaccel.compiler.graph import Graph, OpNode

# Where each entry point lives when the package does not re-export it.
_HOMES = {
    "check_support": "libaccel.compiler.ops",
    "compile_cached": "libaccel.compiler.cache",
    "CompileCache": "libaccel.compiler.cache",
    "PartitionRunner": "libaccel.compiler.runner",
}


class CompilerUnavailable(RuntimeError):
    """libaccel.compiler lacks an entry point the delegate needs."""


def _compiler_attr(name: str) -> Any:
    for module_name in ("libaccel.compiler", _HOMES[name]):
        try:
            return getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError):
            continue
    raise CompilerUnavailable(f"libaccel.compiler has no {name}")


def check(graph: Graph, node: OpNode) -> tuple[bool, str]:
    """(runs on the NPU, why not) for one node, from the compiler's own support check."""
    try:
        check_support = _compiler_attr("check_support")
    except CompilerUnavailable as e:
        return False, str(e)
    result = check_support(graph, node)
    return bool(result.ok), str(result.reason or "")


def compile_partition(graph: Graph, device: Any, cache_dir: Any) -> tuple[Any, bool]:
    """Compile all of ``graph`` (one partition, its outputs as given) for ``device``, through the
    compiler's on-disk cache in ``cache_dir`` (None: the compiler's default). Returns (compiled, hit)."""
    cache = _compiler_attr("CompileCache")(cache_dir)
    node_indices = [n.index for n in graph.nodes]
    return _compiler_attr("compile_cached")(
        graph, node_indices, device.params.isa_version, cache=cache, outputs=graph.outputs
    )


def make_runner(compiled: Any, device: Any) -> Any:
    return _compiler_attr("PartitionRunner")(device, compiled)


def run(runner: Any, inputs: dict[int, np.ndarray], outputs: dict[int, np.ndarray]) -> None:
    """One submit: copy ``inputs`` (the runtime's buffers) into the arena, run, copy ``outputs`` out.

    Exactly one copy each way: TFLite's buffer -> the input BO view, the output BO view -> TFLite's.
    """
    for index, value in inputs.items():
        runner.input_view(index)[...] = value
    runner.submit_and_wait()
    for index, value in outputs.items():
        value[...] = runner.output_view(index)
