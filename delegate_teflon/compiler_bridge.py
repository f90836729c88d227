"""The delegate's contract with the compiler: every call the delegate makes into libaccel.compiler,
typed, in one place (what Mesa's pipe_context ``ml_*`` callbacks are between Teflon and a driver).

- :func:`model_key`: the compile-cache key of a whole model for a device;
- :class:`SupportChecks`: the support checks of one model, memoized in the compile cache;
- :func:`compile_partition`: one partition compiled for a device, through the compile cache;
- :func:`make_runner` and :func:`run`: a compiled partition loaded on the device, and one invoke.

The delegate calls nothing else of the compiler; a partition whose compile or upload fails stays on
the CPU, named in one line (the plugin catches the error).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from libaccel.compiler import CompileCache, PartitionRunner, compile_cached
from libaccel.compiler import cache as compile_cache
from libaccel.compiler.compiled import CompiledPartition
from libaccel.compiler.graph import Graph, OpNode
from libaccel.compiler.partition import check_node
from libaccel.compiler.plan_common import Support
from libaccel.device import Device


class SupportChecks:
    """The compiler's support check for one model, memoized in the compile cache.

    Checking a node computes its requantization constants (per channel: thousands of multipliers),
    which dominates a cached load if redone; the results are a pure function of the model's content
    and the compiler version, so they are stored next to the compiled partitions under the model's
    key (:func:`model_key`) and read back on the next load.
    """

    def __init__(self, key: str, cache_dir: Path | None, strict: bool = False) -> None:
        self.key = key
        self.strict = strict
        self.cache = CompileCache(cache_dir)
        self.results: dict[int, tuple[bool, str]] = self.cache.get_support(key)
        self.cached = len(self.results)
        self._dirty = False

    def check(self, graph: Graph, node: OpNode) -> Support:
        """:func:`libaccel.compiler.partition.check_node`'s answer, from the cache where it has it."""
        hit = self.results.get(node.index)
        if hit is None:
            support = check_node(graph, node, self.strict)
            hit = self.results[node.index] = (support.ok, support.reason)
            self._dirty = True
        return Support(*hit)

    def save(self) -> None:
        """Store the results if any were computed (an unwritable cache only costs time)."""
        if self._dirty:
            try:
                self.cache.put_support(self.key, self.results)
            except OSError:
                pass
            self._dirty = False


def model_key(graph: Graph, device: Device) -> str:
    """The compile-cache key of a whole model for ``device`` (one hash over its constant bytes)."""
    return compile_cache.model_key(graph, device.params.isa_version)


def compile_partition(
    graph: Graph, device: Device, cache_dir: Path | None, model: str | None = None
) -> tuple[CompiledPartition, bool]:
    """Compile all of ``graph`` (one partition, its outputs as given) for ``device``, through the
    compiler's on-disk cache in ``cache_dir`` (None: the compiler's default). With ``model`` (the
    whole model's :func:`model_key`) the partition's key derives from it, without hashing the
    partition's constants again. Returns (compiled, hit)."""
    cache = CompileCache(cache_dir)
    node_indices = [n.index for n in graph.nodes]
    key = None if model is None else compile_cache.partition_key(model, node_indices, graph.outputs)
    return compile_cached(
        graph,
        node_indices,
        device.params.isa_version,
        cache=cache,
        outputs=graph.outputs,
        key=key,
        weights_in_file=True,  # uploaded from the cache file: never a second copy in memory
    )


def make_runner(compiled: CompiledPartition, device: Device) -> PartitionRunner:
    """The partition loaded on ``device``: its weights uploaded, its arena and stream BOs made."""
    return PartitionRunner(device, compiled)


@dataclass(frozen=True)
class InvokeTimes:
    """Where one invoke's time went, in milliseconds."""

    copy_in_ms: float
    job_ms: float  # submit and wait for the job
    copy_out_ms: float


def run(
    runner: PartitionRunner, inputs: dict[int, np.ndarray], outputs: dict[int, np.ndarray]
) -> InvokeTimes:
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
