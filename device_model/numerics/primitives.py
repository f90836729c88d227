"""The arithmetic every NPU operation shares: requantization, the exact integer GEMM, window geometry.

The fixed-point primitives (gemmlowp's SaturatingRoundingDoublingHighMul,
RoundingDivideByPOT, MultiplyByQuantizedMultiplier) are the ISA's, in
``uapi.fixed_point``; this module re-exports them for the device model.
32-bit intermediates of the C code are modelled as int32 with two's-complement
wrap-around, so even overflowing inputs give a defined, hardware-like answer.

Convolutions use an exact floating-point GEMM for BLAS speed: the operands
are small integers and every partial sum is kept below the float mantissa
(2**24 for float32, 2**53 for float64), so the products and sums are exact
whatever order BLAS adds them in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

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


@dataclass(frozen=True, kw_only=True, eq=False)
class Requant:
    """A quantized layer's arithmetic around its accumulators, one record for every convolution,
    FULLY_CONNECTED, their plans and the MAC array: the zero points subtracted from the input and
    the filter, then each channel's accumulator (+ bias) requantized with ``multiplier`` and
    ``shift`` (one for the tensor or one per channel), plus ``output_zp``, clamped to
    [``act_min``, ``act_max``] and saturated to ``out_dtype`` (None: int32 values).

    ``single_rounding``: one rounding (:func:`multiply_by_quantized_multiplier_single_round`), as
    LiteRT's reference FULLY_CONNECTED does. ``float_scale``: ``multiplier`` holds float32 scales
    (``shift`` 0), requantized as onnxruntime does (:func:`requantize_float_scale`)."""

    input_zp: int
    filter_zp: int
    multiplier: ArrayLike
    shift: ArrayLike
    output_zp: int
    act_min: int
    act_max: int
    out_dtype: np.dtype | None = None
    single_rounding: bool = False
    float_scale: bool = False


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


def requantize_channels(acc: np.ndarray, bias: np.ndarray | None, rq: Requant) -> np.ndarray:
    """Channel-major [C, M] accumulators (+ bias [C]) -> clamp(MBQM(acc) + zp) as [C, M], with
    ``rq``'s requantization (its zero points are already in ``acc``).

    ``rq.single_rounding`` requantizes with :func:`multiply_by_quantized_multiplier_single_round`;
    ``rq.float_scale`` with :func:`requantize_float_scale` (``multiplier`` holds float32 scales).

    ``acc`` holds exact integers (any int or float dtype). Returns ``rq.out_dtype`` values
    saturated to it (the device's store), or int32 when ``out_dtype`` is None.

    When |acc| * |multiplier| < 2**52 and no shift is positive, MultiplyByQuantizedMultiplier
    is computed exactly in float64: h = floor(acc * m * 2**-31 + 1/2) is SRDHM (every value is
    an integer or a dyadic fraction with fewer than 53 significant bits, and scaling by a power
    of two is exact), and RoundingDivideByPOT(h, e) = trunc(h * 2**-e + copysign(1/2, h)) is
    rounding half away from zero. Otherwise the int64 path (with int32 wrap-around) is used.
    """
    multiplier, shift, output_zp, out_dtype = rq.multiplier, rq.shift, rq.output_zp, rq.out_dtype
    check_clamp(rq.act_min, rq.act_max)
    c = acc.shape[0]
    lo, hi = _out_range(rq.act_min, rq.act_max, out_dtype)
    if rq.float_scale:
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
    if not rq.single_rounding and sh.max() <= 0 and exact_f64:
        return _requantize_f64(acc, bias, m, sh, output_zp, lo, hi, out_dtype or np.dtype(np.int32))
    acc64 = np.asarray(acc, dtype=np.int64)
    if bias is not None:
        acc64 = acc64 + _col(bias, c)
    mbqm = multiply_by_quantized_multiplier
    if rq.single_rounding:
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


def _filter_matrix(filt: np.ndarray, filter_zp: int, rows: int) -> np.ndarray:
    """(filter - zero point) as a float32 [rows, K] matrix."""
    wt = filt.astype(np.float32).reshape(rows, -1)
    if filter_zp:
        wt -= np.float32(filter_zp)
    return wt
