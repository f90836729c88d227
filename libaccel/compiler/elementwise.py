"""Binary arithmetic of two 8-bit tensors with broadcasting: ADD, SUB, MUL, with TFLite's rescaling."""

from __future__ import annotations

import numpy as np

from libaccel.compiler import quant as q
from libaccel.compiler.emitter import Emitter
from libaccel.compiler.graph import Graph, OpNode, TensorInfo
from libaccel.compiler.plan_common import (
    OpPlan,
    Planner,
    Unsupported,
    activation,
    broadcast,
    clamp,
    multiplier,
    tensor,
    to4d,
)


def elementwise_operand(graph: Graph, index: int, what: str, dtype: str) -> TensorInfo:
    t = tensor(graph, index, what)
    if t.data is not None:  # constant operands live in the weights region
        if t.dtype != dtype or t.quant is None or not t.quant.per_tensor or len(t.shape) > 4:
            raise Unsupported(f"constant {what} {t.name!r} is not a per-tensor {dtype} of rank <= 4")
        return t
    return activation(graph, index, what, dtype)


def mul_multiplier(s1: float, s2: float, so: float) -> tuple[int, int]:
    """MUL's output multiplier and shift: TFLite's Prepare computes s1 * s2 / so in float."""
    real = float(np.float32(np.float32(s1) * np.float32(s2)) / np.float32(so))
    return multiplier(real, "MUL")


def mul_values(
    node: OpNode, a: TensorInfo, b: TensorInfo, y: TensorInfo, va: np.ndarray, vb: np.ndarray
) -> np.ndarray:
    """What the ISA's MUL stores for input values ``va`` and ``vb`` (arrays of stored 8-bit values):
    ``MultiplyByQuantizedMultiplier((a - zp_a)(b - zp_b), M, s) + zp_y`` (the product wrapping as
    int32), clamped to the node's activation and saturated to the output's type."""
    assert a.quant and b.quant and y.quant
    mo, sho = mul_multiplier(a.quant.scale, b.quant.scale, y.quant.scale)
    act_min, act_max = clamp(node, y)
    prod = (va.astype(np.int64) - a.quant.zero_point) * (vb.astype(np.int64) - b.quant.zero_point)
    prod = (prod + 2**31) % 2**32 - 2**31
    out = q.multiply_by_quantized_multiplier(prod, mo, sho) + y.quant.zero_point
    lo, hi = q.QRANGE[y.dtype]
    return np.clip(np.clip(out, act_min, act_max), lo, hi)


def _plan_elementwise(graph: Graph, node: OpNode) -> OpPlan:
    if len(node.inputs) != 2:
        raise Unsupported(f"{node.op} with {len(node.inputs)} inputs")
    y = activation(graph, node.outputs[0], "output")
    a = elementwise_operand(graph, node.inputs[0], "input1", y.dtype)
    b = elementwise_operand(graph, node.inputs[1], "input2", y.dtype)
    out4 = to4d(y.shape)
    a4, b4 = broadcast(a.shape, out4), broadcast(b.shape, out4)
    if a4 is None or b4 is None:
        raise Unsupported(f"shapes {list(a.shape)} and {list(b.shape)} do not broadcast to {list(y.shape)}")
    assert a.quant and b.quant and y.quant
    act_min, act_max = clamp(node, y)
    s1, s2, so = a.quant.scale, b.quant.scale, y.quant.scale
    if node.op in ("ADD", "SUB"):
        # TFLite's 8-bit ADD/SUB Prepare: both inputs rescaled to twice the larger input scale.
        twice = 2.0 * max(s1, s2)
        try:
            m1, sh1 = q.quantize_multiplier_smaller_than_one_exp(s1 / twice)
            m2, sh2 = q.quantize_multiplier_smaller_than_one_exp(s2 / twice)
            mo, sho = q.quantize_multiplier_smaller_than_one_exp(twice / ((1 << q.ADD_LEFT_SHIFT) * so))
        except ValueError as e:
            raise Unsupported(f"{node.op} rescaling: {e}") from None
        if not all(q.shift_ok(s) for s in (sh1, sh2, sho)):
            raise Unsupported(f"{node.op} shifts outside [-31, 30]")
        fields = dict(
            left_shift=q.ADD_LEFT_SHIFT,
            input1_multiplier=m1,
            input1_shift=sh1,
            input2_multiplier=m2,
            input2_shift=sh2,
            output_multiplier=mo,
            output_shift=sho,
        )
    else:
        mo, sho = mul_multiplier(s1, s2, so)
        fields = dict(output_multiplier=mo, output_shift=sho)

    def emit(em: Emitter) -> None:
        em.op(
            node.op,
            input1=em.tensor(a.index, shape=a4, broadcast_to=out4),
            input2=em.tensor(b.index, shape=b4, broadcast_to=out4),
            output=em.tensor(y.index, shape=out4),
            act_min=act_min,
            act_max=act_max,
            **fields,
        )

    return OpPlan(emit)


PLANNERS: dict[str, Planner] = {"ADD": _plan_elementwise, "SUB": _plan_elementwise, "MUL": _plan_elementwise}
