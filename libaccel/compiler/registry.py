"""Which planner lowers which TFLite op, and the compiler's one support check.

Every op family's module (:mod:`.convolution`, :mod:`.elementwise`, :mod:`.pooling`,
:mod:`.activations`, :mod:`.movement`, :mod:`.resize`, ...) holds its planners and a ``PLANNERS``
table of its own; this module merges them into :data:`PLANNERS`. :func:`check_support` and the
compiler (:mod:`.lower`) call the same :func:`plan_node`, so what the partitioner accepts is exactly
what the compiler can lower (:mod:`.partition` holds the rest of the partitioning rules).
"""

from __future__ import annotations

from libaccel.compiler import (
    activations,
    argmax,
    binary_tables,
    convolution,
    elementwise,
    lookup,
    matmul,
    movement,
    pooling,
    reduce,
    resize,
    shape_folding,
    softmax,
    transpose_conv,
)
from libaccel.compiler.graph import Graph, OpNode
from libaccel.compiler.plan_common import OpPlan, Planner, Unsupported

FAMILIES = (
    convolution,
    transpose_conv,
    matmul,
    elementwise,
    binary_tables,
    lookup,
    pooling,
    reduce,
    activations,
    softmax,
    argmax,
    movement,
    resize,
)


def _merge() -> dict[str, Planner]:
    planners: dict[str, Planner] = {}
    for family in FAMILIES:
        twice = set(planners) & set(family.PLANNERS)
        if twice:
            raise RuntimeError(f"{family.__name__} plans {sorted(twice)}, which another family plans too")
        planners.update(family.PLANNERS)
    return planners


#: TFLite op name -> its planner.
PLANNERS: dict[str, Planner] = _merge()

# Ops whose planners write several outputs (each checks every one); every other op has one output.
MULTI_OUTPUT = frozenset({"SPLIT", "SPLIT_V"})


def plan_node(graph: Graph, node: OpNode, strict: bool = False) -> OpPlan:
    """The lowering of ``node``; raises :class:`Unsupported` with the reason it cannot be exact.

    A malformed node (a wrong input count, an option of the wrong type) shows as an IndexError,
    KeyError or TypeError in its planner: an Unsupported naming it, or in ``strict`` mode the error
    itself (tests cannot tell it from a planner bug otherwise)."""
    if shape_folding.is_folded(graph, node):
        return OpPlan(fused=True)  # a shape computation folded into constants: nothing runs
    planner = PLANNERS.get(node.op)
    if planner is None:
        raise Unsupported(f"{node.op} is not an NPU operator")
    if not node.outputs or (len(node.outputs) != 1 and node.op not in MULTI_OUTPUT):
        raise Unsupported(f"{node.op} with {len(node.outputs)} outputs")
    try:
        return planner(graph, node)
    except (IndexError, KeyError, TypeError) as e:
        if strict:
            raise
        raise Unsupported(f"malformed {node.op}: {e}") from None
