"""Shape folding: evaluate the converter's int32 shape subgraphs at compile time.

The TensorFlow converter writes Keras ``Flatten``, squeeze-excite reshapes and a TRANSPOSE_CONV's
output size as a small computation on the *shape* of a tensor::

    SHAPE(x) -> STRIDED_SLICE (the batch) -> PACK([batch, -1]) -> RESHAPE(x, packed)

TFLite runs it on the CPU and marks the RESHAPE's output dynamic (its shape is data). When every
input shape is static, the values are known before anything runs: :func:`fold_shapes` evaluates
SHAPE, STRIDED_SLICE, PACK, GATHER, REDUCE_PROD, CONCATENATION and int32 arithmetic (ADD, SUB, MUL,
FLOOR_DIV, MAXIMUM, MINIMUM) on integer tensors and returns a graph in which their outputs are
constants. A RESHAPE then lowers as the usual alias, and the folded nodes compute nothing on the
device (:func:`libaccel.compiler.registry.plan_node` gives them an empty plan), so the whole pattern stays
inside one NPU partition.

What cannot be folded (a shape fed by activations, an op outside the list) leaves the RESHAPE's
output with a shape known only at run time: :attr:`FoldResult.dynamic` lists those tensors and
every tensor computed from them, and the nodes that touch them stay on the CPU.

The pass also infers every output shape it has a rule for (:func:`infer_shapes`: convolutions,
pools, elementwise ops, SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND, ...), from the input shapes and the
constant operands, as TFLite's kernels compute them at their prepare. The converter stores
placeholders for some outputs (SPACE_TO_BATCH_ND's batch is ``N * prod(block)`` at run time, but the
model says N): the inferred shape replaces the stored one. A rule that cannot give a shape (an
operand known only at run time) leaves the outputs dynamic; an op without a rule keeps its stored
shape only while all its inputs keep theirs, and below a corrected shape its outputs are dynamic.
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


def _evaluate(tensors: dict[int, TensorInfo], node: OpNode, values: dict[int, np.ndarray]) -> np.ndarray:
    """The value of ``node``'s one integer output, or :class:`NotFoldable`."""

    def value(k: int) -> np.ndarray:
        t = node.inputs[k]
        if t < 0 or t not in values:
            raise NotFoldable(f"input {k} of {node.op} is not known at compile time")
        return values[t]

    op = node.op
    if op == "SHAPE":
        x = tensors[node.inputs[0]]
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


# --- shape inference ---------------------------------------------------------------------------------
Shape = tuple[int, ...]

#: Ops whose output has their first input's shape.
SAME_SHAPE = frozenset(
    {
        "RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LOGISTIC", "TANH", "HARD_SWISH", "LEAKY_RELU",
        "QUANTIZE", "DEQUANTIZE", "SOFTMAX", "LOG_SOFTMAX", "NEG", "ABS", "RSQRT", "SQRT", "EXP",
        "LOG", "ELU", "GELU", "FLOOR", "CEIL", "ROUND", "SIN", "COS", "SQUARE", "CAST",
        "L2_NORMALIZATION", "LOCAL_RESPONSE_NORMALIZATION",
    }
)  # fmt: skip
#: Ops whose output is their two inputs' broadcast shape.
BROADCAST = frozenset(
    {
        "ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "FLOOR_DIV",
        "FLOOR_MOD", "POW", "PRELU", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL",
        "NOT_EQUAL",
    }
)  # fmt: skip
REDUCTIONS = frozenset({"MEAN", "SUM", "REDUCE_PROD"})  # the ones whose keep_dims the graph carries


def _window_out(padding: str, size: int, k: int, stride: int, dilation: int) -> int:
    """TFLite's ComputeOutSize (kernels/padding.h)."""
    if stride < 1 or dilation < 1 or k < 1:
        raise NotFoldable(f"stride {stride}, dilation {dilation} or window {k} below 1")
    eff = (k - 1) * dilation + 1
    if padding == "SAME":
        out = (size + stride - 1) // stride
    elif padding == "VALID":
        out = (size + stride - eff) // stride
    else:
        raise NotFoldable(f"padding {padding!r}")
    if out < 1:
        raise NotFoldable(f"window {k} (dilation {dilation}) over {size} leaves no output")
    return out


def _block_and_pads(
    node: OpNode, values: dict[int, np.ndarray], rank: int
) -> tuple[list[int], list[list[int]]]:
    """SPACE_TO_BATCH_ND's / BATCH_TO_SPACE_ND's constant block_shape and paddings / crops."""
    if len(node.inputs) != 3 or any(t not in values for t in node.inputs[1:]):
        raise NotFoldable(f"{node.op} with block_shape or {'crops' if 'BATCH_TO' in node.op else 'paddings'} "
                          "known only at run time")  # fmt: skip
    block = [int(b) for b in np.ravel(values[node.inputs[1]])]
    pads = np.asarray(values[node.inputs[2]]).reshape(-1, 2).tolist()
    if rank not in (3, 4) or len(block) != rank - 2 or len(pads) != len(block):
        raise NotFoldable(f"{node.op} of rank {rank} with block_shape {block}")
    if min(block) < 1 or min(min(p) for p in pads) < 0:
        raise NotFoldable(f"{node.op} with block_shape {block} and {pads}")
    return block, pads


def _space_to_batch(shape: Shape, block: list[int], pads: list[list[int]]) -> Shape:
    spatial = []
    for size, b, (before, after) in zip(shape[1:], block, pads, strict=False):
        if (size + before + after) % b:
            raise NotFoldable(f"padded size {size + before + after} is not a multiple of the block {b}")
        spatial.append((size + before + after) // b)
    return (shape[0] * int(np.prod(block)), *spatial, *shape[1 + len(block) :])


def _batch_to_space(shape: Shape, block: list[int], crops: list[list[int]]) -> Shape:
    count = int(np.prod(block))
    if shape[0] % count:
        raise NotFoldable(f"batch {shape[0]} is not a multiple of the block size {count}")
    spatial = []
    for size, b, (before, after) in zip(shape[1:], block, crops, strict=False):
        out = size * b - before - after
        if out < 0:
            raise NotFoldable(f"crops {before}, {after} exceed {size * b}")
        spatial.append(out)
    return (shape[0] // count, *spatial, *shape[1 + len(block) :])


def infer_shapes(
    tensors: dict[int, TensorInfo], node: OpNode, values: dict[int, np.ndarray]
) -> list[Shape] | None:
    """The shapes of ``node``'s outputs as TFLite's kernel computes them at prepare, from the input
    shapes in ``tensors`` and the constant operands in ``values``; None for an op without a rule.
    Raises :class:`NotFoldable` when the rule cannot give them (an operand known only at run time)."""
    op = node.op

    def shape(k: int) -> Shape:
        if k >= len(node.inputs) or node.inputs[k] < 0:
            raise NotFoldable(f"{op} without input {k}")
        return tuple(tensors[node.inputs[k]].shape)

    def value(k: int) -> np.ndarray:
        if k >= len(node.inputs) or node.inputs[k] not in values:
            raise NotFoldable(f"operand {k} of {op} is known only at run time")
        return values[node.inputs[k]]

    if op in SAME_SHAPE:
        return [shape(0)] * len(node.outputs)
    if op in BROADCAST:
        return [tuple(int(d) for d in np.broadcast_shapes(shape(0), shape(1)))]
    if op in ("CONV_2D", "DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D", "MAX_POOL_2D"):
        x = shape(0)
        if len(x) != 4:
            raise NotFoldable(f"{op} of a rank-{len(x)} input")
        if op in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            w = shape(1)
            if len(w) != 4:
                raise NotFoldable(f"{op} with a rank-{len(w)} filter")
            kh, kw, channels = w[1], w[2], w[0] if op == "CONV_2D" else w[3]
            dh, dw = int(node.option("dilation_h_factor")), int(node.option("dilation_w_factor"))
        else:
            kh, kw, channels = int(node.option("filter_height")), int(node.option("filter_width")), x[3]
            dh = dw = 1
        padding = node.option("padding")
        oh = _window_out(padding, x[1], kh, int(node.option("stride_h")), dh)
        ow = _window_out(padding, x[2], kw, int(node.option("stride_w")), dw)
        return [(x[0], oh, ow, channels)]
    if op == "FULLY_CONNECTED":
        x, w = shape(0), shape(1)
        if len(w) != 2 or not x or w[1] < 1 or int(np.prod(x)) % w[1]:
            raise NotFoldable(f"FULLY_CONNECTED of {list(x)} with weights {list(w)}")
        if node.options.get("keep_num_dims", False):
            return [(*x[:-1], w[0])]
        return [(int(np.prod(x)) // w[1], w[0])]
    if op == "CONCATENATION":
        parts = [shape(k) for k in range(len(node.inputs))]
        axis = _axis(int(node.option("axis")), len(parts[0]))
        if any(len(p) != len(parts[0]) or p[:axis] + p[axis + 1 :] != parts[0][:axis] + parts[0][axis + 1 :]
               for p in parts):  # fmt: skip
            raise NotFoldable(f"CONCATENATION of {parts}")
        return [(*parts[0][:axis], sum(p[axis] for p in parts), *parts[0][axis + 1 :])]
    if op in ("PAD", "PADV2", "MIRROR_PAD"):
        x, pads = shape(0), np.asarray(value(1)).reshape(-1, 2)
        if len(pads) != len(x) or np.any(pads < 0):
            raise NotFoldable(f"{op} of {list(x)} by {pads.tolist()}")
        return [tuple(int(d + a + b) for d, (a, b) in zip(x, pads, strict=True))]
    if op == "SPACE_TO_BATCH_ND":
        x = shape(0)
        return [_space_to_batch(x, *_block_and_pads(node, values, len(x)))]
    if op == "BATCH_TO_SPACE_ND":
        x = shape(0)
        return [_batch_to_space(x, *_block_and_pads(node, values, len(x)))]
    if op in REDUCTIONS:
        x, axes = shape(0), value(1)
        norm = {_axis(int(a), len(x)) for a in np.ravel(axes)}
        if node.options.get("keep_dims", False):
            return [tuple(1 if a in norm else d for a, d in enumerate(x))]
        return [tuple(d for a, d in enumerate(x) if a not in norm)]
    if op == "TRANSPOSE":
        x, perm = shape(0), [int(p) for p in np.ravel(value(1))]
        if sorted(perm) != list(range(len(x))):
            raise NotFoldable(f"TRANSPOSE of {list(x)} by {perm}")
        return [tuple(x[p] for p in perm)]
    if op in ("DEPTH_TO_SPACE", "SPACE_TO_DEPTH"):
        x, b = shape(0), int(node.options.get("block_size", 0))
        if len(x) != 4 or b < 1:
            raise NotFoldable(f"{op} of {list(x)} with block_size {b}")
        if op == "DEPTH_TO_SPACE":
            if x[3] % (b * b):
                raise NotFoldable(f"DEPTH_TO_SPACE of depth {x[3]} by {b}")
            return [(x[0], x[1] * b, x[2] * b, x[3] // (b * b))]
        if x[1] % b or x[2] % b:
            raise NotFoldable(f"SPACE_TO_DEPTH of {list(x)} by {b}")
        return [(x[0], x[1] // b, x[2] // b, x[3] * b * b)]
    if op in ("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"):
        x, size = shape(0), [int(v) for v in np.ravel(value(1))]
        if len(x) != 4 or len(size) != 2 or min(size) < 1:
            raise NotFoldable(f"{op} of {list(x)} to {size}")
        return [(x[0], size[0], size[1], x[3])]
    if op == "SLICE":
        x, begin, size = shape(0), np.ravel(value(1)), np.ravel(value(2))
        if len(begin) != len(x) or len(size) != len(x):
            raise NotFoldable(f"SLICE of {list(x)} at {begin.tolist()} size {size.tolist()}")
        out = []
        for d, b, n in zip(x, begin, size, strict=True):
            n = d - int(b) if n == -1 else int(n)
            if b < 0 or n < 0 or b + n > d:
                raise NotFoldable(f"SLICE of {list(x)} at {begin.tolist()} size {size.tolist()}")
            out.append(n)
        return [tuple(out)]
    if op == "STRIDED_SLICE":
        x = shape(0)
        view = np.broadcast_to(np.zeros((), np.int8), x)  # no memory: only the shape matters
        return [tuple(_strided_slice(node, view, value(1), value(2), value(3)).shape)]
    if op in ("SPLIT", "SPLIT_V"):
        x = shape(1 if op == "SPLIT" else 0)
        axis = _axis(int(np.ravel(value(0 if op == "SPLIT" else 2))[0]), len(x))
        count = len(node.outputs)
        if op == "SPLIT":
            if x[axis] % count:
                raise NotFoldable(f"SPLIT of {x[axis]} into {count}")
            sizes = [x[axis] // count] * count
        else:
            sizes = [int(v) for v in np.ravel(value(1))]
            if sizes.count(-1) > 1 or len(sizes) != count:
                raise NotFoldable(f"SPLIT_V into {sizes}")
            if -1 in sizes:
                sizes[sizes.index(-1)] = x[axis] - (sum(sizes) + 1)
            if min(sizes) < 0 or sum(sizes) != x[axis]:
                raise NotFoldable(f"SPLIT_V of {x[axis]} into {sizes}")
        return [(*x[:axis], n, *x[axis + 1 :]) for n in sizes]
    return None


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
    changed: set[int] = set()  # tensors whose stored shape was a placeholder
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
                result = _evaluate(tensors, node, values)
            except (NotFoldable, IndexError, ValueError):
                pass
            else:
                data = np.array(result, dtype=tensors[out].dtype)  # an array even for a 0-d result
                data.flags.writeable = False
                values[out] = data
                if tensors[out].shape != data.shape:
                    changed.add(out)
                tensors[out] = dataclasses.replace(tensors[out], shape=tuple(data.shape), data=data)
                folded.add(node.index)
                continue
        operand = SHAPE_OPERANDS.get(node.op)
        if operand is not None and len(node.inputs) > operand and node.inputs[operand] >= 0:
            _set_output_shape(tensors, node, operand, values, unknown_shape, changed)
            continue
        if any(t in unknown_shape for t in ins):
            unknown_shape.update(node.outputs)
            continue
        _infer_outputs(tensors, node, values, unknown_shape, changed)
    new = Graph(tensors=tensors, nodes=graph.nodes, inputs=graph.inputs, outputs=graph.outputs)
    return FoldResult(graph=new, folded=frozenset(folded), dynamic=frozenset(unknown_shape))


def _set_output_shape(
    tensors: dict[int, TensorInfo],
    node: OpNode,
    operand: int,
    values: dict[int, np.ndarray],
    unknown_shape: set[int],
    changed: set[int],
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
        changed.add(out)


def _infer_outputs(
    tensors: dict[int, TensorInfo],
    node: OpNode,
    values: dict[int, np.ndarray],
    unknown_shape: set[int],
    changed: set[int],
) -> None:
    """Give ``node``'s outputs their inferred shapes (:func:`infer_shapes`). A rule that cannot give
    them makes them dynamic; where there is no rule, the stored shapes stand while every input has
    its stored shape, and below a corrected one they are unproven: dynamic."""
    try:
        shapes = infer_shapes(tensors, node, values)
    except (NotFoldable, IndexError, ValueError):
        unknown_shape.update(node.outputs)  # TFLite's prepare decides at run time (or rejects it)
        return
    if shapes is None or len(shapes) != len(node.outputs):
        if any(t in changed for t in node.inputs if t >= 0):
            unknown_shape.update(node.outputs)
        return
    for out, shape in zip(node.outputs, shapes, strict=True):
        if tensors[out].shape != shape:  # a placeholder in the model: TFLite's prepare resizes it
            tensors[out] = dataclasses.replace(tensors[out], shape=shape)
            changed.add(out)
