"""Activations and requantizations of one 8-bit input as 256-entry lookup tables: one LUT instruction
with the table of TFLite's reference kernel (RELU, RELU6, RELU_N1_TO_1, RELU_0_TO_1, LOGISTIC, TANH,
HARD_SWISH, LEAKY_RELU, GELU, QUANTIZE, int8 EXP, LOG, RSQRT, NEG and ABS), and the float ops of a
DEQUANTIZE -> QUANTIZE chain (:mod:`.float_chain`), whose QUANTIZE is one LUT too.
"""

from __future__ import annotations

import numpy as np

from libaccel.compiler import float_chain, tables
from libaccel.compiler import quant as q
from libaccel.compiler.graph import Graph, OpNode, TensorInfo
from libaccel.compiler.lookup import lut_plan
from libaccel.compiler.plan_common import (
    OpPlan,
    Planner,
    Unsupported,
    activation,
    multiplier,
)


def _relu_table(node: OpNode, x: TensorInfo, y: TensorInfo) -> np.ndarray:
    """TFLite's quantized ReluX (activations.cc): requantize then clamp, as a 256-entry table."""
    assert x.quant and y.quant
    # ReluPrepare: input_scale / output_scale in float, then QuantizeMultiplier.
    real = float(np.float32(x.quant.scale) / np.float32(y.quant.scale))
    m, shift = multiplier(real, node.op)
    lo, hi = q.QRANGE[y.dtype]
    zo = y.quant.zero_point

    def bound(f: float) -> int:
        return zo + q.tflite_round(float(np.float32(f) / np.float32(y.quant.scale)))

    bounds = {
        "RELU": (0.0, None),
        "RELU6": (0.0, 6.0),
        "RELU_N1_TO_1": (-1.0, 1.0),
        "RELU_0_TO_1": (0.0, 1.0),
    }
    low, high = bounds[node.op]
    act_min = max(lo, bound(low))
    act_max = hi if high is None else min(hi, bound(high))
    base = -128 if x.dtype == "int8" else 0
    zi = x.quant.zero_point
    vals = q.multiply_by_quantized_multiplier(np.arange(base, base + 256, dtype=np.int64) - zi, m, shift) + zo
    return np.clip(vals, act_min, act_max)


def lut_table(node: OpNode, x: TensorInfo, y: TensorInfo) -> np.ndarray:
    """The 256-entry table of TFLite's reference kernel for ``node`` (see :mod:`.tables`)."""
    assert x.quant and y.quant
    args = (x.quant.scale, x.quant.zero_point, y.quant.scale, y.quant.zero_point)
    if node.op in ("RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1"):
        return _relu_table(node, x, y)
    if node.op == "LOGISTIC":
        return tables.logistic_table(*args, x.dtype)
    if node.op == "TANH":
        return tables.tanh_table(*args, x.dtype)
    if node.op == "HARD_SWISH":
        try:
            return tables.hard_swish_table(*args, x.dtype)
        except ValueError as e:
            raise Unsupported(str(e)) from None
    if node.op == "LEAKY_RELU":
        alpha = node.options.get("alpha")
        if alpha is None:  # no schema default would be right: the slope must come from the model
            raise Unsupported("LEAKY_RELU without its alpha option")
        return tables.leaky_relu_table(*args, float(alpha), x.dtype)
    if node.op == "QUANTIZE":
        real = float(x.quant.scale) / float(y.quant.scale)
        multiplier(real, "QUANTIZE")  # the same shift limits as every requantization
        return tables.requantize_table(*args, x.dtype, y.dtype)
    if node.op == "NEG":
        if x.dtype != "int8":
            raise Unsupported(f"{x.dtype} NEG: TFLite negates int8 only")
        # neg.cc negates the stored value, whatever the quantization, in int8 (-(-128) wraps to -128).
        return (-np.arange(-128, 128) + 128) % 256 - 128
    if node.op == "EXP":
        if x.dtype != "int8":
            raise Unsupported(f"{x.dtype} EXP: TFLite quantizes EXP for int8 only")
        return tables.exp_table(*args, x.dtype)
    if node.op == "LOG":
        if x.dtype != "int8":
            raise Unsupported(f"{x.dtype} LOG: TFLite quantizes LOG for int8 only")
        return tables.log_table(*args, x.dtype)
    if node.op == "GELU":
        return tables.gelu_table(*args, x.dtype, bool(node.option("approximate")))
    if node.op == "ABS":
        if x.dtype != "int8":
            raise Unsupported(f"{x.dtype} ABS: TFLite quantizes ABS for int8 only")
        if tables.abs_needs_rescale(x.quant.scale, y.quant.scale):
            multiplier(float(np.float32(x.quant.scale) / np.float32(y.quant.scale)), "ABS")  # shift limits
        return tables.abs_table(*args, x.dtype)
    if node.op == "RSQRT":
        if x.dtype != "int8":
            raise Unsupported(f"{x.dtype} RSQRT: TFLite quantizes RSQRT for int8 only")
        try:
            return tables.rsqrt_table(*args)
        except ValueError as e:
            raise Unsupported(str(e)) from None
    raise Unsupported(f"{node.op} has no lookup table")


def _plan_lut(graph: Graph, node: OpNode) -> OpPlan:
    """Any elementwise op of one 8-bit input: one LUT instruction with TFLite's table."""
    if float_chain.is_float_node(graph, node):
        # The NPU computes no float: a float value can only live inside a DEQUANTIZE -> float ops ->
        # QUANTIZE chain, which runs as one table; float edges of a model stay on the CPU.
        try:
            return float_chain.plan_float_chain(graph, node)
        except Unsupported as e:
            dtypes = " -> ".join(graph.tensors[t].dtype for t in (node.inputs[0], node.outputs[0]))
            raise Unsupported(
                f"{node.op} {dtypes} on float values; the NPU has no float arithmetic and runs them only "
                f"inside a DEQUANTIZE -> QUANTIZE chain ({e})"
            ) from None
    x = activation(graph, node.inputs[0], "input")
    y = activation(graph, node.outputs[0], "output", None if node.op == "QUANTIZE" else x.dtype)
    if x.shape != y.shape:
        raise Unsupported(f"input {list(x.shape)} and output {list(y.shape)} differ")
    return lut_plan(x, y, lut_table(node, x, y))


PLANNERS: dict[str, Planner] = {
    op: _plan_lut
    for op in (
        "RELU",
        "RELU6",
        "RELU_N1_TO_1",
        "RELU_0_TO_1",
        "LOGISTIC",
        "TANH",
        "HARD_SWISH",
        "LEAKY_RELU",
        "QUANTIZE",
        "DEQUANTIZE",
        "RSQRT",
        "NEG",
        "ABS",
        "GELU",
        "EXP",
        "LOG",
    )
}
