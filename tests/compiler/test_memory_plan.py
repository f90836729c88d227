"""The arena planner (libaccel.compiler.memory_plan) on hand-made graphs and plans."""

from __future__ import annotations

import numpy as np
import pytest

from libaccel.compiler.graph import Graph, OpNode, QuantParams, TensorInfo
from libaccel.compiler.memory_plan import plan_arena, plan_memory
from libaccel.compiler.plan_common import OpPlan, Scratch

Q = QuantParams((0.5,), (0,))
SHAPE = (1, 4, 4, 8)  # 128 bytes of int8: two 64-byte lines


def _graph(n_tensors: int, nodes: list[OpNode], constants: tuple[int, ...] = ()) -> Graph:
    tensors = {}
    for i in range(n_tensors):
        data = np.zeros(SHAPE, np.int8) if i in constants else None
        tensors[i] = TensorInfo(i, f"t{i}", "int8", SHAPE, Q, data)
    return Graph(tensors, nodes, (0,), (n_tensors - 1,))


def _overlap(a: int, b: int, size_a: int = 128, size_b: int = 128) -> bool:
    return a < b + size_b and b < a + size_a


def test_tensors_share_bytes_only_when_no_node_needs_both() -> None:
    """0 -> A -> 2 -> B -> 3 -> C -> 4: neighbours along the chain never share bytes, tensors two
    steps apart do (the input is dead once A has run); the constant operand gets no arena bytes."""
    nodes = [
        OpNode(0, "A", (0, 1), (2,)),
        OpNode(1, "B", (2,), (3,)),
        OpNode(2, "C", (3,), (4,)),
    ]
    graph = _graph(5, nodes, constants=(1,))
    plan = plan_memory(graph, nodes, [OpPlan(), OpPlan(), OpPlan()], (0,), (4,))
    o = plan.offsets
    assert set(o) == {0, 2, 3, 4}
    assert not _overlap(o[0], o[2]) and not _overlap(o[2], o[3]) and not _overlap(o[3], o[4])
    assert (o[3], o[4]) == (o[0], o[2])
    assert plan.size == 256 and plan.unshared_bytes == 4 * 128
    assert all(v % 64 == 0 for v in o.values())


def test_an_alias_takes_its_roots_bytes_and_extends_its_life() -> None:
    """B aliases 2's bytes as 3 (a RESHAPE): 3 is 2 in the plan, so 2 lives until C reads 3."""
    nodes = [
        OpNode(0, "A", (0,), (2,)),
        OpNode(1, "RESHAPE", (2,), (3,)),
        OpNode(2, "C", (3, 0), (4,)),
    ]
    graph = _graph(5, nodes)
    plans = [OpPlan(), OpPlan(alias_of=2), OpPlan()]
    o = plan_memory(graph, nodes, plans, (0,), (4,)).offsets
    assert o[3] == o[2]
    assert len({o[0], o[2], o[4]}) == 3  # all three live while C runs


def test_scratch_lives_during_its_node_only() -> None:
    """Node B's scratch tensor (the largest, so placed first) is indexed past the graph's, clashes
    with nothing B touches, and shares bytes with the tensors dead or unborn while B runs."""
    nodes = [OpNode(0, "A", (0,), (1,)), OpNode(1, "B", (1,), (2,)), OpNode(2, "C", (2,), (3,))]
    graph = _graph(4, nodes)
    plans = [OpPlan(), OpPlan(scratch=(Scratch((1, 4, 4, 16), "int8", 3),)), OpPlan()]
    plan = plan_memory(graph, nodes, plans, (0,), (3,))
    assert plan.scratch_ids == ((), (4,), ())
    info = plan.scratch[4]
    assert (info.shape, info.dtype, info.quant.zero_point) == ((1, 4, 4, 16), "int8", 3)
    o = plan.offsets
    assert not _overlap(o[4], o[1], 256) and not _overlap(o[4], o[2], 256)
    assert o[4] == o[0] == o[3]


def test_a_fused_node_touches_nothing_and_reads_keep_tensors_alive() -> None:
    """0 -> A -> 1 -> B -> 2. Unfused, A's input dies when A has run, so B's output takes its bytes.
    With A fused into B, A's step touches nothing (its input is dead from the start and shares with
    A's output), unless B names it in ``reads``: then it lives until B runs and shares with neither."""
    nodes = [OpNode(0, "A", (0,), (1,)), OpNode(1, "B", (1,), (2,))]
    graph = _graph(3, nodes)

    def offsets(plans: list[OpPlan]) -> dict[int, int]:
        return plan_memory(graph, nodes, plans, (0,), (2,)).offsets

    unfused = offsets([OpPlan(), OpPlan()])
    assert unfused[0] == unfused[2] and not _overlap(unfused[0], unfused[1])
    fused = offsets([OpPlan(fused=True), OpPlan()])
    assert fused[0] == fused[1] and not _overlap(fused[1], fused[2])
    kept = offsets([OpPlan(fused=True), OpPlan(reads=(0,))])
    assert len({kept[0], kept[1], kept[2]}) == 3


def test_plan_arena_places_nothing_in_no_bytes() -> None:
    assert plan_arena({}, {}) == ({}, 0)
    offsets, total = plan_arena({7: 0}, {7: (0, 0)})  # an empty tensor still gets an aligned line
    assert offsets == {7: 0} and total == 64


@pytest.mark.parametrize("seed", range(3))
def test_plan_arena_is_first_fit_in_decreasing_size(seed: int) -> None:
    """With every lifetime overlapping, buffers are stacked largest first, each at the previous end."""
    rng = np.random.default_rng(seed)
    sizes = {k: int(rng.integers(1, 1000)) for k in range(10)}
    offsets, total = plan_arena(sizes, dict.fromkeys(sizes, (0, 1)))
    order = sorted(sizes, key=lambda k: (-sizes[k], k))
    at = 0
    for k in order:
        assert offsets[k] == at
        at += -(-sizes[k] // 64) * 64
    assert total == at


def test_exclusive_io_is_io_no_other_tensor_ever_shares_bytes_with() -> None:
    """On the chain 0 -> A -> 2 -> B -> 3 -> C -> 4 the input shares bytes with 3 and the output with
    2; kept live for the whole job (``keep_io``) both have bytes of their own."""
    nodes = [OpNode(0, "A", (0, 1), (2,)), OpNode(1, "B", (2,), (3,)), OpNode(2, "C", (3,), (4,))]
    graph = _graph(5, nodes, constants=(1,))
    plans = [OpPlan(), OpPlan(), OpPlan()]
    assert plan_memory(graph, nodes, plans, (0,), (4,)).exclusive == frozenset()
    kept = plan_memory(graph, nodes, plans, (0,), (4,), keep_io=True)
    assert kept.exclusive == {0, 4}
    o = kept.offsets
    assert not any(_overlap(o[io], o[t]) for io in (0, 4) for t in (2, 3))
    assert kept.size == 4 * 128  # 2 and 3 are neighbours: nothing shares bytes now


def test_an_output_that_aliases_an_input_is_not_exclusive() -> None:
    """A lone RESHAPE: its output is its input's bytes, so neither can move to a buffer of its own."""
    nodes = [OpNode(0, "RESHAPE", (0,), (1,))]
    graph = _graph(2, nodes)
    plan = plan_memory(graph, nodes, [OpPlan(alias_of=0)], (0,), (1,), keep_io=True)
    assert plan.offsets[0] == plan.offsets[1] and plan.exclusive == frozenset()
