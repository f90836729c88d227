"""Planner-made scratch tensors (``OpPlan.scratch``): placed in the arena for their node only."""

from __future__ import annotations

import numpy as np
import pytest

from libaccel import Device
from libaccel.compiler import PartitionRunner, compile_partition, registry
from libaccel.compiler.emitter import Emitter
from libaccel.compiler.graph import Graph, OpNode, QuantParams, TensorInfo
from libaccel.compiler.plan_common import OpPlan, Scratch
from uapi import isa

SHAPE = (1, 4, 5, 3)


def _via_scratch(graph: Graph, node: OpNode) -> OpPlan:
    """A test op: FILL a scratch tensor, then COPY input -> scratch -> output."""
    x, y = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]

    def emit(em: Emitter) -> None:
        s = em.tensor(em.scratch(0))
        em.op("FILL", dst=s, value=7)
        em.op("COPY", src=em.tensor(x.index), dst=s)
        em.op("COPY", src=em.tensor(em.scratch(0)), dst=em.tensor(y.index))

    return OpPlan(emit, scratch=(Scratch(SHAPE, "int8", 3),))


@pytest.fixture
def scratch_graph(monkeypatch: pytest.MonkeyPatch) -> Graph:
    monkeypatch.setitem(registry.PLANNERS, "TEST_VIA_SCRATCH", _via_scratch)
    q = QuantParams((0.1,), (3,))
    tensors = {i: TensorInfo(i, f"t{i}", "int8", SHAPE, q) for i in range(3)}
    nodes = [OpNode(0, "TEST_VIA_SCRATCH", (0,), (1,)), OpNode(1, "TEST_VIA_SCRATCH", (1,), (2,))]
    return Graph(tensors, nodes, (0,), (2,))


def test_scratch_round_trip(dev: Device, scratch_graph: Graph) -> None:
    compiled = compile_partition(scratch_graph, [0, 1], dev.params.isa_version)
    x = np.random.default_rng(0).integers(-128, 128, size=SHAPE).astype(np.int8)
    with PartitionRunner(dev, compiled) as runner:
        out = runner.run({0: x})
    assert np.array_equal(out[2].reshape(SHAPE), x)


def test_scratch_lives_during_its_node(scratch_graph: Graph) -> None:
    """Each scratch overlaps its node's input and output (so never shares their bytes); the first
    scratch dies with its node, so the second node's scratch reuses its (or the dead input's) bytes:
    three tensors' worth of arena for five tensors."""
    compiled = compile_partition(scratch_graph, [0, 1], isa.SPEC.version)
    size = (int(np.prod(SHAPE)) + 63) // 64 * 64
    assert compiled.stats["arena_bytes"] == 3 * size
    assert compiled.stats["activation_bytes_unshared"] == 5 * int(np.prod(SHAPE))
