"""The NPU's arithmetic: bit-exact with TFLite's int8/uint8 *reference* kernels.

Three modules, along the seams of the computation:

* :mod:`.primitives`: requantization (the fixed-point primitives are the ISA's,
  ``uapi.fixed_point``, re-exported), zero-point and clamp checks, the exact
  integer GEMM, window geometry;
* :mod:`.ops`: every operation's general path (CONV2D ... SOFTMAX, ARG_MAX),
  pure and vectorized, the readable reference of the device's behaviour;
* :mod:`.planned`: the fast path for 8-bit outputs (a layer's constants
  prepared once, byte-identical to the general path).

Callers use this package's names (``from device_model import numerics as nm``).
Knobs a test changes (``REQUANT_BLOCK_BYTES``, ``DEPTHWISE_EINSUM_CHANNELS``)
are read from :mod:`.planned`, so set them there.
"""

from .ops import (
    BYTE_TABLES,
    SOFTMAX_ACCUM_INTEGER_BITS,
    SOFTMAX_DIFF_INTEGER_BITS,
    add,
    arg_max,
    avg_pool,
    conv2d,
    depthwise_conv2d,
    exp_on_negative_values,
    fully_connected,
    lut,
    lut2,
    max_pool,
    mul,
    one_over_one_plus_x_for_x_in_0_1,
    resize_bilinear,
    saturating_left_shift,
    softmax,
)
from .planned import (
    DEPTHWISE_EINSUM_CHANNELS,
    KEEP_F32_WEIGHTS,
    REQUANT_BLOCK_BYTES,
    DepthwisePlan,
    FloatRequantPlan,
    GemmPlan,
    RequantPlan,
    plan_depthwise,
    plan_gemm,
    plan_requant,
    run_conv2d_plan,
    run_depthwise_plan,
    run_fc_plan,
)
from .primitives import (
    INT32_MAX,
    INT32_MIN,
    SHIFT_MAX,
    SHIFT_MIN,
    ZERO_POINT_LIMIT,
    ArrayLike,
    check_clamp,
    check_shift,
    check_zero_points,
    int_matmul,
    multiply_by_quantized_multiplier,
    multiply_by_quantized_multiplier_single_round,
    requantize,
    requantize_channels,
    requantize_float_scale,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
    wrap_int32,
)

__all__ = [
    "ArrayLike",
    "BYTE_TABLES",
    "DEPTHWISE_EINSUM_CHANNELS",
    "DepthwisePlan",
    "FloatRequantPlan",
    "GemmPlan",
    "INT32_MAX",
    "INT32_MIN",
    "KEEP_F32_WEIGHTS",
    "REQUANT_BLOCK_BYTES",
    "RequantPlan",
    "SHIFT_MAX",
    "SHIFT_MIN",
    "SOFTMAX_ACCUM_INTEGER_BITS",
    "SOFTMAX_DIFF_INTEGER_BITS",
    "ZERO_POINT_LIMIT",
    "add",
    "arg_max",
    "avg_pool",
    "check_clamp",
    "check_shift",
    "check_zero_points",
    "conv2d",
    "depthwise_conv2d",
    "exp_on_negative_values",
    "fully_connected",
    "int_matmul",
    "lut",
    "lut2",
    "max_pool",
    "mul",
    "multiply_by_quantized_multiplier",
    "multiply_by_quantized_multiplier_single_round",
    "one_over_one_plus_x_for_x_in_0_1",
    "plan_depthwise",
    "plan_gemm",
    "plan_requant",
    "requantize",
    "requantize_channels",
    "requantize_float_scale",
    "resize_bilinear",
    "rounding_divide_by_pot",
    "run_conv2d_plan",
    "run_depthwise_plan",
    "run_fc_plan",
    "saturating_left_shift",
    "saturating_rounding_doubling_high_mul",
    "softmax",
    "wrap_int32",
]
