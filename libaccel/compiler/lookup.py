"""LOOKUP and LOOKUP2: an 8-bit function of one or two 8-bit tensors, given as its table.

A front end whose reference runtime computes an elementwise op as a function of the stored input
bytes alone hands the compiler that function's table: ``LOOKUP(x, table[256])`` and
``LOOKUP2(a, b, table[256, 256])`` (row: a's byte, column: b's byte; index j = value + 128 for
int8, the value for uint8, as the ISA's LUT and LUT2 read it). They lower to one LUT / LUT2; LOOKUP2's
operands broadcast by zero strides as ADD's do. The ONNX front end builds the tables of QLinearAdd,
QLinearMul, QLinearSigmoid, QLinearLeakyRelu and QLinearConcat's rescaling by running onnxruntime's
own kernel on every input byte (pair) (:mod:`libaccel.compiler.onnx_frontend`).
"""

from __future__ import annotations

import numpy as np

from libaccel.compiler.emitter import Emitter
from libaccel.compiler.graph import Graph, OpNode, TensorInfo
from libaccel.compiler.plan_common import OpPlan, Planner, Unsupported, activation, broadcast, const, to4d


def _table(graph: Graph, node: OpNode, index: int, size: int, dtype: str) -> np.ndarray:
    t = const(graph, index, "table")
    if t.dtype != dtype or t.size != size:
        raise Unsupported(f"table is {t.dtype} x {t.size}, expected {dtype} x {size}")
    assert t.data is not None
    return np.asarray(t.data).reshape(-1)


def lut_plan(x: TensorInfo, y: TensorInfo, table: np.ndarray, reads: tuple[int, ...] = ()) -> OpPlan:
    """One LUT from ``x`` to ``y`` (same shape) with the 256 values of ``table`` in ``y``'s type."""
    data = table.astype(np.int8 if y.dtype == "int8" else np.uint8).reshape(1, 1, 1, 256)
    shape4 = to4d(x.shape)

    def emit(em: Emitter) -> None:
        em.op(
            "LUT",
            input=em.tensor(x.index, shape=shape4),
            table=em.const(data, y.dtype),
            output=em.tensor(y.index, shape=shape4),
        )

    return OpPlan(emit, reads=reads)


def plan_lookup(graph: Graph, node: OpNode) -> OpPlan:
    if len(node.inputs) != 2:
        raise Unsupported(f"LOOKUP with {len(node.inputs)} inputs (input, table)")
    x = activation(graph, node.inputs[0], "input")
    y = activation(graph, node.outputs[0], "output")
    if x.shape != y.shape:
        raise Unsupported(f"input {list(x.shape)} and output {list(y.shape)} differ")
    return lut_plan(x, y, _table(graph, node, node.inputs[1], 256, y.dtype))


def plan_lookup2(graph: Graph, node: OpNode) -> OpPlan:
    if len(node.inputs) != 3:
        raise Unsupported(f"LOOKUP2 with {len(node.inputs)} inputs (input1, input2, table)")
    y = activation(graph, node.outputs[0], "output")
    a = activation(graph, node.inputs[0], "input1")
    b = activation(graph, node.inputs[1], "input2")
    table = _table(graph, node, node.inputs[2], 65536, y.dtype)
    out4 = to4d(y.shape)
    a4, b4 = broadcast(a.shape, out4), broadcast(b.shape, out4)
    if a4 is None or b4 is None:
        raise Unsupported(f"shapes {list(a.shape)} and {list(b.shape)} do not broadcast to {list(y.shape)}")

    def emit(em: Emitter) -> None:
        em.op(
            "LUT2",
            input1=em.tensor(a.index, shape=a4, broadcast_to=out4),
            input2=em.tensor(b.index, shape=b4, broadcast_to=out4),
            table=em.const(table.reshape(1, 1, 256, 256), y.dtype),
            output=em.tensor(y.index, shape=out4),
        )

    return OpPlan(emit)


PLANNERS: dict[str, Planner] = {"LOOKUP": plan_lookup, "LOOKUP2": plan_lookup2}
