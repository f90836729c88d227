"""Whole networks (MobileNetV1/V2-shaped, SSD- and FPN-style detectors, MobileNetV3-flavoured) from
chained quantized layers."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from modelgen.builder import (
    ModelBuilder,
    Quant,
    _Tensor,
    accumulator_output_scale,
    activation_quant,
    quantized_bias,
    quantized_filter,
    same_padding_out,
)


class NetworkBuilder:
    """Chains quantized layers on a :class:`ModelBuilder`: each method takes and returns tensor indices.

    Weights are random, the quantization is real (per-channel int8 filters,
    int32 biases at input_scale * filter_scale, output scales from the
    accumulator spread), so the networks exercise the same arithmetic as
    converted models.
    """

    def __init__(self, seed: int = 0, dtype: str = "int8") -> None:
        self.m = ModelBuilder()
        self.rng = np.random.default_rng(seed)
        self.dtype = dtype
        self._n = 0

    def _name(self, kind: str) -> str:
        self._n += 1
        return f"{kind}_{self._n}"

    def t(self, index: int) -> _Tensor:
        return self.m.tensors[index]

    def input(self, shape: Sequence[int]) -> int:
        return self.m.add_tensor("input", shape, self.dtype, activation_quant(self.rng, self.dtype, 0.02))

    def conv(
        self, x: int, out_ch: int, kernel: int, stride: int = 1, act: str = "RELU6", depthwise: bool = False
    ) -> int:
        xt = self.t(x)
        assert xt.quant is not None
        n, h, w, cin = xt.shape
        cout = cin if depthwise else out_ch
        oh, ow = (
            same_padding_out(h, kernel, stride, 1, "SAME"),
            same_padding_out(w, kernel, stride, 1, "SAME"),
        )
        shape = (1, kernel, kernel, cout) if depthwise else (cout, kernel, kernel, cin)
        depth = kernel * kernel * (1 if depthwise else cin)
        wdata, wq = quantized_filter(
            self.rng, shape, self.dtype, self.dtype == "int8", 3 if depthwise else 0, depth
        )
        in_scale = xt.quant.scales[0]
        wt = self.m.add_const(self._name("filter"), wdata, self.dtype, wq)
        bdata, bq = quantized_bias(self.rng, in_scale, wq, cout, 74 * 74 * math.sqrt(depth))
        b = self.m.add_const(self._name("bias"), bdata, "int32", bq)
        oq = activation_quant(self.rng, self.dtype, accumulator_output_scale(in_scale, wq, depth))
        y = self.m.add_tensor(self._name("act"), (n, oh, ow, cout), self.dtype, oq)
        options: dict[str, Any] = dict(
            padding="SAME", stride_h=stride, stride_w=stride, fused_activation_function=act
        )
        if depthwise:
            options["depth_multiplier"] = 1
        self.m.add_op("DEPTHWISE_CONV_2D" if depthwise else "CONV_2D", [x, wt, b], [y], **options)
        return y

    def add(self, a: int, b: int, act: str = "NONE") -> int:
        ta, tb = self.t(a), self.t(b)
        assert ta.quant is not None and tb.quant is not None
        scale = float(np.float32((ta.quant.scales[0] + tb.quant.scales[0]) * 0.8))
        y = self.m.add_tensor(
            self._name("add"), ta.shape, self.dtype, activation_quant(self.rng, self.dtype, scale)
        )
        self.m.add_op("ADD", [a, b], [y], fused_activation_function=act)
        return y

    def avgpool_global(self, x: int) -> int:
        xt = self.t(x)
        n, h, w, c = xt.shape
        y = self.m.add_tensor(self._name("pool"), (n, 1, 1, c), self.dtype, xt.quant)
        self.m.add_op(
            "AVERAGE_POOL_2D",
            [x],
            [y],
            padding="VALID",
            stride_h=1,
            stride_w=1,
            filter_height=h,
            filter_width=w,
            fused_activation_function="NONE",
        )
        return y

    def reshape(self, x: int, shape: Sequence[int]) -> int:
        xt = self.t(x)
        s = self.m.add_const(self._name("shape"), np.array(shape, dtype=np.int32), "int32")
        y = self.m.add_tensor(self._name("reshape"), shape, self.dtype, xt.quant)
        self.m.add_op("RESHAPE", [x, s], [y], new_shape=list(shape))
        return y

    def fc(self, x: int, out: int, act: str = "NONE") -> int:
        xt = self.t(x)
        assert xt.quant is not None
        k = xt.shape[-1]
        wdata, wq = quantized_filter(self.rng, (out, k), self.dtype, False, 0, k)
        wt = self.m.add_const(self._name("fc_filter"), wdata, self.dtype, wq)
        bdata, bq = quantized_bias(self.rng, xt.quant.scales[0], wq, out, 74 * 74 * math.sqrt(k))
        b = self.m.add_const(self._name("fc_bias"), bdata, "int32", bq)
        oq = activation_quant(self.rng, self.dtype, accumulator_output_scale(xt.quant.scales[0], wq, k))
        y = self.m.add_tensor(self._name("logits"), (xt.shape[0], out), self.dtype, oq)
        self.m.add_op("FULLY_CONNECTED", [x, wt, b], [y], fused_activation_function=act)
        return y

    def concat(self, xs: Sequence[int], axis: int) -> int:
        """CONCATENATION; inputs are first re-expressed in one quantization by the caller's design."""
        shapes = [self.t(x).shape for x in xs]
        out_shape = list(shapes[0])
        out_shape[axis] = sum(s[axis] for s in shapes)
        y = self.m.add_tensor(self._name("concat"), out_shape, self.dtype, self.t(xs[0]).quant)
        self.m.add_op("CONCATENATION", list(xs), [y], axis=axis, fused_activation_function="NONE")
        return y

    def unary(self, op: str, x: int) -> int:
        """LOGISTIC, TANH (TFLite's fixed output quantization), HARD_SWISH or RELU on ``x``."""
        xt = self.t(x)
        assert xt.quant is not None
        if op == "LOGISTIC":
            oq = Quant.tensor(1 / 256, -128 if self.dtype == "int8" else 0)
        elif op == "TANH":
            oq = Quant.tensor(1 / 128, 0 if self.dtype == "int8" else 128)
        else:
            oq = activation_quant(self.rng, self.dtype, float(np.float32(xt.quant.scales[0] * 0.7)))
        y = self.m.add_tensor(self._name(op.lower()), xt.shape, self.dtype, oq)
        self.m.add_op(op, [x], [y])
        return y

    def mul(self, a: int, b: int) -> int:
        ta, tb = self.t(a), self.t(b)
        assert ta.quant is not None and tb.quant is not None
        scale = float(np.float32(ta.quant.scales[0] * tb.quant.scales[0] * 128))
        y = self.m.add_tensor(
            self._name("mul"), ta.shape, self.dtype, activation_quant(self.rng, self.dtype, scale)
        )
        self.m.add_op("MUL", [a, b], [y], fused_activation_function="NONE")
        return y

    def mean_hw(self, x: int) -> int:
        """MEAN over H and W with keep_dims (squeeze-and-excite's squeeze)."""
        xt = self.t(x)
        assert xt.quant is not None
        n, h, w, c = xt.shape
        axis = self.m.add_const(self._name("axis"), np.array([1, 2], dtype=np.int32), "int32")
        oq = activation_quant(self.rng, self.dtype, float(np.float32(xt.quant.scales[0] * 0.5)))
        y = self.m.add_tensor(self._name("mean"), (n, 1, 1, c), self.dtype, oq)
        self.m.add_op("MEAN", [x, axis], [y], keep_dims=True)
        return y

    def resize_nearest(self, x: int, factor: int) -> int:
        xt = self.t(x)
        n, h, w, c = xt.shape
        size = self.m.add_const(
            self._name("size"), np.array([h * factor, w * factor], dtype=np.int32), "int32"
        )
        y = self.m.add_tensor(self._name("resize"), (n, h * factor, w * factor, c), self.dtype, xt.quant)
        self.m.add_op(
            "RESIZE_NEAREST_NEIGHBOR", [x, size], [y], align_corners=False, half_pixel_centers=False
        )
        return y

    def float_input(self, shape: Sequence[int]) -> tuple[int, int]:
        """A float32 model input and its QUANTIZE to the network's type: (float input, quantized tensor)."""
        f = self.m.add_tensor("input_float", shape, "float32")
        y = self.m.add_tensor("input_q", shape, self.dtype, activation_quant(self.rng, self.dtype, 0.02))
        self.m.add_op("QUANTIZE", [f], [y])
        return f, y

    def dequantize(self, x: int) -> int:
        xt = self.t(x)
        y = self.m.add_tensor(self._name("dequant"), xt.shape, "float32")
        self.m.add_op("DEQUANTIZE", [x], [y])
        return y

    def build(self, inputs: Sequence[int], outputs: Sequence[int]) -> bytes:
        return self.m.build(inputs, outputs)


MOBILENET_V1_BLOCKS = (
    [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)]
    + [(512, 1)] * 5
    + [
        (1024, 2),
        (1024, 1),
    ]
)


def mobilenet_v1_model(size: int = 224, alpha: float = 1.0, classes: int = 1000, seed: int = 0) -> bytes:
    """MobileNetV1-shaped int8 network: conv 3x3/2, 13 depthwise-separable blocks, global pool, FC."""
    nb = NetworkBuilder(seed)
    x = nb.input((1, size, size, 3))
    y = nb.conv(x, max(8, int(32 * alpha)), 3, 2)
    for ch, stride in MOBILENET_V1_BLOCKS:
        y = nb.conv(y, 0, 3, stride, depthwise=True)
        y = nb.conv(y, max(8, int(ch * alpha)), 1, 1)
    y = nb.avgpool_global(y)
    y = nb.reshape(y, (1, nb.t(y).shape[-1]))
    y = nb.fc(y, classes)
    return nb.build([x], [y])


MOBILENET_V2_BLOCKS = [  # (expansion, channels, repeats, first stride)
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
]


def mobilenet_v2_model(size: int = 224, alpha: float = 1.0, classes: int = 1000, seed: int = 0) -> bytes:
    """MobileNetV2-shaped int8 network: inverted residual blocks with linear bottlenecks and ADDs."""
    nb = NetworkBuilder(seed)
    x = nb.input((1, size, size, 3))
    y = nb.conv(x, max(8, int(32 * alpha)), 3, 2)
    for t, c, n, s in MOBILENET_V2_BLOCKS:
        ch = max(8, int(c * alpha))
        for i in range(n):
            cin = nb.t(y).shape[-1]
            h = nb.conv(y, cin * t, 1, 1) if t != 1 else y
            h = nb.conv(h, 0, 3, s if i == 0 else 1, depthwise=True)
            h = nb.conv(h, ch, 1, 1, act="NONE")
            y = nb.add(y, h) if (i > 0 and cin == ch) else h
    y = nb.conv(y, max(8, int(1280 * alpha)), 1, 1)
    y = nb.avgpool_global(y)
    y = nb.reshape(y, (1, nb.t(y).shape[-1]))
    y = nb.fc(y, classes)
    return nb.build([x], [y])


def ssd_like_model(size: int = 96, classes: int = 5, anchors: int = 3, seed: int = 0) -> bytes:
    """A small SSD-style detector: a MobileNet-ish backbone and box/class heads on two feature maps.

    Outputs: boxes [1, N, 4] and class scores [1, N, classes] (raw logits, no NMS).
    """
    nb = NetworkBuilder(seed)
    x = nb.input((1, size, size, 3))
    y = nb.conv(x, 16, 3, 2)
    feats = []
    for ch, stride in [(32, 2), (64, 2), (64, 1), (128, 2), (128, 1)]:
        y = nb.conv(y, 0, 3, stride, depthwise=True)
        y = nb.conv(y, ch, 1, 1)
        if stride == 1:
            feats.append(y)
    boxes, scores = [], []
    for f in feats:
        _, h, w, _ = nb.t(f).shape
        bo = nb.conv(f, anchors * 4, 3, 1, act="NONE")
        sc = nb.conv(f, anchors * classes, 3, 1, act="NONE")
        if boxes:  # one quantization per head type, so the reshapes and concats are exact copies
            nb.t(bo).quant = nb.t(boxes[0]).quant
            nb.t(sc).quant = nb.t(scores[0]).quant
        boxes.append(nb.reshape(bo, (1, h * w * anchors, 4)))
        scores.append(nb.reshape(sc, (1, h * w * anchors, classes)))
    return nb.build([x], [nb.concat(boxes, 1), nb.concat(scores, 1)])


def mobilenet_v3_like_model(size: int = 64, seed: int = 0, float_io: bool = True) -> bytes:
    """MobileNetV3-flavoured int8 network: HARD_SWISH, squeeze-and-excite (MEAN, LOGISTIC, MUL), a
    requantizing QUANTIZE, TANH; with ``float_io`` a float32 input QUANTIZE and output DEQUANTIZE
    (the conversions a converted model has at its edges)."""
    nb = NetworkBuilder(seed)
    if float_io:
        x_in, x = nb.float_input((1, size, size, 3))
    else:
        x_in = x = nb.input((1, size, size, 3))
    y = nb.unary("HARD_SWISH", nb.conv(x, 16, 3, 2, act="NONE"))
    for ch, stride in [(24, 2), (40, 2), (48, 1)]:
        y = nb.conv(y, 0, 3, stride, act="NONE", depthwise=True)
        y = nb.unary("HARD_SWISH", y)
        gate = nb.unary(
            "LOGISTIC",
            nb.conv(nb.conv(nb.mean_hw(y), 8, 1, 1, act="RELU"), nb.t(y).shape[-1], 1, 1, act="NONE"),
        )
        y = nb.mul(y, gate)
        y = nb.conv(y, ch, 1, 1, act="NONE")
    requant = nb.m.add_tensor("requant", nb.t(y).shape, nb.dtype, activation_quant(nb.rng, nb.dtype, 0.05))
    nb.m.add_op("QUANTIZE", [y], [requant])
    y = nb.unary("TANH", requant)
    y = nb.mean_hw(y)
    y = nb.reshape(y, (1, nb.t(y).shape[-1]))
    y = nb.fc(y, 10)
    return nb.build([x_in], [nb.dequantize(y) if float_io else y])


def fpn_detector_model(size: int = 64, classes: int = 4, anchors: int = 2, seed: int = 0) -> bytes:
    """A small FPN-style detector: the coarse map upsampled by RESIZE_NEAREST_NEIGHBOR and added to the
    finer one, box and LOGISTIC class-score heads."""
    nb = NetworkBuilder(seed)
    x = nb.input((1, size, size, 3))
    y = nb.conv(x, 16, 3, 2)
    y = nb.conv(nb.conv(y, 0, 3, 2, depthwise=True), 32, 1, 1)
    fine = y
    coarse = nb.conv(nb.conv(y, 0, 3, 2, depthwise=True), 32, 1, 1)
    merged = nb.add(fine, nb.resize_nearest(coarse, 2), act="RELU")
    _, h, w, _ = nb.t(merged).shape
    boxes = nb.reshape(nb.conv(merged, anchors * 4, 3, 1, act="NONE"), (1, h * w * anchors, 4))
    scores = nb.conv(merged, anchors * classes, 3, 1, act="NONE")
    scores = nb.unary("LOGISTIC", nb.reshape(scores, (1, h * w * anchors, classes)))
    return nb.build([x], [boxes, scores])
