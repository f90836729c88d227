"""The NPU's arithmetic: bit-exact with TFLite's int8/uint8 *reference* kernels.

Every function here is pure and vectorized (numpy; no per-element Python
loops). Quantized tensors come in as arrays of their stored integer values
(int8, uint8 or int32 as loaded from memory), zero points and requantization
parameters as plain ints or per-channel arrays. Results are int32 arrays
already clamped to [act_min, act_max]; the caller stores them with the
output's dtype.

The formulas are TFLite's (tensorflow/lite/kernels/internal/common.h and
reference/integer_ops/*.h); the fixed-point primitives (gemmlowp's
SaturatingRoundingDoublingHighMul, RoundingDivideByPOT, MultiplyByQuantizedMultiplier)
are the ISA's, in ``uapi.fixed_point``. 32-bit intermediates of the C code are
modelled as int32 with two's-complement wrap-around, so even overflowing
inputs give a defined, hardware-like answer.

Convolutions use an exact floating-point GEMM for BLAS speed: the operands
are small integers and every partial sum is kept below the float mantissa
(2**24 for float32, 2**53 for float64), so the products and sums are exact
whatever order BLAS adds them in.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from uapi.fixed_point import (  # noqa: F401  (re-exported: the device's arithmetic is the ISA's)
    INT32_MAX,
    INT32_MIN,
    SHIFT_MAX,
    SHIFT_MIN,
    ArrayLike,
    check_shift,
    multiply_by_quantized_multiplier,
    multiply_by_quantized_multiplier_single_round,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
    wrap_int32,
)

_F32_EXACT = 1 << 24
_MAX_F32_CHUNKS = 4  # beyond this many K-chunks, one float64 GEMM is faster


def requantize(
    acc: np.ndarray, multiplier: ArrayLike, shift: ArrayLike, output_zp: int, act_min: int, act_max: int
) -> np.ndarray:
    """acc (int32 accumulators) -> clamp(MBQM(acc) + output_zp, act_min, act_max) as int32."""
    check_clamp(act_min, act_max)
    out = multiply_by_quantized_multiplier(acc, multiplier, shift)
    out += output_zp
    np.clip(out, act_min, act_max, out=out)
    return out.astype(np.int32)


ZERO_POINT_LIMIT = 1 << 15  # 8-bit operands minus zero point stay small, exact in float32


def check_zero_points(name: str, *zero_points: int) -> None:
    for zp in zero_points:
        if not -ZERO_POINT_LIMIT <= zp <= ZERO_POINT_LIMIT:
            raise ValueError(f"{name}: zero point {zp} is outside [-{ZERO_POINT_LIMIT}, {ZERO_POINT_LIMIT}]")


def check_clamp(act_min: int, act_max: int) -> None:
    if act_min > act_max:
        raise ValueError(f"act_min {act_min} is above act_max {act_max}")


# --- exact integer GEMM ------------------------------------------------------
def int_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact a @ b for small-integer matrices (M, K) x (K, N), as int64.

    The inputs may be integer or float arrays holding integers below 2**24.

    float32 BLAS when every chunk of K products stays below 2**24 (split K
    when needed, summing chunks in int64), else float64 (exact below 2**53).
    """
    k = a.shape[1]
    bound = int(np.abs(a).max(initial=0)) * int(np.abs(b).max(initial=0))
    if bound == 0 or k == 0:
        return np.zeros((a.shape[0], b.shape[1]), dtype=np.int64)
    chunk = _F32_EXACT // bound
    if chunk >= k:
        return (a.astype(np.float32, copy=False) @ b.astype(np.float32, copy=False)).astype(np.int64)
    if chunk and -(-k // chunk) <= _MAX_F32_CHUNKS:
        a32 = a.astype(np.float32, copy=False)
        b32 = b.astype(np.float32, copy=False)
        out = np.zeros((a.shape[0], b.shape[1]), dtype=np.int64)
        for k0 in range(0, k, chunk):
            out += (a32[:, k0 : k0 + chunk] @ b32[k0 : k0 + chunk]).astype(np.int64)
        return out
    if bound * k >= 1 << 53:
        raise ValueError(f"GEMM of depth {k} with operands up to {bound} exceeds exact float64 range")
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64)


# --- fast exact paths (channel-major) -------------------------------------------------------
# The per-channel requantization parameters broadcast along the long, contiguous axis when the
# accumulators are laid out channel-major ([C, M]): numpy then runs one tight loop per channel
# instead of one short loop per pixel, which is several times faster.
_F64_EXACT_PRODUCT = 1 << 52  # |acc * multiplier| below this: every float64 step below is exact


def _col(v: ArrayLike, c: int, dtype: type = np.int64) -> np.ndarray:
    """A per-channel parameter (scalar or [C]) as a [C, 1] column."""
    return np.broadcast_to(np.asarray(v, dtype=dtype).reshape(-1), (c,)).reshape(c, 1)


def _out_range(act_min: int, act_max: int, out_dtype: np.dtype | None) -> tuple[int, int]:
    """The clamp [act_min, act_max] combined with the saturation to ``out_dtype``."""
    if out_dtype is None:
        return act_min, act_max
    lo, hi = _DTYPE_RANGES.get(np.dtype(out_dtype)) or (np.iinfo(out_dtype).min, np.iinfo(out_dtype).max)
    return max(act_min, int(lo)), min(act_max, int(hi))


_DTYPE_RANGES = {
    np.dtype(t): (int(np.iinfo(t).min), int(np.iinfo(t).max)) for t in (np.int8, np.uint8, np.int32)
}


def requantize_channels(
    acc: np.ndarray,
    bias: np.ndarray | None,
    multiplier: ArrayLike,
    shift: ArrayLike,
    output_zp: int,
    act_min: int,
    act_max: int,
    out_dtype: np.dtype | None = None,
    single_rounding: bool = False,
    float_scale: bool = False,
) -> np.ndarray:
    """Channel-major [C, M] accumulators (+ bias [C]) -> clamp(MBQM(acc) + zp) as [C, M].

    ``single_rounding`` requantizes with :func:`multiply_by_quantized_multiplier_single_round`;
    ``float_scale`` with :func:`requantize_float_scale` (``multiplier`` holds float32 scales).

    ``acc`` holds exact integers (any int or float dtype). Returns ``out_dtype`` values
    saturated to it (the device's store), or int32 when ``out_dtype`` is None.

    When |acc| * |multiplier| < 2**52 and no shift is positive, MultiplyByQuantizedMultiplier
    is computed exactly in float64: h = floor(acc * m * 2**-31 + 1/2) is SRDHM (every value is
    an integer or a dyadic fraction with fewer than 53 significant bits, and scaling by a power
    of two is exact), and RoundingDivideByPOT(h, e) = trunc(h * 2**-e + copysign(1/2, h)) is
    rounding half away from zero. Otherwise the int64 path (with int32 wrap-around) is used.
    """
    check_clamp(act_min, act_max)
    c = acc.shape[0]
    lo, hi = _out_range(act_min, act_max, out_dtype)
    if float_scale:
        out = requantize_float_scale(acc, bias, _col(multiplier, c, np.float32), output_zp, lo, hi)
        return out.astype(out_dtype or np.int32, copy=False)
    check_shift(shift)
    m = _col(multiplier, c)
    sh = _col(shift, c)
    if acc.size == 0:
        return np.zeros(acc.shape, dtype=out_dtype or np.int32)
    amax = max(float(acc.max()), -float(acc.min()))
    if bias is not None:
        amax += float(np.abs(np.asarray(bias, dtype=np.float64)).max(initial=0))
    m_abs = int(np.abs(m).max())
    exact_f64 = amax * m_abs < _F64_EXACT_PRODUCT and amax < 2**31 and m.min() > INT32_MIN
    if not single_rounding and sh.max() <= 0 and exact_f64:
        return _requantize_f64(acc, bias, m, sh, output_zp, lo, hi, out_dtype or np.dtype(np.int32))
    acc64 = np.asarray(acc, dtype=np.int64)
    if bias is not None:
        acc64 = acc64 + _col(bias, c)
    mbqm = multiply_by_quantized_multiplier
    if single_rounding:
        mbqm = multiply_by_quantized_multiplier_single_round
    out = mbqm(acc64, m, sh) + output_zp
    np.clip(out, lo, hi, out=out)
    return out.astype(out_dtype or np.int32, copy=False)


def requantize_float_scale(
    acc: np.ndarray, bias: np.ndarray | None, scale: np.ndarray, output_zp: int, lo: int, hi: int
) -> np.ndarray:
    """onnxruntime's requantization (MLAS's MlasRequantizeOutput), the ISA's FLOAT_SCALE flag.

    The int32 accumulator (+ bias, wrapping as int32 arithmetic does) converts to float32 (rounding
    to nearest even above 2**24), is multiplied by the float32 ``scale`` ([C, 1] column) in float32,
    and rounds half to even (``cvtps2dq``); then + ``output_zp`` and the clamp to [lo, hi]. Returns
    int64 values.
    """
    acc64 = np.asarray(acc, dtype=np.int64)
    if bias is not None:
        acc64 = acc64 + _col(bias, acc64.shape[0])
    product = wrap_int32(acc64).astype(np.float32) * scale.astype(np.float32, copy=False)
    # MLAS clamps in float before converting (so no value overflows int32); the bounds are
    # integers, so clamping before or after the rounding gives the same result.
    np.clip(product, np.float32(lo - output_zp), np.float32(hi - output_zp), out=product)
    return np.rint(product).astype(np.int64) + output_zp


_BLOCK_ELEMENTS = 1 << 15  # float64 temporaries of 256 KiB: they stay in the L2 cache


def _requantize_f64(
    acc: np.ndarray,
    bias: np.ndarray | None,
    m: np.ndarray,
    sh: np.ndarray,
    output_zp: int,
    lo: int,
    hi: int,
    out_dtype: np.dtype,
) -> np.ndarray:
    """The exact float64 requantization (see :func:`requantize_channels`), a few channels at a time."""
    c, n = acc.shape
    out = np.empty((c, n), dtype=out_dtype)
    scale = m.astype(np.float64) * 2.0**-31
    down = np.ldexp(1.0, sh)
    bias_f = _col(bias, c, np.float64) if bias is not None else None
    any_down = bool(sh.min() < 0)
    step = max(1, _BLOCK_ELEMENTS // max(n, 1))
    buf = np.empty(min(c, step) * n, dtype=np.float64)
    half = np.empty_like(buf)
    for c0 in range(0, c, step):
        c1 = min(c, c0 + step)
        v = buf[: (c1 - c0) * n].reshape(c1 - c0, n)
        v[...] = acc[c0:c1]
        if bias_f is not None:
            v += bias_f[c0:c1]
        v *= scale[c0:c1]
        v += 0.5
        np.floor(v, out=v)
        if any_down:  # channels with shift 0 keep h: h + copysign(1/2, h) truncates back to h
            v *= down[c0:c1]
            hv = half[: v.size].reshape(v.shape)
            np.copysign(0.5, v, out=hv)
            v += hv
            np.trunc(v, out=v)
        if output_zp:
            v += output_zp
        np.clip(v, lo, hi, out=v)
        out[c0:c1] = v
    return out


def _gemm_channels(w: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Exact w [C, K] @ cols.T ([M, K]) -> [C, M] for small-integer float32 operands.

    One float32 BLAS GEMM when K products of the largest magnitudes stay below 2**24, else
    K-chunks that each do, summed in float64 (exact below 2**53); beyond a few chunks one
    float64 GEMM.
    """
    k = w.shape[1]
    if k == 0 or cols.size == 0:
        return np.zeros((w.shape[0], cols.shape[0]), dtype=np.float32)
    a_max = max(float(cols.max()), -float(cols.min()))
    w_max = max(float(w.max()), -float(w.min()))
    bound = a_max * w_max
    if bound * k < _F32_EXACT:
        return w @ cols.T
    chunk = int(_F32_EXACT // bound) if bound else k
    if chunk == 0 or -(-k // chunk) > _MAX_F32_CHUNKS:
        if bound * k >= 2**53:
            raise ValueError(f"GEMM of depth {k} with operands up to {bound} exceeds exact float64 range")
        return w.astype(np.float64) @ cols.T.astype(np.float64)
    out = np.zeros((w.shape[0], cols.shape[0]), dtype=np.float64)
    for k0 in range(0, k, chunk):
        out += w[:, k0 : k0 + chunk] @ cols[:, k0 : k0 + chunk].T
    return out


# --- geometry -----------------------------------------------------------------
def _padded(
    x: np.ndarray,
    pad_top: int,
    pad_left: int,
    need_h: int,
    need_w: int,
    value: int,
    dtype: np.dtype | type | None = None,
) -> np.ndarray:
    """x [N,H,W,C] placed at (pad_top, pad_left) in a [N, >=need_h, >=need_w, C] canvas of ``value``.

    With ``dtype`` the canvas has that dtype (x is converted while it is copied in: one pass, not
    a converted copy first)."""
    n, h, w, c = x.shape
    hp = max(pad_top + h, need_h)
    wp = max(pad_left + w, need_w)
    dtype = x.dtype if dtype is None else np.dtype(dtype)
    if (pad_top, pad_left, hp, wp) == (0, 0, h, w):
        return x if x.dtype == dtype else x.astype(dtype)
    out = np.full((n, hp, wp, c), value, dtype=dtype)
    out[:, pad_top : pad_top + h, pad_left : pad_left + w, :] = x
    return out


def _check_geometry(name: str, **values: int) -> None:
    for key, v in values.items():
        if v < 1:
            raise ValueError(f"{name}: {key} must be >= 1, got {v}")


def _windows(
    x: np.ndarray, out_h: int, out_w: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int
) -> np.ndarray:
    """A [N, OH, OW, KH, KW, C] strided view of every window of the padded x."""
    n, _, _, c = x.shape
    s = x.strides
    return as_strided(
        x,
        shape=(n, out_h, out_w, kh, kw, c),
        strides=(s[0], s[1] * sh, s[2] * sw, s[1] * dh, s[2] * dw, s[3]),
        writeable=False,
    )


def _valid_counts(out: int, stride: int, pad: int, size: int, k: int) -> np.ndarray:
    """Per output row (or column): how many of the k window taps land inside the input."""
    origin = np.arange(out) * stride - pad
    start = np.maximum(0, -origin)
    end = np.minimum(k, size - origin)
    return np.maximum(end - start, 0)


# --- operators ----------------------------------------------------------------
def conv2d(
    inp: np.ndarray,
    filt: np.ndarray,
    bias: np.ndarray | None,
    *,
    input_zp: int,
    filter_zp: int,
    stride_h: int,
    stride_w: int,
    dilation_h: int,
    dilation_w: int,
    pad_top: int,
    pad_left: int,
    out_h: int,
    out_w: int,
    multiplier: ArrayLike,
    shift: ArrayLike,
    output_zp: int,
    act_min: int,
    act_max: int,
    out_dtype: np.dtype | None = None,
    fast: bool = True,
    float_scale: bool = False,
) -> np.ndarray:
    """TFLite's quantized Conv2D: input [N,H,W,Cin], filter [Cout,KH,KW,Cin] -> [N,OH,OW,Cout].

    ``fast`` tries the planned path (:func:`plan_gemm`) first; False goes straight to the general one.
    ``float_scale``: ``multiplier`` holds float32 scales, requantized as onnxruntime does.
    """
    n, h, w, cin = inp.shape
    cout, kh, kw, fcin = filt.shape
    if fcin != cin:
        raise ValueError(f"CONV2D: filter has {fcin} input channels, the input {cin}")
    _check_geometry(
        "CONV2D", stride_h=stride_h, stride_w=stride_w, dilation_h=dilation_h, dilation_w=dilation_w
    )
    check_zero_points("CONV2D", input_zp, filter_zp)
    if fast:
        plan = plan_gemm(
            filt, bias, in_dtype=inp.dtype, input_zp=input_zp, filter_zp=filter_zp, multiplier=multiplier,
            shift=shift, output_zp=output_zp, act_min=act_min, act_max=act_max, out_dtype=out_dtype,
            float_scale=float_scale,
        )  # fmt: skip
        if plan is not None:
            geometry = (stride_h, stride_w, dilation_h, dilation_w, pad_top, pad_left, out_h, out_w)
            return run_conv2d_plan(inp, plan, kh, kw, geometry, filt)
    # Positions outside the input contribute nothing: after subtracting the
    # zero point, padding is 0. float32 holds these small integers exactly.
    x = inp.astype(np.float32)
    if input_zp:
        x -= np.float32(input_zp)
    wt = _filter_matrix(filt, filter_zp, cout)
    if (kh, kw, stride_h, stride_w, pad_top, pad_left) == (1, 1, 1, 1, 0, 0) and (out_h, out_w) == (h, w):
        cols = x.reshape(n * h * w, cin)
    else:
        need_h = (out_h - 1) * stride_h + (kh - 1) * dilation_h + 1
        need_w = (out_w - 1) * stride_w + (kw - 1) * dilation_w + 1
        xp = _padded(x, pad_top, pad_left, need_h, need_w, 0)
        win = _windows(xp, out_h, out_w, kh, kw, stride_h, stride_w, dilation_h, dilation_w)
        cols = win.reshape(n * out_h * out_w, kh * kw * cin)
    acc = _gemm_channels(wt, cols)  # [Cout, N*OH*OW]
    out = requantize_channels(
        acc, bias, multiplier, shift, output_zp, act_min, act_max, out_dtype, float_scale=float_scale
    )
    return out.T.reshape(n, out_h, out_w, cout)


def _filter_matrix(filt: np.ndarray, filter_zp: int, rows: int) -> np.ndarray:
    """(filter - zero point) as a float32 [rows, K] matrix."""
    wt = filt.astype(np.float32).reshape(rows, -1)
    if filter_zp:
        wt -= np.float32(filter_zp)
    return wt


def depthwise_conv2d(
    inp: np.ndarray,
    filt: np.ndarray,
    bias: np.ndarray | None,
    *,
    input_zp: int,
    filter_zp: int,
    stride_h: int,
    stride_w: int,
    dilation_h: int,
    dilation_w: int,
    pad_top: int,
    pad_left: int,
    depth_multiplier: int,
    out_h: int,
    out_w: int,
    multiplier: ArrayLike,
    shift: ArrayLike,
    output_zp: int,
    act_min: int,
    act_max: int,
    out_dtype: np.dtype | None = None,
    fast: bool = True,
    float_scale: bool = False,
) -> np.ndarray:
    """TFLite's quantized DepthwiseConv2D: filter [1,KH,KW,Cin*dm]; channel oc reads input oc // dm.

    ``float_scale`` as :func:`conv2d`."""
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
    check_zero_points("DEPTHWISE_CONV2D", input_zp, filter_zp)
    if fast:
        plan = plan_depthwise(
            filt, bias, in_dtype=inp.dtype, input_zp=input_zp, filter_zp=filter_zp, multiplier=multiplier,
            shift=shift, output_zp=output_zp, act_min=act_min, act_max=act_max, out_dtype=out_dtype,
            float_scale=float_scale,
        )  # fmt: skip
        if plan is not None:
            geometry = (stride_h, stride_w, dilation_h, dilation_w, pad_top, pad_left, out_h, out_w)
            return run_depthwise_plan(inp, plan, kh, kw, depth_multiplier, geometry)
    x = inp.astype(np.float32)
    if input_zp:
        x -= np.float32(input_zp)
    if depth_multiplier > 1:
        x = np.repeat(x, depth_multiplier, axis=3)
    wt = filt.astype(np.float32).reshape(kh * kw, cout)
    if filter_zp:
        wt -= np.float32(filter_zp)
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
    out = requantize_channels(
        acc.reshape(-1, cout).T, bias, multiplier, shift, output_zp, act_min, act_max, out_dtype,
        float_scale=float_scale,
    )  # fmt: skip
    return out.T.reshape(n, out_h, out_w, cout)


def fully_connected(
    inp: np.ndarray,
    filt: np.ndarray,
    bias: np.ndarray | None,
    *,
    input_zp: int,
    filter_zp: int,
    multiplier: ArrayLike,
    shift: ArrayLike,
    output_zp: int,
    act_min: int,
    act_max: int,
    out_dtype: np.dtype | None = None,
    fast: bool = True,
    single_rounding: bool = False,
    float_scale: bool = False,
) -> np.ndarray:
    """TFLite's quantized FullyConnected: input [B,K], filter [Cout,K] -> [B,Cout].

    ``single_rounding``: requantize with one rounding, as LiteRT's reference kernel does;
    ``float_scale`` as :func:`conv2d`.
    """
    b, k = inp.shape
    cout, fk = filt.shape
    if fk != k:
        raise ValueError(f"FULLY_CONNECTED: filter depth {fk} does not match input depth {k}")
    check_zero_points("FULLY_CONNECTED", input_zp, filter_zp)
    if fast and not single_rounding and not float_scale:
        plan = plan_gemm(
            filt, bias, in_dtype=inp.dtype, input_zp=input_zp, filter_zp=filter_zp, multiplier=multiplier,
            shift=shift, output_zp=output_zp, act_min=act_min, act_max=act_max, out_dtype=out_dtype,
        )  # fmt: skip
        if plan is not None:
            return run_fc_plan(inp, plan, filt)
    x = inp.astype(np.float32)
    if input_zp:
        x -= np.float32(input_zp)
    acc = _gemm_channels(_filter_matrix(filt, filter_zp, cout), x)  # [Cout, B]
    return requantize_channels(
        acc, bias, multiplier, shift, output_zp, act_min, act_max, out_dtype, single_rounding, float_scale
    ).T


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
    if out_dtype is not None and {np.dtype(out_dtype), in1.dtype, in2.dtype} <= set(_FAST_OUT):
        table = _add_table(
            in1.dtype.str, in2.dtype.str, np.dtype(out_dtype).str,
            (input1_zp, input2_zp, left_shift, input1_multiplier, input1_shift, input2_multiplier,
             input2_shift, output_multiplier, output_shift, output_zp, act_min, act_max, subtract),
        )  # fmt: skip
        idx = in1.view(np.uint8).astype(np.uint16)
        idx <<= 8
        idx |= in2.view(np.uint8)
        return table.take(idx)
    a = wrap_int32((in1.astype(np.int64) - input1_zp) << left_shift)
    b = wrap_int32((in2.astype(np.int64) - input2_zp) << left_shift)
    a = multiply_by_quantized_multiplier(a, input1_multiplier, input1_shift)
    b = multiply_by_quantized_multiplier(b, input2_multiplier, input2_shift)
    raw = wrap_int32(a - b if subtract else a + b)
    out = multiply_by_quantized_multiplier(raw, output_multiplier, output_shift) + output_zp
    return np.clip(out, act_min, act_max).astype(np.int32)


# Byte-input ADD/SUB through a table of all 65536 input pairs: the output is a function of the two
# bytes alone, so a lookup replaces a dozen int64 passes. Each table (64 KiB) is built once per
# parameter set by the exact computation above; a model has a few dozen at most.
ADD_TABLES = 64


@functools.lru_cache(maxsize=ADD_TABLES)
def _add_table(in1_dtype: str, in2_dtype: str, out_dtype: str, params: tuple) -> np.ndarray:
    """[65536] of out_dtype: the saturated ADD/SUB of bytes (b1 << 8) | b2 (read as the inputs' dtypes)."""
    zp1, zp2, ls, m1, s1, m2, s2, om, os_, ozp, act_min, act_max, subtract = params
    byte = np.arange(256, dtype=np.uint8)
    a = np.repeat(byte.view(in1_dtype), 256)
    b = np.tile(byte.view(in2_dtype), 256)
    full = add(
        a, b, input1_zp=zp1, input2_zp=zp2, left_shift=ls, input1_multiplier=m1, input1_shift=s1,
        input2_multiplier=m2, input2_shift=s2, output_multiplier=om, output_shift=os_, output_zp=ozp,
        act_min=act_min, act_max=act_max, subtract=subtract,
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
) -> np.ndarray:
    """TFLite's quantized Mul."""
    check_clamp(act_min, act_max)
    prod = wrap_int32((in1.astype(np.int64) - input1_zp) * (in2.astype(np.int64) - input2_zp))
    out = multiply_by_quantized_multiplier(prod, output_multiplier, output_shift) + output_zp
    return np.clip(out, act_min, act_max).astype(np.int32)


def _pool_setup(
    name: str, inp: np.ndarray, fh: int, fw: int, sh: int, sw: int, pt: int, pl: int, oh: int, ow: int
) -> tuple[np.ndarray, np.ndarray]:
    _check_geometry(name, filter_h=fh, filter_w=fw, stride_h=sh, stride_w=sw)
    _, h, w, _ = inp.shape
    cy = _valid_counts(oh, sh, pt, h, fh)
    cx = _valid_counts(ow, sw, pl, w, fw)
    if not (cy.all() and cx.all()):
        raise ValueError(f"{name}: a window covers no input position (padding too large)")
    return cy, cx


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
    _pool_setup("MAXPOOL", inp, filter_h, filter_w, stride_h, stride_w, pad_top, pad_left, out_h, out_w)
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
    cy, cx = _pool_setup(
        "AVGPOOL", inp, filter_h, filter_w, stride_h, stride_w, pad_top, pad_left, out_h, out_w
    )
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


def _resize_axis(out_size: int, in_size: int, align_corners: bool, half_pixel_centers: bool):
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
    y0, y1, dy = _resize_axis(out_h, h, align_corners, half_pixel_centers)
    x0, x1, dx = _resize_axis(out_w, w, align_corners, half_pixel_centers)
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


def softmax(
    inp: np.ndarray, *, input_multiplier: int, input_left_shift: int, diff_min: int, out_dtype: np.dtype
) -> np.ndarray:
    """TFLite's quantized reference softmax along the last axis (reference_ops::Softmax), as out_dtype.

    The output is 8-bit with scale 1/256 and the dtype's minimum as zero point, as TFLite requires."""
    if not 0 <= input_left_shift <= 31:
        raise ValueError(f"SOFTMAX: input_left_shift must be in [0, 31], got {input_left_shift}")
    out_dtype = np.dtype(out_dtype)
    if out_dtype not in _FAST_OUT:
        raise ValueError(f"SOFTMAX: output {out_dtype} is not int8 or uint8")
    lo, hi = _DTYPE_RANGES[out_dtype]
    shape = inp.shape
    x = inp.reshape(-1, shape[-1]).astype(np.int64)
    diff = x - x.max(axis=1, keepdims=True)
    valid = diff >= diff_min
    scaled = saturating_rounding_doubling_high_mul(wrap_int32(diff << input_left_shift), input_multiplier)
    exps = np.where(valid, exp_on_negative_values(scaled), 0)
    # Rescale<12> of each exponential (Q0.31 -> Q12.19), summed with int32 wrap-around.
    acc = wrap_int32(rounding_divide_by_pot(exps, SOFTMAX_ACCUM_INTEGER_BITS).sum(axis=1, keepdims=True))
    # GetReciprocal: normalise the sum to [1, 2) by its leading zeros, 1 / x of the fraction.
    bit_length = np.frexp(acc.astype(np.float64))[1]  # exact: acc is an integer below 2**31
    headroom_plus_one = np.where(acc < 0, 0, 32 - bit_length)  # CountLeadingZeros(uint32(acc))
    bits_over_unit = SOFTMAX_ACCUM_INTEGER_BITS - headroom_plus_one
    shifted_minus_one = wrap_int32(((acc & 0xFFFFFFFF) << headroom_plus_one) - (1 << 31))
    scale = one_over_one_plus_x_for_x_in_0_1(shifted_minus_one)
    exponent = bits_over_unit + 31 - 8 * out_dtype.itemsize
    if exponent.size and (exponent.min() < 0 or exponent.max() > 31):
        raise ValueError("SOFTMAX: the sum of exponentials is out of range")
    out = rounding_divide_by_pot(saturating_rounding_doubling_high_mul(scale, exps), exponent) + lo
    out = np.where(valid, np.clip(out, lo, hi), lo)
    return out.astype(out_dtype).reshape(shape)


# --- planned fast paths (8-bit outputs) ------------------------------------------------------------
# A layer's filter, bias and requantization parameters are turned once into a plan (float32
# weights, per-channel constants); the command processor keeps plans while the parameters' bytes
# are unchanged, so an invoke only converts its activations. Three exact tricks keep it cheap:
#
# * The GEMM runs on the *raw* input values x (not x - zp; padding holds zp), so no pass subtracts
#   the zero point: sum (x - zp) w = sum x w - zp * sum w, and -zp * sum w joins the bias. float32
#   sums are exact while |x| * sum_k |w| < 2**24 per channel (x bounded by its dtype and zp).
# * Requantization is one affine step and one truncation in float64. With x = acc * m * 2**(l - 31)
#   (l = max(shift, 0), e = max(-shift, 0)), SRDHM is h = floor(x + 1/2) and RoundingDivideByPOT
#   is floor((h + 2**(e-1)) / 2**e) for h >= 0 and floor((h + 2**(e-1) - 1) / 2**e) for h < 0.
#   Since floor(floor(z) / 2**e) = floor(z / 2**e), both are one floor of x / 2**e + c, with
#   c = 1/2 + 2**-(e+1) (h >= 0) or c - 2**-e (h < 0; e = 0: c = 1/2, no correction). Every value is
#   a multiple of 2**-(31+e); while the numerators stay below 2**53 every float64 step is exact.
#   h < 0 exactly when the value is below zp + 1/2; layers whose clamp floor is at or above the
#   output zero point (ReLU, ReLU6) never see the difference, the others get copysign(2**-(e+1))
#   folded in. The output zero point plus B (B >= -act_min, a multiple of 256) is added first, so
#   the values are >= 0 wherever they matter and float -> int32 truncation is the floor; the int32
#   clamp and a wrapping cast to uint8 ((v - B) mod 256) give the output bytes.
# * Per-channel constants are tiled along whole output rows ([N*OH, OW*C]), so every numpy pass
#   is one long contiguous loop; no transposes.
_F64_MANTISSA = 1 << 53
# Requantization works on blocks of output rows of about this many float64 bytes.
REQUANT_BLOCK_BYTES = 1 << 20
# A GEMM plan keeps its float32 filter matrix only up to this many elements (256 KiB); a larger one
# is converted from the filter's int8 bytes at each call: ~0.2 ns a weight (MobileNetV1: ~0.7 ms an
# invoke), against 4 bytes a weight held for as long as the plan lives (4x the model).
KEEP_F32_WEIGHTS = 1 << 16
_FAST_OUT = (np.dtype(np.int8), np.dtype(np.uint8))
# Depthwise layers with at least this many channels sum their taps in one einsum over the windows;
# narrower ones (large feature maps) are faster as one multiply-add per tap over whole rows.
DEPTHWISE_EINSUM_CHANNELS = 128


def _input_bound(in_dtype: np.dtype, input_zp: int) -> int:
    """The largest |value| a raw input element or its padding (input_zp) can have."""
    lo, hi = _DTYPE_RANGES[np.dtype(in_dtype)]
    return max(-lo, hi, abs(input_zp))


@dataclass(frozen=True)
class RequantPlan:
    """Per-channel float64 constants of the exact requantization of raw float32 accumulators."""

    scale: np.ndarray  # [C] m * 2**(l - 31 - e)
    offset: np.ndarray  # [C] the rest: bias, -zp * sum w, rounding constants, output zp + B
    fix: np.ndarray | None  # [C] 2**-(e+1) (0 where e == 0) when negative h can reach the output
    threshold: np.ndarray | None  # [C] values below it had h < 0 (before the fix)
    shift_byte: int  # (output zp - D) mod 256: added to the output bytes (wrapping)
    lo: int  # clamp of floor(value): [act_min - zp + D, act_max - zp + D]
    hi: int
    out_dtype: np.dtype
    floor: bool  # D = 0 and negative values matter: floor explicitly before the truncation
    limit: float  # raw accumulators up to this magnitude are exact in every channel
    checked: bool  # True: the layer's bound is within the limit, no accumulator needs a look
    # The general path's parameters, for accumulators beyond the limit.
    correction: np.ndarray  # [C] int64: accumulator = raw + correction
    multiplier: np.ndarray
    shift: np.ndarray
    output_zp: int
    act_min: int
    act_max: int
    tiled: dict[int, tuple[np.ndarray, ...]] = field(default_factory=dict, compare=False)

    def rows(self, repeat: int) -> tuple[np.ndarray, ...]:
        """The constants tiled ``repeat`` times (an output row of ``repeat`` pixels)."""
        got = self.tiled.get(repeat)
        if got is None:
            arrays = (self.scale, self.offset) + ((self.fix, self.threshold) if self.fix is not None else ())
            got = tuple(np.tile(a, repeat) for a in arrays)
            self.tiled[repeat] = got
        return got

    def apply(self, acc: np.ndarray, repeat: int) -> np.ndarray:
        """Raw float32 accumulators [R, repeat * C] -> the output dtype's values, same shape.

        Blocks of rows keep the float64 and int32 temporaries near :data:`REQUANT_BLOCK_BYTES`
        (a whole large layer's would be several MB each, the device model's peak memory)."""
        if not self.checked and acc.size and max(float(acc.max()), -float(acc.min())) > self.limit:
            return self._general(acc)
        consts = self.rows(repeat)
        out = np.empty(acc.shape, dtype=np.uint8)
        rows = acc.shape[0]
        step = max(1, REQUANT_BLOCK_BYTES // max(1, 8 * acc.shape[1])) if acc.ndim == 2 else rows
        for r in range(0, rows, step):
            self._apply_rows(acc[r : r + step], consts, out[r : r + step])
        return out.view(self.out_dtype)

    def _apply_rows(self, acc: np.ndarray, consts: tuple[np.ndarray, ...], out: np.ndarray) -> None:
        v = acc.astype(np.float64)
        v *= consts[0]
        v += consts[1]
        if self.fix is not None:
            t = np.subtract(v, consts[3])
            np.copysign(consts[2], t, out=t)
            v += t
        if self.floor:
            np.floor(v, out=v)
        q = v.astype(np.int32)  # truncation: the floor for every value that is not clamped to lo
        np.clip(q, self.lo, self.hi, out=q)
        np.copyto(out, q, casting="unsafe")  # int32 -> uint8 wraps (mod 256), as astype does
        if self.shift_byte:
            out += np.uint8(self.shift_byte)

    def _general(self, acc: np.ndarray) -> np.ndarray:
        c = self.scale.shape[0]
        exact = acc.reshape(-1, c).astype(np.float64) + self.correction  # integers below 2**53
        out = requantize_channels(
            exact.T,
            None,
            self.multiplier,
            self.shift,
            self.output_zp,
            self.act_min,
            self.act_max,
            self.out_dtype,
        )
        return np.ascontiguousarray(out.T).reshape(acc.shape)


def plan_requant(
    raw_bound: np.ndarray,
    correction: np.ndarray,
    multiplier: ArrayLike,
    shift: ArrayLike,
    output_zp: int,
    act_min: int,
    act_max: int,
    out_dtype: np.dtype,
) -> RequantPlan | None:
    """The exact float64 requantization of raw accumulators r (|r| <= raw_bound per channel, a
    float32-exact integer) whose int32 accumulator is r + correction, or None where it cannot apply
    (a non-8-bit output, the saturating multiplier INT32_MIN, a correction alone too large).

    Each channel's limit on |r| keeps the accumulator (shifted left by a positive shift) inside
    int32 and every float64 numerator below 2**53; when raw_bound exceeds it, each call checks
    the actual accumulators and takes the general path if one is beyond it."""
    if np.dtype(out_dtype) not in _FAST_OUT:
        return None
    check_clamp(act_min, act_max)
    check_shift(shift)
    c = raw_bound.shape[0]
    m = np.broadcast_to(np.asarray(multiplier, dtype=np.int64).reshape(-1), (c,))
    s = np.broadcast_to(np.asarray(shift, dtype=np.int64).reshape(-1), (c,))
    lo, hi = _out_range(act_min, act_max, out_dtype)
    need_fix = lo < output_zp
    # D = max(zp - lo, 0) makes every value that is not clamped to lo non-negative, so the int32
    # truncation is the floor; when D << (31 + e) leaves too little float64 room (large right
    # shifts), D = 0 and an explicit floor pass instead.
    for base in dict.fromkeys((max(output_zp - lo, 0), 0)):
        scale = np.empty(c)
        offset = np.empty(c)
        fix = np.zeros(c)
        limit = float(_F32_EXACT)
        for i in range(c):
            mi, si, corr = int(m[i]), int(s[i]), int(correction[i])
            left, e = max(si, 0), max(-si, 0)
            num = (corr * mi << left) + (1 << (30 + e)) + ((1 << 30) if e else 0) + (base << (31 + e))
            if need_fix and e:
                num -= 1 << 30  # -2**-(e+1): the copysign below adds it back or takes another one off
                fix[i] = 2.0 ** -(e + 1)
            # int32: (|r| + |corr|) << left <= 2**31 - 1; float64: |r * m| << left + |num| below
            # 2**53 with 2**31 to spare (the fix moves values by 2**-(e+1), 2**30 units).
            room = _F64_MANTISSA - (1 << 31) - 1 - abs(num)
            channel_limit = (INT32_MAX >> left) - abs(corr)
            if mi:
                channel_limit = min(channel_limit, room // (abs(mi) << left))
            if mi == INT32_MIN or channel_limit < 0 or room < 0:
                break
            limit = min(limit, float(channel_limit))
            scale[i] = mi * 2.0 ** (left - 31 - e)
            offset[i] = num * 2.0 ** -(31 + e)
        else:
            threshold = base + 0.5 - fix if need_fix else None
            return RequantPlan(
                scale, offset, fix if need_fix else None, threshold, (output_zp - base) % 256,
                lo - output_zp + base, hi - output_zp + base, np.dtype(out_dtype),
                base == 0 and lo < output_zp,
                limit, bool(np.all(raw_bound <= limit)), np.asarray(correction, dtype=np.int64), m.copy(),
                s.copy(), output_zp, act_min, act_max,
            )  # fmt: skip
    return None


@dataclass(frozen=True)
class FloatRequantPlan:
    """The FLOAT_SCALE requantization (:func:`requantize_float_scale`) of raw float32 accumulators r:
    the int32 accumulator is r + correction (r is float32-exact, the plan's bound checked that)."""

    correction: np.ndarray  # [C] int64
    scale: np.ndarray  # [C] float32
    output_zp: int
    lo: int  # the clamp combined with the output dtype's range
    hi: int
    out_dtype: np.dtype

    def apply(self, acc: np.ndarray, repeat: int) -> np.ndarray:
        """Raw float32 accumulators [R, repeat * C] (C innermost) -> the output dtype's values."""
        c = self.scale.shape[0]
        exact = acc.reshape(-1, c).astype(np.int64) + self.correction
        product = wrap_int32(exact).astype(np.float32) * self.scale
        np.clip(
            product, np.float32(self.lo - self.output_zp), np.float32(self.hi - self.output_zp), out=product
        )
        out = np.rint(product).astype(np.int64) + self.output_zp
        return out.astype(self.out_dtype).reshape(acc.shape)


@dataclass(frozen=True)
class GemmPlan:
    """A CONV2D / FULLY_CONNECTED layer's requantization, and its filter as float32 if small.

    The float32 matrix is exact either way (integers below 2**24); :meth:`matrix` gives the kept one
    or converts the filter the caller passes (the bytes the plan was built from: the command
    processor rebuilds plans when they change)."""

    weights: np.ndarray | None  # (filter - filter_zp), float32 [K, Cout], or None: convert per call
    input_zp: int
    filter_zp: int
    cout: int
    requant: RequantPlan | FloatRequantPlan

    def matrix(self, filt: np.ndarray | None) -> np.ndarray:
        """(filter - filter_zp) as float32 [K, Cout] (a transposed view when converted)."""
        if self.weights is not None:
            return self.weights
        if filt is None:
            raise ValueError("this plan keeps no float32 weights: pass the layer's filter")
        return _filter_matrix(filt, self.filter_zp, self.cout).T


@dataclass(frozen=True)
class DepthwisePlan:
    """A DEPTHWISE_CONV2D layer's taps as float32 [KH*KW, Cout] and its requantization."""

    taps: np.ndarray
    input_zp: int
    requant: RequantPlan | FloatRequantPlan
    tiled: dict[int, np.ndarray] = field(default_factory=dict, compare=False)

    def tap_rows(self, repeat: int) -> np.ndarray:
        got = self.tiled.get(repeat)
        if got is None:
            got = np.tile(self.taps, (1, repeat))
            self.tiled[repeat] = got
        return got


def _layer_requant(
    wmat: np.ndarray,
    in_dtype: np.dtype,
    input_zp: int,
    bias: np.ndarray | None,
    multiplier: ArrayLike,
    shift: ArrayLike,
    output_zp: int,
    act_min: int,
    act_max: int,
    out_dtype: np.dtype | None,
    float_scale: bool = False,
) -> RequantPlan | FloatRequantPlan | None:
    """The requantization plan of a layer whose filter is wmat [K, C] (float32, zero point removed);
    ``float_scale``: ``multiplier`` holds FLOAT_SCALE's float32 scales."""
    if out_dtype is None or np.dtype(in_dtype) not in _DTYPE_RANGES:
        return None
    a = _input_bound(in_dtype, input_zp)
    l1 = np.abs(wmat).sum(axis=0, dtype=np.float64).astype(np.int64)
    if a * int(l1.max(initial=0)) >= _F32_EXACT:
        return None  # float32 partial sums could be inexact
    b = np.zeros(wmat.shape[1], dtype=np.int64) if bias is None else np.asarray(bias, dtype=np.int64)
    correction = b - input_zp * wmat.sum(axis=0, dtype=np.float64).astype(np.int64)
    if float_scale:
        check_clamp(act_min, act_max)
        c = wmat.shape[1]
        lo, hi = _out_range(act_min, act_max, out_dtype)
        scale = np.broadcast_to(np.asarray(multiplier, dtype=np.float32).reshape(-1), (c,)).copy()
        return FloatRequantPlan(correction, scale, output_zp, lo, hi, np.dtype(out_dtype))
    return plan_requant(a * l1, correction, multiplier, shift, output_zp, act_min, act_max, out_dtype)


def plan_gemm(
    filt: np.ndarray,
    bias: np.ndarray | None,
    *,
    in_dtype: np.dtype,
    input_zp: int,
    filter_zp: int,
    multiplier: ArrayLike,
    shift: ArrayLike,
    output_zp: int,
    act_min: int,
    act_max: int,
    out_dtype: np.dtype | None,
    float_scale: bool = False,
) -> GemmPlan | None:
    """The plan of a CONV2D ([Cout, KH, KW, Cin]) or FULLY_CONNECTED ([Cout, K]) filter, or None.

    The float32 filter is kept only when it has at most :data:`KEEP_F32_WEIGHTS` elements."""
    cout = filt.shape[0]
    wmat = np.ascontiguousarray(_filter_matrix(filt, filter_zp, cout).T)
    rq = _layer_requant(
        wmat, in_dtype, input_zp, bias, multiplier, shift, output_zp, act_min, act_max, out_dtype, float_scale
    )
    if rq is None:
        return None
    return GemmPlan(wmat if wmat.size <= KEEP_F32_WEIGHTS else None, input_zp, filter_zp, cout, rq)


def plan_depthwise(
    filt: np.ndarray,
    bias: np.ndarray | None,
    *,
    in_dtype: np.dtype,
    input_zp: int,
    filter_zp: int,
    multiplier: ArrayLike,
    shift: ArrayLike,
    output_zp: int,
    act_min: int,
    act_max: int,
    out_dtype: np.dtype | None,
    float_scale: bool = False,
) -> DepthwisePlan | None:
    """The plan of a DEPTHWISE_CONV2D filter [1, KH, KW, Cout], or None."""
    _, kh, kw, cout = filt.shape
    taps = filt.reshape(kh * kw, cout).astype(np.float32)
    if filter_zp:
        taps -= np.float32(filter_zp)
    rq = _layer_requant(
        taps, in_dtype, input_zp, bias, multiplier, shift, output_zp, act_min, act_max, out_dtype, float_scale
    )
    return None if rq is None else DepthwisePlan(taps, input_zp, rq)


def run_conv2d_plan(
    inp: np.ndarray,
    plan: GemmPlan,
    kh: int,
    kw: int,
    geometry: tuple[int, ...],
    filt: np.ndarray | None = None,
) -> np.ndarray:
    """CONV2D through its plan; ``filt`` is the layer's filter, needed when the plan keeps no
    float32 weights (:meth:`GemmPlan.matrix`)."""
    sh, sw, dh, dw, pt, pl, oh, ow = geometry
    _check_geometry("CONV2D", stride_h=sh, stride_w=sw, dilation_h=dh, dilation_w=dw)
    n, h, w, cin = inp.shape
    cout = plan.cout
    wmat = plan.matrix(filt)
    if (kh, kw, sh, sw, pt, pl) == (1, 1, 1, 1, 0, 0) and (oh, ow) == (h, w):
        cols = inp.reshape(n * h * w, cin).astype(np.float32)
    else:
        need_h, need_w = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
        xp = _padded(inp, pt, pl, need_h, need_w, plan.input_zp, np.float32)
        cols = _windows(xp, oh, ow, kh, kw, sh, sw, dh, dw).reshape(n * oh * ow, kh * kw * cin)
    acc = cols @ wmat  # [M, Cout], exact integers
    out = plan.requant.apply(acc.reshape(n * oh, ow * cout), ow)
    return out.reshape(n, oh, ow, cout)


def run_depthwise_plan(
    inp: np.ndarray, plan: DepthwisePlan, kh: int, kw: int, dm: int, geometry: tuple[int, ...]
) -> np.ndarray:
    sh, sw, dh, dw, pt, pl, oh, ow = geometry
    _check_geometry(
        "DEPTHWISE_CONV2D", stride_h=sh, stride_w=sw, dilation_h=dh, dilation_w=dw, depth_multiplier=dm
    )
    n = inp.shape[0]
    cout = plan.taps.shape[1]
    x = np.repeat(inp, dm, axis=3) if dm > 1 else inp
    need_h, need_w = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
    xp = _padded(x, pt, pl, need_h, need_w, plan.input_zp, np.float32)  # a new float32 array
    out = np.empty((n, oh, ow * cout), dtype=plan.requant.out_dtype)
    if cout >= DEPTHWISE_EINSUM_CHANNELS:
        # One einsum over the windows: no tap-sized temporaries; the float32 sums are exact in any
        # order (the plan's bound keeps every partial sum below 2**24).
        taps3 = plan.taps.reshape(kh, kw, cout)
        span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
        for i in range(n):
            win = sliding_window_view(xp[i], (span_h, span_w), axis=(0, 1))
            win = win[: (oh - 1) * sh + 1 : sh, : (ow - 1) * sw + 1 : sw, :, ::dh, ::dw]
            acc = np.einsum("yxcij,ijc->yxc", win, taps3).reshape(oh, ow * cout)
            out[i] = plan.requant.apply(acc, ow)
        return out.reshape(n, oh, ow, cout)
    taps = plan.tap_rows(ow)
    acc = np.empty((oh, ow * cout), dtype=np.float32)
    tmp = np.empty_like(acc)
    for i in range(n):
        # Column phases: with stride sw, tap column kx*dw reads columns p, p + sw, ... of phase
        # p = (kx*dw) % sw, so each phase made contiguous once turns every tap into a slice whose
        # rows are long contiguous runs of ow * C values.
        phases: dict[int, np.ndarray] = {}
        first = True
        for ky in range(kh):
            rows = slice(ky * dh, ky * dh + (oh - 1) * sh + 1, sh)
            for kx in range(kw):
                col = kx * dw
                p, q = col % sw, col // sw
                ph = phases.get(p)
                if ph is None:
                    ph = xp[i, :, p::sw, :] if sw > 1 else xp[i]
                    ph = np.ascontiguousarray(ph)
                    phases[p] = ph
                src = ph[rows, q : q + ow, :].reshape(oh, ow * cout)
                if first:
                    np.multiply(src, taps[ky * kw + kx], out=acc)
                    first = False
                else:
                    np.multiply(src, taps[ky * kw + kx], out=tmp)
                    acc += tmp
        out[i] = plan.requant.apply(acc, ow)
    return out.reshape(n, oh, ow, cout)


def run_fc_plan(inp: np.ndarray, plan: GemmPlan, filt: np.ndarray | None = None) -> np.ndarray:
    """FULLY_CONNECTED [B, K] -> [B, Cout] through its plan (``filt`` [Cout, K]: as for CONV2D)."""
    return plan.requant.apply(inp.astype(np.float32) @ plan.matrix(filt), 1)
