"""DEQUANTIZE -> float elementwise ops -> QUANTIZE: one LUT from the 8-bit input to the 8-bit output.

The converter leaves a few elementwise ops of an int8 model in float between a DEQUANTIZE and a
QUANTIZE (a LayerNormalization's ``-mean`` is DEQUANTIZE -> NEG -> QUANTIZE). Each float value in
such a chain is a function of the one input byte it came from, so the whole chain is a function
of 256 values: the compiler evaluates TFLite's reference arithmetic for every input byte and the
NPU looks the result up, with no float tensor ever stored.

* DEQUANTIZE (``reference_integer_ops::Dequantize``): ``float(double(s_in) * (x - zp_in))``;
* the float ops of :data:`FLOAT_OPS`, each exact in float32 (a sign change, a comparison);
* QUANTIZE (``reference_ops::AffineQuantize``): ``int32(roundf(v / float(s_out))) + zp_out`` with
  roundf half away from zero, clamped to the output type.

A chain is lowered only whole: every float tensor in it has one reader (the next node of the chain)
and is no graph output, so nothing outside the chain can see a float value. Its QUANTIZE emits the
LUT (reading the DEQUANTIZE's input); the DEQUANTIZE and the float ops are fused (no instruction, no
storage). :func:`chain_nodes` names a chain's nodes, which the delegate keeps in one partition or
all on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from libaccel.compiler import quant as q
from libaccel.compiler.graph import Graph, OpNode
from libaccel.compiler.lookup import lut_plan
from libaccel.compiler.plan_common import BYTE_TYPES, OpPlan, Unsupported, activation

_f32 = np.float32

#: Float elementwise ops of one input whose float32 result TFLite's reference kernels compute exactly.
FLOAT_OPS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "NEG": np.negative,
    "ABS": np.abs,
    "RELU": lambda v: np.maximum(v, _f32(0)),
    "RELU6": lambda v: np.minimum(np.maximum(v, _f32(0)), _f32(6)),
    "RELU_N1_TO_1": lambda v: np.minimum(np.maximum(v, _f32(-1)), _f32(1)),
}


def is_float_node(graph: Graph, node: OpNode) -> bool:
    """Whether ``node`` reads or writes a float32 tensor (so it can only run inside a chain)."""
    return any(t >= 0 and graph.tensors[t].dtype == "float32" for t in (*node.inputs, *node.outputs))


def _readers(graph: Graph, t: int) -> list[OpNode]:
    return [n for n in graph.nodes if t in n.inputs]


def _producer(graph: Graph, t: int) -> OpNode | None:
    for n in graph.nodes:
        if t in n.outputs:
            return n
    return None


def _private_float(graph: Graph, t: int) -> OpNode:
    """The one reader of float tensor ``t``, which no graph output may be."""
    info = graph.tensors[t]
    if info.dtype != "float32":
        raise Unsupported(f"tensor {info.name!r} is {info.dtype}, not float32")
    if t in graph.outputs:
        raise Unsupported(f"float tensor {info.name!r} is a graph output")
    readers = _readers(graph, t)
    if len(readers) != 1:
        raise Unsupported(f"float tensor {info.name!r} has {len(readers)} readers")
    return readers[0]


def _is_middle(graph: Graph, node: OpNode) -> bool:
    return (
        node.op in FLOAT_OPS
        and len(node.inputs) == 1
        and len(node.outputs) == 1
        and graph.tensors[node.inputs[0]].dtype == "float32"
        and graph.tensors[node.outputs[0]].dtype == "float32"
    )


def chain_nodes(graph: Graph, node: OpNode) -> list[OpNode]:
    """The DEQUANTIZE -> float ops -> QUANTIZE chain ``node`` belongs to, in order; Unsupported with
    the reason where there is none."""
    start = node
    for _ in range(len(graph.nodes)):
        if start.op == "DEQUANTIZE":
            break
        if not _is_middle(graph, start) and start.op != "QUANTIZE":
            raise Unsupported(f"{start.op} on float tensors is not part of a DEQUANTIZE -> QUANTIZE chain")
        if len(start.inputs) != 1:
            raise Unsupported(f"{start.op} with {len(start.inputs)} inputs")
        producer = _producer(graph, start.inputs[0])
        if producer is None or graph.tensors[start.inputs[0]].dtype != "float32":
            raise Unsupported(f"{start.op}'s float input comes from no DEQUANTIZE of an 8-bit tensor")
        start = producer
    if len(start.inputs) != 1 or len(start.outputs) != 1:
        raise Unsupported("DEQUANTIZE with other than one input and one output")
    chain = [start]
    current = start
    while True:
        reader = _private_float(graph, current.outputs[0])
        chain.append(reader)
        if reader.op == "QUANTIZE":
            break
        if not _is_middle(graph, reader):
            raise Unsupported(f"float value read by {reader.op}, which is no elementwise op of the chain")
        current = reader
    if all(n.index != node.index for n in chain):
        raise Unsupported("not part of a DEQUANTIZE -> QUANTIZE chain")
    return chain


def _round_half_away(v: np.ndarray) -> np.ndarray:
    """roundf in float32: the integer part plus one step away from zero where the fraction is >= 0.5
    (adding 0.5 first would round 0.49999997 up)."""
    whole = np.trunc(v)
    frac = v - whole  # exact in float32
    return whole + np.where(np.abs(frac) >= _f32(0.5), np.sign(v), _f32(0))


def chain_table(graph: Graph, chain: list[OpNode]) -> np.ndarray:
    """The chain's output for each of the 256 input bytes (table order: value + 128 for int8)."""
    x = graph.tensors[chain[0].inputs[0]]
    y = graph.tensors[chain[-1].outputs[0]]
    assert x.quant and y.quant
    lo, hi = q.QRANGE[x.dtype]
    v = np.arange(lo, hi + 1, dtype=np.int64)
    # Dequantize: the product in double (DequantizationParams.scale is a double), then float.
    f = (np.float64(_f32(x.quant.scale)) * (v - x.quant.zero_point)).astype(_f32)
    for n in chain[1:-1]:
        f = FLOAT_OPS[n.op](f).astype(_f32)
    scaled = (f / _f32(y.quant.scale)).astype(_f32)
    rounded = _round_half_away(scaled)
    big = float(2**30)
    out = np.clip(rounded.astype(np.float64), -big, big).astype(np.int64) + y.quant.zero_point
    olo, ohi = q.QRANGE[y.dtype]
    return np.clip(out, olo, ohi)


def plan_float_chain(graph: Graph, node: OpNode) -> OpPlan:
    """A node of a DEQUANTIZE -> float ops -> QUANTIZE chain: the QUANTIZE emits the chain's LUT,
    every other node is fused into it."""
    chain = chain_nodes(graph, node)
    x = activation(graph, chain[0].inputs[0], "DEQUANTIZE input")
    y = activation(graph, chain[-1].outputs[0], "QUANTIZE output")
    if x.dtype not in BYTE_TYPES or y.dtype not in BYTE_TYPES:
        raise Unsupported(f"chain from {x.dtype} to {y.dtype}")
    shapes = {graph.tensors[t].shape for n in chain for t in (*n.inputs, *n.outputs)}
    if len(shapes) != 1:
        raise Unsupported(f"the chain's tensors have shapes {sorted(shapes)}")
    if node.index != chain[-1].index:
        return OpPlan(fused=True)
    return lut_plan(x, y, chain_table(graph, chain), reads=(x.index,))
