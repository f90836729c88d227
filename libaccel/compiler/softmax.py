"""SOFTMAX of 8-bit tensors along the last axis: one SOFTMAX instruction.

TFLite's reference 8-bit softmax (``reference_ops::Softmax``, selected by BUILTIN_REF) is gemmlowp
fixed point; its Prepare folds beta and the input scale into ``input_multiplier`` and
``input_left_shift`` (``PreprocessSoftmaxScaling`` with 5 integer bits) and ``diff_min``
(``CalculateInputRadius``). The instruction takes those three numbers and does the rest
(docs/isa.md). TFLite requires the output scale 1/256 with zero point -128 (int8) or 0 (uint8).
"""

from __future__ import annotations

import math

from libaccel.compiler import quant as q
from libaccel.compiler.emitter import Emitter
from libaccel.compiler.graph import Graph, OpNode
from libaccel.compiler.plan_common import OpPlan, Planner, Unsupported, activation

# A longer row can make the final rounding shift exceed 31, where TFLite's arithmetic is undefined.
MAX_SOFTMAX_DEPTH = 511


def plan_softmax(graph: Graph, node: OpNode) -> OpPlan:
    x = activation(graph, node.inputs[0], "input")
    y = activation(graph, node.outputs[0], "output", x.dtype)
    assert x.quant and y.quant
    if x.shape != y.shape or not x.shape:
        raise Unsupported(f"input {list(x.shape)} and output {list(y.shape)} differ")
    beta = node.options.get("beta")
    if beta is None:  # the schema's default (0) would be wrong: the model must say
        raise Unsupported("SOFTMAX without its beta option")
    lowest = q.QRANGE[y.dtype][0]
    if y.quant.scale != 1.0 / 256 or y.quant.zero_point != lowest:
        raise Unsupported(
            f"output quantized ({y.quant.scale:g}, {y.quant.zero_point}), not TFLite's (1/256, {lowest})"
        )
    depth = x.shape[-1]
    if depth > MAX_SOFTMAX_DEPTH:
        raise Unsupported(
            f"rows of {depth} values (more than {MAX_SOFTMAX_DEPTH}: TFLite's final shift is undefined)"
        )
    # TfLiteSoftmaxParams.beta is a float, the input scale a float; PreprocessSoftmaxScaling takes doubles.
    try:
        m, shift = q.preprocess_softmax_scaling(float(beta), x.quant.scale, q.SOFTMAX_DIFF_INTEGER_BITS)
    except ValueError as e:
        raise Unsupported(str(e)) from None
    if not 0 <= shift <= q.SHIFT_MAX:
        raise Unsupported(f"softmax input shift {shift} outside [0, {q.SHIFT_MAX}]")
    diff_min = -q.calculate_input_radius(q.SOFTMAX_DIFF_INTEGER_BITS, shift)
    rows = math.prod(x.shape) // depth
    view = (1, 1, rows, depth)

    def emit(em: Emitter) -> None:
        em.op(
            "SOFTMAX",
            input=em.tensor(x.index, shape=view),
            output=em.tensor(y.index, shape=view),
            input_multiplier=m,
            input_left_shift=shift,
            diff_min=diff_min,
        )

    return OpPlan(emit)


PLANNERS: dict[str, Planner] = {"SOFTMAX": plan_softmax}
