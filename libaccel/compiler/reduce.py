"""MEAN and SUM over a run of adjacent axes: one DEPTHWISE_CONV2D with an all-ones filter.

TFLite's integer mean and rescaling sum (reference/reduce.h ``QuantizedMeanOrSum``, and
``reference_integer_ops::Mean`` for MEAN with keep_dims) accumulate ``x - input_zp`` over the
reduced positions and requantize the int32 sum once: with QuantizeMultiplier(double(s_in) /
double(s_out)) for SUM, and with ``1/(H*W)`` folded into that multiplier for MEAN
(:func:`tables.mean_multiplier`). A depthwise convolution with filter 1 and that multiplier is the
same arithmetic. keep_dims only changes the output's shape: [N, 1, 1, C] or [N, C] are the same bytes.

Any run of adjacent axes reduces the same way: a dense tensor is [A, K, B] with K the product of the
reduced dimensions, A of those before them and B of those after, so the convolution reads it as
[1, A, K, B] with a 1 x K window per channel and writes [1, A, 1, B]. That covers H and W of NHWC
(global average pooling) and the last axis of a layer norm's [batch, tokens, features] alike; both
runtimes' reference kernels compute every such axis set with the arithmetic above (checked in the
tests for single axes of 2-, 3- and 4-D tensors).

Input and output quantized alike take the same path in both runtimes' reference kernels (measured:
MEAN with or without keep_dims, uint8 SUM; no truncating raw division, no wrapping 8-bit sum), so
they lower the same way. int8 SUM stays on the CPU: both runtimes' reference kernels read its input
as uint8 (checked in the tests).
"""

from __future__ import annotations

import numpy as np

from libaccel.compiler import quant as q
from libaccel.compiler import tables
from libaccel.compiler.emitter import Emitter
from libaccel.compiler.graph import Graph, OpNode
from libaccel.compiler.plan_common import OpPlan, Planner, Unsupported, activation, int_const, multiplier


def reduced_layout(shape: tuple[int, ...], axes: list[int]) -> tuple[int, int, int]:
    """(A, K, B): ``shape`` as [A, K, B] with K the product of ``axes``, a run of adjacent axes."""
    if not axes or axes != list(range(axes[0], axes[-1] + 1)):
        raise Unsupported(f"axes {axes} are not adjacent")
    a = int(np.prod(shape[: axes[0]], dtype=np.int64))
    k = int(np.prod(shape[axes[0] : axes[-1] + 1], dtype=np.int64))
    b = int(np.prod(shape[axes[-1] + 1 :], dtype=np.int64))
    return a, k, b


def plan_mean_or_sum(graph: Graph, node: OpNode) -> OpPlan:
    x = activation(graph, node.inputs[0], "input")
    y = activation(graph, node.outputs[0], "output", x.dtype)
    rank = len(x.shape)
    raw = [int(a) for a in int_const(graph, node.inputs[1], "axis")]
    if rank == 0 or any(not -rank <= a < rank for a in raw):
        raise Unsupported(f"{node.op} axes {raw} of a rank-{rank} input")
    axes = sorted({a + rank if a < 0 else a for a in raw})
    a_size, count, b_size = reduced_layout(x.shape, axes)
    # keep_dims is read from the output's shape, which is what it decides.
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    dropped = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    if y.shape not in (kept, dropped):
        raise Unsupported(f"output {list(y.shape)} is neither {list(kept)} nor {list(dropped)}")
    assert x.quant and y.quant
    if node.op == "SUM" and x.dtype == "int8":
        # Measured on both runtimes: their reference SUM reads int8 inputs as uint8 and clamps to
        # [0, 255] before the int8 cast, which no NPU arithmetic reproduces.
        raise Unsupported("int8 SUM: TFLite's reference kernel reads int8 inputs as uint8")
    float_scale = (node.option("requant") or "fixed") == "float"
    if float_scale:
        if node.op != "MEAN":
            raise Unsupported(f"{node.op} with a float scale")
        # onnxruntime's QLinearGlobalAveragePool (MLAS, x86): sum(x - zp) * float32(s_in / (s_out * count))
        # requantized as FLOAT_SCALE does
        f32 = np.float32
        scale = f32(x.quant.scale) / (f32(y.quant.scale) * f32(count))
        if not np.isfinite(scale):
            raise Unsupported("MEAN scale is not finite")
        m, shift = int(np.array([scale], f32).view(np.int32)[0]), 0
    else:
        # PrepareMeanOrSum: QuantizeMultiplier(double(s_in) / double(s_out)); MEAN folds in 1/count.
        m, shift = multiplier(float(x.quant.scale) / float(y.quant.scale), node.op)
        if node.op == "MEAN":
            m, shift = tables.mean_multiplier(m, shift, count)
        if not q.shift_ok(shift):
            raise Unsupported(f"{node.op} multiplier shift {shift} outside [-31, 30]")
    lo, hi = q.QRANGE[y.dtype]

    def emit(em: Emitter) -> None:
        em.op(
            "DEPTHWISE_CONV2D",
            input=em.tensor(x.index, shape=(1, a_size, count, b_size)),
            filter=em.const(np.ones((1, 1, count, b_size), dtype=np.int8), "int8"),
            output=em.tensor(y.index, shape=(1, a_size, 1, b_size)),
            stride_h=1,
            stride_w=1,
            dilation_h=1,
            dilation_w=1,
            pad_top=0,
            pad_left=0,
            depth_multiplier=1,
            multiplier=m,
            shift=shift,
            act_min=lo,
            act_max=hi,
            float_scale=float_scale,
        )

    return OpPlan(emit)


PLANNERS: dict[str, Planner] = {"MEAN": plan_mean_or_sum, "SUM": plan_mean_or_sum}
