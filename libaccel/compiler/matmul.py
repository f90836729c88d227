"""BATCH_MATMUL of int8 tensors: one FULLY_CONNECTED per output batch, both operands run-time tensors.

FULLY_CONNECTED takes its filter from a TENSOR descriptor like any operand, zero point included, so a
batch of ``out[i, j] = sum_k (lhs[i, k] - zp_lhs) * (rhs[k, j] - zp_rhs)`` is one instruction with the
lhs batch as the input rows ``[1, 1, M, K]`` and the rhs batch as the filter ``[1, 1, N, K]``, both
strided views (``adj_x``/``adj_y`` only swap the strides, TFLite's transposes cost nothing). Batch
dimensions broadcast by reading the same lhs or rhs batch again. TFLite's reference kernel
(``reference_ops::BatchMatMul``) requantizes per tensor with QuantizeMultiplier(s_lhs * s_rhs / s_out),
the product in float (GetQuantizedConvolutionMultipler), and clamps to the int8 range; no bias, no
fused activation.
"""

from __future__ import annotations

import itertools
import math

from libaccel.compiler import quant as q
from libaccel.compiler.emitter import Emitter
from libaccel.compiler.graph import Graph, OpNode
from libaccel.compiler.plan_common import OpPlan, Planner, Unsupported, activation, multiplier

MAX_MATMUL_BATCHES = 256  # one instruction per batch


def plan_batch_matmul(graph: Graph, node: OpNode) -> OpPlan:
    a = activation(graph, node.inputs[0], "lhs")
    b = graph.tensors.get(node.inputs[1])
    if b is None or b.data is None:
        b = activation(graph, node.inputs[1], "rhs", a.dtype)
    elif b.dtype != a.dtype or b.quant is None or not b.quant.per_tensor or len(b.shape) > 4:
        raise Unsupported("constant rhs is not a per-tensor quantized tensor of the lhs type, rank <= 4")
    y = activation(graph, node.outputs[0], "output", a.dtype)
    if a.dtype != "int8":
        raise Unsupported(f"{a.dtype} BATCH_MATMUL (TFLite runs int8 only)")
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise Unsupported("operands of rank below 2")
    adj_x, adj_y = bool(node.options.get("adj_x", False)), bool(node.options.get("adj_y", False))
    m, k = (a.shape[-1], a.shape[-2]) if adj_x else (a.shape[-2], a.shape[-1])
    kb, n = (b.shape[-1], b.shape[-2]) if adj_y else (b.shape[-2], b.shape[-1])
    if kb != k:
        raise Unsupported(f"depths {k} and {kb} differ")
    rank = len(y.shape)
    if rank > 4 or rank != max(len(a.shape), len(b.shape)):
        raise Unsupported(f"output rank {rank}")
    batch = y.shape[:-2]
    ab = (1,) * (rank - len(a.shape)) + a.shape[:-2]
    bb = (1,) * (rank - len(b.shape)) + b.shape[:-2]
    for da, db, do in zip(ab, bb, batch, strict=True):
        if do != max(da, db) or da not in (1, do) or db not in (1, do):
            raise Unsupported(f"batch shapes {list(ab)} and {list(bb)} do not broadcast to {list(batch)}")
    if y.shape[-2:] != (m, n):
        raise Unsupported(f"output {list(y.shape)} is not [..., {m}, {n}]")
    count = math.prod(batch)
    if count > MAX_MATMUL_BATCHES:
        raise Unsupported(f"{count} batches (more than {MAX_MATMUL_BATCHES} instructions)")
    assert a.quant and b.quant and y.quant
    # GetQuantizedConvolutionMultipler (both runtimes): the scales' product in float.
    mult, shift = multiplier(
        q.convolution_scale(a.quant.scale, b.quant.scale, y.quant.scale, float_product=True), "BATCH_MATMUL"
    )
    lo, hi = q.QRANGE[y.dtype]
    rounding = node.option("rounding") or "double"  # reference.annotate_reference sets it

    def flat(index: tuple[int, ...], dims: tuple[int, ...]) -> int:
        """The batch number of a batch index in a tensor of batch dims ``dims`` (size 1: broadcast)."""
        f = 0
        for i, d in zip(index, dims, strict=True):
            f = f * d + (i if d > 1 else 0)
        return f

    a_rows, a_cols = (a.shape[-2], a.shape[-1])
    b_rows, b_cols = (b.shape[-2], b.shape[-1])
    lhs_strides = (0, 0, 1, a_cols) if adj_x else (0, 0, a_cols, 1)  # element (i, k) of the lhs batch
    rhs_strides = (0, 0, b_cols, 1) if adj_y else (0, 0, 1, b_cols)  # element (j, k): filter row j

    def emit(em: Emitter) -> None:
        for index in itertools.product(*(range(d) for d in batch)):
            ia, ib, io = flat(index, ab), flat(index, bb), flat(index, batch)
            em.op(
                "FULLY_CONNECTED",
                input=em.tensor(
                    a.index, shape=(1, 1, m, k), origin=_at(ia, a_rows, a_cols), strides=lhs_strides
                ),
                filter=em.tensor(
                    b.index, shape=(1, 1, n, k), origin=_at(ib, b_rows, b_cols), strides=rhs_strides
                ),
                output=em.tensor(y.index, shape=(1, 1, m, n), origin=_at(io, m, n), strides=(0, 0, n, 1)),
                multiplier=mult,
                shift=shift,
                act_min=lo,
                act_max=hi,
                single_rounding=rounding == "single",
            )

    return OpPlan(emit)


def _at(batch: int, rows: int, cols: int) -> tuple[int, int, int, int]:
    """Batch ``batch``'s first element as an origin in a tensor's own 4-D layout: its flat element offset
    in the last dimension (the view's strides are given explicitly)."""
    return (0, 0, 0, batch * rows * cols)


PLANNERS: dict[str, Planner] = {"BATCH_MATMUL": plan_batch_matmul}
