"""Resizing: RESIZE_NEAREST_NEIGHBOR as strided COPYs, RESIZE_BILINEAR of int8 tensors as one
RESIZE_BILINEAR instruction.

For RESIZE_BILINEAR of int8, TFLite's resolvers (reference and optimized alike) run
``reference_ops::ResizeBilinearInteger``: fixed-point coordinates in 1/1024 units and four integer
weights, which the instruction computes from the shapes and the two flags (docs/isa.md). uint8 runs
``reference_ops::ResizeBilinear<uint8_t>`` in float32 with a truncating cast, which the NPU (no float
arithmetic) does not reproduce: uint8 stays on the CPU.
"""

from __future__ import annotations

import numpy as np

from libaccel.compiler import quant as q
from libaccel.compiler.emitter import Emitter
from libaccel.compiler.graph import Graph, OpNode, TensorInfo
from libaccel.compiler.plan_common import OpPlan, Planner, Unsupported, activation, int_const


def nearest_source(out_size: int, in_size: int, align_corners: bool, half_pixel_centers: bool) -> list[int]:
    """The input index each output index reads: reference_ops' GetNearestNeighbor, in float32 as TFLite."""
    f32 = np.float32
    if align_corners and out_size > 1:
        scale = f32(in_size - 1) / f32(out_size - 1)
    else:
        scale = f32(in_size) / f32(out_size)
    offset = f32(0.5) if half_pixel_centers else f32(0.0)
    src = []
    for i in range(out_size):
        v = f32(f32(i) + offset) * scale
        j = q.tflite_round(float(v)) if align_corners else int(np.floor(v))
        j = min(j, in_size - 1)
        src.append(max(0, j) if half_pixel_centers else j)
    return src


def _phases(src: list[int], limit: int) -> list[tuple[int, int, int, int]] | None:
    """Split an index map into the fewest arithmetic progressions over output phases.

    Returns ``[(out_start, out_step, in_start, in_step)]``, one per phase
    ``r`` of a period ``p`` dividing the output size, such that
    ``src[r + p*i] == in_start + in_step*i``: each phase is one strided view.
    """
    n = len(src)
    for p in range(1, min(n, limit) + 1):
        if n % p:
            continue
        out = []
        for r in range(p):
            seq = src[r::p]
            step = seq[1] - seq[0] if len(seq) > 1 else 0
            if step < 0 or any(b - a != step for a, b in zip(seq, seq[1:], strict=False)):
                break
            out.append((r, p, seq[0], step))
        else:
            return out
    return None


MAX_RESIZE_COPIES = 64


def resize_operands(graph: Graph, node: OpNode) -> tuple[TensorInfo, TensorInfo, bool, bool]:
    """A RESIZE_* node's checked input and output (NHWC of equal N and C, ``size`` the output's H, W)
    and its align_corners and half_pixel_centers options."""
    x = activation(graph, node.inputs[0], "input")
    y = activation(graph, node.outputs[0], "output", x.dtype)
    if len(x.shape) != 4 or len(y.shape) != 4 or (x.shape[0], x.shape[3]) != (y.shape[0], y.shape[3]):
        raise Unsupported(f"input {list(x.shape)} and output {list(y.shape)} are not NHWC of equal N, C")
    size = int_const(graph, node.inputs[1], "size")
    if tuple(int(v) for v in size) != y.shape[1:3]:
        raise Unsupported(f"size {size.tolist()} is not the output's {list(y.shape[1:3])}")
    return x, y, bool(node.option("align_corners")), bool(node.option("half_pixel_centers"))


def _plan_resize_nearest(graph: Graph, node: OpNode) -> OpPlan:
    """RESIZE_NEAREST_NEIGHBOR as strided COPYs: one per (row phase, column phase) of the index map."""
    x, y, ac, hp = resize_operands(graph, node)
    n, h, w, c = x.shape
    _, oh, ow, _ = y.shape
    # A front end whose runtime maps indices otherwise (ONNX's coordinate modes) gives the maps.
    src_rows, src_cols = node.option("source_rows"), node.option("source_cols")
    src_rows = list(src_rows) if src_rows is not None else nearest_source(oh, h, ac, hp)
    src_cols = list(src_cols) if src_cols is not None else nearest_source(ow, w, ac, hp)
    if (
        len(src_rows) != oh
        or len(src_cols) != ow
        or not all(0 <= v < h for v in src_rows)
        or not all(0 <= v < w for v in src_cols)
    ):
        raise Unsupported("source index maps do not fit the input and output")
    rows = _phases(src_rows, MAX_RESIZE_COPIES)
    cols = _phases(src_cols, MAX_RESIZE_COPIES)
    if rows is None or cols is None or len(rows) * len(cols) > MAX_RESIZE_COPIES:
        raise Unsupported(
            f"resize {h}x{w} -> {oh}x{ow} needs more than {MAX_RESIZE_COPIES} strided copies "
            "(not an integer scale factor)"
        )
    # TFLite copies the stored bytes: no requantization, whatever the two quantizations are.

    def emit(em: Emitter) -> None:
        for ry, py, sy, ky in rows:
            for rx, px, sx, kx in cols:
                view = (n, oh // py, ow // px, c)
                em.op(
                    "COPY",
                    src=em.tensor(
                        x.index, shape=view, origin=(0, sy, sx, 0), strides=(h * w * c, ky * w * c, kx * c, 1)
                    ),
                    dst=em.tensor(
                        y.index,
                        shape=view,
                        origin=(0, ry, rx, 0),
                        strides=(oh * ow * c, py * ow * c, px * c, 1),
                    ),
                )

    return OpPlan(emit)


def plan_resize_bilinear(graph: Graph, node: OpNode) -> OpPlan:
    x, y, ac, hp = resize_operands(graph, node)
    if x.dtype != "int8":
        raise Unsupported("uint8 RESIZE_BILINEAR: TFLite's reference kernel interpolates in float32")
    if ac and hp:
        raise Unsupported("align_corners with half_pixel_centers (TFLite rejects it)")
    # The stored values are interpolated as they are: no requantization, whatever the quantizations.
    flags = (("ALIGN_CORNERS",) if ac else ()) + (("HALF_PIXEL_CENTERS",) if hp else ())

    def emit(em: Emitter) -> None:
        em.op("RESIZE_BILINEAR", flags=flags, input=em.tensor(x.index), output=em.tensor(y.index))

    return OpPlan(emit)


PLANNERS: dict[str, Planner] = {
    "RESIZE_NEAREST_NEIGHBOR": _plan_resize_nearest,
    "RESIZE_BILINEAR": plan_resize_bilinear,
}
