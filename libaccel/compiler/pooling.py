"""Pooling: AVERAGE_POOL_2D and MAX_POOL_2D, one AVGPOOL / MAXPOOL instruction each."""

from __future__ import annotations

from libaccel.compiler.emitter import Emitter
from libaccel.compiler.graph import Graph, OpNode
from libaccel.compiler.plan_common import (
    OpPlan,
    Planner,
    Unsupported,
    activation,
    clamp,
    geometry,
)


def _plan_pool(graph: Graph, node: OpNode) -> OpPlan:
    x = activation(graph, node.inputs[0], "input")
    y = activation(graph, node.outputs[0], "output", x.dtype)
    if len(x.shape) != 4 or len(y.shape) != 4:
        raise Unsupported("input and output must be 4-D")
    if x.quant != y.quant:
        raise Unsupported("input and output quantization differ")
    n, h, w, c = x.shape
    if (y.shape[0], y.shape[3]) != (n, c):
        raise Unsupported(f"output {list(y.shape)} does not match input {list(x.shape)}")
    fh, fw = int(node.option("filter_height")), int(node.option("filter_width"))
    if min(fh, fw) < 1:
        raise Unsupported(f"filter {fh}x{fw}")
    geo = geometry(node, h, w, fh, fw, y.shape[1], y.shape[2], dil=False)
    for size, k, s, p, o in ((h, fh, geo["stride_h"], geo["pad_top"], y.shape[1]),
                             (w, fw, geo["stride_w"], geo["pad_left"], y.shape[2])):  # fmt: skip
        if any(min(k, size - (i * s - p)) - max(0, p - i * s) <= 0 for i in range(o)):
            raise Unsupported("a pooling window covers no input position")
    act_min, act_max = clamp(node, y)
    op = "AVGPOOL" if node.op == "AVERAGE_POOL_2D" else "MAXPOOL"
    del geo["dilation_h"], geo["dilation_w"]

    def emit(em: Emitter) -> None:
        em.op(
            op,
            input=em.tensor(x.index),
            output=em.tensor(y.index),
            filter_h=fh,
            filter_w=fw,
            act_min=act_min,
            act_max=act_max,
            **geo,
        )

    return OpPlan(emit)


PLANNERS: dict[str, Planner] = {"AVERAGE_POOL_2D": _plan_pool, "MAX_POOL_2D": _plan_pool}
