"""Every call the delegate makes into libaccel.compiler, in one place.

The compiler's entry points (``check_support``, ``compile_partition``, ``PartitionRunner``) are looked
up when first used, from the package or the module that defines them, so the delegate still loads,
and runs a model wholly on the CPU with a clear reason, where the compiler lacks a piece.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from libaccel.compiler.graph import Graph, OpNode

# Where each entry point lives when the package does not re-export it.
_HOMES = {
    "check_support": "libaccel.compiler.registry",
    "compile_cached": "libaccel.compiler.cache",
    "CompileCache": "libaccel.compiler.cache",
    "model_key": "libaccel.compiler.cache",
    "partition_key": "libaccel.compiler.cache",
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


class SupportChecks:
    """The compiler's support check for one model, memoized in the compile cache.

    Checking a node computes its requantization constants (per channel: thousands of multipliers),
    which dominates a cached load if redone; the results are a pure function of the model's content
    and the compiler version, so they are stored next to the compiled partitions under the model's
    key (:func:`model_key`) and read back on the next load.
    """

    def __init__(self, key: str, cache_dir: Any) -> None:
        self.key = key
        self.cache = _compiler_attr("CompileCache")(cache_dir)
        self.results: dict[int, tuple[bool, str]] = self.cache.get_support(key)
        self.cached = len(self.results)
        self._dirty = False

    def check(self, graph: Graph, node: OpNode) -> tuple[bool, str]:
        hit = self.results.get(node.index)
        if hit is None:
            hit = self.results[node.index] = check(graph, node)
            self._dirty = True
        return hit

    def save(self) -> None:
        """Store the results if any were computed (an unwritable cache only costs time)."""
        if self._dirty:
            try:
                self.cache.put_support(self.key, self.results)
            except OSError:
                pass
            self._dirty = False


def model_key(graph: Graph, device: Any) -> str:
    """The compile-cache key of a whole model for ``device`` (one hash over its constant bytes)."""
    return str(_compiler_attr("model_key")(graph, device.params.isa_version))


def compile_partition(
    graph: Graph, device: Any, cache_dir: Any, model: str | None = None
) -> tuple[Any, bool]:
    """Compile all of ``graph`` (one partition, its outputs as given) for ``device``, through the
    compiler's on-disk cache in ``cache_dir`` (None: the compiler's default). With ``model`` (the
    whole model's :func:`model_key`) the partition's key derives from it, without hashing the
    partition's constants again. Returns (compiled, hit)."""
    cache = _compiler_attr("CompileCache")(cache_dir)
    node_indices = [n.index for n in graph.nodes]
    key = None if model is None else _compiler_attr("partition_key")(model, node_indices, graph.outputs)
    return _compiler_attr("compile_cached")(
        graph,
        node_indices,
        device.params.isa_version,
        cache=cache,
        outputs=graph.outputs,
        key=key,
        weights_in_file=True,  # uploaded from the cache file: never a second copy in memory
    )


def make_runner(compiled: Any, device: Any) -> Any:
    return _compiler_attr("PartitionRunner")(device, compiled)


@dataclass(frozen=True)
class InvokeTimes:
    """Where one invoke's time went, in milliseconds."""

    copy_in_ms: float
    job_ms: float  # submit and wait for the job
    copy_out_ms: float


def run(runner: Any, inputs: dict[int, np.ndarray], outputs: dict[int, np.ndarray]) -> InvokeTimes:
    """One submit: copy ``inputs`` (the runtime's buffers) into the arena, run, copy ``outputs`` out.

    Exactly one copy each way: TFLite's buffer -> the input BO view, the output BO view -> TFLite's.
    """
    t0 = time.perf_counter()
    for index, value in inputs.items():
        runner.input_view(index)[...] = value
    t1 = time.perf_counter()
    runner.submit_and_wait()
    t2 = time.perf_counter()
    for index, value in outputs.items():
        value[...] = runner.output_view(index)
    t3 = time.perf_counter()
    return InvokeTimes(1000 * (t1 - t0), 1000 * (t2 - t1), 1000 * (t3 - t2))
