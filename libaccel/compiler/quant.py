"""TFLite's quantization parameter arithmetic, reproduced exactly (compile time, scalar Python).

The fixed-point primitives and QuantizeMultiplier are the ISA's, in ``uapi.fixed_point``; this
module holds what the compiler derives from them per op.

Each function names the TFLite code it mirrors (tensorflow/lite/kernels/
internal/quantization_util.cc, kernels/kernel_util.cc and the ops' Prepare
functions). Where TFLite computes in ``float`` rather than ``double`` we do
too (via numpy float32), because a multiplier one ulp off changes outputs.
"""

from __future__ import annotations

import math

import numpy as np

from uapi.fixed_point import (  # noqa: F401  (re-exported: the compiler's names for the ISA's rules)
    INT32_MAX,
    INT32_MIN,
    SHIFT_MAX,
    SHIFT_MIN,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    tflite_round,
)

QRANGE = {"int8": (-128, 127), "uint8": (0, 255), "int32": (INT32_MIN, INT32_MAX)}
ADD_LEFT_SHIFT = 20  # TFLite's left shift for 8-bit ADD/SUB


def raw_shift(real: float) -> int:
    """QuantizeMultiplier's shift before TFLite flushes (< -31) or saturates (> 30) it."""
    if real == 0.0:
        return 0
    frac, shift = math.frexp(real)
    return shift + (1 if tflite_round(frac * (1 << 31)) == 1 << 31 else 0)


def quantize_multiplier_smaller_than_one_exp(real: float) -> tuple[int, int]:
    """QuantizeMultiplierSmallerThanOneExp: 0 < real < 1, shift <= 0 (TFLite CHECK-fails otherwise)."""
    if not 0.0 < real < 1.0:
        raise ValueError(f"multiplier {real} is not in (0, 1)")
    m, shift = quantize_multiplier(real)
    if shift > 0:
        raise ValueError(f"multiplier {real} gives a positive shift {shift}")
    return m, shift


def convolution_scale(
    input_scale: float, filter_scale: float, output_scale: float, float_product: bool
) -> float:
    """The real multiplier TFLite quantizes for a convolution-like layer (kernels/kernel_util.cc).

    ``float_product``: GetQuantizedConvolutionMultipler's
    ``static_cast<double>(input->params.scale * filter->params.scale)`` divided by
    ``static_cast<double>(output->params.scale)``: the two float scales' product rounded to float,
    the quotient in double. TFLite takes it for
    uint8 CONV_2D, DEPTHWISE_CONV_2D and TRANSPOSE_CONV, for per-tensor FULLY_CONNECTED (TFLite
    2.14) and for BATCH_MATMUL. Otherwise PopulateConvolutionQuantizationParams' per-channel loop:
    ``double(input_scale) * double(filter_scale) / double(output_scale)``, every step in double.
    The two differ by up to half a float ulp, enough to move a 31-bit multiplier by ~100.
    """
    if float_product:
        return float(np.float32(input_scale) * np.float32(filter_scale)) / float(np.float32(output_scale))
    return float(np.float32(input_scale)) * float(np.float32(filter_scale)) / float(np.float32(output_scale))


def shift_ok(shift: int) -> bool:
    return SHIFT_MIN <= shift <= SHIFT_MAX


def activation_range(act: str, scale: float, zero_point: int, dtype: str) -> tuple[int, int]:
    """CalculateActivationRangeQuantized: the fused activation's clamp in the output's quantized domain.

    TFLite quantizes the bounds as ``zero_point + round(f / scale)`` in float.
    """
    qmin, qmax = QRANGE[dtype]

    def q(f: float) -> int:
        return zero_point + tflite_round(float(np.float32(f) / np.float32(scale)))

    if act == "NONE":
        return qmin, qmax
    if act == "RELU":
        return max(qmin, q(0.0)), qmax
    if act == "RELU6":
        return max(qmin, q(0.0)), min(qmax, q(6.0))
    if act == "RELU_N1_TO_1":
        return max(qmin, q(-1.0)), min(qmax, q(1.0))
    raise ValueError(f"unsupported fused activation {act!r}")


# --- softmax (TFLite's quantization_util.cc) -----------------------------------------------------
SOFTMAX_DIFF_INTEGER_BITS = 5  # kScaledDiffIntegerBits of TFLite's 8-bit softmax


def preprocess_softmax_scaling(beta: float, input_scale: float, input_integer_bits: int) -> tuple[int, int]:
    """PreprocessSoftmaxScaling: QuantizeMultiplierGreaterThanOne(min(beta * s * 2**(31 - bits), 2**31 - 1)).

    TFLite CHECK-fails on a real multiplier not above 1: ValueError here."""
    real = min(float(beta) * float(input_scale) * (1 << (31 - input_integer_bits)), (1 << 31) - 1.0)
    if not real > 1.0:
        raise ValueError(f"softmax input multiplier {real:g} is not above 1 (TFLite rejects it)")
    return quantize_multiplier(real)


def calculate_input_radius(
    input_integer_bits: int, input_left_shift: int, total_signed_bits: int = 31
) -> int:
    """CalculateInputRadius: floor of the largest input difference the rescaling keeps in range."""
    max_input_rescaled = (
        1.0
        * ((1 << input_integer_bits) - 1)
        * (1 << (total_signed_bits - input_integer_bits))
        / (1 << input_left_shift)
    )
    return int(math.floor(max_input_rescaled))
