"""What every op planner shares: the plan record (:class:`OpPlan`), the support answer, and the checks
and geometry every lowering needs (tensor kinds, quantization, fused activations, TFLite's integer
multipliers, padding and output sizes, 4-D shapes).

A planner is a function ``(graph, node) -> OpPlan`` that checks everything its exact lowering needs
(types, quantization, shapes, options, the range of the integer multipliers) and raises
:class:`Unsupported` with the reason when something does not hold; the op families' modules
(:mod:`.convolution`, :mod:`.elementwise`, ...) define them and :mod:`.registry` maps op names to them.
This module imports no planner.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from libaccel.compiler import quant as q
from libaccel.compiler.emitter import Emitter, pad4
from libaccel.compiler.graph import Graph, OpNode, TensorInfo

BYTE_TYPES = ("int8", "uint8")
ACTIVATIONS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")


class Unsupported(Exception):
    """The node cannot run exactly on the NPU; the message says why."""


@dataclass(frozen=True)
class Support:
    """check_support's answer: ``ok``, or the reason the node stays on the CPU."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class Scratch:
    """An arena tensor a plan makes for itself (an intermediate no graph tensor holds): dense,
    per-tensor quantized with ``zero_point``, alive only while its node's instructions run."""

    shape: tuple[int, int, int, int]
    dtype: str
    zero_point: int = 0


@dataclass
class OpPlan:
    """How one node lowers: instructions (``emit``), or an alias of its input's storage (``alias_of``).

    A pattern fused across nodes (:mod:`.fusion`) gives the last node the instructions, with the
    tensors they read beyond that node's own inputs in ``reads`` (kept alive until it runs), and the
    earlier nodes ``fused``: no instruction, and their tensors need no storage.

    ``scratch`` asks the memory plan for intermediate tensors of the plan's own; ``emit`` describes
    the k-th as ``em.tensor(em.scratch(k), ...)``.
    """

    emit: Callable[[Emitter], None] | None = None
    alias_of: int | None = None  # RESHAPE of a dense tensor: the output is the input's bytes
    reads: tuple[int, ...] = ()
    fused: bool = False
    scratch: tuple[Scratch, ...] = ()


#: A planner: checks one node and returns its lowering, or raises :class:`Unsupported`.
Planner = Callable[[Graph, OpNode], OpPlan]


# --- checks: each returns what it checked, or raises Unsupported naming ``what`` ---------------
def tensor(graph: Graph, index: int, what: str) -> TensorInfo:
    """Tensor ``index`` of the graph (any kind)."""
    if index < 0:
        raise Unsupported(f"{what} is absent")
    if index not in graph.tensors:
        raise Unsupported(f"{what} is tensor {index}, which the graph does not have")
    return graph.tensors[index]


def activation(graph: Graph, index: int, what: str, dtype: str | None = None) -> TensorInfo:
    """A per-tensor quantized int8/uint8 tensor of static shape, rank <= 4."""
    t = tensor(graph, index, what)
    if t.dtype not in BYTE_TYPES:
        raise Unsupported(f"{what} {t.name!r} is {t.dtype}; the NPU computes int8/uint8")
    if dtype is not None and t.dtype != dtype:
        raise Unsupported(f"{what} {t.name!r} is {t.dtype}, the op's other tensors {dtype}")
    if t.quant is None:
        raise Unsupported(f"{what} {t.name!r} has no quantization")
    if not t.quant.per_tensor:
        raise Unsupported(f"{what} {t.name!r} is quantized per channel; activations must be per tensor")
    if len(t.shape) > 4:
        raise Unsupported(f"{what} {t.name!r} has rank {len(t.shape)}; the NPU has 4-D tensors")
    if any(d < 1 for d in t.shape):
        raise Unsupported(f"{what} {t.name!r} has a dynamic or empty shape {list(t.shape)}")
    return t


def const(graph: Graph, index: int, what: str) -> TensorInfo:
    """A constant tensor (its data is in the model)."""
    t = tensor(graph, index, what)
    if t.data is None:
        raise Unsupported(f"{what} {t.name!r} is not a constant")
    return t


def int_const(graph: Graph, index: int, what: str) -> np.ndarray:
    """A constant int32/int64 tensor's values, flat, as int64."""
    t = const(graph, index, what)
    if t.dtype not in ("int32", "int64"):
        raise Unsupported(f"{what} is {t.dtype}, expected int32")
    assert t.data is not None
    return np.asarray(t.data, dtype=np.int64).reshape(-1)


def fused_activation(node: OpNode) -> str:
    """The node's fused activation, one whose clamp is exact (:data:`ACTIVATIONS`)."""
    act = node.option("fused_activation_function")
    if act not in ACTIVATIONS:
        raise Unsupported(f"fused activation {act} has no exact clamp")
    return act


def clamp(node: OpNode, out: TensorInfo) -> tuple[int, int]:
    """(act_min, act_max): the node's fused activation as a clamp of ``out``'s stored values."""
    assert out.quant is not None
    return q.activation_range(fused_activation(node), out.quant.scale, out.quant.zero_point, out.dtype)


def multiplier(real: float, what: str) -> tuple[int, int]:
    """QuantizeMultiplier(real), or Unsupported where the ISA cannot reproduce TFLite's result.

    A shift below -31 is flushed by TFLite to multiplier 0 (every product is 0),
    which the ISA reproduces exactly with multiplier 0. A shift above 30 (a
    multiplier >= 2^30) overflows TFLite's int32 left shift: such models stay on
    the CPU.
    """
    m, shift = q.quantize_multiplier(real)
    if q.raw_shift(real) > q.SHIFT_MAX:
        raise Unsupported(f"{what} multiplier {real:g} needs shift {q.raw_shift(real)}, above 30")
    return m, shift


def axis_index(value: int, rank: int) -> int:
    """A TFLite axis operand (negative counts from the end) as an index into a shape of ``rank``."""
    a = value + rank if value < 0 else value
    if not 0 <= a < rank:
        raise Unsupported(f"axis {value} of rank {rank}")
    return a


def to4d(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """A shape of rank <= 4 as the NPU's 4-D one (leading 1s)."""
    if len(shape) > 4:
        raise Unsupported(f"rank {len(shape)} > 4")
    return pad4(shape)


def out_size(padding: str, size: int, k: int, stride: int, dilation: int) -> int:
    """ComputeOutSize."""
    eff = (k - 1) * dilation + 1
    if padding == "SAME":
        return (size + stride - 1) // stride
    if padding == "VALID":
        return (size + stride - eff) // stride
    raise Unsupported(f"padding {padding!r}")


def pad_before(size: int, k: int, stride: int, dilation: int, out: int) -> int:
    """ComputePaddingWithOffset's leading padding (the smaller half)."""
    eff = (k - 1) * dilation + 1
    return max(0, (out - 1) * stride + eff - size) // 2


# --- geometry ------------------------------------------------------------------------------
def geometry(node: OpNode, h: int, w: int, kh: int, kw: int, oh: int, ow: int, dil: bool) -> dict:
    """A window op's strides, dilations (with ``dil``) and leading padding as the instruction's fields,
    checked against the output size ``oh`` x ``ow`` (SAME, VALID, or the ONNX front end's EXPLICIT)."""
    sh, sw = int(node.option("stride_h")), int(node.option("stride_w"))
    dh = int(node.option("dilation_h_factor")) if dil else 1
    dw = int(node.option("dilation_w_factor")) if dil else 1
    if min(sh, sw, dh, dw) < 1:
        raise Unsupported(f"stride ({sh}, {sw}) or dilation ({dh}, {dw}) below 1")
    padding = node.option("padding")
    if padding == "EXPLICIT":  # ONNX's pads: [top, left] given, bottom/right implied by the output size
        top, left = int(node.option("pad_top")), int(node.option("pad_left"))
        bottom, right = int(node.option("pad_bottom")), int(node.option("pad_right"))
        if min(top, left, bottom, right) < 0:
            raise Unsupported(f"negative padding ({top}, {left}, {bottom}, {right})")
        exp = (
            (h + top + bottom - (kh - 1) * dh - 1) // sh + 1,
            (w + left + right - (kw - 1) * dw - 1) // sw + 1,
        )
        if exp != (oh, ow):
            raise Unsupported(f"output is {oh}x{ow}, the explicit padding gives {exp[0]}x{exp[1]}")
        return dict(stride_h=sh, stride_w=sw, dilation_h=dh, dilation_w=dw, pad_top=top, pad_left=left)
    exp = (out_size(padding, h, kh, sh, dh), out_size(padding, w, kw, sw, dw))
    if exp != (oh, ow):
        raise Unsupported(f"output is {oh}x{ow}, {padding} padding gives {exp[0]}x{exp[1]}")
    return dict(
        stride_h=sh,
        stride_w=sw,
        dilation_h=dh,
        dilation_w=dw,
        pad_top=pad_before(h, kh, sh, dh, oh),
        pad_left=pad_before(w, kw, sw, dw, ow),
    )


def elem_strides(shape4: tuple[int, int, int, int]) -> list[int]:
    """The element strides of a dense 4-D tensor."""
    return [int(np.prod(shape4[i + 1 :], dtype=np.int64)) for i in range(4)]


def broadcast(shape: tuple[int, ...], out: tuple[int, int, int, int]) -> tuple[int, int, int, int] | None:
    """``shape`` as 4-D if it broadcasts to ``out`` (every dimension 1 or equal), else None."""
    s = to4d(shape)
    if any(d not in (1, o) for d, o in zip(s, out, strict=True)):
        return None
    return s
