"""The NPU's arithmetic: bit-exact with TFLite's int8/uint8 *reference* kernels.

Every function here is pure and vectorized (numpy; no per-element Python
loops). Quantized tensors come in as arrays of their stored integer values
(int8, uint8 or int32 as loaded from memory), zero points and requantization
parameters as plain ints or per-channel arrays. Results are int32 arrays
already clamped to [act_min, act_max]; the caller stores them with the
output's dtype.

The formulas are TFLite's (tensorflow/lite/kernels/internal/common.h and
reference/integer_ops/*.h): gemmlowp's SaturatingRoundingDoublingHighMul and
RoundingDivideByPOT, and MultiplyByQuantizedMultiplier with "double
rounding" (TFLite's default build). 32-bit intermediates of the C code are
modelled as int32 with two's-complement wrap-around, so even overflowing
inputs give a defined, hardware-like answer.

Convolutions use an exact floating-point GEMM for BLAS speed: the operands
are small integers and every partial sum is kept below the float mantissa
(2**24 for float32, 2**53 for float64), so the products and sums are exact
whatever order BLAS adds them in.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
SHIFT_MIN = -31  # RoundingDivideByPOT takes exponents up to 31
SHIFT_MAX = 30  # x * (1 << shift) must stay a defined int32 shift
_F32_EXACT = 1 << 24
_MAX_F32_CHUNKS = 4  # beyond this many K-chunks, one float64 GEMM is faster

ArrayLike = np.ndarray | int


def wrap_int32(x: np.ndarray) -> np.ndarray:
    """Reduce int64 values modulo 2**32 into the int32 range (C's wrap-around)."""
    return (np.asarray(x, dtype=np.int64) + 2**31 & 0xFFFFFFFF) - 2**31


def saturating_rounding_doubling_high_mul(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """gemmlowp's SaturatingRoundingDoublingHighMul on int32 values (as int64 arrays).

    gemmlowp adds a nudge of 2**30 (or 1 - 2**30 for negative products) and
    divides by 2**31 truncating toward zero; both cases are the same as
    adding 2**30 and flooring, which is one add and one arithmetic shift.
    """
    a64 = np.asarray(a, dtype=np.int64)
    b64 = np.asarray(b, dtype=np.int64)
    high = a64 * b64  # |ab| <= 2**62: no int64 overflow
    high += 1 << 30
    high >>= 31
    if np.any(b64 == INT32_MIN):  # the only product that saturates: INT32_MIN * INT32_MIN
        high = np.where((a64 == INT32_MIN) & (b64 == INT32_MIN), INT32_MAX, high)
    return high


def rounding_divide_by_pot(x: ArrayLike, exponent: ArrayLike) -> np.ndarray:
    """gemmlowp's RoundingDivideByPOT: x / 2**exponent rounded half away from zero.

    gemmlowp rounds up when the remainder exceeds half (half - 1 for x >= 0):
    that is (x + 2**(e-1) - [x < 0]) >> e for e >= 1, and x for e == 0.
    """
    x64 = np.asarray(x, dtype=np.int64)
    e = np.asarray(exponent, dtype=np.int64)
    if np.any((e < 0) | (e > 31)):
        raise ValueError(f"rounding shift exponent must be in [0, 31], got {e.min()}..{e.max()}")
    half = np.where(e > 0, np.left_shift(1, np.maximum(e - 1, 0)), 0)
    negative_fix = np.where(e > 0, -1, 0)  # AND-mask: keep x >> 63 (-1 for x < 0) only where e > 0
    out = x64 >> 63
    out &= negative_fix
    out += x64
    out += half
    out >>= e
    return out


def check_shift(shift: ArrayLike) -> None:
    s = np.asarray(shift, dtype=np.int64)
    if s.size and (s.min() < SHIFT_MIN or s.max() > SHIFT_MAX):
        raise ValueError(
            f"requantization shift must be in [{SHIFT_MIN}, {SHIFT_MAX}], got {s.min()}..{s.max()}"
        )


def _as_int32(x: np.ndarray) -> np.ndarray:
    """x as int64 values in the int32 range, wrapping only if some value is outside it."""
    x = np.asarray(x, dtype=np.int64)
    if x.size and (x.min() < INT32_MIN or x.max() > INT32_MAX):
        return wrap_int32(x)
    return x


def multiply_by_quantized_multiplier(x: ArrayLike, multiplier: ArrayLike, shift: ArrayLike) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier: x * multiplier * 2**(shift - 31), rounded.

    ``shift > 0`` shifts x left first (in int32, wrapping), ``shift < 0`` is a
    rounding right shift after the high multiply. ``multiplier`` and ``shift``
    broadcast against ``x`` (per-channel: arrays over the last axis).
    """
    check_shift(shift)
    s = np.asarray(shift, dtype=np.int64)
    x64 = _as_int32(np.asarray(x, dtype=np.int64))
    if np.any(s > 0):
        x64 = wrap_int32(x64 << np.maximum(s, 0))
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x64, multiplier), np.maximum(-s, 0))


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


# --- geometry -----------------------------------------------------------------
def _padded(x: np.ndarray, pad_top: int, pad_left: int, need_h: int, need_w: int, value: int) -> np.ndarray:
    """x [N,H,W,C] placed at (pad_top, pad_left) in a [N, >=need_h, >=need_w, C] canvas of ``value``."""
    n, h, w, c = x.shape
    hp = max(pad_top + h, need_h)
    wp = max(pad_left + w, need_w)
    if (pad_top, pad_left, hp, wp) == (0, 0, h, w):
        return x
    out = np.full((n, hp, wp, c), value, dtype=x.dtype)
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
) -> np.ndarray:
    """TFLite's quantized Conv2D: input [N,H,W,Cin], filter [Cout,KH,KW,Cin] -> [N,OH,OW,Cout]."""
    n, h, w, cin = inp.shape
    cout, kh, kw, fcin = filt.shape
    if fcin != cin:
        raise ValueError(f"CONV2D: filter has {fcin} input channels, the input {cin}")
    _check_geometry(
        "CONV2D", stride_h=stride_h, stride_w=stride_w, dilation_h=dilation_h, dilation_w=dilation_w
    )
    check_zero_points("CONV2D", input_zp, filter_zp)
    # Positions outside the input contribute nothing: after subtracting the
    # zero point, padding is 0. float32 holds these small integers exactly.
    x = inp.astype(np.float32) - np.float32(input_zp)
    wt = (filt.astype(np.float32) - np.float32(filter_zp)).reshape(cout, kh * kw * cin).T
    if (kh, kw, stride_h, stride_w, pad_top, pad_left) == (1, 1, 1, 1, 0, 0) and (out_h, out_w) == (h, w):
        cols = x.reshape(n * h * w, cin)
    else:
        need_h = (out_h - 1) * stride_h + (kh - 1) * dilation_h + 1
        need_w = (out_w - 1) * stride_w + (kw - 1) * dilation_w + 1
        xp = _padded(x, pad_top, pad_left, need_h, need_w, 0)
        win = _windows(xp, out_h, out_w, kh, kw, stride_h, stride_w, dilation_h, dilation_w)
        cols = win.reshape(n * out_h * out_w, kh * kw * cin)
    acc = int_matmul(cols, wt).reshape(n, out_h, out_w, cout)
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=np.int64).reshape(cout)
    return requantize(acc, multiplier, shift, output_zp, act_min, act_max)


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
) -> np.ndarray:
    """TFLite's quantized DepthwiseConv2D: filter [1,KH,KW,Cin*dm]; channel oc reads input oc // dm."""
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
    acc_type = np.int32 if kh * kw * 2**16 < 2**31 else np.int64
    x = inp.astype(acc_type) - acc_type(input_zp)
    if depth_multiplier > 1:
        x = np.repeat(x, depth_multiplier, axis=3)
    wt = filt.astype(acc_type).reshape(kh, kw, cout) - acc_type(filter_zp)
    need_h = (out_h - 1) * stride_h + (kh - 1) * dilation_h + 1
    need_w = (out_w - 1) * stride_w + (kw - 1) * dilation_w + 1
    xp = _padded(x, pad_top, pad_left, need_h, need_w, 0)
    acc = np.zeros((n, out_h, out_w, cout), dtype=acc_type)
    # One vectorized multiply-add per filter tap (KH*KW iterations, not per pixel).
    for ky in range(kh):
        for kx in range(kw):
            y0 = ky * dilation_h
            x0 = kx * dilation_w
            tap = xp[
                :,
                y0 : y0 + (out_h - 1) * stride_h + 1 : stride_h,
                x0 : x0 + (out_w - 1) * stride_w + 1 : stride_w,
            ]
            acc += tap * wt[ky, kx]
    acc64 = acc.astype(np.int64)
    if bias is not None:
        acc64 += np.asarray(bias, dtype=np.int64).reshape(cout)
    return requantize(acc64, multiplier, shift, output_zp, act_min, act_max)


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
) -> np.ndarray:
    """TFLite's quantized FullyConnected: input [B,K], filter [Cout,K] -> [B,Cout]."""
    b, k = inp.shape
    cout, fk = filt.shape
    if fk != k:
        raise ValueError(f"FULLY_CONNECTED: filter depth {fk} does not match input depth {k}")
    check_zero_points("FULLY_CONNECTED", input_zp, filter_zp)
    x = inp.astype(np.float32) - np.float32(input_zp)
    wt = (filt.astype(np.float32) - np.float32(filter_zp)).T
    acc = int_matmul(x, wt)
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=np.int64).reshape(cout)
    return requantize(acc, multiplier, shift, output_zp, act_min, act_max)


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
) -> np.ndarray:
    """TFLite's quantized Add (or Sub with ``subtract``): rescale both inputs to a common scale.

    TFLite uses MultiplyByQuantizedMultiplierSmallerThanOneExp, which is
    MultiplyByQuantizedMultiplier for the shifts <= 0 it produces; positive
    shifts get MultiplyByQuantizedMultiplier's defined left shift.
    """
    if not 0 <= left_shift <= SHIFT_MAX:
        raise ValueError(f"ADD: left_shift must be in [0, {SHIFT_MAX}], got {left_shift}")
    check_clamp(act_min, act_max)
    a = wrap_int32((in1.astype(np.int64) - input1_zp) << left_shift)
    b = wrap_int32((in2.astype(np.int64) - input2_zp) << left_shift)
    a = multiply_by_quantized_multiplier(a, input1_multiplier, input1_shift)
    b = multiply_by_quantized_multiplier(b, input2_multiplier, input2_shift)
    raw = wrap_int32(a - b if subtract else a + b)
    out = multiply_by_quantized_multiplier(raw, output_multiplier, output_shift) + output_zp
    return np.clip(out, act_min, act_max).astype(np.int32)


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
