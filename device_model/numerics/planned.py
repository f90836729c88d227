"""The planned fast path for 8-bit outputs: a layer's constants prepared once, byte-identical to the
general path (:mod:`.ops`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .primitives import (
    _DTYPE_RANGES,
    _F32_EXACT,
    INT32_MAX,
    INT32_MIN,
    Requant,
    _check_geometry,
    _filter_matrix,
    _out_range,
    _padded,
    _windows,
    check_clamp,
    check_shift,
    requantize_channels,
    wrap_int32,
)

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
    threshold: np.ndarray | None  # [C] values below it had h < 0 (before ``fix`` is added)
    shift_byte: int  # (output zp - D) mod 256: added to the output bytes (wrapping)
    lo: int  # clamp of floor(value): [act_min - zp + D, act_max - zp + D]
    hi: int
    out_dtype: np.dtype
    floor: bool  # D = 0 and negative values matter: floor explicitly before the truncation
    limit: float  # raw accumulators up to this magnitude are exact in every channel
    checked: bool  # True: the layer's bound is within the limit, no accumulator needs a look
    # The general path's parameters, for accumulators beyond the limit.
    correction: np.ndarray  # [C] int64: accumulator = raw + correction
    general: Requant  # multiplier and shift per channel
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
        out = requantize_channels(exact.T, None, self.general)
        return np.ascontiguousarray(out.T).reshape(acc.shape)


def plan_requant(raw_bound: np.ndarray, correction: np.ndarray, rq: Requant) -> RequantPlan | None:
    """The exact float64 requantization (``rq``'s; its zero points are already in the accumulators)
    of raw accumulators r (|r| <= raw_bound per channel, a float32-exact integer) whose int32
    accumulator is r + correction, or None where it cannot apply (a non-8-bit output, the
    saturating multiplier INT32_MIN, a correction alone too large).

    ``rq.single_rounding``: TFLITE_SINGLE_ROUNDING's floor(acc * m * 2**(shift - 31) + 1/2), one floor
    whatever the sign, so the same affine step with the 1/2 alone in the offset and no negative fix.

    Each channel's limit on |r| keeps the accumulator (shifted left by a positive shift) inside
    int32 and every float64 numerator below 2**53; when raw_bound exceeds it, each call checks
    the actual accumulators and takes the general path if one is beyond it."""
    out_dtype, output_zp, act_min, act_max = rq.out_dtype, rq.output_zp, rq.act_min, rq.act_max
    single_rounding = rq.single_rounding
    if out_dtype is None or np.dtype(out_dtype) not in _FAST_OUT:
        return None
    check_clamp(act_min, act_max)
    check_shift(rq.shift)
    c = raw_bound.shape[0]
    m = np.broadcast_to(np.asarray(rq.multiplier, dtype=np.int64).reshape(-1), (c,))
    s = np.broadcast_to(np.asarray(rq.shift, dtype=np.int64).reshape(-1), (c,))
    lo, hi = _out_range(act_min, act_max, out_dtype)
    need_fix = lo < output_zp and not single_rounding
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
            num = (corr * mi << left) + (1 << (30 + e)) + (base << (31 + e))
            if e and not single_rounding:
                num += 1 << 30  # the rounding shift's half
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
                limit, bool(np.all(raw_bound <= limit)), np.asarray(correction, dtype=np.int64),
                replace(rq, multiplier=m.copy(), shift=s.copy()),
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
    wmat: np.ndarray, in_dtype: np.dtype, bias: np.ndarray | None, rq: Requant
) -> RequantPlan | FloatRequantPlan | None:
    """The requantization plan of a layer whose filter is wmat [K, C] (float32, zero point removed);
    ``rq.float_scale``: ``multiplier`` holds FLOAT_SCALE's float32 scales; ``rq.single_rounding``
    as :func:`plan_requant`."""
    out_dtype, input_zp = rq.out_dtype, rq.input_zp
    if out_dtype is None or np.dtype(in_dtype) not in _DTYPE_RANGES:
        return None
    a = _input_bound(in_dtype, input_zp)
    l1 = np.abs(wmat).sum(axis=0, dtype=np.float64).astype(np.int64)
    if a * int(l1.max(initial=0)) >= _F32_EXACT:
        return None  # float32 partial sums could be inexact
    b = np.zeros(wmat.shape[1], dtype=np.int64) if bias is None else np.asarray(bias, dtype=np.int64)
    correction = b - input_zp * wmat.sum(axis=0, dtype=np.float64).astype(np.int64)
    if rq.float_scale:
        check_clamp(rq.act_min, rq.act_max)
        c = wmat.shape[1]
        lo, hi = _out_range(rq.act_min, rq.act_max, out_dtype)
        scale = np.broadcast_to(np.asarray(rq.multiplier, dtype=np.float32).reshape(-1), (c,)).copy()
        return FloatRequantPlan(correction, scale, rq.output_zp, lo, hi, np.dtype(out_dtype))
    return plan_requant(a * l1, correction, rq)


def plan_gemm(
    filt: np.ndarray, bias: np.ndarray | None, rq: Requant, *, in_dtype: np.dtype
) -> GemmPlan | None:
    """The plan of a CONV2D ([Cout, KH, KW, Cin]) or FULLY_CONNECTED ([Cout, K]) filter with
    ``rq``'s zero points and requantization, or None.

    The float32 filter is kept only when it has at most :data:`KEEP_F32_WEIGHTS` elements."""
    cout = filt.shape[0]
    wmat = np.ascontiguousarray(_filter_matrix(filt, rq.filter_zp, cout).T)
    requant = _layer_requant(wmat, in_dtype, bias, rq)
    if requant is None:
        return None
    return GemmPlan(wmat if wmat.size <= KEEP_F32_WEIGHTS else None, rq.input_zp, rq.filter_zp, cout, requant)


def plan_depthwise(
    filt: np.ndarray, bias: np.ndarray | None, rq: Requant, *, in_dtype: np.dtype
) -> DepthwisePlan | None:
    """The plan of a DEPTHWISE_CONV2D filter [1, KH, KW, Cout] with ``rq``, or None."""
    _, kh, kw, cout = filt.shape
    taps = filt.reshape(kh * kw, cout).astype(np.float32)
    if rq.filter_zp:
        taps -= np.float32(rq.filter_zp)
    requant = _layer_requant(taps, in_dtype, bias, rq)
    return None if requant is None else DepthwisePlan(taps, rq.input_zp, requant)


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
