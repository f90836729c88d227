"""The arena plan of a partition: where every non-constant tensor lives in the job's read/write BO.

Every tensor the partition stores (its inputs, intermediates and outputs) gets arena bytes, placed
by lifetime: two tensors share bytes when no node needs both (greedy first-fit by size, the usual
offline planner). A RESHAPE's output aliases its input's bytes (``OpPlan.alias_of``); the tensors
inside a fused pattern are never stored; a plan's scratch tensors
(:class:`~libaccel.compiler.plan_common.Scratch`) are placed like the others, alive during their
node only. Constants are not here: the emitter puts them in the weights.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from libaccel.compiler.emitter import align_up
from libaccel.compiler.graph import Graph, OpNode, QuantParams, TensorInfo
from libaccel.compiler.plan_common import OpPlan


@dataclass(frozen=True)
class MemoryPlan:
    """The arena placement of one partition."""

    offsets: dict[int, int]  # graph or scratch tensor index -> arena offset (an alias: its root's)
    size: int  # arena bytes the placed tensors span (0 when nothing is stored)
    scratch: dict[int, TensorInfo]  # the plans' scratch tensors, indexed past the graph's
    scratch_ids: tuple[tuple[int, ...], ...]  # each plan's scratch tensor indices, in plan order
    unshared_bytes: int  # what the stored tensors would take with no sharing (before alignment)
    # The partition inputs and outputs whose bytes no other stored tensor ever uses (an alias of one
    # is the tensor itself, unless it is another input or output): a runner may move such a tensor
    # out of the arena into a buffer of its own by rebasing the stream's addresses inside it.
    exclusive: frozenset[int] = frozenset()


def plan_arena(sizes: dict[int, int], lifetimes: dict[int, tuple[int, int]]) -> tuple[dict[int, int], int]:
    """Offsets for buffers of ``sizes`` live over inclusive step ranges: overlapping lives never share bytes.

    Greedy by decreasing size, each at the lowest aligned offset that fits
    between the buffers already placed whose lifetimes intersect its own.
    """
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, first, last)
    offsets: dict[int, int] = {}
    for key in sorted(sizes, key=lambda k: (-sizes[k], lifetimes[k][0], k)):
        first, last = lifetimes[key]
        size = align_up(max(sizes[key], 1))
        busy = sorted((o, e) for o, e, f, la in placed if f <= last and first <= la)
        offset = 0
        for o, e in busy:
            if offset + size <= o:
                break
            offset = max(offset, e)
        offsets[key] = offset
        placed.append((offset, offset + size, first, last))
    total = max((e for _, e, _, _ in placed), default=0)
    return offsets, total


def scratch_tensors(
    graph: Graph, nodes: Sequence[OpNode], plans: Sequence[OpPlan]
) -> tuple[dict[int, TensorInfo], list[tuple[int, ...]]]:
    """The plans' scratch tensors as TensorInfos indexed past the graph's tensors, and each plan's indices."""
    first = max(graph.tensors, default=-1) + 1
    infos: dict[int, TensorInfo] = {}
    ids: list[tuple[int, ...]] = []
    for n, plan in zip(nodes, plans, strict=True):
        mine = []
        for k, s in enumerate(plan.scratch):
            index = first + len(infos)
            quant = QuantParams((1.0,), (s.zero_point,))
            infos[index] = TensorInfo(index, f"node{n.index}.scratch{k}", s.dtype, tuple(s.shape), quant)
            mine.append(index)
        ids.append(tuple(mine))
    return infos, ids


def plan_memory(
    graph: Graph,
    nodes: Sequence[OpNode],
    plans: Sequence[OpPlan],
    inputs: Sequence[int],
    outputs: Sequence[int],
    keep_io: bool = False,
) -> MemoryPlan:
    """Place the tensors of ``nodes`` (in execution order, each with its plan) in one arena.

    Step ``k`` is the ``k``-th node; the partition's ``inputs`` are live from before the first
    node, its ``outputs`` until after the last. ``keep_io``: they are live for the whole job, so no
    other tensor shares their bytes and each is :attr:`MemoryPlan.exclusive` (unless it is another
    one's alias), at the cost of their bytes in the arena.
    """
    root: dict[int, int] = {}  # an aliasing tensor -> the tensor whose bytes it is

    def find(t: int) -> int:
        while t in root:
            t = root[t]
        return t

    for n, plan in zip(nodes, plans, strict=True):
        if plan.alias_of is not None:
            root[n.outputs[0]] = find(plan.alias_of)
    lifetimes: dict[int, tuple[int, int]] = {}

    def touch(t: int, step: int) -> None:
        if t < 0 or graph.tensors[t].data is not None:
            return
        r = find(t)
        lo, hi = lifetimes.get(r, (step, step))
        lifetimes[r] = (min(lo, step), max(hi, step))

    for t in inputs:
        touch(t, -1)
    for step, (n, plan) in enumerate(zip(nodes, plans, strict=True)):
        # A fused node's tensors are either internal to the pattern (never stored) or read, through
        # ``reads``, by the node that emits the pattern.
        for t in () if plan.fused else (*n.inputs, *n.outputs, *plan.reads):
            touch(t, step)
    for t in outputs:
        touch(t, len(nodes))
    if keep_io:
        for t in (*inputs, *outputs):
            touch(t, -1)
            touch(t, len(nodes))
    scratch, scratch_ids = scratch_tensors(graph, nodes, plans)
    for step, ids in enumerate(scratch_ids):
        lifetimes.update((t, (step, step)) for t in ids)  # only while its node's instructions run
    sizes = {r: (scratch[r] if r in scratch else graph.tensors[r]).nbytes for r in lifetimes}
    offsets, size = plan_arena(sizes, lifetimes)
    return MemoryPlan(
        offsets={t: offsets[find(t)] for t in (*graph.tensors, *scratch) if find(t) in offsets},
        size=size,
        scratch=scratch,
        scratch_ids=tuple(scratch_ids),
        unshared_bytes=sum(sizes.values()),
        exclusive=_exclusive((*inputs, *outputs), find, offsets, sizes),
    )


def _exclusive(
    io: Sequence[int], find: Callable[[int], int], offsets: dict[int, int], sizes: dict[int, int]
) -> frozenset[int]:
    """The tensors of ``io`` whose root's bytes overlap no other root's, at any time, and that share
    their root with no other tensor of ``io``."""
    roots = [find(t) for t in io]

    def alone(r: int) -> bool:
        start, end = offsets[r], offsets[r] + max(sizes[r], 1)
        return all(
            o == r or not (offsets[o] < end and start < offsets[o] + max(sizes[o], 1)) for o in offsets
        )

    return frozenset(
        t for t, r in zip(io, roots, strict=True) if r in offsets and roots.count(r) == 1 and alone(r)
    )
