"""One-op models of the ops ISA 1.1 lowers (SOFTMAX, RESIZE_BILINEAR, MAXIMUM/MINIMUM, PRELU,
BATCH_MATMUL, ARG_MAX), built with :class:`modelgen.builder.ModelBuilder`, quantized as the
TensorFlow converter quantizes them."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from modelgen.builder import NP_TYPES, QMAX, QMIN, ModelBuilder, Quant, activation_quant, random_scale


def softmax_model(
    shape: Sequence[int], seed: int = 0, dtype: str = "int8", beta: float = 1.0, in_scale: float | None = None
) -> bytes:
    """One SOFTMAX over the last axis; the output is quantized as TFLite requires (1/256, dtype minimum)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    scale = in_scale if in_scale is not None else random_scale(rng, 0.01, 0.2)
    x = m.add_tensor("input", shape, dtype, activation_quant(rng, dtype, scale))
    y = m.add_tensor("output", shape, dtype, Quant.tensor(1 / 256, QMIN[dtype]))
    m.add_op("SOFTMAX", [x], [y], beta=beta)
    return m.build([x], [y])


def resize_bilinear_model(
    in_shape: Sequence[int],
    out_hw: Sequence[int],
    align_corners: bool = False,
    half_pixel_centers: bool = False,
    seed: int = 0,
    dtype: str = "int8",
) -> bytes:
    """One RESIZE_BILINEAR to ``out_hw`` (input and output quantized alike, as the converter writes it)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    q = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, q)
    size = m.add_const("size", np.array(out_hw, dtype=np.int32), "int32")
    y = m.add_tensor("output", (in_shape[0], out_hw[0], out_hw[1], in_shape[3]), dtype, q)
    m.add_op(
        "RESIZE_BILINEAR", [x, size], [y], align_corners=align_corners, half_pixel_centers=half_pixel_centers
    )
    return m.build([x], [y])


def max_min_model(
    op: str,
    shape1: Sequence[int],
    shape2: Sequence[int],
    seed: int = 0,
    dtype: str = "int8",
    const2: bool = False,
    same_quant: bool = True,
) -> bytes:
    """One MAXIMUM or MINIMUM of two tensors broadcast to each other (the second optionally constant)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    q = activation_quant(rng, dtype, random_scale(rng))
    q2 = q if same_quant else activation_quant(rng, dtype, random_scale(rng))
    out_shape = np.broadcast_shapes(tuple(shape1), tuple(shape2))
    a = m.add_tensor("input1", shape1, dtype, q)
    if const2:
        data = rng.integers(QMIN[dtype], QMAX[dtype] + 1, size=shape2).astype(NP_TYPES[dtype])
        b = m.add_const("input2", data, dtype, q2)
    else:
        b = m.add_tensor("input2", shape2, dtype, q2)
    y = m.add_tensor("output", out_shape, dtype, q)
    m.add_op(op, [a, b], [y])
    return m.build([a] if const2 else [a, b], [y])


def prelu_model(
    in_shape: Sequence[int], alpha_shape: Sequence[int], seed: int = 0, dtype: str = "int8"
) -> bytes:
    """One PRELU with a constant alpha (slopes in [0, 0.5), quantized per tensor as the converter does)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    iq = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, iq)
    alpha = rng.uniform(0.0, 0.5, size=alpha_shape)
    a_scale = float(alpha.max()) / (QMAX[dtype] - QMIN[dtype])
    a_zp = QMIN[dtype]
    a_q = np.clip(np.round(alpha / a_scale) + a_zp, QMIN[dtype], QMAX[dtype]).astype(NP_TYPES[dtype])
    a = m.add_const("alpha", a_q, dtype, Quant.tensor(a_scale, a_zp))
    oq = activation_quant(rng, dtype, iq.scales[0] * rng.uniform(0.6, 1.0))
    y = m.add_tensor("output", in_shape, dtype, oq)
    m.add_op("PRELU", [x, a], [y], version=1)  # the version both runtimes register for 8-bit PRELU
    return m.build([x], [y])


def batch_matmul_model(
    lhs_shape: Sequence[int],
    rhs_shape: Sequence[int],
    adj_x: bool = False,
    adj_y: bool = False,
    seed: int = 0,
    const_rhs: bool = False,
) -> bytes:
    """One int8 BATCH_MATMUL (both operands run-time tensors unless ``const_rhs``), batch dims broadcast."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    lq = activation_quant(rng, "int8", random_scale(rng))
    rq = activation_quant(rng, "int8", random_scale(rng))
    a = m.add_tensor("lhs", lhs_shape, "int8", lq)
    if const_rhs:
        b = m.add_const("rhs", rng.integers(-128, 128, size=rhs_shape).astype(np.int8), "int8", rq)
    else:
        b = m.add_tensor("rhs", rhs_shape, "int8", rq)
    rows = lhs_shape[-1] if adj_x else lhs_shape[-2]
    depth = lhs_shape[-2] if adj_x else lhs_shape[-1]
    cols = rhs_shape[-2] if adj_y else rhs_shape[-1]
    batch = np.broadcast_shapes(tuple(lhs_shape[:-2]), tuple(rhs_shape[:-2]))
    out_scale = lq.scales[0] * rq.scales[0] * 60 * math.sqrt(depth)
    y = m.add_tensor("output", (*batch, rows, cols), "int8", activation_quant(rng, "int8", out_scale))
    m.add_op("BATCH_MATMUL", [a, b], [y], adj_x=adj_x, adj_y=adj_y)
    return m.build([a] if const_rhs else [a, b], [y])


def arg_max_model(
    in_shape: Sequence[int], axis: int, seed: int = 0, dtype: str = "int8", output_type: str = "int32"
) -> bytes:
    """One ARG_MAX over ``axis`` (a constant), output int32 or int64."""
    import tflite

    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    x = m.add_tensor("input", in_shape, dtype, activation_quant(rng, dtype, random_scale(rng)))
    ax = m.add_const("axis", np.array([axis], dtype=np.int32), "int32")
    out_shape = [d for i, d in enumerate(in_shape) if i != axis % len(in_shape)]
    y = m.add_tensor("output", out_shape, output_type)
    m.add_op("ARG_MAX", [x, ax], [y], output_type=getattr(tflite.TensorType, output_type.upper()))
    return m.build([x], [y])
