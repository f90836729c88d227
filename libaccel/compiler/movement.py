"""Data-movement ops as COPY/FILL of strided views: RESHAPE, SQUEEZE, EXPAND_DIMS (no instruction:
the output aliases the input's bytes), CONCATENATION, PAD, PADV2, TRANSPOSE, STRIDED_SLICE, SPLIT,
SPLIT_V, SLICE, DEPTH_TO_SPACE, SPACE_TO_DEPTH, SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND.

TFLite's reference kernels for these copy the stored bytes (no requantization), so each lowers to
COPYs between views of the input and output (see :meth:`Emitter.tensor`'s ``origin``/``strides``);
positions no input byte reaches get the output's zero point, as TFLite's ``pad_value``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from libaccel.compiler import tables
from libaccel.compiler.emitter import Emitter
from libaccel.compiler.graph import Graph, OpNode, TensorInfo
from libaccel.compiler.plan_common import (
    OpPlan,
    Planner,
    Unsupported,
    activation,
    axis_index,
    const,
    elem_strides,
    fused_activation,
    int_const,
    tensor,
    to4d,
)

Shape4 = tuple[int, int, int, int]
# One COPY: (view shape, source origin, source element strides, destination origin, destination strides).
Copy = tuple[Shape4, Shape4, Shape4, Shape4, Shape4]


def _four(v: list[int] | tuple[int, ...]) -> Shape4:
    return int(v[0]), int(v[1]), int(v[2]), int(v[3])


def _dense(shape: tuple[int, ...]) -> Shape4:
    return _four(elem_strides(to4d(shape)))


def _emit_copies(x: TensorInfo, y: TensorInfo, copies: list[Copy], fill: int | None = None) -> OpPlan:
    """An OpPlan: optionally FILL ``y`` with ``fill``, then every COPY from ``x`` into ``y``."""

    def emit(em: Emitter) -> None:
        if fill is not None:
            em.op("FILL", dst=em.tensor(y.index, shape=to4d(y.shape)), value=fill)
        for shape, so, ss, do, ds in copies:
            em.op(
                "COPY",
                src=em.tensor(x.index, shape=shape, origin=so, strides=ss),
                dst=em.tensor(y.index, shape=shape, origin=do, strides=ds),
            )

    return OpPlan(emit)


def _same_quant(x: TensorInfo, y: TensorInfo) -> None:
    if x.quant != y.quant:
        raise Unsupported("input and output quantization differ (TFLite requires them equal)")


# --- SPLIT, SPLIT_V, SLICE -----------------------------------------------------------------------
def _plan_split_along(graph: Graph, node: OpNode, x: TensorInfo, axis: int) -> OpPlan:
    """Each output is the next block of ``x`` along ``axis`` (one COPY per output)."""
    rank = len(x.shape)
    ys = [activation(graph, o, f"output{k}", x.dtype) for k, o in enumerate(node.outputs)]
    shift = 4 - rank
    plans = []
    start = 0
    for y in ys:
        others = [d for i, d in enumerate(y.shape) if i != axis]
        if len(y.shape) != rank or others != [d for i, d in enumerate(x.shape) if i != axis]:
            raise Unsupported(f"output {list(y.shape)} is not a block of {list(x.shape)} along axis {axis}")
        origin = [0, 0, 0, 0]
        origin[shift + axis] = start
        copy = (to4d(y.shape), _four(origin), _dense(x.shape), (0, 0, 0, 0), _dense(y.shape))
        plans.append(_emit_copies(x, y, [copy]))
        start += y.shape[axis]
    if start != x.shape[axis]:
        raise Unsupported(f"output sizes along axis {axis} add up to {start}, not {x.shape[axis]}")

    def emit(em: Emitter) -> None:
        for p in plans:
            assert p.emit is not None
            p.emit(em)

    return OpPlan(emit)


def plan_split(graph: Graph, node: OpNode) -> OpPlan:
    """SPLIT(axis, input): ``num_splits`` equal blocks (the outputs' shapes say how big)."""
    x = activation(graph, node.inputs[1], "input")
    axis = int_const(graph, node.inputs[0], "axis")
    if axis.size != 1:
        raise Unsupported(f"axis has {axis.size} values")
    return _plan_split_along(graph, node, x, axis_index(int(axis[0]), len(x.shape)))


def plan_split_v(graph: Graph, node: OpNode) -> OpPlan:
    """SPLIT_V(input, size_splits, axis): blocks of the given sizes (one may be -1: the rest)."""
    x = activation(graph, node.inputs[0], "input")
    axis = int_const(graph, node.inputs[2], "axis")
    if axis.size != 1:
        raise Unsupported(f"axis has {axis.size} values")
    a = axis_index(int(axis[0]), len(x.shape))
    sizes = [int(s) for s in int_const(graph, node.inputs[1], "size_splits")]
    if len(sizes) != len(node.outputs):
        raise Unsupported(f"{len(sizes)} size_splits for {len(node.outputs)} outputs")
    if sizes.count(-1) == 1:
        sizes[sizes.index(-1)] = x.shape[a] - (sum(sizes) + 1)
    got = [tensor(graph, o, "output").shape for o in node.outputs]
    if any(len(s) != len(x.shape) or s[a] != n for s, n in zip(got, sizes, strict=True)):
        raise Unsupported(f"size_splits {sizes} do not match the outputs {[list(s) for s in got]}")
    return _plan_split_along(graph, node, x, a)


def plan_slice(graph: Graph, node: OpNode) -> OpPlan:
    """SLICE(input, begin, size): one COPY of the block (size -1: to the end)."""
    x = activation(graph, node.inputs[0], "input")
    y = activation(graph, node.outputs[0], "output", x.dtype)
    begin = [int(b) for b in int_const(graph, node.inputs[1], "begin")]
    size = [int(s) for s in int_const(graph, node.inputs[2], "size")]
    rank = len(x.shape)
    if len(begin) != rank or len(size) != rank:
        raise Unsupported(f"begin/size of lengths {len(begin)}/{len(size)} for rank {rank}")
    size = [d - b if s == -1 else s for d, b, s in zip(x.shape, begin, size, strict=True)]
    if any(b < 0 or s < 0 or b + s > d for d, b, s in zip(x.shape, begin, size, strict=True)):
        raise Unsupported(f"slice begin {begin} size {size} outside {list(x.shape)}")
    if tuple(size) != y.shape:
        raise Unsupported(f"output {list(y.shape)} is not the slice's {size}")
    origin = _four([0] * (4 - rank) + begin)
    return _emit_copies(x, y, [(to4d(y.shape), origin, _dense(x.shape), (0, 0, 0, 0), _dense(y.shape))])


# --- DEPTH_TO_SPACE, SPACE_TO_DEPTH --------------------------------------------------------------
def _block_copies(depth: TensorInfo, space: TensorInfo, block: int) -> list[Copy]:
    """The block^2 COPYs between ``depth`` [N,H,W,b*b*C] and ``space`` [N,H*b,W*b,C], as views of both:
    space[n, h*b + i, w*b + j, c] == depth[n, h, w, (i*b + j)*C + c] (TFLite's DepthToSpace order)."""
    n, h, w, _ = depth.shape
    c = space.shape[3]
    view = (n, h, w, c)
    dense_depth = _dense(depth.shape)
    oh, ow = h * block, w * block
    strided = (oh * ow * c, block * ow * c, block * c, 1)
    return [
        (view, (0, 0, 0, (i * block + j) * c), dense_depth, (0, i, j, 0), strided)
        for i in range(block)
        for j in range(block)
    ]


def _block_size(node: OpNode, depth: TensorInfo, space: TensorInfo) -> int:
    if len(depth.shape) != 4 or len(space.shape) != 4:
        raise Unsupported("input and output must be 4-D")
    n, h, w, cd = depth.shape
    sn, sh, sw, c = space.shape
    b = sh // h if h else 0
    if "block_size" in node.options and int(node.options["block_size"]) != b:
        raise Unsupported(f"block_size {node.options['block_size']} does not match the shapes")
    if b < 1 or (sn, sh, sw, cd) != (n, h * b, w * b, c * b * b):
        raise Unsupported(f"{list(depth.shape)} and {list(space.shape)} are not related by a square block")
    return b


def _swap(copies: list[Copy]) -> list[Copy]:
    """The same COPYs in the other direction (source and destination views exchanged)."""
    return [(shape, do, ds, so, ss) for shape, so, ss, do, ds in copies]


def plan_depth_to_space(graph: Graph, node: OpNode) -> OpPlan:
    x = activation(graph, node.inputs[0], "input")
    y = activation(graph, node.outputs[0], "output", x.dtype)
    _same_quant(x, y)
    return _emit_copies(x, y, _block_copies(x, y, _block_size(node, x, y)))


def plan_space_to_depth(graph: Graph, node: OpNode) -> OpPlan:
    x = activation(graph, node.inputs[0], "input")
    y = activation(graph, node.outputs[0], "output", x.dtype)
    _same_quant(x, y)
    return _emit_copies(x, y, _swap(_block_copies(y, x, _block_size(node, y, x))))


# --- SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND ------------------------------------------------------
def _spatial(graph: Graph, x: TensorInfo, block_index: int, pads_index: int, what: str) -> tuple:
    """(N, H, W, C, (bh, bw), ((top, bottom), (left, right))) with a 3-D tensor as [N, H, 1, C]."""
    rank = len(x.shape)
    if rank not in (3, 4):
        raise Unsupported(f"rank {rank}: only 3-D and 4-D (one or two spatial dimensions)")
    block = [int(b) for b in int_const(graph, block_index, "block_shape")]
    pads = np.asarray(int_const(graph, pads_index, what)).reshape(-1, 2).tolist()
    if len(block) != rank - 2 or len(pads) != rank - 2:
        raise Unsupported(f"block_shape {block} and {what} {pads} for rank {rank}")
    if min(block) < 1 or min(min(p) for p in pads) < 0:
        raise Unsupported(f"block_shape {block} or {what} {pads} out of range")
    if rank == 3:
        block, pads = [block[0], 1], [pads[0], [0, 0]]
    n, h = x.shape[0], x.shape[1]
    w = x.shape[2] if rank == 4 else 1
    return n, h, w, x.shape[-1], (block[0], block[1]), (tuple(pads[0]), tuple(pads[1]))


def _as4(t: TensorInfo) -> Shape4:
    """A 4-D tensor's shape, or a 3-D one's [N, H, C] as [N, H, 1, C] (one spatial dimension)."""
    s = t.shape
    return _four(s) if len(s) == 4 else (s[0], s[1], 1, s[2])


def _valid_range(size: int, phase: int, block: int, before: int, count: int) -> tuple[int, int]:
    """(first, number) of the indices k < count with 0 <= k*block + phase - before < size."""
    first = max(0, -(-(before - phase) // block))
    last = min(count - 1, (size - 1 + before - phase) // block)
    return first, max(0, last - first + 1)


def _batch_copies(n: int, space: Shape4, batch: Shape4, block: tuple, pads: tuple) -> list[Copy]:
    """COPYs of ``space`` [N,H,W,C] into ``batch`` [bh*bw*N, OH, OW, C] (TFLite's SpaceToBatchND):
    batch[(i*bw + j)*N + b, y, x] == space[b, y*bh + i - top, x*bw + j - left]; out-of-range
    positions are left alone (the caller fills them, or crops them away)."""
    _, h, w, c = space
    _, oh, ow, _ = batch
    (bh, bw), ((top, _), (left, _)) = block, pads
    src_dense = _four(elem_strides(space))
    dst_dense = _four(elem_strides(batch))
    copies = []
    for i in range(bh):
        y0, ny = _valid_range(h, i, bh, top, oh)
        for j in range(bw):
            x0, nx = _valid_range(w, j, bw, left, ow)
            if ny == 0 or nx == 0:
                continue
            src_origin = (0, y0 * bh + i - top, x0 * bw + j - left, 0)
            src_strides = (src_dense[0], bh * src_dense[1], bw * src_dense[2], 1)
            copies.append(((n, ny, nx, c), src_origin, src_strides, ((i * bw + j) * n, y0, x0, 0), dst_dense))
    return copies


@dataclass(frozen=True)
class BatchLayout:
    """The geometry SPACE_TO_BATCH_ND and BATCH_TO_SPACE_ND share: a space tensor [N,H,W,C], the block
    and the paddings (SPACE_TO_BATCH_ND) or crops (BATCH_TO_SPACE_ND) of H and W."""

    space: Shape4
    block: tuple[int, int]
    pads: tuple[tuple[int, int], tuple[int, int]]

    @property
    def batch(self) -> Shape4:
        n, h, w, c = self.space
        (bh, bw), ((top, bottom), (left, right)) = self.block, self.pads
        return n * bh * bw, (h + top + bottom) // bh, (w + left + right) // bw, c

    @property
    def padded(self) -> bool:
        return any(p for pair in self.pads for p in pair)


def batch_layout(graph: Graph, node: OpNode, space: TensorInfo, batch: TensorInfo, what: str) -> BatchLayout:
    """The checked layout of a SPACE_TO_BATCH_ND (``what`` "paddings") or BATCH_TO_SPACE_ND ("crops")."""
    _same_quant(space, batch)
    n, h, w, c, block, pads = _spatial(graph, space, node.inputs[1], node.inputs[2], what)
    (bh, bw), ((top, bottom), (left, right)) = block, pads
    if (h + top + bottom) % bh or (w + left + right) % bw:
        raise Unsupported(f"spatial sizes with the {what} are not multiples of the block")
    layout = BatchLayout((n, h, w, c), block, pads)
    if _as4(batch) != layout.batch:
        raise Unsupported(
            f"{list(batch.shape)} is not the batch layout {list(layout.batch)} of {list(space.shape)}"
        )
    return layout


def plan_space_to_batch_nd(graph: Graph, node: OpNode) -> OpPlan:
    x = activation(graph, node.inputs[0], "input")
    y = activation(graph, node.outputs[0], "output", x.dtype)
    lay = batch_layout(graph, node, x, y, "paddings")
    copies = _batch_copies(lay.space[0], lay.space, lay.batch, lay.block, lay.pads)
    assert y.quant is not None
    # TFLite's SpaceToBatchND pads with the output's zero point.
    return _emit_copies(x, y, _reshaped(copies, x), fill=y.quant.zero_point if lay.padded else None)


def plan_batch_to_space_nd(graph: Graph, node: OpNode) -> OpPlan:
    x = activation(graph, node.inputs[0], "input")
    y = activation(graph, node.outputs[0], "output", x.dtype)
    lay = batch_layout(graph, node, y, x, "crops")
    # BatchToSpaceND is SpaceToBatchND's inverse with crops in place of paddings; every output
    # position is written, so no FILL.
    copies = _swap(_batch_copies(lay.space[0], lay.space, lay.batch, lay.block, lay.pads))
    return _emit_copies(x, y, _reshaped(copies, x))


def _reshaped(copies: list[Copy], x: TensorInfo) -> list[Copy]:
    """The COPYs, valid for the 4-D layouts, also for 3-D tensors ([N, H, C] is [N, H, 1, C], whose
    origins the emitter computes from its own to4d view [1, N, H, C]): shift the origins one axis."""
    if len(x.shape) == 4:
        return copies
    out = []
    for shape, so, ss, do, ds in copies:
        out.append((shape, _lift(so), ss, _lift(do), ds))
    return out


def _lift(origin: Shape4) -> Shape4:
    """An origin in [N, H, 1, C] coordinates as the element offset the emitter computes for
    [1, N, H, C]: same linear offset, expressed on axes (1, 2, 3)."""
    n, h, _, c = origin
    return 0, n, h, c


def _plan_reshape(graph: Graph, node: OpNode) -> OpPlan:
    if node.op == "RESHAPE" and len(node.inputs) > 1 and node.inputs[1] >= 0:
        if tensor(graph, node.inputs[1], "shape").data is None:
            # TFLite then sizes the output at run time; shape_folding.fold_shapes makes it a constant
            # where the input shapes are static.
            raise Unsupported("RESHAPE's shape is computed at run time (not foldable at compile time)")
    x = activation(graph, node.inputs[0], "input")
    y = activation(graph, node.outputs[0], "output", x.dtype)
    if x.quant != y.quant or x.size != y.size:
        raise Unsupported("RESHAPE changing quantization or element count")
    return OpPlan(alias_of=x.index)


def _plan_concat(graph: Graph, node: OpNode) -> OpPlan:
    y = activation(graph, node.outputs[0], "output")
    xs = [activation(graph, i, f"input{k}", y.dtype) for k, i in enumerate(node.inputs)]
    if fused_activation(node) != "NONE":
        raise Unsupported("CONCATENATION with a fused activation")
    if y.dtype == "int8" and any(x.quant != y.quant for x in xs):
        raise Unsupported("int8 inputs quantized differently from the output (TFLite rejects the model)")
    # uint8 inputs quantized unlike the output go through ConcatenationWithScaling's table.
    assert y.quant is not None
    tabs = {
        x.index: tables.concat_rescale_table(
            x.quant.scale, x.quant.zero_point, y.quant.scale, y.quant.zero_point
        )
        for x in xs
        if x.quant is not None and x.quant != y.quant
    }
    rank = len(y.shape)
    if any(len(x.shape) != rank for x in xs):
        raise Unsupported(f"inputs of ranks {[len(x.shape) for x in xs]}, the output's is {rank}")
    axis = axis_index(int(node.option("axis")), rank)
    if sum(x.shape[axis] for x in xs) != y.shape[axis]:
        raise Unsupported("input sizes along the axis do not add up")
    shift = 4 - rank

    def emit(em: Emitter) -> None:
        start = 0
        for x in xs:
            x4 = to4d(x.shape)
            src = em.tensor(x.index, shape=x4)
            dst = em.tensor(y.index, shape=x4, origin=_origin(shift + axis, start))
            if x.index in tabs:
                em.op(
                    "LUT", input=src, table=em.const(tabs[x.index].reshape(1, 1, 1, 256), "uint8"), output=dst
                )
            else:
                em.op("COPY", src=src, dst=dst)
            start += x.shape[axis]

    return OpPlan(emit)


def _origin(axis4: int, start: int) -> tuple[int, int, int, int]:
    o = [0, 0, 0, 0]
    o[axis4] = start
    return o[0], o[1], o[2], o[3]


def _pad_value(graph: Graph, node: OpNode, y: TensorInfo) -> int:
    """TFLite's quantized pad value: PADV2's constant_values as stored, else the output's zero point."""
    assert y.quant is not None
    if len(node.inputs) < 3 or node.inputs[2] < 0:
        return y.quant.zero_point
    v = const(graph, node.inputs[2], "constant_values")
    if v.dtype != y.dtype or v.size != 1 or v.quant != y.quant:
        raise Unsupported("constant_values is not a scalar quantized like the output (TFLite requires it)")
    assert v.data is not None
    return int(np.asarray(v.data).reshape(-1)[0])


def _plan_pad(graph: Graph, node: OpNode) -> OpPlan:
    """PAD and PADV2: FILL with the pad value, then one COPY of the input into the interior."""
    x = activation(graph, node.inputs[0], "input")
    y = activation(graph, node.outputs[0], "output", x.dtype)
    value = _pad_value(graph, node, y)
    p = const(graph, node.inputs[1], "paddings")
    assert p.data is not None
    pads = np.asarray(p.data).reshape(-1, 2)
    if pads.shape[0] != len(x.shape) or (pads < 0).any():
        raise Unsupported(f"paddings {pads.tolist()} for rank {len(x.shape)}")
    if x.quant != y.quant:
        raise Unsupported("input and output quantization differ")
    if tuple(int(d + lo + hi) for d, (lo, hi) in zip(x.shape, pads, strict=True)) != y.shape:
        raise Unsupported("output shape does not match the paddings")
    assert y.quant is not None
    shift = 4 - len(x.shape)
    origin = [0, 0, 0, 0]
    for i, (lo, _) in enumerate(pads):
        origin[shift + i] = int(lo)

    def emit(em: Emitter) -> None:
        assert y.quant is not None
        em.op("FILL", dst=em.tensor(y.index, shape=to4d(y.shape)), value=value)
        x4 = to4d(x.shape)
        em.op(
            "COPY",
            src=em.tensor(x.index, shape=x4),
            dst=em.tensor(y.index, shape=x4, origin=(origin[0], origin[1], origin[2], origin[3])),
        )

    return OpPlan(emit)


def _plan_transpose(graph: Graph, node: OpNode) -> OpPlan:
    x = activation(graph, node.inputs[0], "input")
    y = activation(graph, node.outputs[0], "output", x.dtype)
    perm = [int(p) for p in int_const(graph, node.inputs[1], "permutation")]
    rank = len(x.shape)
    perm = [p + rank if p < 0 else p for p in perm]
    if sorted(perm) != list(range(rank)):
        raise Unsupported(f"permutation {perm} of rank {rank}")
    if tuple(x.shape[p] for p in perm) != y.shape:
        raise Unsupported(f"output shape {list(y.shape)} is not the permuted input")
    shift = 4 - rank
    elem = elem_strides(to4d(x.shape))
    src = [elem[i] for i in range(shift)] + [elem[shift + p] for p in perm]
    y4 = to4d(y.shape)

    def emit(em: Emitter) -> None:
        em.op(
            "COPY",
            src=em.tensor(x.index, shape=y4, origin=(0, 0, 0, 0), strides=(src[0], src[1], src[2], src[3])),
            dst=em.tensor(y.index, shape=y4),
        )

    return OpPlan(emit)


def _plan_strided_slice(graph: Graph, node: OpNode) -> OpPlan:
    x = activation(graph, node.inputs[0], "input")
    y = activation(graph, node.outputs[0], "output", x.dtype)
    for mask in ("ellipsis_mask", "new_axis_mask", "shrink_axis_mask"):
        if node.option(mask):
            raise Unsupported(f"{mask} {node.option(mask)}")
    if node.option("offset"):
        raise Unsupported("offset=True")
    rank = len(x.shape)
    begin = int_const(graph, node.inputs[1], "begin")
    end = int_const(graph, node.inputs[2], "end")
    step = int_const(graph, node.inputs[3], "strides")
    if not len(begin) == len(end) == len(step) == rank:
        raise Unsupported(f"begin/end/strides of lengths {len(begin)}/{len(end)}/{len(step)} for rank {rank}")
    if (step < 1).any():
        raise Unsupported(f"strides {step.tolist()}: only positive strides")
    starts, counts = [], []
    for i, d in enumerate(x.shape):
        # TFLite's StartForAxis/StopForAxis for positive strides: wrap negatives, clamp to [0, d].
        b = 0 if node.option("begin_mask") & (1 << i) else int(begin[i])
        e = d if node.option("end_mask") & (1 << i) else int(end[i])
        b = min(max(b + d if b < 0 else b, 0), d)
        e = min(max(e + d if e < 0 else e, 0), d)
        starts.append(b)
        counts.append(max(0, -(-(e - b) // int(step[i]))))
    if tuple(counts) != y.shape:
        raise Unsupported(f"output shape {list(y.shape)} is not the slice's {counts}")
    shift = 4 - rank
    elem = elem_strides(to4d(x.shape))
    strides = [elem[i] * (int(step[i - shift]) if i >= shift else 1) for i in range(4)]
    origin = [0] * shift + starts
    y4 = to4d(y.shape)

    def emit(em: Emitter) -> None:
        em.op(
            "COPY",
            src=em.tensor(
                x.index,
                shape=y4,
                origin=(origin[0], origin[1], origin[2], origin[3]),
                strides=(strides[0], strides[1], strides[2], strides[3]),
            ),
            dst=em.tensor(y.index, shape=y4),
        )

    return OpPlan(emit)


PLANNERS: dict[str, Planner] = {
    "SPLIT": plan_split,
    "SPLIT_V": plan_split_v,
    "SLICE": plan_slice,
    "DEPTH_TO_SPACE": plan_depth_to_space,
    "SPACE_TO_DEPTH": plan_space_to_depth,
    "SPACE_TO_BATCH_ND": plan_space_to_batch_nd,
    "BATCH_TO_SPACE_ND": plan_batch_to_space_nd,
    "RESHAPE": _plan_reshape,
    "SQUEEZE": _plan_reshape,  # like RESHAPE: the same bytes under another shape
    "EXPAND_DIMS": _plan_reshape,
    "CONCATENATION": _plan_concat,
    "PAD": _plan_pad,
    "PADV2": _plan_pad,
    "TRANSPOSE": _plan_transpose,
    "STRIDED_SLICE": _plan_strided_slice,
}
