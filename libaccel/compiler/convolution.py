"""Convolutions and fully connected layers: CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED.

Each lowers to one instruction with TFLite's requantization: per-channel or per-tensor integer
multipliers (:func:`conv_quant`), or onnxruntime's float32 scales for models from the ONNX front end.
"""

from __future__ import annotations

import numpy as np

from libaccel.compiler import quant as q
from libaccel.compiler.emitter import Emitter
from libaccel.compiler.graph import Graph, OpNode, TensorInfo
from libaccel.compiler.plan_common import (
    BYTE_TYPES,
    OpPlan,
    Planner,
    Unsupported,
    activation,
    clamp,
    const,
    geometry,
    multiplier,
)


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


def float_scale_product(node: OpNode, x: TensorInfo, w: TensorInfo) -> bool:
    """Whether TFLite derives this layer's multiplier from the float product of the input and filter
    scales (:func:`quant.convolution_scale`): where it takes GetQuantizedConvolutionMultipler.

    CONV_2D, DEPTHWISE_CONV_2D and TRANSPOSE_CONV do for uint8 only (the scalar "legacy" multiplier
    of PopulateConvolutionQuantizationParams; int8 kernels read its per-channel double loop, which
    broadcasts a per-tensor filter). FULLY_CONNECTED does for every per-tensor filter, unless the
    runtime's kernel multiplies in double (its ``per_tensor_scale_product`` option, set by
    :func:`libaccel.compiler.reference.annotate_reference`).
    """
    if node.op != "FULLY_CONNECTED":
        return x.dtype == "uint8"
    assert w.quant is not None
    product = node.option("per_tensor_scale_product") or "float"
    if product not in ("float", "double"):
        raise Unsupported(f"per-tensor scale product {product!r}")
    return w.quant.per_tensor and product == "float"


def conv_quant(
    x: TensorInfo,
    w: TensorInfo,
    y: TensorInfo,
    cout: int,
    axis: int,
    what: str,
    float_scale: bool = False,
    float_product: bool = False,
) -> tuple[dict, np.ndarray | None]:
    """(per-tensor fields, per-channel [Cout, 2] table or None); checks the filter's quantization.
    ``float_product``: TFLite's multiplier from the scales' float product (:func:`float_scale_product`)."""
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
    reals = [q.convolution_scale(x.quant.scale, s, y.quant.scale, float_product) for s in wq.scales]
    mults = [multiplier(r, what) for r in reals]
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
    b = const(graph, node.inputs[2], "bias")
    if b.dtype != "int32" or b.size != cout:
        raise Unsupported(f"bias is {b.dtype} of {b.size} values; expected int32 x {cout}")
    return b


def _plan_conv(graph: Graph, node: OpNode, depthwise: bool) -> OpPlan:
    name = node.op
    x = activation(graph, node.inputs[0], "input")
    y = activation(graph, node.outputs[0], "output", x.dtype)
    w = const(graph, node.inputs[1], "filter")
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
    geo = geometry(node, h, wd, kh, kw, oh, ow, dil=True)
    fields, table = conv_quant(
        x, w, y, cout, 3 if depthwise else 0, name, float_scale, float_scale_product(node, x, w)
    )
    bias = _bias(graph, node, cout)
    act_min, act_max = clamp(node, y)
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
    x = activation(graph, node.inputs[0], "input")
    y = activation(graph, node.outputs[0], "output", x.dtype)
    w = const(graph, node.inputs[1], "filter")
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
    fields, table = conv_quant(
        x, w, y, cout, 0, "FULLY_CONNECTED", float_scale, float_scale_product(node, x, w)
    )
    bias = _bias(graph, node, cout)
    act_min, act_max = clamp(node, y)
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


PLANNERS: dict[str, Planner] = {
    "CONV_2D": lambda g, n: _plan_conv(g, n, depthwise=False),
    "DEPTHWISE_CONV_2D": lambda g, n: _plan_conv(g, n, depthwise=True),
    "FULLY_CONNECTED": _plan_fully_connected,
}
