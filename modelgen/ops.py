"""One-op models: each function returns one quantized operator's model as ``bytes`` (the ISA 1.1 ops'
-- SOFTMAX, RESIZE_BILINEAR, MAXIMUM/MINIMUM, PRELU, BATCH_MATMUL, ARG_MAX -- quantized as the
TensorFlow converter quantizes them)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import tflite

from modelgen.builder import (
    NP_TYPES,
    QMAX,
    QMIN,
    ModelBuilder,
    Quant,
    accumulator_output_scale,
    activation_quant,
    quantized_bias,
    quantized_filter,
    random_scale,
    same_padding_out,
)


def _pair(value: int | tuple[int, int]) -> tuple[int, int]:
    """A kernel, stride or dilation argument: one int for both axes, or (height, width)."""
    return (value, value) if isinstance(value, int) else (value[0], value[1])


def _conv_model(
    op: str,
    in_shape: Sequence[int],
    filter_shape: tuple[int, int, int, int],
    channel_axis: int,
    depth: int,
    bias_spread: float,
    stride: int | tuple[int, int],
    padding: str,
    per_channel: bool,
    act: str,
    seed: int,
    dtype: str,
    dilation: int | tuple[int, int],
    bias: bool,
    space_to_batch: bool = False,
    **op_options: int,
) -> bytes:
    """One CONV_2D or DEPTHWISE_CONV_2D: ``filter_shape`` [*, KH, KW, *] quantized along
    ``channel_axis``; ``depth`` terms per accumulator set the output scale. The random draws keep one
    order (input scale, filter, output scale, bias): tests and docs name their models by seed.
    ``space_to_batch`` writes a dilated convolution as the TensorFlow converter does:
    SPACE_TO_BATCH_ND -> the convolution undilated and VALID -> BATCH_TO_SPACE_ND."""
    rng = np.random.default_rng(seed)
    kh, kw = filter_shape[1:3]
    cout = filter_shape[channel_axis]
    sh, sw = _pair(stride)
    dh, dw = _pair(dilation)
    n, h, w, _ = in_shape
    oh, ow = same_padding_out(h, kh, sh, dh, padding), same_padding_out(w, kw, sw, dw, padding)
    m = ModelBuilder()
    iq = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, iq)
    wdata, wq = quantized_filter(rng, filter_shape, dtype, per_channel, channel_axis)
    wt = m.add_const("filter", wdata, dtype, wq)
    oq = activation_quant(rng, dtype, accumulator_output_scale(iq.scales[0], wq, depth))
    inputs = [x, wt]
    if bias:
        bdata, bq = quantized_bias(rng, iq.scales[0], wq, cout, bias_spread)
        inputs.append(m.add_const("bias", bdata, "int32", bq))
    y = m.add_tensor("output", (n, oh, ow, cout), dtype, oq)
    conv_out = y
    if space_to_batch:
        if (sh, sw) != (1, 1):
            raise ValueError("the converter's space-to-batch form needs stride 1")
        (pt, pb), (ct, cb) = space_to_batch_paddings(h, kh, dh, padding)
        (pl, pr), (cl, cr) = space_to_batch_paddings(w, kw, dw, padding)
        hs, ws = (h + pt + pb) // dh, (w + pl + pr) // dw
        block = m.add_const("block_shape", np.array([dh, dw], dtype=np.int32), "int32")
        xs = m.add_tensor("space_to_batch", (n * dh * dw, hs, ws, in_shape[3]), dtype, iq)
        pads = m.add_const("paddings", np.array([[pt, pb], [pl, pr]], dtype=np.int32), "int32")
        m.add_op("SPACE_TO_BATCH_ND", [x, block, pads], [xs])
        inputs[0] = xs
        conv_out = m.add_tensor("batch_conv", (n * dh * dw, hs - kh + 1, ws - kw + 1, cout), dtype, oq)
        padding, dh, dw = "VALID", 1, 1
    m.add_op(
        op,
        inputs,
        [conv_out],
        padding=padding,
        stride_h=sh,
        stride_w=sw,
        **op_options,
        dilation_h_factor=dh,
        dilation_w_factor=dw,
        fused_activation_function=act,
    )
    if space_to_batch:
        crops = m.add_const("crops", np.array([[ct, cb], [cl, cr]], dtype=np.int32), "int32")
        m.add_op("BATCH_TO_SPACE_ND", [conv_out, block, crops], [y])
    return m.build([x], [y])


def space_to_batch_paddings(size: int, kernel: int, dilation: int, padding: str) -> tuple[tuple, tuple]:
    """((pad before, pad after), (crop before, crop after)) of one spatial dimension in the converter's
    dilated convolution (TensorFlow's required_space_to_batch_paddings): SAME's padding of the dilated
    filter, plus what rounds the padded size up to a multiple of the dilation, cropped off again."""
    total = (kernel - 1) * dilation if padding == "SAME" else 0
    before, after = total // 2, total - total // 2
    extra = -(size + total) % dilation
    return (before, after + extra), (0, extra)


def conv2d_model(
    in_shape: Sequence[int],
    out_ch: int,
    kernel: int | tuple[int, int] = 3,
    stride: int | tuple[int, int] = 1,
    padding: str = "SAME",
    per_channel: bool = True,
    act: str = "NONE",
    seed: int = 0,
    dtype: str = "int8",
    dilation: int | tuple[int, int] = 1,
    bias: bool = True,
    space_to_batch: bool = False,
) -> bytes:
    """One CONV_2D: input [N,H,W,Cin] -> [N,OH,OW,out_ch], filter [out_ch,KH,KW,Cin] (with
    ``space_to_batch``, a dilated one in the converter's three-op form)."""
    kh, kw = _pair(kernel)
    cin = in_shape[3]
    depth = kh * kw * cin
    return _conv_model(
        "CONV_2D",
        in_shape,
        filter_shape=(out_ch, kh, kw, cin),
        channel_axis=0,
        depth=depth,
        bias_spread=74 * 74 * math.sqrt(depth),
        stride=stride,
        padding=padding,
        per_channel=per_channel,
        act=act,
        seed=seed,
        dtype=dtype,
        dilation=dilation,
        bias=bias,
        space_to_batch=space_to_batch,
    )


def depthwise_conv2d_model(
    in_shape: Sequence[int],
    depth_multiplier: int = 1,
    kernel: int | tuple[int, int] = 3,
    stride: int | tuple[int, int] = 1,
    padding: str = "SAME",
    per_channel: bool = True,
    act: str = "NONE",
    seed: int = 0,
    dtype: str = "int8",
    dilation: int | tuple[int, int] = 1,
    bias: bool = True,
    space_to_batch: bool = False,
) -> bytes:
    """One DEPTHWISE_CONV_2D: filter [1,KH,KW,Cin*depth_multiplier], per-channel along axis 3 (with
    ``space_to_batch``, a dilated one in the converter's three-op form)."""
    kh, kw = _pair(kernel)
    cout = in_shape[3] * depth_multiplier
    return _conv_model(
        "DEPTHWISE_CONV_2D",
        in_shape,
        filter_shape=(1, kh, kw, cout),
        channel_axis=3,
        depth=kh * kw,
        bias_spread=74 * 74 * kh,
        stride=stride,
        padding=padding,
        per_channel=per_channel,
        act=act,
        seed=seed,
        dtype=dtype,
        dilation=dilation,
        bias=bias,
        space_to_batch=space_to_batch,
        depth_multiplier=depth_multiplier,
    )


def transpose_conv_output(size: int, kernel: int, stride: int, padding: str) -> int:
    """Keras Conv2DTranspose's output size (deconv_output_length without output_padding)."""
    return size * stride if padding == "SAME" else size * stride + max(kernel - stride, 0)


def transpose_conv_model(
    in_shape: Sequence[int],
    out_ch: int,
    kernel: int | tuple[int, int] = 3,
    stride: int | tuple[int, int] = 2,
    padding: str = "SAME",
    per_channel: bool = True,
    act: str = "NONE",
    seed: int = 0,
    dtype: str = "int8",
    bias: bool = True,
    out_hw: tuple[int, int] | None = None,
) -> bytes:
    """One TRANSPOSE_CONV (inputs: output_shape, filter [out_ch,KH,KW,Cin], input, optional bias),
    output [N, *out_hw, out_ch] (default: Keras Conv2DTranspose's size for the padding)."""
    rng = np.random.default_rng(seed)
    kh, kw = _pair(kernel)
    sh, sw = _pair(stride)
    n, h, w, cin = in_shape
    if out_hw is None:
        out_hw = (transpose_conv_output(h, kh, sh, padding), transpose_conv_output(w, kw, sw, padding))
    m = ModelBuilder()
    iq = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, iq)
    wdata, wq = quantized_filter(rng, (out_ch, kh, kw, cin), dtype, per_channel, 0)
    wt = m.add_const("filter", wdata, dtype, wq)
    depth = max(1, kh * kw * cin // (sh * sw))  # products per output, on average
    oq = activation_quant(rng, dtype, accumulator_output_scale(iq.scales[0], wq, depth))
    out_shape = (n, out_hw[0], out_hw[1], out_ch)
    shape = m.add_const("output_shape", np.array(out_shape, dtype=np.int32), "int32")
    inputs = [shape, wt, x]
    if bias:
        bdata, bq = quantized_bias(rng, iq.scales[0], wq, out_ch, 74 * 74 * math.sqrt(depth))
        inputs.append(m.add_const("bias", bdata, "int32", bq))
    y = m.add_tensor("output", out_shape, dtype, oq)
    m.add_op(
        "TRANSPOSE_CONV",
        inputs,
        [y],
        padding=padding,
        stride_h=sh,
        stride_w=sw,
        fused_activation_function=act,
    )
    return m.build([x], [y])


def fully_connected_model(
    batch: int,
    in_features: int,
    out_features: int,
    act: str = "NONE",
    seed: int = 0,
    dtype: str = "int8",
    per_channel: bool = False,
    bias: bool = True,
    in_shape: Sequence[int] | None = None,
) -> bytes:
    """One FULLY_CONNECTED: input [batch, in_features] (or ``in_shape``) -> [batch, out_features]."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    iq = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape or (batch, in_features), dtype, iq)
    wdata, wq = quantized_filter(rng, (out_features, in_features), dtype, per_channel, 0)
    wt = m.add_const("filter", wdata, dtype, wq)
    oq = activation_quant(rng, dtype, accumulator_output_scale(iq.scales[0], wq, in_features))
    b = -1
    if bias:
        bdata, bq = quantized_bias(rng, iq.scales[0], wq, out_features, 74 * 74 * math.sqrt(in_features))
        b = m.add_const("bias", bdata, "int32", bq)
    y = m.add_tensor("output", (batch, out_features), dtype, oq)
    m.add_op("FULLY_CONNECTED", [x, wt, b] if b >= 0 else [x, wt], [y], fused_activation_function=act)
    return m.build([x], [y])


def elementwise_model(
    op: str,
    shape1: Sequence[int],
    shape2: Sequence[int] | None = None,
    act: str = "NONE",
    seed: int = 0,
    dtype: str = "int8",
) -> bytes:
    """One ADD, SUB or MUL of two variable inputs (``shape2`` may broadcast against ``shape1``)."""
    if op not in ("ADD", "SUB", "MUL"):
        raise ValueError(f"elementwise_model: {op!r} is not ADD, SUB or MUL")
    rng = np.random.default_rng(seed)
    shape2 = tuple(shape1) if shape2 is None else tuple(shape2)
    out_shape = tuple(np.broadcast_shapes(tuple(shape1), shape2))
    m = ModelBuilder()
    q1 = activation_quant(rng, dtype, random_scale(rng, 0.01, 0.1))
    q2 = activation_quant(rng, dtype, random_scale(rng, 0.01, 0.1))
    a = m.add_tensor("input1", shape1, dtype, q1)
    c = m.add_tensor("input2", shape2, dtype, q2)
    if op == "MUL":
        out_scale = q1.scales[0] * q2.scales[0] * 74 * 74 / 60
    else:
        out_scale = (q1.scales[0] + q2.scales[0]) * 1.2
    y = m.add_tensor("output", out_shape, dtype, activation_quant(rng, dtype, float(np.float32(out_scale))))
    m.add_op(op, [a, c], [y], fused_activation_function=act)
    return m.build([a, c], [y])


def pool_model(
    op: str,
    in_shape: Sequence[int],
    filter_size: int | tuple[int, int] = 2,
    stride: int | tuple[int, int] = 2,
    padding: str = "VALID",
    act: str = "NONE",
    seed: int = 0,
    dtype: str = "int8",
) -> bytes:
    """One AVERAGE_POOL_2D or MAX_POOL_2D (input and output share scale and zero point, as TFLite needs)."""
    if op not in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        raise ValueError(f"pool_model: {op!r} is not a pooling op")
    rng = np.random.default_rng(seed)
    fh, fw = _pair(filter_size)
    sh, sw = _pair(stride)
    n, h, w, c = in_shape
    oh, ow = same_padding_out(h, fh, sh, 1, padding), same_padding_out(w, fw, sw, 1, padding)
    m = ModelBuilder()
    q = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, q)
    y = m.add_tensor("output", (n, oh, ow, c), dtype, q)
    m.add_op(
        op,
        [x],
        [y],
        padding=padding,
        stride_h=sh,
        stride_w=sw,
        filter_height=fh,
        filter_width=fw,
        fused_activation_function=act,
    )
    return m.build([x], [y])


def activation_model(op: str, shape: Sequence[int], seed: int = 0, dtype: str = "int8") -> bytes:
    """One RELU, RELU6, RELU_0_TO_1, LOGISTIC, TANH, HARD_SWISH, EXP or LOG (LOGISTIC/TANH: TFLite's
    fixed output quantization; EXP and LOG: an output range over the function's values)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    iq = activation_quant(rng, dtype, random_scale(rng, 0.01, 0.08))
    x = m.add_tensor("input", shape, dtype, iq)
    if op == "LOGISTIC":
        oq = Quant.tensor(1 / 256, -128 if dtype == "int8" else 0)
    elif op == "TANH":
        oq = Quant.tensor(1 / 128, 0 if dtype == "int8" else 128)
    elif op == "EXP":
        top = math.exp(iq.scales[0] * (QMAX[dtype] - iq.zero_points[0]))
        oq = Quant.tensor(float(np.float32(top / 255 * rng.uniform(0.5, 1.0))), QMIN[dtype])
    elif op == "LOG":  # log over the positive inputs [s, s * (qmax - zp)]
        low, high = math.log(iq.scales[0]), math.log(iq.scales[0] * (QMAX[dtype] - iq.zero_points[0]))
        scale = float(np.float32((high - low) / 250 * rng.uniform(1.0, 1.2)))
        oq = Quant.tensor(scale, QMIN[dtype] + 2 - int(round(low / scale)))
    else:
        oq = activation_quant(rng, dtype, random_scale(rng, 0.01, 0.08))
    y = m.add_tensor("output", shape, dtype, oq)
    m.add_op(op, [x], [y])
    return m.build([x], [y])


def reshape_model(
    in_shape: Sequence[int], out_shape: Sequence[int], seed: int = 0, dtype: str = "int8"
) -> bytes:
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    q = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, q)
    s = m.add_const("shape", np.array(out_shape, dtype=np.int32), "int32")
    y = m.add_tensor("output", out_shape, dtype, q)
    m.add_op("RESHAPE", [x, s], [y], new_shape=list(out_shape))
    return m.build([x], [y])


def concat_model(shapes: Sequence[Sequence[int]], axis: int, seed: int = 0, dtype: str = "int8") -> bytes:
    """CONCATENATION of variable inputs sharing one quantization (what an exact copy needs)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    q = activation_quant(rng, dtype, random_scale(rng))
    xs = [m.add_tensor(f"input{i}", s, dtype, q) for i, s in enumerate(shapes)]
    out_shape = list(shapes[0])
    out_shape[axis] = sum(s[axis] for s in shapes)
    y = m.add_tensor("output", out_shape, dtype, q)
    m.add_op("CONCATENATION", xs, [y], axis=axis, fused_activation_function="NONE")
    return m.build(xs, [y])


def pad_model(
    in_shape: Sequence[int], paddings: Sequence[Sequence[int]], seed: int = 0, dtype: str = "int8"
) -> bytes:
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    q = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, q)
    p = m.add_const("paddings", np.array(paddings, dtype=np.int32), "int32")
    out_shape = [d + lo + hi for d, (lo, hi) in zip(in_shape, paddings, strict=True)]
    y = m.add_tensor("output", out_shape, dtype, q)
    m.add_op("PAD", [x, p], [y])
    return m.build([x], [y])


def transpose_model(
    in_shape: Sequence[int], perm: Sequence[int], seed: int = 0, dtype: str = "int8"
) -> bytes:
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    q = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, q)
    p = m.add_const("perm", np.array(perm, dtype=np.int32), "int32")
    y = m.add_tensor("output", [in_shape[i] for i in perm], dtype, q)
    m.add_op("TRANSPOSE", [x, p], [y])
    return m.build([x], [y])


def strided_slice_model(
    in_shape: Sequence[int],
    begin: Sequence[int],
    end: Sequence[int],
    strides: Sequence[int],
    begin_mask: int = 0,
    end_mask: int = 0,
    seed: int = 0,
    dtype: str = "int8",
) -> bytes:
    """One STRIDED_SLICE with positive strides (the output shape is computed as TFLite does)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    q = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, q)
    out = []
    for i, d in enumerate(in_shape):
        b = 0 if begin_mask >> i & 1 else begin[i]
        e = d if end_mask >> i & 1 else end[i]
        b = min(max(b + d if b < 0 else b, 0), d)
        e = min(max(e + d if e < 0 else e, 0), d)
        out.append(max(0, -(-(e - b) // strides[i])))
    consts = (("begin", begin), ("end", end), ("strides", strides))
    ins = [x] + [m.add_const(n, np.array(v, dtype=np.int32), "int32") for n, v in consts]
    y = m.add_tensor("output", out, dtype, q)
    m.add_op("STRIDED_SLICE", ins, [y], begin_mask=begin_mask, end_mask=end_mask)
    return m.build([x], [y])


def converter_flatten(m: ModelBuilder, x: int, out_shape: Sequence[int]) -> int:
    """The TensorFlow converter's Keras ``Flatten``: ``RESHAPE(x, PACK([SHAPE(x)[0], -1]))``.

    The shape operand is computed (SHAPE -> STRIDED_SLICE -> PACK), so TFLite treats the RESHAPE's
    output as dynamic; ``out_shape`` is the shape the model declares for it. Returns its index.
    """
    t = m.tensors[x]
    shape = m.add_tensor(f"{t.name}/shape", (len(t.shape),), "int32")
    m.add_op("SHAPE", [x], [shape], version=1, out_type=tflite.TensorType.INT32)
    ends = [
        m.add_const(f"{t.name}/{n}", np.array([v], np.int32), "int32") for n, v in (("begin", 0), ("end", 1))
    ]
    stride = m.add_const(f"{t.name}/stride", np.array([1], np.int32), "int32")
    batch = m.add_tensor(f"{t.name}/batch", (), "int32")
    m.add_op("STRIDED_SLICE", [shape, *ends, stride], [batch], version=1, shrink_axis_mask=1)
    rest = m.add_const(f"{t.name}/rest", np.array(-1, np.int32), "int32")
    packed = m.add_tensor(f"{t.name}/packed", (2,), "int32")
    m.add_op("PACK", [batch, rest], [packed], version=1, values_count=2, axis=0)
    y = m.add_tensor(f"{t.name}/flat", out_shape, t.dtype, t.quant)
    m.add_op("RESHAPE", [x, packed], [y], version=1)
    return y


def space_to_batch_tile_conv_model(
    in_shape: Sequence[int] = (1, 8, 8, 4), out_ch: int = 6, seed: int = 0
) -> bytes:
    """SPACE_TO_BATCH_ND (block 2) -> TILE (multiples 1) -> 1x1 CONV_2D with the converter's placeholder
    shapes: every tensor after the input is stored with the input's batch, not ``4 * N``. Nothing
    infers TILE's output, so its stored shape cannot be trusted below the corrected one."""
    rng = np.random.default_rng(seed)
    n, h, w, c = in_shape
    m = ModelBuilder()
    iq = activation_quant(rng, "int8", random_scale(rng))
    x = m.add_tensor("input", in_shape, "int8", iq)
    block = m.add_const("block_shape", np.array([2, 2], np.int32), "int32")
    pads = m.add_const("paddings", np.zeros((2, 2), np.int32), "int32")
    xs = m.add_tensor("space_to_batch", (n, h // 2, w // 2, c), "int8", iq)
    m.add_op("SPACE_TO_BATCH_ND", [x, block, pads], [xs])
    multiples = m.add_const("multiples", np.ones(4, np.int32), "int32")
    tiled = m.add_tensor("tiled", (n, h // 2, w // 2, c), "int8", iq)
    m.add_op("TILE", [xs, multiples], [tiled])
    wdata, wq = quantized_filter(rng, (out_ch, 1, 1, c), "int8", False, 0)
    wt = m.add_const("filter", wdata, "int8", wq)
    bdata, bq = quantized_bias(rng, iq.scales[0], wq, out_ch, 8.0)
    bias = m.add_const("bias", bdata, "int32", bq)
    y = m.add_tensor("output", (n, h // 2, w // 2, out_ch), "int8", activation_quant(rng, "int8", 0.5))
    m.add_op(
        "CONV_2D",
        [tiled, wt, bias],
        [y],
        padding="VALID",
        stride_h=1,
        stride_w=1,
        fused_activation_function="NONE",
    )
    return m.build([x], [y])


def flatten_fc_model(in_shape: Sequence[int], out_features: int, seed: int = 0, dtype: str = "int8") -> bytes:
    """The converter's Flatten (:func:`converter_flatten`) then FULLY_CONNECTED: a classifier head."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    iq = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, iq)
    features = int(np.prod(in_shape[1:]))
    flat = converter_flatten(m, x, (in_shape[0], features))
    wdata, wq = quantized_filter(rng, (out_features, features), dtype, False, 0)
    w = m.add_const("filter", wdata, dtype, wq)
    oq = activation_quant(rng, dtype, accumulator_output_scale(iq.scales[0], wq, features))
    y = m.add_tensor("output", (in_shape[0], out_features), dtype, oq)
    m.add_op("FULLY_CONNECTED", [flat, w], [y], fused_activation_function="NONE")
    return m.build([x], [y])


def quantize_model(
    shape: Sequence[int], in_dtype: str = "int8", out_dtype: str = "int8", seed: int = 0
) -> bytes:
    """One QUANTIZE: 8-bit requantization, or float32 -> 8-bit when ``in_dtype`` is float32."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    iq = None if in_dtype == "float32" else activation_quant(rng, in_dtype, random_scale(rng, 0.01, 0.1))
    x = m.add_tensor("input", shape, in_dtype, iq)
    y = m.add_tensor(
        "output", shape, out_dtype, activation_quant(rng, out_dtype, random_scale(rng, 0.01, 0.1))
    )
    m.add_op("QUANTIZE", [x], [y])
    return m.build([x], [y])


def mean_model(
    in_shape: Sequence[int],
    axes: Sequence[int] = (1, 2),
    keep_dims: bool = True,
    seed: int = 0,
    dtype: str = "int8",
    same_quant: bool = False,
    op: str = "MEAN",
) -> bytes:
    """One MEAN (or SUM) over ``axes`` (the output keeps them as size 1 with ``keep_dims``); a SUM's
    output scale grows with the number of values summed, so the outputs do not saturate."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    iq = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, iq)
    a = m.add_const("axis", np.array(axes, dtype=np.int32), "int32")
    norm = [ax % len(in_shape) for ax in axes]
    out = [1 if i in norm else d for i, d in enumerate(in_shape)]
    if not keep_dims:
        out = [d for i, d in enumerate(in_shape) if i not in norm]
    grow = math.prod(in_shape[i] for i in norm) ** 0.5 if op == "SUM" else 1.0
    oq = (
        iq
        if same_quant
        else activation_quant(rng, dtype, random_scale(rng, iq.scales[0] * 0.3 * grow, iq.scales[0] * grow))
    )
    y = m.add_tensor("output", out, dtype, oq)
    m.add_op(op, [x, a], [y], keep_dims=keep_dims)
    return m.build([x], [y])


def resize_model(
    op: str,
    in_shape: Sequence[int],
    out_hw: Sequence[int],
    align_corners: bool = False,
    half_pixel_centers: bool = False,
    seed: int = 0,
    dtype: str = "int8",
) -> bytes:
    """One RESIZE_NEAREST_NEIGHBOR or RESIZE_BILINEAR (``op``) to ``out_hw``; input and output share the
    quantization, as the converter writes them."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    q = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, q)
    size = m.add_const("size", np.array(out_hw, dtype=np.int32), "int32")
    y = m.add_tensor("output", (in_shape[0], out_hw[0], out_hw[1], in_shape[3]), dtype, q)
    m.add_op(op, [x, size], [y], align_corners=align_corners, half_pixel_centers=half_pixel_centers)
    return m.build([x], [y])


def layout_model(
    op: str,
    in_shape: Sequence[int],
    out_shapes: Sequence[Sequence[int]],
    consts: Sequence[tuple[str, Sequence[int] | np.ndarray]] = (),
    input_at: int = 0,
    seed: int = 0,
    dtype: str = "int8",
    **options: Any,
) -> bytes:
    """One data-movement op (SPLIT, SLICE, DEPTH_TO_SPACE, SPACE_TO_BATCH_ND, SQUEEZE, ...): one
    variable input at position ``input_at`` among int32 constant operands ``consts`` (name, values),
    outputs of ``out_shapes``, every tensor quantized alike (these ops copy bytes)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    q = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, q)
    ins = [m.add_const(name, np.array(v, dtype=np.int32), "int32") for name, v in consts]
    ins.insert(input_at, x)
    ys = [m.add_tensor(f"output{k}", s, dtype, q) for k, s in enumerate(out_shapes)]
    m.add_op(op, ins, ys, **options)
    return m.build([x], ys)


def softmax_model(
    shape: Sequence[int], seed: int = 0, dtype: str = "int8", beta: float = 1.0, in_scale: float | None = None
) -> bytes:
    """One SOFTMAX over the last axis; the output is quantized as TFLite requires (1/256, dtype minimum).
    The NPU runs rows of up to 511 values; :func:`log_softmax_model` is a CPU op."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    scale = in_scale if in_scale is not None else random_scale(rng, 0.01, 0.2)
    x = m.add_tensor("input", shape, dtype, activation_quant(rng, dtype, scale))
    y = m.add_tensor("output", shape, dtype, Quant.tensor(1 / 256, QMIN[dtype]))
    m.add_op("SOFTMAX", [x], [y], beta=beta)
    return m.build([x], [y])


def log_softmax_model(shape: Sequence[int], seed: int = 0) -> bytes:
    """One int8 LOG_SOFTMAX: an op the NPU does not run (a CPU-fallback case)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    x = m.add_tensor("input", shape, "int8", activation_quant(rng, "int8", random_scale(rng)))
    y = m.add_tensor("output", shape, "int8", Quant.tensor(16 / 256, 127))
    m.add_op("LOG_SOFTMAX", [x], [y])
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
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    x = m.add_tensor("input", in_shape, dtype, activation_quant(rng, dtype, random_scale(rng)))
    ax = m.add_const("axis", np.array([axis], dtype=np.int32), "int32")
    out_shape = [d for i, d in enumerate(in_shape) if i != axis % len(in_shape)]
    y = m.add_tensor("output", out_shape, output_type)
    m.add_op("ARG_MAX", [x, ax], [y], output_type=getattr(tflite.TensorType, output_type.upper()))
    return m.build([x], [y])


def rsqrt_model(shape: Sequence[int], seed: int = 0) -> bytes:
    """One int8 RSQRT whose input zero point is -128, so every input value is one TFLite accepts
    (it refuses values below the zero point at run time)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    iq = Quant.tensor(random_scale(rng, 0.0005, 0.05), -128)
    x = m.add_tensor("input", shape, "int8", iq)
    # 1/sqrt over the input's range [scale, 255 * scale], spread over the output's 256 steps.
    low = 1.0 / math.sqrt(255 * iq.scales[0])
    oq = Quant.tensor(float(np.float32((1.0 / math.sqrt(iq.scales[0]) - low) / rng.uniform(120, 250))), -128)
    y = m.add_tensor("output", shape, "int8", oq)
    m.add_op("RSQRT", [x], [y])
    return m.build([x], [y])


def squared_difference_model(shape1: Sequence[int], shape2: Sequence[int], seed: int = 0) -> bytes:
    """One int8 SQUARED_DIFFERENCE of two inputs (``shape2`` may broadcast against ``shape1``)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    q1 = activation_quant(rng, "int8", random_scale(rng, 0.005, 0.05))
    q2 = activation_quant(rng, "int8", random_scale(rng, 0.005, 0.05))
    big = max(q1.scales[0], q2.scales[0])
    oq = Quant.tensor(float(np.float32(big * big * rng.uniform(30, 250))), -128)
    out_shape = tuple(np.broadcast_shapes(tuple(shape1), tuple(shape2)))
    a = m.add_tensor("input1", shape1, "int8", q1)
    b = m.add_tensor("input2", shape2, "int8", q2)
    y = m.add_tensor("output", out_shape, "int8", oq)
    m.add_op("SQUARED_DIFFERENCE", [a, b], [y])
    return m.build([a, b], [y])


def neg_model(shape: Sequence[int], seed: int = 0) -> bytes:
    """One int8 NEG (TFLite negates the stored value, whatever the quantization)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    q = activation_quant(rng, "int8", random_scale(rng))
    x = m.add_tensor("input", shape, "int8", q)
    y = m.add_tensor("output", shape, "int8", q)
    m.add_op("NEG", [x], [y], version=1)
    return m.build([x], [y])


def abs_model(shape: Sequence[int], seed: int = 0, same_quant: bool = False) -> bytes:
    """One int8 ABS; the output quantized like the input with ``same_quant`` (TFLite adds the output
    zero point to ``|x - zp|``), else with its own scale and zero point (TFLite requantizes)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    iq = activation_quant(rng, "int8", random_scale(rng))
    # |x| spans half the input's range: an output scale near half the input's keeps it in int8.
    out_scale = float(np.float32(iq.scales[0] * rng.uniform(0.4, 0.9)))
    oq = iq if same_quant else Quant.tensor(out_scale, int(rng.integers(-128, -90)))
    x = m.add_tensor("input", shape, "int8", iq)
    y = m.add_tensor("output", shape, "int8", oq)
    m.add_op("ABS", [x], [y])
    return m.build([x], [y])


def gelu_model(shape: Sequence[int], seed: int = 0, dtype: str = "int8", approximate: bool = False) -> bytes:
    """One GELU (exact erf form or the tanh approximation); the output's scale and zero point cover
    GELU's range, about [-0.17, max(x)]."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    iq = activation_quant(rng, dtype, random_scale(rng, 0.01, 0.06))
    span = iq.scales[0] * (QMAX[dtype] - iq.zero_points[0])  # the largest input, the largest output
    out_scale = float(np.float32(span / 230 * rng.uniform(0.9, 1.1)))
    oq = Quant.tensor(out_scale, QMIN[dtype] + int(round(0.17 / out_scale)) + int(rng.integers(1, 4)))
    x = m.add_tensor("input", shape, dtype, iq)
    y = m.add_tensor("output", shape, dtype, oq)
    m.add_op("GELU", [x], [y], approximate=approximate)
    return m.build([x], [y])


def float_chain_model(
    shape: Sequence[int],
    float_ops: Sequence[str] = ("NEG",),
    seed: int = 0,
    in_dtype: str = "int8",
    out_dtype: str = "int8",
    around: bool = False,
) -> bytes:
    """8-bit -> DEQUANTIZE -> ``float_ops`` (float32, one input each) -> QUANTIZE -> 8-bit, as the
    converter leaves a LayerNormalization's ``-mean``; with ``around``, an int8 MUL of the input by
    itself before and one after, so the chain sits inside an 8-bit graph."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    iq = activation_quant(rng, in_dtype, random_scale(rng, 0.005, 0.1))
    x = m.add_tensor("input", shape, in_dtype, iq)
    first = x
    if around:
        sq = activation_quant(rng, in_dtype, float(np.float32(iq.scales[0] ** 2 * 128)))
        first = m.add_tensor("squared", shape, in_dtype, sq)
        m.add_op("MUL", [x, x], [first], fused_activation_function="NONE")
        iq = sq
    prev = m.add_tensor("dequantized", shape, "float32")
    m.add_op("DEQUANTIZE", [first], [prev])
    for i, op in enumerate(float_ops):
        out = m.add_tensor(f"{op.lower()}{i}", shape, "float32")
        m.add_op(op, [prev], [out])
        prev = out
    oq = activation_quant(rng, out_dtype, iq.scales[0] * rng.uniform(0.5, 1.5))
    y = m.add_tensor("output", shape, out_dtype, oq)
    m.add_op("QUANTIZE", [prev], [y])
    if around:
        z = m.add_tensor("after", shape, out_dtype, activation_quant(rng, out_dtype, oq.scales[0] * 0.7))
        m.add_op("MUL", [y, x], [z], fused_activation_function="NONE")
        y = z
    return m.build([x], [y])


#: Operators :func:`accumulator_probe_model` builds.
PROBE_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "FULLY_CONNECTED", "BATCH_MATMUL")
PROBE_DEPTH = 257  # BATCH_MATMUL's depth: one unit term plus 256 terms of 255 reach any accumulator < 255**3


def accumulator_probe_model(
    op: str,
    dtype: str,
    scales: tuple[float, float, float],
    accumulators: Sequence[int],
    per_channel: bool = False,
) -> tuple[bytes, list[np.ndarray]]:
    """(model, inputs): one ``op`` whose output channel ``c`` requantizes exactly ``accumulators[c]``,
    so a test can put every output where two requantizations disagree.

    ``scales`` are (input, filter, output). The window ops and FULLY_CONNECTED are 1x1 layers of one
    input value (zero point + 1) and a filter of zero point + 1: the accumulator is 1 + bias, the bias
    ``accumulators - 1``. BATCH_MATMUL has no bias: lhs ``[1, 1, PROBE_DEPTH]`` is (1, 255, 255, ...)
    above its zero point and the rhs column ``c`` spells ``accumulators[c]`` in base 255 (each
    accumulator in [0, 255**3)). Output zero points sit mid-range, so the outputs must stay within
    about +-100 of them not to clip."""
    if op not in PROBE_OPS:
        raise ValueError(f"no probe for {op}")
    s_in, s_w, s_out = (float(np.float32(s)) for s in scales)
    acc = np.asarray(accumulators, dtype=np.int64)
    c = len(acc)
    z = 128 if dtype == "uint8" else 0
    np_type = NP_TYPES[dtype]
    m = ModelBuilder()
    if op == "BATCH_MATMUL":
        if dtype != "int8" or acc.min() < 0 or acc.max() >= 255**3:
            raise ValueError("BATCH_MATMUL probes int8 accumulators in [0, 255**3)")
        digits = np.zeros((PROBE_DEPTH, c), dtype=np.int64)
        digits[0], rest = acc % 255, acc // 255
        for k in range(1, PROBE_DEPTH):
            digits[k] = np.minimum(rest, 255)
            rest = rest - digits[k]
        a = m.add_tensor("lhs", (1, 1, PROBE_DEPTH), "int8", Quant.tensor(s_in, -128))
        b = m.add_tensor("rhs", (1, PROBE_DEPTH, c), "int8", Quant.tensor(s_w, -128))
        y = m.add_tensor("output", (1, 1, c), "int8", Quant.tensor(s_out, 0))
        m.add_op("BATCH_MATMUL", [a, b], [y], adj_x=False, adj_y=False)
        lhs = np.full((1, 1, PROBE_DEPTH), 127, dtype=np.int8)
        lhs[0, 0, 0] = -127
        return m.build([a, b], [y]), [lhs, (digits - 128).astype(np.int8).reshape(1, PROBE_DEPTH, c)]
    n = c if per_channel else 1
    axis = 3 if op == "DEPTHWISE_CONV_2D" else 0
    wq = Quant((s_w,) * n, (z,) * n, axis if per_channel else 0)
    bq = Quant((float(np.float32(np.float32(s_in) * np.float32(s_w))),) * n, (0,) * n, 0)
    in_shape = {"FULLY_CONNECTED": (1, 1), "DEPTHWISE_CONV_2D": (1, 1, 1, c)}.get(op, (1, 1, 1, 1))
    w_shape = {"FULLY_CONNECTED": (c, 1), "DEPTHWISE_CONV_2D": (1, 1, 1, c)}.get(op, (c, 1, 1, 1))
    out_shape = (1, c) if op == "FULLY_CONNECTED" else (1, 1, 1, c)
    x = m.add_tensor("input", in_shape, dtype, Quant.tensor(s_in, z))
    w = m.add_const("filter", np.full(w_shape, z + 1, dtype=np_type), dtype, wq)
    bias = m.add_const("bias", (acc - 1).astype(np.int32), "int32", bq)
    y = m.add_tensor("output", out_shape, dtype, Quant.tensor(s_out, z))
    window = dict(padding="VALID", stride_h=1, stride_w=1, fused_activation_function="NONE")
    dilation = dict(dilation_h_factor=1, dilation_w_factor=1)
    if op == "FULLY_CONNECTED":
        m.add_op(op, [x, w, bias], [y], fused_activation_function="NONE")
    elif op == "CONV_2D":
        m.add_op(op, [x, w, bias], [y], **window, **dilation)
    elif op == "DEPTHWISE_CONV_2D":
        m.add_op(op, [x, w, bias], [y], **window, **dilation, depth_multiplier=1)
    else:
        shape = m.add_const("output_shape", np.array(out_shape, dtype=np.int32), "int32")
        m.add_op(op, [shape, w, x, bias], [y], **window)
    return m.build([x], [y]), [np.full(in_shape, z + 1, dtype=np_type)]
