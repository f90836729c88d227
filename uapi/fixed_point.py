"""The ISA's fixed-point arithmetic: TFLite's integer requantization, in one place.

The device executes it (``device_model.numerics``), the compiler predicts it when it builds
tables and chooses parameters (``libaccel.compiler``), and the demo checks against it. The
formulas are TFLite's (tensorflow/lite/kernels/internal/common.h and quantization_util.cc):
gemmlowp's SaturatingRoundingDoublingHighMul and RoundingDivideByPOT, MultiplyByQuantizedMultiplier
in its default double-rounding form and its ``TFLITE_SINGLE_ROUNDING`` form, and QuantizeMultiplier.

Each operation has one definition, vectorised over numpy arrays (int32 values carried in int64,
C's two's-complement wrap-around modelled explicitly). The scalar forms (``srdhm``,
``rounding_divide_by_pot_int``, ``multiply_by_quantized_multiplier_int``) call it on plain ints.
``tests/reference_kernels.py`` is the independent oracle these are tested against.
"""

from __future__ import annotations

import math

import numpy as np

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
SHIFT_MIN = -31  # RoundingDivideByPOT takes exponents up to 31
SHIFT_MAX = 30  # x * (1 << shift) must stay a defined int32 shift

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


def multiply_by_quantized_multiplier_single_round(
    x: ArrayLike, multiplier: ArrayLike, shift: ArrayLike
) -> np.ndarray:
    """MultiplyByQuantizedMultiplier with one rounding: (x * multiplier + 2**(30 - shift)) >> (31 - shift).

    TFLite's ``TFLITE_SINGLE_ROUNDING`` form, which LiteRT's reference FULLY_CONNECTED uses: one
    64-bit product and one round-half-up shift, where :func:`multiply_by_quantized_multiplier`
    rounds twice (SRDHM, then a rounding shift) and so differs on values near a half.
    """
    check_shift(shift)
    total = 31 - np.asarray(shift, dtype=np.int64)
    x64 = _as_int32(np.asarray(x, dtype=np.int64))
    product = x64 * np.asarray(multiplier, dtype=np.int64) + (np.int64(1) << (total - 1))
    return wrap_int32(product >> total)


def wrap32(x: int) -> int:
    """x modulo 2**32 in the int32 range (C's wrap-around), for a plain int."""
    return (x + 2**31) % 2**32 - 2**31


def srdhm(a: int, b: int) -> int:
    """SaturatingRoundingDoublingHighMul on plain ints."""
    return int(saturating_rounding_doubling_high_mul(a, b))


def rounding_divide_by_pot_int(x: int, exponent: int) -> int:
    """RoundingDivideByPOT on plain ints."""
    return int(rounding_divide_by_pot(x, exponent))


def multiply_by_quantized_multiplier_int(x: int, multiplier: int, shift: int) -> int:
    """MultiplyByQuantizedMultiplier (double rounding) on plain ints."""
    return int(multiply_by_quantized_multiplier(x, multiplier, shift))


# --- choosing the parameters (compile time) ---------------------------------------------------------
def tflite_round(x: float) -> int:
    """std::round: half away from zero (Python's round() is half to even)."""
    return int(math.floor(abs(x) + 0.5)) * (1 if x >= 0 else -1)


def quantize_multiplier(real: float) -> tuple[int, int]:
    """QuantizeMultiplier: real = M * 2**(shift - 31) with M in [2**30, 2**31), double precision."""
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    q_fixed = tflite_round(q * (1 << 31))
    if q_fixed == 1 << 31:
        q_fixed //= 2
        shift += 1
    if shift < SHIFT_MIN:  # flushed to zero, as TFLite does
        return 0, 0
    if shift > SHIFT_MAX:
        shift, q_fixed = SHIFT_MAX, INT32_MAX
    return q_fixed, shift
