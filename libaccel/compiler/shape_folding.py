"""Shape folding: evaluate the converter's int32 shape subgraphs at compile time.

The TensorFlow converter writes Keras ``Flatten``, squeeze-excite reshapes and a TRANSPOSE_CONV's
output size as a small computation on the *shape* of a tensor::

    SHAPE(x) -> STRIDED_SLICE (the batch) -> PACK([batch, -1]) -> RESHAPE(x, packed)

TFLite runs it on the CPU and marks the RESHAPE's output dynamic (its shape is data). When every
input shape is static, the values are known before anything runs: :func:`fold_shapes` evaluates
SHAPE, STRIDED_SLICE, PACK, GATHER, REDUCE_PROD, CONCATENATION and int32 arithmetic (ADD, SUB, MUL,
FLOOR_DIV, MAXIMUM, MINIMUM) on integer tensors and returns a graph in which their outputs are
constants. A RESHAPE then lowers as the usual alias, and the folded nodes compute nothing on the
device (:func:`libaccel.compiler.ops.plan_node` gives them an empty plan), so the whole pattern stays
inside one NPU partition.

What cannot be folded (a shape fed by activations, an op outside the list) leaves the RESHAPE's
output with a shape known only at run time: :attr:`FoldResult.dynamic` lists those tensors and
every tensor computed from them, and the nodes that touch them stay on the CPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from libaccel.compiler.graph import Graph, OpNode, TensorInfo

INT_TYPES = ("int32", "int64")

#: The ops whose integer outputs :func:`fold_shapes` evaluates.
FOLDABLE = frozenset(
    {
        "SHAPE",
        "STRIDED_SLICE",
        "PACK",
        "GATHER",
        "REDUCE_PROD",
        "CONCATENATION",
        "ADD",
        "SUB",
        "MUL",
        "FLOOR_DIV",
        "MAXIMUM",
        "MINIMUM",
    }
)

# The input that carries the output's shape, per op whose output shape is data.
SHAPE_OPERANDS = {"RESHAPE": 1, "TRANSPOSE_CONV": 0}


class NotFoldable(Exception):
    """This node's value cannot be computed at compile time (the message says why)."""


@dataclass(frozen=True)
class FoldResult:
    """:func:`fold_shapes`' answer."""

    graph: Graph  # the input graph with folded tensors as constants (the input graph is not modified)
    folded: frozenset[int]  # indices of the nodes whose outputs became constants
    dynamic: frozenset[int]  # tensors whose shapes are known only at run time


def is_folded(graph: Graph, node: OpNode) -> bool:
    """Whether ``node`` is a shape computation whose integer outputs are constants (nothing runs)."""
    if node.op not in FOLDABLE or not node.outputs:
        return False
    for t in node.outputs:
        info = graph.tensors.get(t)
        if info is None or info.data is None or info.dtype not in INT_TYPES:
            return False
    return True


# --- evaluation of one node ---------------------------------------------------------------------
def _strided_slice(
    node: OpNode, x: np.ndarray, begin: np.ndarray, end: np.ndarray, strides: np.ndarray
) -> np.ndarray:
    """TFLite's STRIDED_SLICE (``strided_slice_logic.h``) without ellipsis, new axes or ``offset``."""
    if node.option("ellipsis_mask") or node.option("new_axis_mask") or node.option("offset"):
        raise NotFoldable("STRIDED_SLICE with ellipsis_mask, new_axis_mask or offset")
    n = len(begin)
    if not (len(end) == len(strides) == n) or n > x.ndim:
        raise NotFoldable("STRIDED_SLICE operands of mismatched lengths")
    begin_mask, end_mask = int(node.option("begin_mask")), int(node.option("end_mask"))
    shrink = int(node.option("shrink_axis_mask"))
    out = x
    keep: list[int] = []
    for axis in range(x.ndim):
        dim = x.shape[axis]
        if axis >= n:
            keep.append(axis)
            continue
        s = int(strides[axis])
        if s == 0:
            raise NotFoldable("STRIDED_SLICE with stride 0")
        lo, hi = (0, dim) if s > 0 else (-1, dim - 1)

        def clamp(v: int, lo: int = lo, hi: int = hi, dim: int = dim) -> int:
            return min(max(v + dim if v < 0 else v, lo), hi)

        if shrink >> axis & 1:
            b = int(begin[axis])
            b = b + dim if b < 0 else b
            if not 0 <= b < dim:
                raise NotFoldable(f"STRIDED_SLICE shrinks axis {axis} at {int(begin[axis])}, outside {dim}")
            idx = [b]
        else:
            b = (0 if s > 0 else dim - 1) if begin_mask >> axis & 1 else clamp(int(begin[axis]))
            e = (dim if s > 0 else -1) if end_mask >> axis & 1 else clamp(int(end[axis]))
            idx = list(range(b, e, s))
            keep.append(axis)
        out = np.take(out, idx, axis=axis)
    return out.reshape([out.shape[a] for a in keep])


def _axis(value: int, rank: int) -> int:
    axis = value + rank if value < 0 else value
    if not 0 <= axis < rank:
        raise NotFoldable(f"axis {value} outside rank {rank}")
    return axis


_ARITHMETIC: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "ADD": np.add,
    "SUB": np.subtract,
    "MUL": np.multiply,
    "MAXIMUM": np.maximum,
    "MINIMUM": np.minimum,
}


def _floor_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.any(b == 0):
        raise NotFoldable("FLOOR_DIV by zero")
    return np.floor_divide(a, b)


def _evaluate(graph: Graph, node: OpNode, values: dict[int, np.ndarray]) -> np.ndarray:
    """The value of ``node``'s one integer output, or :class:`NotFoldable`."""

    def value(k: int) -> np.ndarray:
        t = node.inputs[k]
        if t < 0 or t not in values:
            raise NotFoldable(f"input {k} of {node.op} is not known at compile time")
        return values[t]

    op = node.op
    if op == "SHAPE":
        x = graph.tensors[node.inputs[0]]
        if any(d < 1 for d in x.shape):
            raise NotFoldable(f"SHAPE of a tensor of unknown shape {list(x.shape)}")
        return np.array(x.shape, dtype=np.int64)
    if op == "STRIDED_SLICE":
        return _strided_slice(node, value(0), value(1), value(2), value(3))
    if op == "PACK":
        parts = [value(k) for k in range(len(node.inputs))]
        return np.stack(parts, axis=_axis(int(node.options.get("axis", 0)), parts[0].ndim + 1))
    if op == "CONCATENATION":
        if node.option("fused_activation_function") != "NONE":
            raise NotFoldable("CONCATENATION with a fused activation")
        parts = [value(k) for k in range(len(node.inputs))]
        return np.concatenate(parts, axis=_axis(int(node.option("axis")), parts[0].ndim))
    if op == "GATHER":
        params, indices = value(0), value(1)
        if int(node.options.get("batch_dims", 0)) != 0:
            raise NotFoldable("GATHER with batch_dims")
        axis = _axis(int(node.options.get("axis", 0)), params.ndim)
        if np.any(indices < 0) or np.any(indices >= params.shape[axis]):
            raise NotFoldable("GATHER index out of range")
        return np.take(params, indices, axis=axis)
    if op == "REDUCE_PROD":
        x, axes = value(0), value(1)
        norm = tuple(sorted({_axis(int(a), x.ndim) for a in np.ravel(axes)}))
        return np.prod(x, axis=norm, keepdims=bool(node.option("keep_dims")))
    if op in _ARITHMETIC or op == "FLOOR_DIV":
        if node.option("fused_activation_function") != "NONE":
            raise NotFoldable(f"{op} with a fused activation")
        fn = _floor_div if op == "FLOOR_DIV" else _ARITHMETIC[op]
        return fn(value(0), value(1))
    raise NotFoldable(f"{op} is not a shape computation")


# --- the pass -------------------------------------------------------------------------------------
def reshape_output_shape(input_shape: tuple[int, ...], requested: Iterable[int]) -> tuple[int, ...]:
    """RESHAPE's output shape from its shape operand (one -1 takes the remaining elements)."""
    dims = [int(d) for d in requested]
    size = int(np.prod(input_shape, dtype=np.int64))
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        raise NotFoldable(f"RESHAPE to {dims}")
    if -1 in dims:
        known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
        if known == 0 or size % known:
            raise NotFoldable(f"RESHAPE of {size} elements to {dims}")
        dims[dims.index(-1)] = size // known
    if int(np.prod(dims, dtype=np.int64)) != size:
        raise NotFoldable(f"RESHAPE of {list(input_shape)} to {dims}")
    return tuple(dims)


def fold_shapes(graph: Graph, dynamic: Iterable[int] = ()) -> FoldResult:
    """Fold ``graph``'s shape computations into constants (see the module docstring).

    ``dynamic``: tensors the runtime already treats as of run-time shape; their shapes are not used
    and everything computed from them is dynamic too.
    """
    tensors = dict(graph.tensors)
    values: dict[int, np.ndarray] = {
        i: t.data for i, t in tensors.items() if t.data is not None and t.dtype in INT_TYPES
    }
    unknown_shape = set(dynamic)
    folded: set[int] = set()

    for node in graph.nodes:
        ins = [t for t in node.inputs if t >= 0]
        if node.op == "SHAPE" and ins and ins[0] in unknown_shape:
            pass  # the shape of a run-time-shaped tensor is itself a run-time value
        elif node.op in FOLDABLE and len(node.outputs) == 1 and tensors[node.outputs[0]].dtype in INT_TYPES:
            if node.op != "SHAPE" and any(t in unknown_shape for t in ins):
                unknown_shape.update(node.outputs)
                continue
            out = node.outputs[0]
            try:
                result = _evaluate(graph, node, values)
            except (NotFoldable, IndexError, ValueError):
                pass
            else:
                data = np.array(result, dtype=tensors[out].dtype)  # an array even for a 0-d result
                data.flags.writeable = False
                values[out] = data
                tensors[out] = dataclasses.replace(tensors[out], shape=tuple(data.shape), data=data)
                folded.add(node.index)
                continue
        operand = SHAPE_OPERANDS.get(node.op)
        if operand is not None and len(node.inputs) > operand and node.inputs[operand] >= 0:
            _set_output_shape(tensors, node, operand, values, unknown_shape)
            continue
        if any(t in unknown_shape for t in ins):
            unknown_shape.update(node.outputs)
    new = Graph(tensors=tensors, nodes=graph.nodes, inputs=graph.inputs, outputs=graph.outputs)
    return FoldResult(graph=new, folded=frozenset(folded), dynamic=frozenset(unknown_shape))


def _set_output_shape(
    tensors: dict[int, TensorInfo],
    node: OpNode,
    operand: int,
    values: dict[int, np.ndarray],
    unknown_shape: set[int],
) -> None:
    """A RESHAPE's or TRANSPOSE_CONV's output shape from its (folded) shape operand, else dynamic."""
    out = node.outputs[0]
    shape_tensor = node.inputs[operand]
    data = values.get(shape_tensor)
    source = node.inputs[0] if node.op == "RESHAPE" else node.inputs[2] if len(node.inputs) > 2 else -1
    if data is None or data.ndim != 1 or source in unknown_shape:
        unknown_shape.add(out)
        return
    try:
        if node.op == "RESHAPE":
            shape = reshape_output_shape(tensors[source].shape, data)
        else:
            shape = tuple(int(d) for d in data)
            if any(d < 1 for d in shape):
                raise NotFoldable(f"output_shape {list(shape)}")
    except NotFoldable:
        unknown_shape.add(out)
        return
    if tensors[out].shape != shape:  # the model's declared shape is a placeholder: the value rules
        tensors[out] = dataclasses.replace(tensors[out], shape=shape)
