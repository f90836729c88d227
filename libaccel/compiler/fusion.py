"""Patterns fused across nodes when a partition holds all of them: the converter's dilated convolution,
and the MUL of a tensor by a lookup activation of itself (swish: ``x * LOGISTIC(x)``).

TensorFlow writes a dilated convolution (Keras ``Conv2D(dilation_rate=d)``) as SPACE_TO_BATCH_ND ->
CONV_2D or DEPTHWISE_CONV_2D (stride 1, dilation 1) -> BATCH_TO_SPACE_ND. Each of the three lowers
exactly on its own (movement.py's COPYs and the convolution on the batch-folded tensor), so whatever
subset of them a partition holds is exact; when it holds all three, and nothing else reads the two
intermediate tensors, they become one CONV2D / DEPTHWISE_CONV2D with dilation = block.

Why the fused convolution is bit-exact: SPACE_TO_BATCH_ND pads with the input's zero point, and a
padded position contributes ``(zp - zp) * w = 0`` to the integer accumulator, exactly as a position the
dilated convolution skips; following the index maps, output row ``Y`` of BATCH_TO_SPACE_ND sums
``input[Y - pad_top + ky * block]`` over the taps with
``pad_top = paddings_top + inner_pad_top * block - crops_top`` (likewise for columns), the same integer
sum the dilated convolution computes with that padding, requantized with the same multipliers.

The MUL of ``x`` by ``U(x)`` (``U`` an activation the NPU runs as a LUT: LOGISTIC, TANH, RELU6, ...)
stores a function of ``x``'s byte alone, so the two nodes become one LUT of ``x``, whose table is
``U``'s table followed by the ISA's MUL of each byte with its ``U`` value (``elementwise.mul_values``,
the arithmetic the unfused MUL instruction performs): the same bytes, one pass over ``x`` against a
256-entry table instead of a LUT and a MUL through a 65536-entry one. EfficientNet's 49 swishes are
this pattern.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from libaccel.compiler import activations, elementwise, movement, registry
from libaccel.compiler.graph import Graph, OpNode
from libaccel.compiler.lookup import lut_plan
from libaccel.compiler.plan_common import OpPlan, Unsupported, activation, out_size, pad_before

CONVS = ("CONV_2D", "DEPTHWISE_CONV_2D")


def _dilated_plan(graph: Graph, s2b: OpNode, conv: OpNode, b2s: OpNode) -> OpPlan | None:
    """The one dilated convolution equal to ``s2b -> conv -> b2s``, or None where none is."""
    x, y = graph.tensors[s2b.inputs[0]], graph.tensors[b2s.outputs[0]]
    try:
        into = movement.batch_layout(graph, s2b, x, graph.tensors[s2b.outputs[0]], "paddings")
        back = movement.batch_layout(graph, b2s, y, graph.tensors[b2s.inputs[0]], "crops")
    except Unsupported:
        return None
    w = graph.tensors[conv.inputs[1]]
    if len(x.shape) != 4 or into.block != back.block or into.space[0] != back.space[0] or len(w.shape) != 4:
        return None
    if any(
        int(conv.option(k)) != 1 for k in ("stride_h", "stride_w", "dilation_h_factor", "dilation_w_factor")
    ):
        return None
    (bh, bw), (kh, kw) = into.block, (w.shape[1], w.shape[2])
    hs, ws = into.batch[1], into.batch[2]
    ohs, ows = back.batch[1], back.batch[2]
    if conv.option("padding") == "SAME":
        inner = (pad_before(hs, kh, 1, 1, ohs), pad_before(ws, kw, 1, 1, ows))
    elif conv.option("padding") == "VALID":
        inner = (0, 0)
    else:
        return None
    pad_top = into.pads[0][0] + inner[0] * bh - back.pads[0][0]
    pad_left = into.pads[1][0] + inner[1] * bw - back.pads[1][0]
    _, h, wd, _ = x.shape
    _, oh, ow, _ = y.shape
    # The ISA's padding is TFLite's SAME/VALID formula: use whichever gives this output and padding.
    for padding in ("VALID", "SAME"):
        try:
            size = (out_size(padding, h, kh, 1, bh), out_size(padding, wd, kw, 1, bw))
        except Unsupported:
            return None
        pads = (pad_before(h, kh, 1, bh, oh), pad_before(wd, kw, 1, bw, ow))
        if size == (oh, ow) and pads == (pad_top, pad_left):
            break
    else:
        return None
    options = {**conv.options, "padding": padding, "dilation_h_factor": bh, "dilation_w_factor": bw}
    fused = OpNode(b2s.index, conv.op, (x.index, *conv.inputs[1:]), (y.index,), options)
    try:
        plan = registry.PLANNERS[conv.op](graph, fused)
    except Unsupported:
        return None
    return OpPlan(emit=plan.emit, reads=(x.index,))


def _self_mul_plan(
    graph: Graph, mul: OpNode, activations_of: dict[int, OpNode]
) -> tuple[OpPlan, list[OpNode]] | None:
    """The LUT of ``x`` equal to ``mul``, whose operands are each ``x`` or the private output of a
    lookup activation of ``x`` (``activations_of``: such nodes by output), and those nodes; or None."""
    if len(mul.inputs) != 2:
        return None
    sources = [activations_of.get(t) for t in mul.inputs]
    roots = {t if u is None else u.inputs[0] for t, u in zip(mul.inputs, sources, strict=True)}
    if len(roots) != 1 or all(u is None for u in sources):
        return None
    (root,) = roots
    try:
        x = activation(graph, root, "input")
        y = activation(graph, mul.outputs[0], "output", x.dtype)
        a, b = (activation(graph, t, f"input{i + 1}", x.dtype) for i, t in enumerate(mul.inputs))
        if not (x.shape == y.shape == a.shape == b.shape):
            return None
        base = -128 if x.dtype == "int8" else 0
        xs = np.arange(base, base + 256, dtype=np.int64)
        va, vb = (
            xs if u is None else activations.lut_table(u, x, graph.tensors[u.outputs[0]]).astype(np.int64)
            for u in sources
        )
        table = elementwise.mul_values(mul, a, b, y, va, vb)
    except Unsupported:
        return None
    return lut_plan(x, y, table), [u for u in sources if u is not None]


def fuse(graph: Graph, nodes: Sequence[OpNode], plans: Sequence[OpPlan], keep: set[int]) -> list[OpPlan]:
    """``plans`` (one per node of the partition, in order) with each dilated-convolution pattern whose
    three nodes are all in ``nodes``, and each MUL of a tensor by a lookup activation of itself,
    fused, unless a tensor inside it is in ``keep`` (a partition output) or read by any other node
    of the graph."""
    readers: dict[int, int] = {}
    for n in graph.nodes:
        for t in n.inputs:
            readers[t] = readers.get(t, 0) + 1
    producer = {t: n for n in nodes for t in n.outputs}
    position = {n.index: i for i, n in enumerate(nodes)}
    out = list(plans)

    def private(t: int) -> bool:
        return t not in keep and t not in graph.outputs and readers.get(t, 0) == 1

    for i, b2s in enumerate(nodes):
        if b2s.op != "BATCH_TO_SPACE_ND" or len(b2s.inputs) != 3:
            continue
        conv = producer.get(b2s.inputs[0])
        if conv is None or conv.op not in CONVS or not private(b2s.inputs[0]):
            continue
        s2b = producer.get(conv.inputs[0])
        if (
            s2b is None
            or s2b.op != "SPACE_TO_BATCH_ND"
            or len(s2b.inputs) != 3
            or not private(conv.inputs[0])
        ):
            continue
        plan = _dilated_plan(graph, s2b, conv, b2s)
        if plan is not None:
            out[position[s2b.index]] = OpPlan(fused=True)
            out[position[conv.index]] = OpPlan(fused=True)
            out[i] = plan

    lookups = {
        n.outputs[0]: n
        for i, n in enumerate(nodes)
        if n.op in activations.PLANNERS
        and n.op not in ("QUANTIZE", "DEQUANTIZE")
        and len(n.outputs) == 1
        and private(n.outputs[0])
        and not out[i].fused
        and out[i].emit is not None
    }
    for i, mul in enumerate(nodes):
        if mul.op != "MUL" or out[i].fused:
            continue
        found = _self_mul_plan(graph, mul, lookups)
        if found is not None:
            plan, absorbed = found
            for u in absorbed:
                out[position[u.index]] = OpPlan(fused=True)
            out[i] = plan
    return out
