"""ARG_MAX of an 8-bit tensor along a constant axis: one ARG_MAX instruction.

The instruction reduces the last axis of its input descriptor, so the input is described with the
reduced axis last (strides); TFLite's ``ArgMinMax`` keeps the first index of a tie, as the
instruction does. The converter's default int64 output is written as int32 words: a FILL of zeros,
then the indices into the low word of each element (little-endian).
"""

from __future__ import annotations

from libaccel.compiler.emitter import Emitter
from libaccel.compiler.graph import Graph, OpNode
from libaccel.compiler.plan_common import (
    OpPlan,
    Planner,
    Unsupported,
    activation,
    axis_index,
    elem_strides,
    int_const,
    tensor,
    to4d,
)


def plan_arg_max(graph: Graph, node: OpNode) -> OpPlan:
    x = activation(graph, node.inputs[0], "input")
    y = tensor(graph, node.outputs[0], "output")
    if y.dtype not in ("int32", "int64"):
        raise Unsupported(f"output is {y.dtype}, expected int32 or int64")
    axes = int_const(graph, node.inputs[1], "axis")
    rank = len(x.shape)
    if axes.size != 1:
        raise Unsupported(f"axis {axes.tolist()}: one axis expected")
    axis = axis_index(int(axes[0]), rank)
    rest = tuple(d for i, d in enumerate(x.shape) if i != axis)
    if y.shape != rest:
        raise Unsupported(f"output {list(y.shape)} is not the input's shape without axis {axis}")
    shift = 4 - rank
    elem = elem_strides(to4d(x.shape))
    others = [i for i in range(4) if i != shift + axis]
    x4 = to4d(x.shape)
    view = (x4[others[0]], x4[others[1]], x4[others[2]], x4[shift + axis])
    strides = (elem[others[0]], elem[others[1]], elem[others[2]], elem[shift + axis])
    n = view[0] * view[1] * view[2]

    def emit(em: Emitter) -> None:
        src = em.tensor(x.index, shape=view, origin=(0, 0, 0, 0), strides=strides)
        if y.dtype == "int32":
            em.op("ARG_MAX", input=src, output=em.tensor(y.index, shape=(view[0], view[1], view[2], 1)))
            return
        em.op("FILL", dst=em.tensor(y.index, shape=(1, 1, n, 2), dtype="int32"), value=0)
        low = (view[1] * view[2] * 2, view[2] * 2, 2, 1)
        dst = em.tensor(
            y.index, shape=(view[0], view[1], view[2], 1), origin=(0, 0, 0, 0), strides=low, dtype="int32"
        )
        em.op("ARG_MAX", input=src, output=dst)

    return OpPlan(emit)


PLANNERS: dict[str, Planner] = {"ARG_MAX": plan_arg_max}
