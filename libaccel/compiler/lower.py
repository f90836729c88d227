"""compile_partition: a set of graph nodes -> one vnpu job (command stream, weights, arena plan).

The nodes' plans (:mod:`~libaccel.compiler.registry`), fused across nodes
(:mod:`~libaccel.compiler.fusion`), are given arena bytes (:mod:`~libaccel.compiler.memory_plan`)
and emitted (:class:`~libaccel.compiler.emitter.Emitter`) into one job of three buffer objects:

* **weights** (read-only): every constant the partition reads (filters,
  biases, constant operands) and tables the compiler makes (per-channel
  requantization, lookup tables), each 64-byte aligned; uploaded once when a
  :class:`~libaccel.compiler.runner.PartitionRunner` is created;
* **arena** (read/write): every non-constant tensor, placed by the memory plan;
* **command stream**: TENSOR descriptors and operations. Device addresses in
  the stream are offsets into the weights or arena; the runner adds the BOs'
  VAs through :attr:`CompiledPartition.relocations` once, at load.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from libaccel.compiler import fusion, registry
from libaccel.compiler.compiled import CompiledPartition, IoBinding
from libaccel.compiler.emitter import ALIGN, Emitter
from libaccel.compiler.graph import Graph
from libaccel.compiler.memory_plan import plan_memory
from libaccel.compiler.plan_common import Unsupported
from uapi import isa


class CompileError(ValueError):
    """The partition cannot be compiled (an unsupported node, a bad node list, a wrong ISA version)."""


def partition_io(graph: Graph, node_indices: Iterable[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(inputs, outputs) of a node set: non-constant tensors read but not produced inside it, and
    tensors produced inside it that a node outside reads or that are graph outputs."""
    inside = set(node_indices)
    nodes = [n for n in graph.nodes if n.index in inside]
    produced = {t for n in nodes for t in n.outputs}
    inputs: list[int] = []
    for n in nodes:
        for t in n.inputs:
            if t >= 0 and t not in produced and graph.tensors[t].data is None and t not in inputs:
                inputs.append(t)
    used_outside = {t for n in graph.nodes if n.index not in inside for t in n.inputs}
    outputs = [t for n in nodes for t in n.outputs if t in used_outside or t in graph.outputs]
    return tuple(inputs), tuple(outputs)


def compile_partition(
    graph: Graph,
    node_indices: Sequence[int],
    isa_version: int,
    outputs: Sequence[int] | None = None,
    exclusive_io: bool = False,
) -> CompiledPartition:
    """Compile ``node_indices`` of ``graph`` into one job for a device of ``isa_version``.

    ``isa_version`` is the device's DRM_VNPU_PARAM_ISA_VERSION ((major << 16) | minor;
    ``Device.params.isa_version``). ``outputs`` overrides which produced tensors
    the caller reads afterwards (default: those read outside the partition or
    graph outputs). Raises :class:`CompileError` naming the first node that
    cannot be lowered exactly. Partition inputs/outputs are
    :attr:`CompiledPartition.inputs`/``outputs`` (graph tensor indices and
    their arena placement). ``exclusive_io`` gives every input and output arena bytes no other
    tensor uses (:attr:`IoBinding.exclusive`), so a runner can move it to a buffer of the caller's
    (LiteRT's dma-buf tensor buffers); the arena grows by their size.
    """
    if isa_version >> 16 != isa.SPEC.version_major:
        raise CompileError(
            f"device ISA {isa_version >> 16}.{isa_version & 0xFFFF} is not supported "
            f"(the compiler emits ISA {isa.SPEC.version_major}.x)"
        )
    wanted = list(dict.fromkeys(node_indices))
    known = {n.index for n in graph.nodes}
    missing = [i for i in wanted if i not in known]
    if missing:
        raise CompileError(f"nodes {missing} are not in the graph")
    if not wanted:
        raise CompileError("empty partition")
    nodes = [n for n in graph.nodes if n.index in set(wanted)]  # execution order
    plans = []
    for n in nodes:
        try:
            plans.append(registry.plan_node(graph, n))
        except Unsupported as e:
            raise CompileError(f"node {n.index} ({n.op}): {e}") from None
    p_inputs, p_outputs = partition_io(graph, wanted)
    if outputs is not None:
        produced = {t for n in nodes for t in n.outputs}
        bad = [t for t in outputs if t not in produced]
        if bad:
            raise CompileError(f"requested outputs {bad} are not produced by the partition")
        p_outputs = tuple(outputs)
    plans = fusion.fuse(graph, nodes, plans, set(p_outputs))

    memory = plan_memory(graph, nodes, plans, p_inputs, p_outputs, keep_io=exclusive_io)
    em = Emitter(graph, memory.offsets, memory.scratch)
    for plan, ids in zip(plans, memory.scratch_ids, strict=True):
        if plan.emit is not None:
            em.current_scratch = ids
            plan.emit(em)
    em.end()

    def binding(t: int) -> IoBinding:
        info = graph.tensors[t]
        return IoBinding(t, memory.offsets[t], info.shape, info.dtype, t in memory.exclusive)

    return CompiledPartition(
        isa_version=isa_version,
        node_indices=tuple(n.index for n in nodes),
        stream=bytes(em.stream),
        relocations=tuple(em.relocations),
        weights=em.weights,  # the emitter's bytearray itself: no copy of the model's weights
        arena_size=max(memory.size, ALIGN),  # a BO is never empty
        inputs=tuple(binding(t) for t in p_inputs),
        outputs=tuple(binding(t) for t in p_outputs),
        stats={
            "nodes": len(nodes),
            "instructions": em.counts,
            "stream_bytes": len(em.stream),
            "weights_bytes": len(em.weights),
            "arena_bytes": memory.size,
            "activation_bytes_unshared": memory.unshared_bytes,
        },
    )
