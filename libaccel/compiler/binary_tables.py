"""MAXIMUM, MINIMUM, PRELU and SQUARED_DIFFERENCE of 8-bit tensors: one LUT2 (a table of every pair
of input bytes).

The output of each is a function of the two stored input values alone, so TFLite's reference
arithmetic is evaluated at compile time for all 65536 pairs and the instruction looks it up, with
the operands broadcast by zero strides as for ADD:

* MAXIMUM, MINIMUM (``reference_ops::MaximumMinimumBroadcastSlow``): the larger / smaller stored
  value, no requantization (TFLite compares the stored values whatever the quantizations are);
* PRELU (``reference_ops::BroadcastPrelu4DSlow``, int8 and uint8): with ``v = x - zp_x``,
  ``MultiplyByQuantizedMultiplier(v, M1, s1)`` for ``v >= 0`` and
  ``MultiplyByQuantizedMultiplier(v * (alpha - zp_alpha), M2, s2)`` otherwise, plus the output zero
  point, saturated; ``M1, s1`` from ``s_x / s_out`` and ``M2, s2`` from ``s_x * s_alpha / s_out``, both
  computed in float as PreluPrepare does. Any alpha shape that broadcasts (per channel, per position,
  one value) is the same table;
* SQUARED_DIFFERENCE (int8, squared_difference.cc): both inputs shifted left 7 and rescaled to
  twice the larger input scale (QuantizeMultiplierSmallerThanOneExp, as ADD), the difference
  squared in int32, then rescaled by ``(2 max(s1, s2))^2 / (2^14 s_out)`` and the output zero point
  added, clamped to int8.
"""

from __future__ import annotations

import numpy as np

from libaccel.compiler import quant as q
from libaccel.compiler.elementwise import elementwise_operand
from libaccel.compiler.emitter import Emitter
from libaccel.compiler.graph import Graph, OpNode, TensorInfo
from libaccel.compiler.plan_common import (
    OpPlan,
    Planner,
    Unsupported,
    activation,
    broadcast,
    multiplier,
    to4d,
)

_NP = {"int8": np.int8, "uint8": np.uint8}


def byte_values(dtype: str) -> np.ndarray:
    """The value of each table index j: j - 128 for int8, j for uint8."""
    return np.arange(256) + q.QRANGE[dtype][0]


def max_min_table(op: str, dtype: str) -> np.ndarray:
    v = byte_values(dtype)
    fn = np.maximum if op == "MAXIMUM" else np.minimum
    return fn(v[:, None], v[None, :])


def prelu_table(x: TensorInfo, alpha: TensorInfo, y: TensorInfo, what: str = "PRELU") -> np.ndarray:
    """[256, 256] of TFLite's PRELU output for (input byte, alpha byte); rows of alpha values the
    constant alpha does not hold are left 0 (never read)."""
    assert x.quant and alpha.quant and y.quant
    f32 = np.float32
    m1, s1 = multiplier(float(f32(x.quant.scale) / f32(y.quant.scale)), what)
    m2, s2 = multiplier(float(f32(f32(x.quant.scale) * f32(alpha.quant.scale)) / f32(y.quant.scale)), what)
    lo, hi = q.QRANGE[y.dtype]
    xs = byte_values(x.dtype)
    alphas = byte_values(alpha.dtype)
    used = range(256)
    if alpha.data is not None:
        used = sorted({int(a) - int(alphas[0]) for a in np.asarray(alpha.data).reshape(-1)})
    zx, za, zy = x.quant.zero_point, alpha.quant.zero_point, y.quant.zero_point
    table = np.zeros((256, 256), dtype=np.int64)
    cols = np.asarray(list(used), dtype=np.int64)
    alpha_d = alphas.astype(np.int64)[cols] - za
    for i, xv in enumerate(xs):
        v = int(xv) - zx
        if v >= 0:
            table[i, :] = q.multiply_by_quantized_multiplier(v, m1, s1) + zy
        else:
            table[i, cols] = q.multiply_by_quantized_multiplier(v * alpha_d, m2, s2) + zy
    return np.clip(table, lo, hi)


SQUARED_DIFFERENCE_LEFT_SHIFT = 7


def squared_difference_table(a: TensorInfo, b: TensorInfo, y: TensorInfo) -> np.ndarray:
    """[256, 256] of TFLite's int8 SQUARED_DIFFERENCE for (input1 byte, input2 byte)."""
    assert a.quant and b.quant and y.quant
    s1, s2, so = a.quant.scale, b.quant.scale, y.quant.scale
    twice = 2.0 * float(max(np.float32(s1), np.float32(s2)))
    shift = SQUARED_DIFFERENCE_LEFT_SHIFT
    try:
        m1, sh1 = q.quantize_multiplier_smaller_than_one_exp(float(s1) / twice)
        m2, sh2 = q.quantize_multiplier_smaller_than_one_exp(float(s2) / twice)
        mo, sho = q.quantize_multiplier_smaller_than_one_exp(
            (twice * twice) / float(np.float32((1 << 2 * shift) * np.float32(so)))
        )
    except ValueError as e:
        raise Unsupported(f"SQUARED_DIFFERENCE rescaling: {e}") from None
    if not all(q.shift_ok(s) for s in (sh1, sh2, sho)):
        raise Unsupported("SQUARED_DIFFERENCE shifts outside [-31, 30]")
    v = byte_values("int8").astype(np.int64)
    # MultiplyByQuantizedMultiplierSmallerThanOneExp is MBQM with a shift <= 0.
    x1 = q.multiply_by_quantized_multiplier((v - a.quant.zero_point) << shift, m1, sh1)
    x2 = q.multiply_by_quantized_multiplier((v - b.quant.zero_point) << shift, m2, sh2)
    diff = x1[:, None] - x2[None, :]
    out = q.multiply_by_quantized_multiplier(diff * diff, mo, sho) + y.quant.zero_point
    return np.clip(out, -128, 127)


def plan_binary_table(graph: Graph, node: OpNode) -> OpPlan:
    if len(node.inputs) != 2:
        raise Unsupported(f"{node.op} with {len(node.inputs)} inputs")
    if node.op == "PRELU":
        x = activation(graph, node.inputs[0], "input")
        y = activation(graph, node.outputs[0], "output", x.dtype)
        b = elementwise_operand(graph, node.inputs[1], "alpha", x.dtype)
        a = x
        if x.shape != y.shape:
            raise Unsupported(f"input {list(x.shape)} and output {list(y.shape)} differ")
        table = prelu_table(x, b, y)
    elif node.op == "SQUARED_DIFFERENCE":
        a = elementwise_operand(graph, node.inputs[0], "input1", "int8")
        b = elementwise_operand(graph, node.inputs[1], "input2", "int8")
        y = activation(graph, node.outputs[0], "output", "int8")
        table = squared_difference_table(a, b, y)
    else:
        y = activation(graph, node.outputs[0], "output")
        a = elementwise_operand(graph, node.inputs[0], "input1", y.dtype)
        b = elementwise_operand(graph, node.inputs[1], "input2", y.dtype)
        table = max_min_table(node.op, y.dtype)
    out4 = to4d(y.shape)
    a4, b4 = broadcast(a.shape, out4), broadcast(b.shape, out4)
    if a4 is None or b4 is None:
        raise Unsupported(f"shapes {list(a.shape)} and {list(b.shape)} do not broadcast to {list(y.shape)}")
    data = table.astype(_NP[y.dtype]).reshape(1, 1, 256, 256)

    def emit(em: Emitter) -> None:
        em.op(
            "LUT2",
            input1=em.tensor(a.index, shape=a4, broadcast_to=out4),
            input2=em.tensor(b.index, shape=b4, broadcast_to=out4),
            table=em.const(data, y.dtype),
            output=em.tensor(y.index, shape=out4),
        )

    return OpPlan(emit)


PLANNERS: dict[str, Planner] = {
    "MAXIMUM": plan_binary_table,
    "MINIMUM": plan_binary_table,
    "PRELU": plan_binary_table,
    "SQUARED_DIFFERENCE": plan_binary_table,
}
