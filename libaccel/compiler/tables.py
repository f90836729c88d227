"""256-entry lookup tables of TFLite's 8-bit elementwise kernels, computed exactly at compile time.

Any elementwise op of one int8/uint8 input is a function of 256 values, so the
NPU's LUT instruction runs it exactly once the table holds what TFLite's
reference kernel (``OpResolverType.BUILTIN_REF``) computes for each value.
Each function here mirrors one TFLite kernel, named in its docstring, in the
kernel's own arithmetic:

* LOGISTIC and TANH: TFLite's reference resolver itself evaluates them through
  a table its Prepare fills with ``LUTPopulate`` (float32 arithmetic and the C
  library's ``expf``/``tanhf``); we call the same libm functions through ctypes,
  so the table is TFLite's, not an approximation of it;
* HARD_SWISH: ``reference_ops::HardSwish`` (16-bit fixed point with the
  multipliers of ``HardSwishPrepare``);
* QUANTIZE (8-bit to 8-bit): ``Requantize``, one MultiplyByQuantizedMultiplier;
* LEAKY_RELU: ``reference_ops::QuantizeLeakyRelu`` (two multipliers by the input's sign);
* uint8 CONCATENATION of differently quantized inputs: ``ConcatenationWithScaling`` (float32);
* int8 RSQRT: ``RsqrtEvalQuantized`` (elementwise.cc), gemmlowp's Newton-Raphson inverse square
  root (``GetInvSqrtQuantizedMultiplierExp``) and two MultiplyByQuantizedMultiplier.

Checked against both TFLite runtimes' BUILTIN_REF on all 256 inputs in
tests/compiler/test_tables.py.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

import numpy as np

from libaccel.compiler import quant as q
from uapi import fixed_point as fp

_f32 = np.float32
I16_MIN, I16_MAX = -(2**15), 2**15 - 1


def _libm() -> ctypes.CDLL:
    lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    for name in ("expf", "tanhf", "erfcf", "logf"):
        fn = getattr(lib, name)
        fn.restype = ctypes.c_float
        fn.argtypes = [ctypes.c_float]
    return lib


_LIBM = _libm()


def input_values(dtype: str) -> range:
    """The 256 input values in table order (the LUT instruction indexes int8 by value + 128)."""
    lo, hi = q.QRANGE[dtype]
    return range(lo, hi + 1)


def _round_f32(x: np.float32) -> np.float32:
    """roundf: half away from zero, in float."""
    return _f32(np.floor(np.abs(x) + _f32(0.5))) * (_f32(1) if x >= 0 else _f32(-1))


def lut_populate(
    transform: Callable[[np.float32], np.float32],
    in_scale: float,
    in_zp: int,
    out_scale: float,
    out_zp: int,
    dtype: str,
) -> np.ndarray:
    """TFLite's ``LUTPopulate<int8_t/uint8_t>`` (kernels/internal/common.h), in float32 as TFLite does."""
    lo, hi = q.QRANGE[dtype]
    inverse_scale = _f32(1) / _f32(out_scale)
    out = np.empty(256, dtype=np.int32)
    for i, v in enumerate(input_values(dtype)):
        dequantized = _f32(in_scale) * _f32(v - in_zp)
        rescaled = _round_f32(_f32(transform(dequantized)) * inverse_scale)
        quantized = int(_f32(rescaled + _f32(out_zp)))  # static_cast<int32_t>: truncation
        out[i] = min(max(quantized, lo), hi)
    return out


def _sigmoid(x: np.float32) -> np.float32:
    return _f32(1) / (_f32(1) + _f32(_LIBM.expf(float(-x))))


def _tanh(x: np.float32) -> np.float32:
    return _f32(_LIBM.tanhf(float(x)))


def logistic_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int, dtype: str) -> np.ndarray:
    """LOGISTIC: SigmoidPrepare's ``LUTPopulate`` with ``1 / (1 + exp(-x))``."""
    return lut_populate(_sigmoid, in_scale, in_zp, out_scale, out_zp, dtype)


def tanh_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int, dtype: str) -> np.ndarray:
    """TANH: TanhPrepare's ``LUTPopulate`` with ``tanh(x)``."""
    return lut_populate(_tanh, in_scale, in_zp, out_scale, out_zp, dtype)


def requantize_table(
    in_scale: float, in_zp: int, out_scale: float, out_zp: int, in_dtype: str, out_dtype: str
) -> np.ndarray:
    """QUANTIZE between 8-bit types: ``Requantize`` with QuantizeMultiplier(double(s_in) / double(s_out))."""
    m, shift = q.quantize_multiplier(float(in_scale) / float(out_scale))
    lo, hi = q.QRANGE[out_dtype]
    d = np.asarray(list(input_values(in_dtype)), dtype=np.int64) - in_zp
    vals = q.multiply_by_quantized_multiplier(d, m, shift) + out_zp
    return np.clip(vals, lo, hi).astype(np.int32)


def abs_needs_rescale(in_scale: float, out_scale: float) -> bool:
    """GenericPrepare's ``needs_rescale`` for ABS: the float scales differ."""
    return bool(_f32(in_scale) != _f32(out_scale))


def abs_multiplier(in_scale: float, out_scale: float) -> tuple[int, int]:
    """SetAbsOutputMultiplier: QuantizeMultiplier(input_scale / output_scale), the quotient in float."""
    return q.quantize_multiplier(float(_f32(in_scale) / _f32(out_scale)))


def abs_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int, dtype: str) -> np.ndarray:
    """int8 ABS, ``AbsEvalQuantized`` (elementwise.cc): ``|x - zp_in|``, requantized only where the
    scales differ, plus ``zp_out``, clamped to the type."""
    lo, hi = q.QRANGE[dtype]
    d = np.abs(np.asarray(list(input_values(dtype)), dtype=np.int64) - in_zp)
    if abs_needs_rescale(in_scale, out_scale):
        m, shift = abs_multiplier(in_scale, out_scale)
        d = q.multiply_by_quantized_multiplier(d, m, shift)
    return np.clip(d + out_zp, lo, hi).astype(np.int32)


def exp_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int, dtype: str) -> np.ndarray:
    """int8 EXP: exp.cc's ``LUTPopulate`` with ``std::exp`` (libm's ``expf``)."""
    return lut_populate(lambda x: _f32(_LIBM.expf(float(x))), in_scale, in_zp, out_scale, out_zp, dtype)


def log_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int, dtype: str) -> np.ndarray:
    """int8 LOG (LiteRT's elementwise.cc ``LogLUTPrepare``; TFLite 2.14 has no int8 LOG): the
    ``LUTPopulate`` table of libm's ``logf``, inputs at or below 0 mapped to the output's lowest
    value ``(qmin - zp_out) * s_out`` (in float)."""
    output_min = _f32(q.QRANGE[dtype][0] - out_zp) * _f32(out_scale)

    def log(x: np.float32) -> np.float32:
        return output_min if x <= 0 else _f32(_LIBM.logf(float(x)))

    return lut_populate(log, in_scale, in_zp, out_scale, out_zp, dtype)


_SQRT1_2 = 0.70710678118654752440  # M_SQRT1_2
_SQRT_2_OVER_PI = _f32(1.12837916709551257390 * _SQRT1_2)  # gelu_internal::kSqrt2dPi, a float


def _gelu(x: np.float32) -> np.float32:
    """reference_ops::GeluTransform: ``0.5f * x * erfc(x * -M_SQRT1_2)`` in float (the erfc form; the
    older ``0.5f * x * (1 + erf(x * M_SQRT1_2))`` gave the same tables on 6000 random scale pairs)."""
    return _f32(_f32(0.5) * x) * _f32(_LIBM.erfcf(float(x * _f32(-_SQRT1_2))))


def _gelu_approximate(x: np.float32) -> np.float32:
    """reference_ops::GeluTransformApproximate: ``0.5f * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715f *
    x * x * x)))``, every step in float, left to right."""
    cube = _f32(_f32(_f32(0.044715) * x) * x) * x
    return _f32(_f32(0.5) * x) * (_f32(1) + _f32(_LIBM.tanhf(float(_SQRT_2_OVER_PI * (x + cube)))))


def gelu_table(
    in_scale: float, in_zp: int, out_scale: float, out_zp: int, dtype: str, approximate: bool
) -> np.ndarray:
    """GELU: GeluPrepare's lookup table of GeluTransform (or GeluTransformApproximate)."""
    transform = _gelu_approximate if approximate else _gelu
    return lut_populate(transform, in_scale, in_zp, out_scale, out_zp, dtype)


def leaky_relu_multipliers(in_scale: float, out_scale: float, alpha: float) -> tuple[tuple[int, int], ...]:
    """LeakyReluPrepare: ((identity M, shift), (alpha M, shift)), the reals computed in float as TFLite's
    ``input->params.scale * params->alpha / output->params.scale`` is."""
    identity = float(_f32(in_scale) / _f32(out_scale))
    scaled_alpha = float(_f32(_f32(in_scale) * _f32(alpha)) / _f32(out_scale))
    return q.quantize_multiplier(identity), q.quantize_multiplier(scaled_alpha)


def leaky_relu_table(
    in_scale: float, in_zp: int, out_scale: float, out_zp: int, alpha: float, dtype: str
) -> np.ndarray:
    """LEAKY_RELU: reference_ops::QuantizeLeakyRelu, the identity multiplier for inputs at or above the
    zero point and the alpha multiplier below it, then the type's clamp."""
    (mi, si), (ma, sa) = leaky_relu_multipliers(in_scale, out_scale, alpha)
    lo, hi = q.QRANGE[dtype]
    d = np.asarray(list(input_values(dtype)), dtype=np.int64) - in_zp
    at_or_above = d >= 0
    vals = out_zp + np.where(
        at_or_above,
        q.multiply_by_quantized_multiplier(np.where(at_or_above, d, 0), mi, si),
        q.multiply_by_quantized_multiplier(np.where(at_or_above, 0, d), ma, sa),
    )
    return np.clip(vals, lo, hi).astype(np.int32)


def concat_rescale_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> np.ndarray:
    """uint8 CONCATENATION of an input quantized unlike the output: reference_ops'
    ConcatenationWithScaling, ``round(x * scale + bias) + out_zp`` in float32 with
    ``scale = s_in * (1 / s_out)`` and ``bias = -in_zp * scale``, clamped to [0, 255]."""
    scale = _f32(in_scale) * (_f32(1.0) / _f32(out_scale))
    bias = _f32(-in_zp) * scale
    vals = [q.tflite_round(float(_f32(_f32(v) * scale + bias))) + out_zp for v in input_values("uint8")]
    return np.clip(np.array(vals, dtype=np.int64), 0, 255).astype(np.int32)


# --- HARD_SWISH: 16-bit gemmlowp fixed point --------------------------------------------------
def _i16(v: int) -> int:
    """static_cast<int16_t>: wrap to 16 bits."""
    return (v + 2**15) % 2**16 - 2**15


def _trunc_div(a: int, b: int) -> int:
    return a // b if a >= 0 else -((-a) // b)


def srdhm16(a: int, b: int) -> int:
    """gemmlowp::SaturatingRoundingDoublingHighMul on int16."""
    if a == b == I16_MIN:
        return I16_MAX
    ab = a * b
    return _i16(_trunc_div(ab + ((1 << 14) if ab >= 0 else 1 - (1 << 14)), 1 << 15))


def sdhm16(a: int, b: int) -> int:
    """reference_ops::SaturatingDoublingHighMul: as above but truncating (no rounding nudge)."""
    if a == b == I16_MIN:
        return I16_MAX
    return _i16(_trunc_div(a * b, 1 << 15))


def rdbp16(x: int, e: int) -> int:
    """gemmlowp::RoundingDivideByPOT on int16."""
    mask = (1 << e) - 1
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return _i16((x >> e) + (1 if (x & mask) > threshold else 0))


def _sat_lshift16(v: int, amount: int) -> int:
    return max(I16_MIN, min(I16_MAX, v * (1 << amount)))


def _downscale_to_int16(m32: int) -> int:
    """DownScaleInt32ToInt16Multiplier."""
    if m32 >= q.INT32_MAX - (1 << 15):
        return I16_MAX
    return (m32 + (1 << 15)) >> 16


def hard_swish_params(in_scale: float, out_scale: float) -> tuple[int, int, int, int]:
    """HardSwishPrepare: (output multiplier int16, output exponent, reluish multiplier int16, exponent).

    Raises ValueError where TFLite's Prepare fails (a positive output exponent)
    or where the int16 right shift would exceed 15 bits.
    """
    hires = _f32(1.0 / 128.0) * _f32(in_scale)
    m, out_exp = q.quantize_multiplier(float(hires / _f32(out_scale)))
    if out_exp > 0:
        raise ValueError(f"HARD_SWISH output multiplier exponent {out_exp} > 0 (TFLite rejects the model)")
    if -out_exp > 15:
        raise ValueError(f"HARD_SWISH output shift {-out_exp} exceeds 16-bit arithmetic")
    rm, rel_exp = q.quantize_multiplier(float(hires / (_f32(3.0) / _f32(32768.0))))
    if rel_exp < -15:
        raise ValueError(f"HARD_SWISH reluish shift {-rel_exp} exceeds 16-bit arithmetic")
    return _downscale_to_int16(m), out_exp, _downscale_to_int16(rm), rel_exp


def hard_swish_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int, dtype: str) -> np.ndarray:
    """HARD_SWISH: reference_ops::HardSwish<T>(params, ...) for each of the 256 inputs."""
    out_m16, out_exp, rel_m16, rel_exp = hard_swish_params(in_scale, out_scale)
    lo, hi = q.QRANGE[dtype]
    out = np.empty(256, dtype=np.int32)
    for i, v in enumerate(input_values(dtype)):
        hires = _i16(_i16(v - in_zp) * 128)
        preshift = srdhm16(hires, out_m16)
        r = hires
        if rel_exp > 0:
            r = _sat_lshift16(r, rel_exp - 1)
        r = srdhm16(r, rel_m16)
        if rel_exp > 0:
            r = _sat_lshift16(r, 1)
        if rel_exp < 0:
            r = rdbp16(r, -rel_exp)
        r = (r + (1 << 15)) >> 1  # [-1, 1] -> [0, 1] in Q15
        value = rdbp16(sdhm16(r, preshift), -out_exp) + out_zp
        out[i] = min(max(value, lo), hi)
    return out


def mean_multiplier(m: int, shift: int, count: int) -> tuple[int, int]:
    """QuantizedMeanOrSum's 1/count folded into the requantization multiplier (reference/reduce.h).

    TFLite's integer MEAN computes ``MultiplyByQuantizedMultiplier(sum(x - zp), M', shift')`` with
    ``M' = (M << k) / count`` (int64, truncating) and ``shift' = shift - k``,
    ``k = min(floor(log2(count)), 32, 31 + shift)``.
    """
    k = min(count.bit_length() - 1, 32, 31 + shift)
    return int((m << k) // count), shift - k


# --- RSQRT: gemmlowp's fixed-point inverse square root ----------------------------------------
def _sat_shift32(raw: int, exponent: int) -> int:
    """gemmlowp's SaturatingRoundingMultiplyByPOT<exponent> for exponent > 0: a saturating left shift."""
    return min(max(raw << exponent, q.INT32_MIN), q.INT32_MAX)


def inv_sqrt_multiplier_exp(value: int) -> tuple[int, int]:
    """TFLite's ``GetInvSqrtQuantizedMultiplierExp(value, kReverseShift)``: (multiplier, left shift)
    with 1/sqrt(value) = multiplier * 2^(shift - 31), by gemmlowp's Newton-Raphson iteration in
    FixedPoint<int32, 3> (five steps from x = 1), as TFLite computes it."""
    if value <= 1:
        return q.INT32_MAX, 0
    shift = 11
    while value >= 1 << 29:
        value //= 4
        shift += 1
    clz = 32 - value.bit_length()
    pairs = (clz - 1) // 2 - 1
    shift -= pairs
    value <<= 2 * pairs
    f3_input = value >> 1  # FixedPoint<int32, 3>
    half_input = fp.rounding_divide_by_pot_int(f3_input, 1)
    half_three = (1 << 28) + (1 << 27)
    x = 1 << 28  # F3::One()
    for _ in range(5):
        x3 = _sat_shift32(fp.srdhm(fp.srdhm(x, x), x), 6)  # F9 -> Rescale<3>
        x = _sat_shift32(fp.wrap32(fp.srdhm(half_three, x) - fp.srdhm(half_input, x3)), 3)  # F6 -> Rescale<3>
    x = fp.srdhm(x, 1518500250)  # * sqrt(2) / 2 in FixedPoint<int32, 0>
    if shift < 0:
        x = fp.wrap32(x << -shift)
        shift = 0
    return x, -shift


def rsqrt_multiplier(in_scale: float, out_scale: float) -> tuple[int, int]:
    """SetRsqrtOutputMultiplier: QuantizeMultiplier(1. / (sqrtf(s_in) * s_out)), the product in float."""
    return q.quantize_multiplier(1.0 / float(_f32(np.sqrt(_f32(in_scale))) * _f32(out_scale)))


def rsqrt_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> np.ndarray:
    """int8 RSQRT: ``RsqrtEvalQuantized``. With v = x - zp: 127 for v == 0, else
    ``MBQM(MBQM(1, m_v, s_v + 20), M, shift - 20) + out_zp`` clamped, where (m_v, s_v) is
    :func:`inv_sqrt_multiplier_exp` of v and (M, shift) :func:`rsqrt_multiplier`. TFLite refuses an
    input below the zero point at run time ("Rsqrt is only defined for positive values"); the table
    holds 127 there.

    Raises ValueError where TFLite's rounding shift would leave [0, 31] (undefined in its C++).
    """
    m, shift = rsqrt_multiplier(in_scale, out_scale)
    k_shift = 20
    if not q.shift_ok(shift - k_shift):
        raise ValueError(f"RSQRT output shift {shift - k_shift} outside [-31, 30]")
    out = np.empty(256, dtype=np.int32)
    for i, v in enumerate(input_values("int8")):
        value = v - in_zp
        if value <= 0:
            out[i] = 127
            continue
        inv_m, inv_s = inv_sqrt_multiplier_exp(value)
        data = fp.multiply_by_quantized_multiplier_int(1, inv_m, inv_s + k_shift)
        res = fp.multiply_by_quantized_multiplier_int(data, m, shift - k_shift) + out_zp
        out[i] = min(max(res, -128), 127)
    return out
