"""Per-operator support checks and lowering to vnpu instructions.

Each TFLite op has one ``_plan_<op>`` function that checks everything the
exact lowering needs (types, quantization, shapes, options, the range of the
integer multipliers) and returns an :class:`OpPlan` whose ``emit`` writes the
instructions. :func:`check_support` and the compiler call the same function,
so what the partitioner accepts is exactly what the compiler can lower.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from libaccel.compiler import quant as q
from libaccel.compiler import shape_folding, tables
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


# --- common checks ---------------------------------------------------------------
def _t(graph: Graph, index: int, what: str) -> TensorInfo:
    if index < 0:
        raise Unsupported(f"{what} is absent")
    if index not in graph.tensors:
        raise Unsupported(f"{what} is tensor {index}, which the graph does not have")
    return graph.tensors[index]


def _activation(graph: Graph, index: int, what: str, dtype: str | None = None) -> TensorInfo:
    """A per-tensor quantized int8/uint8 tensor of static shape, rank <= 4."""
    t = _t(graph, index, what)
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


def _const(graph: Graph, index: int, what: str) -> TensorInfo:
    t = _t(graph, index, what)
    if t.data is None:
        raise Unsupported(f"{what} {t.name!r} is not a constant")
    return t


def _fused(node: OpNode) -> str:
    act = node.option("fused_activation_function")
    if act not in ACTIVATIONS:
        raise Unsupported(f"fused activation {act} has no exact clamp")
    return act


def _clamp(node: OpNode, out: TensorInfo) -> tuple[int, int]:
    assert out.quant is not None
    return q.activation_range(_fused(node), out.quant.scale, out.quant.zero_point, out.dtype)


def _mult(real: float, what: str) -> tuple[int, int]:
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


def _geometry(node: OpNode, h: int, w: int, kh: int, kw: int, oh: int, ow: int, dil: bool) -> dict:
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


# --- convolutions ------------------------------------------------------------------------
def _requant_mode(node: OpNode) -> bool:
    """True for onnxruntime's float32-scale requantization (the node's ``requant`` option "float",
    set by the ONNX front end), False for TFLite's fixed point (absent or "fixed")."""
    mode = node.option("requant") or "fixed"
    if mode not in ("fixed", "float"):
        raise Unsupported(f"requantization {mode!r}")
    return mode == "float"


def _check_filter_type(x: TensorInfo, w: TensorInfo, float_scale: bool) -> None:
    # onnxruntime pairs uint8 activations with int8 filters (quantize_static's default); its kernels
    # subtract each operand's zero point, which is what the NPU does for any pair of byte types.
    if w.dtype == x.dtype or (float_scale and w.dtype in BYTE_TYPES):
        return
    raise Unsupported(f"filter is {w.dtype}, input {x.dtype} (hybrid models stay on the CPU)")


def _float_scale_quant(
    x: TensorInfo, w: TensorInfo, y: TensorInfo, cout: int, axis: int, what: str
) -> tuple[dict, np.ndarray | None]:
    """onnxruntime's scales (QLinearConv's ComputeOutputScale: float32 ``x * w / y`` left to right)
    as FLOAT_SCALE's float32 bits: per-tensor fields, or a per-channel [Cout, 2] (bits, 0) table."""
    assert x.quant and y.quant and w.quant
    wq = w.quant
    if any(z != wq.zero_points[0] for z in wq.zero_points):
        raise Unsupported(f"{what} filter zero points differ per channel (onnxruntime rejects it)")
    if not wq.per_tensor and (wq.axis != axis or len(wq.scales) != cout):
        raise Unsupported(f"filter quantized along axis {wq.axis} with {len(wq.scales)} scales")
    f32 = np.float32
    scales = np.array([f32(f32(x.quant.scale) * f32(s)) / f32(y.quant.scale) for s in wq.scales], f32)
    if not np.isfinite(scales).all():
        raise Unsupported(f"{what} requantization scale is not finite")
    bits = scales.view(np.int32)
    if len(bits) == 1 or (bits == bits[0]).all():
        return dict(multiplier=int(bits[0]), shift=0), None
    table = np.zeros((cout, 2), dtype=np.int32)
    table[:, 0] = bits
    return dict(multiplier=0, shift=0), table


def _conv_quant(
    x: TensorInfo, w: TensorInfo, y: TensorInfo, cout: int, axis: int, what: str, float_scale: bool = False
) -> tuple[dict, np.ndarray | None]:
    """(per-tensor fields, per-channel [Cout, 2] table or None); checks the filter's quantization."""
    assert x.quant and y.quant
    wq = w.quant
    if wq is None:
        raise Unsupported(f"{what} filter has no quantization")
    if float_scale:
        return _float_scale_quant(x, w, y, cout, axis, what)
    if x.dtype == "int8":
        if any(z != 0 for z in wq.zero_points):
            raise Unsupported("int8 filter with a non-zero zero point (TFLite requires symmetric)")
    elif not wq.per_tensor:
        raise Unsupported("uint8 filter quantized per channel")
    if not wq.per_tensor and (wq.axis != axis or len(wq.scales) != cout):
        raise Unsupported(f"filter quantized along axis {wq.axis} with {len(wq.scales)} scales")
    # TFLite: effective scale = double(input_scale) * double(filter_scale) / double(output_scale).
    reals = [x.quant.scale * s / y.quant.scale for s in wq.scales]
    mults = [_mult(r, what) for r in reals]
    if len(mults) == 1 and x.dtype == "uint8":
        m, s = mults[0]
        return dict(multiplier=m, shift=s), None
    if len(mults) == 1:
        mults = mults * cout  # int8 kernels requantize per channel even for per-tensor filters
    table = np.array(mults, dtype=np.int32).reshape(cout, 2)
    if (table[:, 0] == table[0, 0]).all() and (table[:, 1] == table[0, 1]).all():
        return dict(multiplier=int(table[0, 0]), shift=int(table[0, 1])), None
    return dict(multiplier=0, shift=0), table


def _bias(graph: Graph, node: OpNode, cout: int) -> TensorInfo | None:
    if len(node.inputs) < 3 or node.inputs[2] < 0:
        return None
    b = _const(graph, node.inputs[2], "bias")
    if b.dtype != "int32" or b.size != cout:
        raise Unsupported(f"bias is {b.dtype} of {b.size} values; expected int32 x {cout}")
    return b


def _plan_conv(graph: Graph, node: OpNode, depthwise: bool) -> OpPlan:
    name = node.op
    x = _activation(graph, node.inputs[0], "input")
    y = _activation(graph, node.outputs[0], "output", x.dtype)
    w = _const(graph, node.inputs[1], "filter")
    float_scale = _requant_mode(node)
    _check_filter_type(x, w, float_scale)
    if len(x.shape) != 4 or len(y.shape) != 4 or len(w.shape) != 4:
        raise Unsupported("input, filter and output must be 4-D")
    n, h, wd, cin = x.shape
    on, oh, ow, cout = y.shape
    if depthwise:
        one, kh, kw, fcout = w.shape
        dm = int(node.option("depth_multiplier"))
        if one != 1 or fcout != cout or cout != cin * dm:
            raise Unsupported(
                f"filter {list(w.shape)} with depth_multiplier {dm} does not fit {cin} -> {cout}"
            )
    else:
        fcout, kh, kw, fcin = w.shape
        if fcin != cin or fcout != cout:
            raise Unsupported(f"filter {list(w.shape)} does not fit {cin} -> {cout} channels (grouped?)")
        dm = 0
    if on != n:
        raise Unsupported(f"batch {n} -> {on}")
    geo = _geometry(node, h, wd, kh, kw, oh, ow, dil=True)
    fields, table = _conv_quant(x, w, y, cout, 3 if depthwise else 0, name, float_scale)
    bias = _bias(graph, node, cout)
    act_min, act_max = _clamp(node, y)
    op = "DEPTHWISE_CONV2D" if depthwise else "CONV2D"

    def emit(em: Emitter) -> None:
        extra = {"depth_multiplier": dm} if depthwise else {}
        em.op(
            op,
            input=em.tensor(x.index),
            filter=em.tensor(w.index),
            bias=em.tensor(bias.index, shape=(1, 1, 1, cout)) if bias is not None else None,
            quant=em.const(table.reshape(1, 1, cout, 2), "int32") if table is not None else None,
            output=em.tensor(y.index),
            act_min=act_min,
            act_max=act_max,
            float_scale=float_scale,
            **geo,
            **fields,
            **extra,
        )

    return OpPlan(emit)


def _plan_fully_connected(graph: Graph, node: OpNode) -> OpPlan:
    x = _activation(graph, node.inputs[0], "input")
    y = _activation(graph, node.outputs[0], "output", x.dtype)
    w = _const(graph, node.inputs[1], "filter")
    float_scale = _requant_mode(node)
    _check_filter_type(x, w, float_scale)
    if node.option("weights_format") not in ("DEFAULT", 0):
        raise Unsupported(f"weights format {node.option('weights_format')}")
    if len(w.shape) != 2:
        raise Unsupported(f"filter has shape {list(w.shape)}, expected [Cout, K]")
    cout, k = w.shape
    if x.size % k:
        raise Unsupported(f"input of {x.size} values is not rows of {k}")
    rows = x.size // k
    if y.size != rows * cout or y.shape[-1] != cout:
        raise Unsupported(f"output shape {list(y.shape)} is not {rows} rows of {cout}")
    fields, table = _conv_quant(x, w, y, cout, 0, "FULLY_CONNECTED", float_scale)
    bias = _bias(graph, node, cout)
    act_min, act_max = _clamp(node, y)
    rounding = node.option("rounding") or "double"  # reference.annotate_reference sets it
    if rounding not in ("single", "double"):
        raise Unsupported(f"requantization rounding {rounding!r}")
    if float_scale and rounding == "single":
        raise Unsupported("single rounding and a float scale are two different requantizations")

    def emit(em: Emitter) -> None:
        em.op(
            "FULLY_CONNECTED",
            input=em.tensor(x.index, shape=(1, 1, rows, k)),
            filter=em.tensor(w.index, shape=(1, 1, cout, k)),
            bias=em.tensor(bias.index, shape=(1, 1, 1, cout)) if bias is not None else None,
            quant=em.const(table.reshape(1, 1, cout, 2), "int32") if table is not None else None,
            output=em.tensor(y.index, shape=(1, 1, rows, cout)),
            act_min=act_min,
            act_max=act_max,
            single_rounding=rounding == "single",
            float_scale=float_scale,
            **fields,
        )

    return OpPlan(emit)


# --- elementwise ----------------------------------------------------------------------------
def _elementwise_operand(graph: Graph, index: int, what: str, dtype: str) -> TensorInfo:
    t = _t(graph, index, what)
    if t.data is not None:  # constant operands live in the weights region
        if t.dtype != dtype or t.quant is None or not t.quant.per_tensor or len(t.shape) > 4:
            raise Unsupported(f"constant {what} {t.name!r} is not a per-tensor {dtype} of rank <= 4")
        return t
    return _activation(graph, index, what, dtype)


def _broadcast(shape: tuple[int, ...], out: tuple[int, int, int, int]) -> tuple[int, int, int, int] | None:
    s = to4d(shape)
    if any(d not in (1, o) for d, o in zip(s, out, strict=True)):
        return None
    return s


def _plan_elementwise(graph: Graph, node: OpNode) -> OpPlan:
    if len(node.inputs) != 2:
        raise Unsupported(f"{node.op} with {len(node.inputs)} inputs")
    y = _activation(graph, node.outputs[0], "output")
    a = _elementwise_operand(graph, node.inputs[0], "input1", y.dtype)
    b = _elementwise_operand(graph, node.inputs[1], "input2", y.dtype)
    out4 = to4d(y.shape)
    a4, b4 = _broadcast(a.shape, out4), _broadcast(b.shape, out4)
    if a4 is None or b4 is None:
        raise Unsupported(f"shapes {list(a.shape)} and {list(b.shape)} do not broadcast to {list(y.shape)}")
    assert a.quant and b.quant and y.quant
    act_min, act_max = _clamp(node, y)
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
        # TFLite's MUL Prepare computes input1_scale * input2_scale / output_scale in float.
        real = float(np.float32(np.float32(s1) * np.float32(s2)) / np.float32(so))
        mo, sho = _mult(real, "MUL")
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


# --- pooling -------------------------------------------------------------------------------
def _plan_pool(graph: Graph, node: OpNode) -> OpPlan:
    x = _activation(graph, node.inputs[0], "input")
    y = _activation(graph, node.outputs[0], "output", x.dtype)
    if len(x.shape) != 4 or len(y.shape) != 4:
        raise Unsupported("input and output must be 4-D")
    if x.quant != y.quant:
        raise Unsupported("input and output quantization differ")
    n, h, w, c = x.shape
    if (y.shape[0], y.shape[3]) != (n, c):
        raise Unsupported(f"output {list(y.shape)} does not match input {list(x.shape)}")
    fh, fw = int(node.option("filter_height")), int(node.option("filter_width"))
    if min(fh, fw) < 1:
        raise Unsupported(f"filter {fh}x{fw}")
    geo = _geometry(node, h, w, fh, fw, y.shape[1], y.shape[2], dil=False)
    for size, k, s, p, o in ((h, fh, geo["stride_h"], geo["pad_top"], y.shape[1]),
                             (w, fw, geo["stride_w"], geo["pad_left"], y.shape[2])):  # fmt: skip
        if any(min(k, size - (i * s - p)) - max(0, p - i * s) <= 0 for i in range(o)):
            raise Unsupported("a pooling window covers no input position")
    act_min, act_max = _clamp(node, y)
    op = "AVGPOOL" if node.op == "AVERAGE_POOL_2D" else "MAXPOOL"
    del geo["dilation_h"], geo["dilation_w"]

    def emit(em: Emitter) -> None:
        em.op(
            op,
            input=em.tensor(x.index),
            output=em.tensor(y.index),
            filter_h=fh,
            filter_w=fw,
            act_min=act_min,
            act_max=act_max,
            **geo,
        )

    return OpPlan(emit)


# --- activations as lookup tables ---------------------------------------------------------
def _relu_table(node: OpNode, x: TensorInfo, y: TensorInfo) -> np.ndarray:
    """TFLite's quantized ReluX (activations.cc): requantize then clamp, as a 256-entry table."""
    assert x.quant and y.quant
    # ReluPrepare: input_scale / output_scale in float, then QuantizeMultiplier.
    real = float(np.float32(x.quant.scale) / np.float32(y.quant.scale))
    m, shift = _mult(real, node.op)
    lo, hi = q.QRANGE[y.dtype]
    zo = y.quant.zero_point

    def bound(f: float) -> int:
        return zo + q.tflite_round(float(np.float32(f) / np.float32(y.quant.scale)))

    bounds = {"RELU": (0.0, None), "RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0)}[node.op]
    act_min = max(lo, bound(bounds[0]))
    act_max = hi if bounds[1] is None else min(hi, bound(bounds[1]))
    base = -128 if x.dtype == "int8" else 0
    zi = x.quant.zero_point
    vals = q.multiply_by_quantized_multiplier(np.arange(base, base + 256, dtype=np.int64) - zi, m, shift) + zo
    return np.clip(vals, act_min, act_max)


def _lut_table(node: OpNode, x: TensorInfo, y: TensorInfo) -> np.ndarray:
    """The 256-entry table of TFLite's reference kernel for ``node`` (see :mod:`.tables`)."""
    assert x.quant and y.quant
    args = (x.quant.scale, x.quant.zero_point, y.quant.scale, y.quant.zero_point)
    if node.op in ("RELU", "RELU6", "RELU_N1_TO_1"):
        return _relu_table(node, x, y)
    if node.op == "LOGISTIC":
        return tables.logistic_table(*args, x.dtype)
    if node.op == "TANH":
        return tables.tanh_table(*args, x.dtype)
    if node.op == "HARD_SWISH":
        try:
            return tables.hard_swish_table(*args, x.dtype)
        except ValueError as e:
            raise Unsupported(str(e)) from None
    if node.op == "LEAKY_RELU":
        alpha = node.options.get("alpha")
        if alpha is None:  # no schema default would be right: the slope must come from the model
            raise Unsupported("LEAKY_RELU without its alpha option")
        return tables.leaky_relu_table(*args, float(alpha), x.dtype)
    if node.op == "QUANTIZE":
        real = float(x.quant.scale) / float(y.quant.scale)
        _mult(real, "QUANTIZE")  # the same shift limits as every requantization
        return tables.requantize_table(*args, x.dtype, y.dtype)
    raise Unsupported(f"{node.op} has no lookup table")


def _plan_lut(graph: Graph, node: OpNode) -> OpPlan:
    """Any elementwise op of one 8-bit input: one LUT instruction with TFLite's table."""
    if node.op in ("QUANTIZE", "DEQUANTIZE"):
        # The NPU computes no float: float <-> int8 conversions at a model's edges stay on the CPU.
        x0, y0 = _t(graph, node.inputs[0], "input"), _t(graph, node.outputs[0], "output")
        if x0.dtype not in BYTE_TYPES or y0.dtype not in BYTE_TYPES:
            raise Unsupported(
                f"{node.op} {x0.dtype} -> {y0.dtype} converts to or from float; the NPU has no float "
                "arithmetic (only 8-bit -> 8-bit requantization runs on the NPU)"
            )
    x = _activation(graph, node.inputs[0], "input")
    y = _activation(graph, node.outputs[0], "output", None if node.op == "QUANTIZE" else x.dtype)
    if x.shape != y.shape:
        raise Unsupported(f"input {list(x.shape)} and output {list(y.shape)} differ")
    table = _lut_table(node, x, y)
    np_t = np.int8 if y.dtype == "int8" else np.uint8
    shape4 = to4d(x.shape)

    def emit(em: Emitter) -> None:
        em.op(
            "LUT",
            input=em.tensor(x.index, shape=shape4),
            table=em.const(table.astype(np_t).reshape(1, 1, 1, 256), y.dtype),
            output=em.tensor(y.index, shape=shape4),
        )

    return OpPlan(emit)


# --- layout ----------------------------------------------------------------------------------
def _plan_reshape(graph: Graph, node: OpNode) -> OpPlan:
    if node.op == "RESHAPE" and len(node.inputs) > 1 and node.inputs[1] >= 0:
        if _t(graph, node.inputs[1], "shape").data is None:
            # TFLite then sizes the output at run time; shape_folding.fold_shapes makes it a constant
            # where the input shapes are static.
            raise Unsupported("RESHAPE's shape is computed at run time (not foldable at compile time)")
    x = _activation(graph, node.inputs[0], "input")
    y = _activation(graph, node.outputs[0], "output", x.dtype)
    if x.quant != y.quant or x.size != y.size:
        raise Unsupported("RESHAPE changing quantization or element count")
    return OpPlan(alias_of=x.index)


def _plan_concat(graph: Graph, node: OpNode) -> OpPlan:
    y = _activation(graph, node.outputs[0], "output")
    xs = [_activation(graph, i, f"input{k}", y.dtype) for k, i in enumerate(node.inputs)]
    if _fused(node) != "NONE":
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
    v = _const(graph, node.inputs[2], "constant_values")
    if v.dtype != y.dtype or v.size != 1 or v.quant != y.quant:
        raise Unsupported("constant_values is not a scalar quantized like the output (TFLite requires it)")
    assert v.data is not None
    return int(np.asarray(v.data).reshape(-1)[0])


def _plan_pad(graph: Graph, node: OpNode) -> OpPlan:
    """PAD and PADV2: FILL with the pad value, then one COPY of the input into the interior."""
    x = _activation(graph, node.inputs[0], "input")
    y = _activation(graph, node.outputs[0], "output", x.dtype)
    value = _pad_value(graph, node, y)
    p = _const(graph, node.inputs[1], "paddings")
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


def _int_const(graph: Graph, index: int, what: str) -> np.ndarray:
    t = _const(graph, index, what)
    if t.dtype not in ("int32", "int64"):
        raise Unsupported(f"{what} is {t.dtype}, expected int32")
    assert t.data is not None
    return np.asarray(t.data, dtype=np.int64).reshape(-1)


def _elem_strides(shape4: tuple[int, int, int, int]) -> list[int]:
    return [int(np.prod(shape4[i + 1 :], dtype=np.int64)) for i in range(4)]


def _plan_transpose(graph: Graph, node: OpNode) -> OpPlan:
    x = _activation(graph, node.inputs[0], "input")
    y = _activation(graph, node.outputs[0], "output", x.dtype)
    perm = [int(p) for p in _int_const(graph, node.inputs[1], "permutation")]
    rank = len(x.shape)
    perm = [p + rank if p < 0 else p for p in perm]
    if sorted(perm) != list(range(rank)):
        raise Unsupported(f"permutation {perm} of rank {rank}")
    if tuple(x.shape[p] for p in perm) != y.shape:
        raise Unsupported(f"output shape {list(y.shape)} is not the permuted input")
    shift = 4 - rank
    elem = _elem_strides(to4d(x.shape))
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
    x = _activation(graph, node.inputs[0], "input")
    y = _activation(graph, node.outputs[0], "output", x.dtype)
    for mask in ("ellipsis_mask", "new_axis_mask", "shrink_axis_mask"):
        if node.option(mask):
            raise Unsupported(f"{mask} {node.option(mask)}")
    if node.option("offset"):
        raise Unsupported("offset=True")
    rank = len(x.shape)
    begin = _int_const(graph, node.inputs[1], "begin")
    end = _int_const(graph, node.inputs[2], "end")
    step = _int_const(graph, node.inputs[3], "strides")
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
    elem = _elem_strides(to4d(x.shape))
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
    x = _activation(graph, node.inputs[0], "input")
    y = _activation(graph, node.outputs[0], "output", x.dtype)
    if len(x.shape) != 4 or len(y.shape) != 4 or (x.shape[0], x.shape[3]) != (y.shape[0], y.shape[3]):
        raise Unsupported(f"input {list(x.shape)} and output {list(y.shape)} are not NHWC of equal N, C")
    size = _int_const(graph, node.inputs[1], "size")
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


PLANNERS: dict[str, Callable[[Graph, OpNode], OpPlan]] = {
    "CONV_2D": lambda g, n: _plan_conv(g, n, depthwise=False),
    "DEPTHWISE_CONV_2D": lambda g, n: _plan_conv(g, n, depthwise=True),
    "FULLY_CONNECTED": _plan_fully_connected,
    "ADD": _plan_elementwise,
    "SUB": _plan_elementwise,
    "MUL": _plan_elementwise,
    "AVERAGE_POOL_2D": _plan_pool,
    "MAX_POOL_2D": _plan_pool,
    "RELU": _plan_lut,
    "RELU6": _plan_lut,
    "RELU_N1_TO_1": _plan_lut,
    "LOGISTIC": _plan_lut,
    "TANH": _plan_lut,
    "HARD_SWISH": _plan_lut,
    "LEAKY_RELU": _plan_lut,
    "QUANTIZE": _plan_lut,
    "DEQUANTIZE": _plan_lut,
    "RESIZE_NEAREST_NEIGHBOR": _plan_resize_nearest,
    "RESHAPE": _plan_reshape,
    "CONCATENATION": _plan_concat,
    "PAD": _plan_pad,
    "PADV2": _plan_pad,
    "SQUEEZE": _plan_reshape,  # like RESHAPE: the same bytes under another shape
    "EXPAND_DIMS": _plan_reshape,
    "TRANSPOSE": _plan_transpose,
    "STRIDED_SLICE": _plan_strided_slice,
}


# Ops whose planners write several outputs (each checks every one); every other op has one output.
MULTI_OUTPUT = frozenset({"SPLIT", "SPLIT_V"})


def plan_node(graph: Graph, node: OpNode) -> OpPlan:
    """The lowering of ``node``; raises :class:`Unsupported` with the reason it cannot be exact."""
    if shape_folding.is_folded(graph, node):
        return OpPlan(fused=True)  # a shape computation folded into constants: nothing runs
    planner = PLANNERS.get(node.op)
    if planner is None:
        raise Unsupported(f"{node.op} is not an NPU operator")
    if not node.outputs or (len(node.outputs) != 1 and node.op not in MULTI_OUTPUT):
        raise Unsupported(f"{node.op} with {len(node.outputs)} outputs")
    try:
        return planner(graph, node)
    except (IndexError, KeyError, TypeError) as e:  # malformed node: wrong input count, option types
        raise Unsupported(f"malformed {node.op}: {e}") from None


def check_support(graph: Graph, node: OpNode) -> Support:
    """Whether ``node`` runs on the NPU bit-exactly, and if not, why (for the placement report)."""
    try:
        plan_node(graph, node)
    except Unsupported as e:
        return Support(False, str(e))
    return Support(True, "")


# Lowerings in their own modules: each adds its planners to PLANNERS when imported (they import this
# module's helpers, so whichever of the two is imported first, both end up complete).
from libaccel.compiler import (  # noqa: E402, F401
    argmax,
    binary_tables,
    lookup,
    matmul,
    movement,
    reduce,
    resize,
    softmax,
    transpose_conv,
)
