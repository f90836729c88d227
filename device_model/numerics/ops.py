"""The NPU's operations (the general path): bit-exact with TFLite's int8/uint8 *reference* kernels.

Every function here is pure and vectorized (numpy; no per-element Python
loops). Quantized tensors come in as arrays of their stored integer values
(int8, uint8 or int32 as loaded from memory), zero points and requantization
parameters as plain ints or per-channel arrays (the convolutions and
FULLY_CONNECTED take theirs as one :class:`Requant` record). Results are int32 arrays
already clamped to [act_min, act_max]; the caller stores them with the
output's dtype. The formulas are TFLite's (tensorflow/lite/kernels/internal/common.h and
reference/integer_ops/*.h). With ``fast=True`` the convolutions and FULLY_CONNECTED take
:mod:`.planned`'s path for 8-bit outputs, byte-identical.
"""

from __future__ import annotations

import functools

import numpy as np

from .planned import (
    _FAST_OUT,
    plan_depthwise,
    plan_gemm,
    run_conv2d_plan,
    run_depthwise_plan,
    run_fc_plan,
)
from .primitives import (
    _DTYPE_RANGES,
    _F32_EXACT,
    INT32_MAX,
    INT32_MIN,
    SHIFT_MAX,
    ArrayLike,
    Requant,
    _check_geometry,
    _filter_matrix,
    _gemm_channels,
    _padded,
    _valid_counts,
    _windows,
    check_clamp,
    check_zero_points,
    multiply_by_quantized_multiplier,
    requantize_channels,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
    wrap_int32,
)


# --- operators ----------------------------------------------------------------
def conv2d(
    inp: np.ndarray,
    filt: np.ndarray,
    bias: np.ndarray | None,
    rq: Requant,
    *,
    stride_h: int,
    stride_w: int,
    dilation_h: int,
    dilation_w: int,
    pad_top: int,
    pad_left: int,
    out_h: int,
    out_w: int,
    fast: bool = True,
) -> np.ndarray:
    """TFLite's quantized Conv2D: input [N,H,W,Cin], filter [Cout,KH,KW,Cin] -> [N,OH,OW,Cout],
    with ``rq``'s zero points and requantization.

    ``fast`` tries the planned path (:func:`plan_gemm`) first; False goes straight to the general one.
    """
    n, h, w, cin = inp.shape
    cout, kh, kw, fcin = filt.shape
    if fcin != cin:
        raise ValueError(f"CONV2D: filter has {fcin} input channels, the input {cin}")
    _check_geometry(
        "CONV2D", stride_h=stride_h, stride_w=stride_w, dilation_h=dilation_h, dilation_w=dilation_w
    )
    check_zero_points("CONV2D", rq.input_zp, rq.filter_zp)
    if fast:
        plan = plan_gemm(filt, bias, rq, in_dtype=inp.dtype)
        if plan is not None:
            geometry = (stride_h, stride_w, dilation_h, dilation_w, pad_top, pad_left, out_h, out_w)
            return run_conv2d_plan(inp, plan, kh, kw, geometry, filt)
    # Positions outside the input contribute nothing: after subtracting the
    # zero point, padding is 0. float32 holds these small integers exactly.
    x = inp.astype(np.float32)
    if rq.input_zp:
        x -= np.float32(rq.input_zp)
    wt = _filter_matrix(filt, rq.filter_zp, cout)
    if (kh, kw, stride_h, stride_w, pad_top, pad_left) == (1, 1, 1, 1, 0, 0) and (out_h, out_w) == (h, w):
        cols = x.reshape(n * h * w, cin)
    else:
        need_h = (out_h - 1) * stride_h + (kh - 1) * dilation_h + 1
        need_w = (out_w - 1) * stride_w + (kw - 1) * dilation_w + 1
        xp = _padded(x, pad_top, pad_left, need_h, need_w, 0)
        win = _windows(xp, out_h, out_w, kh, kw, stride_h, stride_w, dilation_h, dilation_w)
        cols = win.reshape(n * out_h * out_w, kh * kw * cin)
    acc = _gemm_channels(wt, cols)  # [Cout, N*OH*OW]
    return requantize_channels(acc, bias, rq).T.reshape(n, out_h, out_w, cout)


def depthwise_conv2d(
    inp: np.ndarray,
    filt: np.ndarray,
    bias: np.ndarray | None,
    rq: Requant,
    *,
    stride_h: int,
    stride_w: int,
    dilation_h: int,
    dilation_w: int,
    pad_top: int,
    pad_left: int,
    depth_multiplier: int,
    out_h: int,
    out_w: int,
    fast: bool = True,
) -> np.ndarray:
    """TFLite's quantized DepthwiseConv2D: filter [1,KH,KW,Cin*dm]; channel oc reads input oc // dm.

    ``rq`` and ``fast`` as :func:`conv2d`."""
    n, h, w, cin = inp.shape
    one, kh, kw, cout = filt.shape
    _check_geometry(
        "DEPTHWISE_CONV2D",
        stride_h=stride_h,
        stride_w=stride_w,
        dilation_h=dilation_h,
        dilation_w=dilation_w,
        depth_multiplier=depth_multiplier,
    )
    if one != 1 or cout != cin * depth_multiplier:
        raise ValueError(
            f"DEPTHWISE_CONV2D: filter shape {filt.shape} does not match {cin} channels x {depth_multiplier}"
        )
    check_zero_points("DEPTHWISE_CONV2D", rq.input_zp, rq.filter_zp)
    if fast:
        plan = plan_depthwise(filt, bias, rq, in_dtype=inp.dtype)
        if plan is not None:
            geometry = (stride_h, stride_w, dilation_h, dilation_w, pad_top, pad_left, out_h, out_w)
            return run_depthwise_plan(inp, plan, kh, kw, depth_multiplier, geometry)
    x = inp.astype(np.float32)
    if rq.input_zp:
        x -= np.float32(rq.input_zp)
    if depth_multiplier > 1:
        x = np.repeat(x, depth_multiplier, axis=3)
    wt = filt.astype(np.float32).reshape(kh * kw, cout)
    if rq.filter_zp:
        wt -= np.float32(rq.filter_zp)
    # float32 sums are exact while every partial sum stays below 2**24; else float64 (2**53).
    a_max = max(float(x.max(initial=0)), -float(x.min(initial=0)))
    acc_type = np.float32 if a_max * float(np.abs(wt).sum(axis=0).max(initial=0)) < _F32_EXACT else np.float64
    wt = wt.astype(acc_type)
    need_h = (out_h - 1) * stride_h + (kh - 1) * dilation_h + 1
    need_w = (out_w - 1) * stride_w + (kw - 1) * dilation_w + 1
    xp = _padded(x, pad_top, pad_left, need_h, need_w, 0)
    acc = np.zeros((n, out_h, out_w, cout), dtype=acc_type)
    tmp = np.empty_like(acc)
    # One vectorized multiply-add per filter tap (KH*KW iterations, not per pixel); the channel
    # axis is innermost, so each is a long contiguous loop against the tap's weights.
    for ky in range(kh):
        for kx in range(kw):
            y0 = ky * dilation_h
            x0 = kx * dilation_w
            tap = xp[
                :,
                y0 : y0 + (out_h - 1) * stride_h + 1 : stride_h,
                x0 : x0 + (out_w - 1) * stride_w + 1 : stride_w,
            ]
            np.multiply(tap, wt[ky * kw + kx], out=tmp)
            acc += tmp
    return requantize_channels(acc.reshape(-1, cout).T, bias, rq).T.reshape(n, out_h, out_w, cout)


def fully_connected(
    inp: np.ndarray, filt: np.ndarray, bias: np.ndarray | None, rq: Requant, *, fast: bool = True
) -> np.ndarray:
    """TFLite's quantized FullyConnected: input [B,K], filter [Cout,K] -> [B,Cout].

    ``rq`` and ``fast`` as :func:`conv2d` (``rq.single_rounding``: one rounding, as LiteRT's
    reference kernel does).
    """
    b, k = inp.shape
    cout, fk = filt.shape
    if fk != k:
        raise ValueError(f"FULLY_CONNECTED: filter depth {fk} does not match input depth {k}")
    check_zero_points("FULLY_CONNECTED", rq.input_zp, rq.filter_zp)
    if fast and not rq.float_scale:
        plan = plan_gemm(filt, bias, rq, in_dtype=inp.dtype)
        if plan is not None:
            return run_fc_plan(inp, plan, filt)
    x = inp.astype(np.float32)
    if rq.input_zp:
        x -= np.float32(rq.input_zp)
    acc = _gemm_channels(_filter_matrix(filt, rq.filter_zp, cout), x)  # [Cout, B]
    return requantize_channels(acc, bias, rq).T


def add(
    in1: np.ndarray,
    in2: np.ndarray,
    *,
    input1_zp: int,
    input2_zp: int,
    left_shift: int,
    input1_multiplier: int,
    input1_shift: int,
    input2_multiplier: int,
    input2_shift: int,
    output_multiplier: int,
    output_shift: int,
    output_zp: int,
    act_min: int,
    act_max: int,
    subtract: bool = False,
    out_dtype: np.dtype | None = None,
) -> np.ndarray:
    """TFLite's quantized Add (or Sub with ``subtract``): rescale both inputs to a common scale.

    TFLite uses MultiplyByQuantizedMultiplierSmallerThanOneExp, which is
    MultiplyByQuantizedMultiplier for the shifts <= 0 it produces; positive
    shifts get MultiplyByQuantizedMultiplier's defined left shift.

    With ``out_dtype`` int8/uint8 and byte inputs the result is already saturated to out_dtype (a
    lookup in :func:`_add_table`); otherwise int32 values in [act_min, act_max].
    """
    if not 0 <= left_shift <= SHIFT_MAX:
        raise ValueError(f"ADD: left_shift must be in [0, {SHIFT_MAX}], got {left_shift}")
    check_clamp(act_min, act_max)
    table = add_table(
        in1.dtype, in2.dtype, out_dtype, input1_zp=input1_zp, input2_zp=input2_zp, left_shift=left_shift,
        input1_multiplier=input1_multiplier, input1_shift=input1_shift, input2_multiplier=input2_multiplier,
        input2_shift=input2_shift, output_multiplier=output_multiplier, output_shift=output_shift,
        output_zp=output_zp, act_min=act_min, act_max=act_max, subtract=subtract,
    )  # fmt: skip
    if table is not None:
        return table.take(_pair_index(in1, in2))
    a = wrap_int32((in1.astype(np.int64) - input1_zp) << left_shift)
    b = wrap_int32((in2.astype(np.int64) - input2_zp) << left_shift)
    a = multiply_by_quantized_multiplier(a, input1_multiplier, input1_shift)
    b = multiply_by_quantized_multiplier(b, input2_multiplier, input2_shift)
    raw = wrap_int32(a - b if subtract else a + b)
    out = multiply_by_quantized_multiplier(raw, output_multiplier, output_shift) + output_zp
    return np.clip(out, act_min, act_max).astype(np.int32)


def _byte_operands(*dtypes: np.dtype | None) -> bool:
    return all(d is not None and np.dtype(d) in _FAST_OUT for d in dtypes)


def add_table(
    in1_dtype: np.dtype, in2_dtype: np.dtype, out_dtype: np.dtype | None, **params: int | bool
) -> np.ndarray | None:
    """The read-only [65536] table of out_dtype that :func:`add` (same keyword parameters) looks
    byte inputs up in, by (b1 << 8) | b2 of the inputs' raw bytes; None unless all three dtypes are
    int8/uint8. Parameters outside add()'s bounds raise ValueError as add() does."""
    if not _byte_operands(in1_dtype, in2_dtype, out_dtype):
        return None
    if not 0 <= int(params["left_shift"]) <= SHIFT_MAX:
        raise ValueError(f"ADD: left_shift must be in [0, {SHIFT_MAX}], got {params['left_shift']}")
    check_clamp(int(params["act_min"]), int(params["act_max"]))
    names = (
        "input1_zp", "input2_zp", "left_shift", "input1_multiplier", "input1_shift", "input2_multiplier",
        "input2_shift", "output_multiplier", "output_shift", "output_zp", "act_min", "act_max", "subtract",
    )  # fmt: skip
    key = tuple(params[name] for name in names)
    return _pair_table("ADD", np.dtype(in1_dtype).str, np.dtype(in2_dtype).str, np.dtype(out_dtype).str, key)


def mul_table(
    in1_dtype: np.dtype, in2_dtype: np.dtype, out_dtype: np.dtype | None, **params: int
) -> np.ndarray | None:
    """The [65536] table :func:`mul` looks byte inputs up in (as :func:`add_table` for add())."""
    if not _byte_operands(in1_dtype, in2_dtype, out_dtype):
        return None
    check_clamp(int(params["act_min"]), int(params["act_max"]))
    names = ("input1_zp", "input2_zp", "output_multiplier", "output_shift", "output_zp", "act_min", "act_max")
    key = tuple(params[name] for name in names)
    return _pair_table("MUL", np.dtype(in1_dtype).str, np.dtype(in2_dtype).str, np.dtype(out_dtype).str, key)


# Byte-input ADD/SUB and MUL through a table of all 65536 input pairs: the output is a function of
# the two bytes alone, so a lookup replaces a dozen int64 passes over the tensor (MUL on a 32x32x32
# tensor: ~190 us direct, ~25 us looked up). Each table (64 KiB) is built once per parameter set by the
# exact computation below. Tables are shared by every stream; a model has a few dozen parameter
# sets (EfficientNet-B0: 74) and the cache holds BYTE_TABLES of them (16 MiB at most).
BYTE_TABLES = 256


def _pair_index(in1: np.ndarray, in2: np.ndarray) -> np.ndarray:
    """(b1 << 8) | b2 of two same-shape 8-bit tensors' bytes, as uint16 table indices."""
    idx = in1.view(np.uint8).astype(np.uint16)
    idx <<= 8
    idx |= in2.view(np.uint8)
    return idx


@functools.lru_cache(maxsize=BYTE_TABLES)
def _pair_table(op: str, in1_dtype: str, in2_dtype: str, out_dtype: str, params: tuple) -> np.ndarray:
    """[65536] of out_dtype: ``op`` (ADD, with SUB as a parameter, or MUL) of the bytes (b1 << 8) | b2
    read as the inputs' dtypes, saturated as storing to out_dtype does."""
    byte = np.arange(256, dtype=np.uint8)
    a = np.repeat(byte.view(in1_dtype), 256)
    b = np.tile(byte.view(in2_dtype), 256)
    if op == "ADD":
        zp1, zp2, ls, m1, s1, m2, s2, om, os_, ozp, act_min, act_max, subtract = params
        full = add(
            a, b, input1_zp=zp1, input2_zp=zp2, left_shift=ls, input1_multiplier=m1, input1_shift=s1,
            input2_multiplier=m2, input2_shift=s2, output_multiplier=om, output_shift=os_, output_zp=ozp,
            act_min=act_min, act_max=act_max, subtract=subtract,
        )  # fmt: skip
    else:
        zp1, zp2, om, os_, ozp, act_min, act_max = params
        full = mul(
            a, b, input1_zp=zp1, input2_zp=zp2, output_multiplier=om, output_shift=os_, output_zp=ozp,
            act_min=act_min, act_max=act_max,
        )  # fmt: skip
    info = np.iinfo(out_dtype)  # what storing to the output saturates to
    table = np.clip(full, info.min, info.max).astype(out_dtype)
    table.flags.writeable = False
    return table


def mul(
    in1: np.ndarray,
    in2: np.ndarray,
    *,
    input1_zp: int,
    input2_zp: int,
    output_multiplier: int,
    output_shift: int,
    output_zp: int,
    act_min: int,
    act_max: int,
    out_dtype: np.dtype | None = None,
) -> np.ndarray:
    """TFLite's quantized Mul.

    With ``out_dtype`` int8/uint8 and byte inputs the result is already saturated to out_dtype (a
    lookup in :func:`_pair_table`); otherwise int32 values in [act_min, act_max].
    """
    check_clamp(act_min, act_max)
    table = mul_table(
        in1.dtype, in2.dtype, out_dtype, input1_zp=input1_zp, input2_zp=input2_zp,
        output_multiplier=output_multiplier, output_shift=output_shift, output_zp=output_zp, act_min=act_min,
        act_max=act_max,
    )  # fmt: skip
    if table is not None:
        return table.take(_pair_index(in1, in2))
    prod = wrap_int32((in1.astype(np.int64) - input1_zp) * (in2.astype(np.int64) - input2_zp))
    out = multiply_by_quantized_multiplier(prod, output_multiplier, output_shift) + output_zp
    return np.clip(out, act_min, act_max).astype(np.int32)


def _pool_setup(
    name: str, inp: np.ndarray, fh: int, fw: int, sh: int, sw: int, pt: int, pl: int, oh: int, ow: int
) -> tuple[np.ndarray, np.ndarray] | np.ndarray:
    """Each output row's and column's count of valid window taps, or the windows of
    :func:`_tiled_windows` when they tile the input (every count is then fh * fw)."""
    _check_geometry(name, filter_h=fh, filter_w=fw, stride_h=sh, stride_w=sw)
    tiles = _tiled_windows(inp, fh, fw, sh, sw, pt, pl, oh, ow)
    if tiles is not None:
        return tiles
    _, h, w, _ = inp.shape
    cy = _valid_counts(oh, sh, pt, h, fh)
    cx = _valid_counts(ow, sw, pl, w, fw)
    if not (cy.all() and cx.all()):
        raise ValueError(f"{name}: a window covers no input position (padding too large)")
    return cy, cx


def _tiled_windows(
    inp: np.ndarray, fh: int, fw: int, sh: int, sw: int, pt: int, pl: int, oh: int, ow: int
) -> np.ndarray | None:
    """[N, OH, FH, OW, FW, C]: the windows as a reshape of the input, when they tile it without
    padding or overlap (stride = filter: global pooling, 2x2/2 transitions), else None.

    Reducing over axes 2 and 4 of it is one pass over the input, where the general path copies it
    to int64, pads it and reduces a strided window view (~60 us for a 4 KiB global pool)."""
    n, h, w, c = inp.shape
    # One window along an axis has no stride (a global pool converted with stride 1 tiles too).
    sh, sw = (sh if oh > 1 else fh), (sw if ow > 1 else fw)
    if (sh, sw, pt, pl) != (fh, fw, 0, 0) or oh * fh > h or ow * fw > w:
        return None
    return inp[:, : oh * fh, : ow * fw].reshape(n, oh, fh, ow, fw, c)


def max_pool(
    inp: np.ndarray,
    *,
    filter_h: int,
    filter_w: int,
    stride_h: int,
    stride_w: int,
    pad_top: int,
    pad_left: int,
    out_h: int,
    out_w: int,
    act_min: int,
    act_max: int,
) -> np.ndarray:
    """TFLite's MaxPool over the valid positions of each window."""
    check_clamp(act_min, act_max)
    geometry = (filter_h, filter_w, stride_h, stride_w, pad_top, pad_left, out_h, out_w)
    tiles = _pool_setup("MAXPOOL", inp, *geometry)
    if isinstance(tiles, np.ndarray):
        return np.clip(tiles.max(axis=(2, 4)), act_min, act_max).astype(np.int32)
    need_h = (out_h - 1) * stride_h + filter_h
    need_w = (out_w - 1) * stride_w + filter_w
    xp = _padded(inp.astype(np.int32), pad_top, pad_left, need_h, need_w, INT32_MIN)
    win = _windows(xp, out_h, out_w, filter_h, filter_w, stride_h, stride_w, 1, 1)
    return np.clip(win.max(axis=(3, 4)), act_min, act_max).astype(np.int32)


def avg_pool(
    inp: np.ndarray,
    *,
    filter_h: int,
    filter_w: int,
    stride_h: int,
    stride_w: int,
    pad_top: int,
    pad_left: int,
    out_h: int,
    out_w: int,
    act_min: int,
    act_max: int,
) -> np.ndarray:
    """TFLite's AveragePool: sum of valid positions / their count, rounded half away from zero."""
    check_clamp(act_min, act_max)
    geometry = (filter_h, filter_w, stride_h, stride_w, pad_top, pad_left, out_h, out_w)
    setup = _pool_setup("AVGPOOL", inp, *geometry)
    if isinstance(setup, np.ndarray):  # every window is whole: one count
        acc = setup.sum(axis=(2, 4), dtype=np.int64)
        count: np.ndarray | int = filter_h * filter_w
    else:
        cy, cx = setup
        need_h = (out_h - 1) * stride_h + filter_h
        need_w = (out_w - 1) * stride_w + filter_w
        xp = _padded(inp.astype(np.int64), pad_top, pad_left, need_h, need_w, 0)
        win = _windows(xp, out_h, out_w, filter_h, filter_w, stride_h, stride_w, 1, 1)
        acc = win.sum(axis=(3, 4))
        count = (cy[:, None] * cx[None, :])[None, :, :, None]
    half = count // 2
    # C division truncates toward zero: round the magnitude, then restore the sign.
    avg = np.where(acc > 0, (acc + half) // count, -((-acc + half) // count))
    return np.clip(avg, act_min, act_max).astype(np.int32)


def lut(inp: np.ndarray, table: np.ndarray, signed_input: bool) -> np.ndarray:
    """out[i] = table[in[i] + 128] for int8 input, table[in[i]] for uint8."""
    if table.size != 256:
        raise ValueError(f"LUT: the table has {table.size} elements, not 256")
    if inp.dtype == (np.int8 if signed_input else np.uint8):  # one pass over the bytes, no int32 index
        return table.reshape(256).take(_byte_index(inp))
    idx = inp.astype(np.int32) + (128 if signed_input else 0)
    return table.reshape(256)[idx]


# --- two-input tables, argmax, bilinear resize ----------------------------------------------
def _byte_index(x: np.ndarray) -> np.ndarray:
    """An 8-bit tensor's values as table indices 0..255: in + 128 for int8, in for uint8."""
    if x.dtype == np.int8:
        return x.view(np.uint8) ^ np.uint8(0x80)
    if x.dtype == np.uint8:
        return x
    raise ValueError(f"table index of {x.dtype} values: expected int8 or uint8")


def lut2(in1: np.ndarray, in2: np.ndarray, table: np.ndarray) -> np.ndarray:
    """out[i] = table[256 * j1 + j2], j = in + 128 for int8 inputs, in for uint8."""
    if table.size != 65536:
        raise ValueError(f"LUT2: the table has {table.size} elements, not 65536")
    idx = _byte_index(in1).astype(np.int32) << 8
    idx |= _byte_index(in2)
    return table.reshape(65536).take(idx)


def arg_max(inp: np.ndarray) -> np.ndarray:
    """The index of the maximum along the last axis, the first one on a tie (TFLite's ArgMinMax), as int32
    with the last axis kept (size 1)."""
    return np.argmax(inp, axis=-1).astype(np.int32)[..., None]


def resize_axis(
    out_size: int, in_size: int, align_corners: bool, half_pixel_centers: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """reference_ops::ResizeBilinearInteger's per-axis (lower, upper, weight of upper) in 1/1024 units."""
    if align_corners and out_size > 1:
        scale = ((1 << 10) * (in_size - 1) + (out_size - 1) // 2) // (out_size - 1)
    else:
        scale = ((1 << 10) * in_size + out_size // 2) // out_size
    v = np.arange(out_size, dtype=np.int64) * scale
    if half_pixel_centers:
        v += scale // 2 - (1 << 9)
    # C division truncates toward zero (v may be negative with half-pixel centers).
    lower = np.maximum(np.trunc(v / 1024).astype(np.int64), 0)
    upper = np.minimum(np.trunc((v + 1023) / 1024).astype(np.int64), in_size - 1)
    if out_size and int(lower.max()) > in_size - 1:  # ALIGN_CORNERS with HALF_PIXEL_CENTERS can
        raise ValueError(  # (TFLite refuses the pair); the device fails the job, reads nothing
            f"RESIZE_BILINEAR: {out_size} from {in_size} reads index {int(lower.max())}, past the input"
        )
    return lower, upper, v - 1024 * lower


def resize_bilinear(
    inp: np.ndarray,
    out_h: int,
    out_w: int,
    align_corners: bool,
    half_pixel_centers: bool,
    single_rounding: bool = False,
) -> np.ndarray:
    """TFLite's ResizeBilinearInteger on [N,H,W,C] 8-bit values, as the input's dtype.

    The four corners weighted in 1/1024 units sum to a value in 1/2**20 units, divided by 2**20
    rounding half away from zero (half up with ``single_rounding``, TFLite's TFLITE_SINGLE_ROUNDING)
    and cast to the dtype as C does (wrapping: the weights can be negative with half-pixel centers)."""
    _check_geometry("RESIZE_BILINEAR", out_h=out_h, out_w=out_w)
    _, h, w, _ = inp.shape
    y0, y1, dy = resize_axis(out_h, h, align_corners, half_pixel_centers)
    x0, x1, dx = resize_axis(out_w, w, align_corners, half_pixel_centers)
    x = inp.astype(np.int64)
    wx = dx[None, None, :, None]
    top, bottom = x[:, y0], x[:, y1]
    top = top[:, :, x0] * (1024 - wx) + top[:, :, x1] * wx
    bottom = bottom[:, :, x0] * (1024 - wx) + bottom[:, :, x1] * wx
    wy = dy[None, :, None, None]
    total = top * (1024 - wy) + bottom * wy
    if single_rounding:
        out = (total + (1 << 19)) >> 20
    else:  # (total +- 2**19) / 2**20 with C's truncating division
        out = np.where(total > 0, (total + (1 << 19)) >> 20, -((-total + (1 << 19)) >> 20))
    return out.astype(inp.dtype)


# --- softmax (gemmlowp fixed point) -------------------------------------------------------------
# The FixedPoint<int32, I> values of gemmlowp (fixedpoint.h) as their raw int32 values in int64
# arrays: + is a wrapping add, * is SaturatingRoundingDoublingHighMul.
SOFTMAX_DIFF_INTEGER_BITS = 5  # the Q5.26 input of exp_on_negative_values
SOFTMAX_ACCUM_INTEGER_BITS = 12  # the Q12.19 sum of exponentials


def saturating_left_shift(x: ArrayLike, exponent: int) -> np.ndarray:
    """gemmlowp's SaturatingRoundingMultiplyByPOT for a positive exponent: x << e, saturated to int32."""
    x64 = np.asarray(x, dtype=np.int64)
    threshold = (1 << (31 - exponent)) - 1
    return np.where(x64 > threshold, INT32_MAX, np.where(x64 < -threshold, INT32_MIN, x64 << exponent))


def _exp_on_interval_between_negative_one_quarter_and_0_excl(a: np.ndarray) -> np.ndarray:
    srdhm = saturating_rounding_doubling_high_mul
    constant_term = 1895147668  # exp(-1/8) in Q0.31
    constant_1_over_3 = 715827883
    x = wrap_int32(a + (1 << 28))  # a + 1/8
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    x4_over_4 = rounding_divide_by_pot(x4, 2)
    poly = rounding_divide_by_pot(wrap_int32(srdhm(wrap_int32(x4_over_4 + x3), constant_1_over_3) + x2), 1)
    return wrap_int32(constant_term + srdhm(constant_term, wrap_int32(x + poly)))


def exp_on_negative_values(a: np.ndarray, integer_bits: int = SOFTMAX_DIFF_INTEGER_BITS) -> np.ndarray:
    """gemmlowp's exp_on_negative_values: a <= 0 in Q(integer_bits) -> exp(a) in Q0.31 (raw values)."""
    a = np.asarray(a, dtype=np.int64)
    fractional_bits = 31 - integer_bits
    one_quarter = 1 << (fractional_bits - 2)
    a_mod_quarter_minus_one_quarter = (a & (one_quarter - 1)) - one_quarter
    result = _exp_on_interval_between_negative_one_quarter_and_0_excl(
        saturating_left_shift(a_mod_quarter_minus_one_quarter, integer_bits)
    )
    remainder = wrap_int32(a_mod_quarter_minus_one_quarter - a)
    barrel = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535),
              (3, 720401), (4, 242))  # fmt: skip
    for exponent, multiplier in barrel:
        if integer_bits > exponent:
            hit = (remainder & (1 << (fractional_bits + exponent))) != 0
            result = np.where(hit, saturating_rounding_doubling_high_mul(result, multiplier), result)
    if integer_bits > 5:
        result = np.where(a < -(1 << (fractional_bits + 5)), 0, result)  # below -32: 0
    return np.where(a == 0, INT32_MAX, result)


def one_over_one_plus_x_for_x_in_0_1(a: np.ndarray) -> np.ndarray:
    """gemmlowp's Newton-Raphson 1 / (1 + a) for a in [0, 1) in Q0.31; the result in Q0.31."""
    srdhm = saturating_rounding_doubling_high_mul
    total = np.asarray(a, dtype=np.int64) + INT32_MAX  # RoundingHalfSum(a, One): (sum + sign) / 2
    half_denominator = np.trunc((total + np.where(total >= 0, 1, -1)) / 2).astype(np.int64)
    x = wrap_int32(1515870810 + srdhm(half_denominator, -1010580540))  # 48/17 - 32/17 d in Q2.29
    for _ in range(3):
        one_minus = wrap_int32((1 << 29) - srdhm(half_denominator, x))
        x = wrap_int32(x + saturating_left_shift(srdhm(x, one_minus), 2))
    return saturating_left_shift(x, 1)  # ExactMulByPot<-1> then Rescale<0>


def check_softmax(input_left_shift: int, out_dtype: np.dtype) -> np.dtype:
    """SOFTMAX's parameter checks (ValueError naming the problem); the output dtype."""
    if not 0 <= input_left_shift <= 31:
        raise ValueError(f"SOFTMAX: input_left_shift must be in [0, 31], got {input_left_shift}")
    out_dtype = np.dtype(out_dtype)
    if out_dtype not in _FAST_OUT:
        raise ValueError(f"SOFTMAX: output {out_dtype} is not int8 or uint8")
    return out_dtype


SOFTMAX_RANGE_ERROR = "SOFTMAX: the sum of exponentials is out of range"


def softmax(
    inp: np.ndarray, *, input_multiplier: int, input_left_shift: int, diff_min: int, out_dtype: np.dtype
) -> np.ndarray:
    """TFLite's quantized reference softmax along the last axis (reference_ops::Softmax), as out_dtype.

    The output is 8-bit with scale 1/256 and the dtype's minimum as zero point, as TFLite requires."""
    out_dtype = check_softmax(input_left_shift, out_dtype)
    lo, hi = _DTYPE_RANGES[out_dtype]
    shape = inp.shape
    x = inp.reshape(-1, shape[-1]).astype(np.int64)
    diff = x - x.max(axis=1, keepdims=True)
    if inp.dtype in _FAST_OUT:  # 8-bit input: diff is in [-255, 0], each exponential is a lookup
        exps_table, rescaled_table = softmax_tables(input_multiplier, input_left_shift, diff_min)
        exps, rescaled = exps_table.take(diff + 255), rescaled_table.take(diff + 255)
    else:
        exps, rescaled = _softmax_exps(diff, input_multiplier, input_left_shift, diff_min)
    # Rescale<12> of each exponential (Q0.31 -> Q12.19), summed with int32 wrap-around.
    acc = wrap_int32(rescaled.sum(axis=1, keepdims=True))
    # GetReciprocal: normalise the sum to [1, 2) by its leading zeros, 1 / x of the fraction.
    bit_length = np.frexp(acc.astype(np.float64))[1]  # exact: acc is an integer below 2**31
    headroom_plus_one = np.where(acc < 0, 0, 32 - bit_length)  # CountLeadingZeros(uint32(acc))
    bits_over_unit = SOFTMAX_ACCUM_INTEGER_BITS - headroom_plus_one
    shifted_minus_one = wrap_int32(((acc & 0xFFFFFFFF) << headroom_plus_one) - (1 << 31))
    scale = one_over_one_plus_x_for_x_in_0_1(shifted_minus_one)
    exponent = bits_over_unit + 31 - 8 * out_dtype.itemsize
    if exponent.size and (exponent.min() < 0 or exponent.max() > 31):
        raise ValueError(SOFTMAX_RANGE_ERROR)
    out = rounding_divide_by_pot(saturating_rounding_doubling_high_mul(scale, exps), exponent) + lo
    # An input below diff_min has the exponential 0, and 0 scales and shifts to 0: its output is lo.
    return np.clip(out, lo, hi).astype(out_dtype).reshape(shape)


def _softmax_exps(
    diff: np.ndarray, input_multiplier: int, input_left_shift: int, diff_min: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each input's exponential exp(beta * (x - max)) in Q0.31 (0 below diff_min), and it as Q12.19."""
    scaled = saturating_rounding_doubling_high_mul(wrap_int32(diff << input_left_shift), input_multiplier)
    exps = np.where(diff >= diff_min, exp_on_negative_values(scaled), 0)
    return exps, rounding_divide_by_pot(exps, SOFTMAX_ACCUM_INTEGER_BITS)


@functools.lru_cache(maxsize=BYTE_TABLES)
def softmax_tables(
    input_multiplier: int, input_left_shift: int, diff_min: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_softmax_exps` of every difference an 8-bit input can have, -255..0 (index diff + 255).

    The fixed-point exponential is ~60 numpy passes; a row of 12 classes paid ~400 us in them, a
    lookup costs two passes."""
    tables = _softmax_exps(np.arange(-255, 1, dtype=np.int64), input_multiplier, input_left_shift, diff_min)
    for t in tables:
        t.flags.writeable = False
    return tables
