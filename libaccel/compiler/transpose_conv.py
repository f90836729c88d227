"""TRANSPOSE_CONV as a zero-inserted canvas and a stride-1 CONV2D with the spatially flipped filter.

TFLite's reference kernels (``reference_integer_ops::TransposeConv`` for int8,
``reference_ops::TransposeConv`` for uint8) scatter: every input position ``iy`` adds
``(x[iy] - x_zp) * (w[oc, ky, ., ic] - w_zp)`` into an int32 accumulator at ``oy = iy*stride - pad + ky``
(dropped outside the output), then add the bias and requantize each accumulator as CONV_2D does
(per-channel multipliers for int8, one for uint8; the fused activation's clamp). ``pad`` is
``ComputePaddingHeightWidth`` on the *output* size, as if the output were a convolution's input.

The same sums as a gather: put input row ``iy`` at canvas row ``iy*stride`` and the input's zero point
everywhere else (a canvas of ``(H-1)*stride + 1`` rows), then run a stride-1 convolution with the
filter flipped in both spatial axes and ``pad_top = K - 1 - pad``:
``out[oy] = sum_j canvas[oy - (K-1-pad) + j] * w[K-1-j] = sum_ky canvas[oy + pad - ky] * w[ky]``,
which picks exactly the pairs with ``oy = iy*stride - pad + ky``. A zero-point canvas position adds
``(x_zp - x_zp) * w = 0`` and a position outside the canvas is skipped, so the integer accumulators,
hence the outputs, are TFLite's bit for bit. The filter already has the convolution's
``[Cout, KH, KW, Cin]`` layout (TFLite stores TRANSPOSE_CONV filters output-channel first).

Lowered: FILL of the canvas (a scratch tensor, :class:`.plan_common.Scratch`) with the input's zero point,
one strided COPY of the input into it, one CONV2D. With stride 1 the input itself is the canvas.
"""

from __future__ import annotations

import numpy as np

from libaccel.compiler.convolution import conv_quant, float_scale_product
from libaccel.compiler.emitter import Emitter
from libaccel.compiler.graph import Graph, OpNode, TensorInfo
from libaccel.compiler.plan_common import (
    OpPlan,
    Planner,
    Scratch,
    Unsupported,
    activation,
    clamp,
    const,
    int_const,
    pad_before,
)

SHAPE_INPUT, FILTER_INPUT, DATA_INPUT, BIAS_INPUT = 0, 1, 2, 3


def transpose_padding(padding: str, out: int, k: int, stride: int) -> int:
    """TFLite's leading padding of a TRANSPOSE_CONV dimension: ComputePaddingHeightWidth's for a
    convolution whose input is the transposed convolution's output (``out``)."""
    if padding == "SAME":
        conv_out = (out + stride - 1) // stride
    elif padding == "VALID":
        conv_out = (out + stride - k) // stride
        if out + stride - k < 0:  # C++ truncates this division toward zero, Python floors
            raise Unsupported(f"VALID output size {out} smaller than the filter {k} minus the stride")
    else:
        raise Unsupported(f"padding {padding!r}")
    return pad_before(out, k, stride, 1, conv_out)


def canvas_size(size: int, stride: int) -> int:
    """Rows (or columns) of the zero-inserted input: input index i at canvas index i*stride."""
    return (size - 1) * stride + 1


def _transpose_bias(graph: Graph, node: OpNode, cout: int) -> TensorInfo | None:
    if len(node.inputs) <= BIAS_INPUT or node.inputs[BIAS_INPUT] < 0:
        return None
    b = const(graph, node.inputs[BIAS_INPUT], "bias")
    if b.dtype != "int32" or b.size != cout:
        raise Unsupported(f"bias is {b.dtype} of {b.size} values; expected int32 x {cout}")
    return b


def plan_transpose_conv(graph: Graph, node: OpNode) -> OpPlan:
    if len(node.inputs) not in (3, 4):
        raise Unsupported(f"TRANSPOSE_CONV with {len(node.inputs)} inputs")
    x = activation(graph, node.inputs[DATA_INPUT], "input")
    y = activation(graph, node.outputs[0], "output", x.dtype)
    w = const(graph, node.inputs[FILTER_INPUT], "filter")
    if w.dtype != x.dtype:
        raise Unsupported(f"filter is {w.dtype}, input {x.dtype}")
    if len(x.shape) != 4 or len(y.shape) != 4 or len(w.shape) != 4:
        raise Unsupported("input, filter and output must be 4-D")
    # The output shape operand must be known now (a constant, or folded by shape_folding).
    if graph.tensors[node.inputs[SHAPE_INPUT]].data is None:
        raise Unsupported("output_shape is computed at run time (not foldable at compile time)")
    shape = tuple(int(v) for v in int_const(graph, node.inputs[SHAPE_INPUT], "output_shape"))
    if shape != y.shape:
        raise Unsupported(f"output_shape {list(shape)} is not the output's {list(y.shape)}")
    n, h, wd, cin = x.shape
    cout, kh, kw, fcin = w.shape
    if fcin != cin or y.shape[3] != cout or y.shape[0] != n:
        raise Unsupported(f"filter {list(w.shape)} does not fit {list(x.shape)} -> {list(y.shape)}")
    sh, sw = int(node.option("stride_h")), int(node.option("stride_w"))
    if min(sh, sw) < 1:
        raise Unsupported(f"stride ({sh}, {sw}) below 1")
    _, oh, ow, _ = y.shape
    padding = node.option("padding")
    pad_top = kh - 1 - transpose_padding(padding, oh, kh, sh)
    pad_left = kw - 1 - transpose_padding(padding, ow, kw, sw)
    fields, table = conv_quant(x, w, y, cout, 0, node.op, float_product=float_scale_product(node, x, w))
    bias = _transpose_bias(graph, node, cout)
    act_min, act_max = clamp(node, y)
    assert w.data is not None and x.quant is not None and w.quant is not None
    flipped = np.ascontiguousarray(np.asarray(w.data)[:, ::-1, ::-1, :])
    w_zp = w.quant.zero_points[0]  # uint8 filters are per tensor (checked by conv_quant)
    canvas = (n, canvas_size(h, sh), canvas_size(wd, sw), cin)
    inserted = (sh, sw) != (1, 1)

    def emit(em: Emitter) -> None:
        assert x.quant is not None
        if inserted:
            c = em.scratch(0)
            em.op("FILL", dst=em.tensor(c), value=x.quant.zero_point)
            # The input into every stride-th row and column of the canvas.
            ch, cw = canvas[1], canvas[2]
            strides = (ch * cw * cin, sh * cw * cin, sw * cin, 1)
            dst = em.tensor(c, shape=x.shape, origin=(0, 0, 0, 0), strides=strides)
            em.op("COPY", src=em.tensor(x.index), dst=dst)
            source = em.tensor(c)
        else:
            source = em.tensor(x.index)
        em.op(
            "CONV2D",
            input=source,
            filter=em.const(flipped, w.dtype, w_zp),
            bias=em.tensor(bias.index, shape=(1, 1, 1, cout)) if bias is not None else None,
            quant=em.const(table.reshape(1, 1, cout, 2), "int32") if table is not None else None,
            output=em.tensor(y.index),
            act_min=act_min,
            act_max=act_max,
            stride_h=1,
            stride_w=1,
            dilation_h=1,
            dilation_w=1,
            pad_top=pad_top,
            pad_left=pad_left,
            **fields,
        )

    scratch = (Scratch(canvas, x.dtype, x.quant.zero_point),) if inserted else ()
    return OpPlan(emit, scratch=scratch)


PLANNERS: dict[str, Planner] = {"TRANSPOSE_CONV": plan_transpose_conv}
