"""Quantized ONNX test models: float graphs built with onnx.helper, quantized by onnxruntime's own
``quantize_static`` in QDQ or QOperator form (the two forms users arrive with).

    python -m tools.convert.make_onnx_models OUT_DIR     # the committed fixtures (tests/onnx/models)

One-op builders (``conv_model``, ``matmul_model``, ``gemm_model``, ``binary_model``, ``pool_model``,
``concat_model``, ``activation_model``, ``layout_model``) make the op grid; ``mobilenet_like`` and
``resnet_like`` are whole networks (NCHW, as exporters write them). Everything is seeded: the same
arguments give the same bytes.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
FIXTURES = ("mobilenet_like", "resnet_like")


class _Builder:
    """Float graph under construction: nodes, initializers, fresh names."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}{self.count}"

    def const(self, value: np.ndarray, base: str = "w") -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], base: str | None = None, **attrs: object) -> str:
        out = self.name(base or op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out + "_node", **attrs))
        return out

    def conv(
        self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1, relu: bool = True
    ) -> str:
        fan_in = cin // group * k * k
        w = self.rng.normal(0, 1 / np.sqrt(fan_in), size=(cout, cin // group, k, k)).astype(np.float32)
        b = self.rng.normal(0, 0.1, size=cout).astype(np.float32)
        pad = k // 2
        y = self.node(
            "Conv", [x, self.const(w), self.const(b, "b")], "conv", kernel_shape=[k, k],
            strides=[stride, stride], pads=[pad] * 4, group=group,
        )  # fmt: skip
        return self.node("Relu", [y]) if relu else y

    def model(self, inputs: list[tuple[str, list[int]]], outputs: list[str]) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            "g",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
            self.inits,
        )
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        m.ir_version = 8
        return onnx.shape_inference.infer_shapes(m)


# --- one-op float models -------------------------------------------------------------------
def conv_model(cin: int = 8, cout: int = 16, k: int = 3, stride: int = 1, depthwise: bool = False,
               size: int = 10, seed: int = 0, group: int = 1) -> onnx.ModelProto:  # fmt: skip
    b = _Builder(seed)
    group = cin if depthwise else group
    y = b.conv("x", cin, cin if depthwise else cout, k, stride, group, relu=False)
    return b.model([("x", [1, cin, size, size])], [y])


def matmul_model(m: int = 6, k: int = 32, n: int = 24, seed: int = 0) -> onnx.ModelProto:
    b = _Builder(seed)
    w = b.rng.normal(0, 1 / np.sqrt(k), size=(k, n)).astype(np.float32)
    return b.model([("x", [m, k])], [b.node("MatMul", ["x", b.const(w)])])


def gemm_model(m: int = 4, k: int = 32, n: int = 10, seed: int = 0) -> onnx.ModelProto:
    b = _Builder(seed)
    w = b.rng.normal(0, 1 / np.sqrt(k), size=(n, k)).astype(np.float32)
    bias = b.rng.normal(0, 0.1, size=n).astype(np.float32)
    return b.model([("x", [m, k])], [b.node("Gemm", ["x", b.const(w), b.const(bias, "b")], transB=1)])


def binary_model(
    op: str = "Add",
    shape: tuple[int, ...] = (1, 8, 6, 6),
    shape_b: tuple[int, ...] | None = None,
    seed: int = 0,
) -> onnx.ModelProto:
    b = _Builder(seed)
    return b.model([("a", list(shape)), ("b", list(shape_b or shape))], [b.node(op, ["a", "b"])])


def activation_model(op: str = "Sigmoid", c: int = 8, size: int = 6, seed: int = 0) -> onnx.ModelProto:
    """A 1x1 convolution then ``op`` (Sigmoid, LeakyRelu): quantize_static quantizes the pair."""
    b = _Builder(seed)
    y = b.conv("x", c, c, 1, relu=False)
    attrs = {"alpha": 0.1} if op == "LeakyRelu" else {}
    return b.model([("x", [1, c, size, size])], [b.node(op, [y], **attrs)])


def pool_model(op: str = "MaxPool", c: int = 8, size: int = 8, seed: int = 0) -> onnx.ModelProto:
    b = _Builder(seed)
    y = b.conv("x", c, c, 1, relu=False)  # pools alone are not quantized: give them a producer
    if op == "GlobalAveragePool":
        out = b.node(op, [y])
    else:
        out = b.node(op, [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    return b.model([("x", [1, c, size, size])], [out])


def concat_model(c: int = 8, size: int = 6, seed: int = 0) -> onnx.ModelProto:
    b = _Builder(seed)
    y1 = b.conv("x", c, c, 1, relu=False)
    y2 = b.conv("x", c, 2 * c, 3, relu=True)
    return b.model([("x", [1, c, size, size])], [b.node("Concat", [y1, y2], axis=1)])


def layout_model(op: str = "Transpose", c: int = 8, size: int = 6, seed: int = 0) -> onnx.ModelProto:
    """conv -> ``op`` -> (conv or MatMul): Transpose (H and W swapped), Pad, Flatten (a 4-D tensor
    with H*W > 1, then MatMul), Clip (0..6) or Relu between two quantized layers."""
    b = _Builder(seed)
    y = b.conv("x", c, c, 1, relu=False)
    if op == "Transpose":
        y = b.node("Transpose", [y], perm=[0, 1, 3, 2])
    elif op == "Pad":
        pads = b.const(np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64), "pads")
        y = b.node("Pad", [y, pads], mode="constant")
    elif op == "Clip":
        y = b.node(
            "Clip", [y, b.const(np.array(0, np.float32), "lo"), b.const(np.array(6, np.float32), "hi")]
        )
    elif op == "Relu":
        y = b.node("Relu", [y])
    elif op == "Resize":  # nearest, scale 2 (onnxruntime's defaults: half_pixel, round_prefer_floor)
        y = b.node("Resize", [y, "", b.const(np.array([1, 1, 2, 2], np.float32), "scales")], mode="nearest")
    elif op == "ResizeSizes":  # nearest to a size that is no integer multiple (6 -> 9), asymmetric, floor
        sizes = b.const(np.array([1, c, size * 3 // 2, size * 3 // 2], np.int64), "sizes")
        y = b.node("Resize", [y, "", "", sizes], mode="nearest", coordinate_transformation_mode="asymmetric",
                   nearest_mode="floor")  # fmt: skip
    if op == "Flatten":
        y = b.node("Flatten", [y], axis=1)
        w = b.rng.normal(0, 0.1, size=(c * size * size, 10)).astype(np.float32)
        return b.model([("x", [1, c, size, size])], [b.node("MatMul", [y, b.const(w)])])
    return b.model([("x", [1, c, size, size])], [b.conv(y, c, c, 3, relu=False)])


# --- networks --------------------------------------------------------------------------------------
def mobilenet_like(size: int = 32, seed: int = 0) -> onnx.ModelProto:
    """MobileNetV1-shaped: conv, depthwise/pointwise pairs with stride 2, global pool, Gemm, Softmax."""
    b = _Builder(seed)
    y = b.conv("input", 3, 8, 3, stride=2)
    for cin, cout, stride in ((8, 16, 1), (16, 32, 2), (32, 32, 1), (32, 64, 2)):
        y = b.conv(y, cin, cin, 3, stride=stride, group=cin)
        y = b.conv(y, cin, cout, 1)
    y = b.node("GlobalAveragePool", [y])
    y = b.node("Flatten", [y], axis=1)
    w = b.rng.normal(0, 1 / 8, size=(10, 64)).astype(np.float32)
    y = b.node("Gemm", [y, b.const(w), b.const(np.zeros(10, np.float32), "b")], transB=1)
    return b.model([("input", [1, 3, size, size])], [b.node("Softmax", [y], axis=1)])


def resnet_like(size: int = 32, seed: int = 0) -> onnx.ModelProto:
    """ResNet-shaped: stem conv + max pool, two basic blocks (one with a strided 1x1 shortcut), Add
    residuals, global pool, MatMul classifier."""
    b = _Builder(seed)
    y = b.conv("input", 3, 16, 3, stride=2)
    y = b.node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    for cin, cout, stride in ((16, 16, 1), (16, 32, 2)):
        h = b.conv(y, cin, cout, 3, stride=stride)
        h = b.conv(h, cout, cout, 3, relu=False)
        short = y if (cin, stride) == (cout, 1) else b.conv(y, cin, cout, 1, stride=stride, relu=False)
        y = b.node("Relu", [b.node("Add", [h, short])])
    y = b.node("GlobalAveragePool", [y])
    y = b.node("Flatten", [y], axis=1)
    w = b.rng.normal(0, 1 / 6, size=(32, 10)).astype(np.float32)
    return b.model([("input", [1, 3, size, size])], [b.node("MatMul", [y, b.const(w)])])


def odd_cnn(seed: int = 0) -> onnx.ModelProto:
    """An odd-shaped CNN (3x29x23 input, 5/7/10/12 channels): strided conv, depthwise conv, grouped
    conv, max pool, a residual Add, a channel Concat, global pool, Gemm."""
    b = _Builder(seed)
    y = b.conv("input", 3, 10, 3, stride=2)
    y = b.node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    d = b.conv(y, 10, 10, 3, group=10)
    g = b.conv(d, 10, 10, 3, group=2, relu=False)
    y = b.node("Relu", [b.node("Add", [g, y])])
    a = b.conv(y, 10, 5, 1)
    c = b.conv(y, 10, 7, 3, stride=1)
    y = b.node("Concat", [a, c], axis=1)
    y = b.conv(y, 12, 12, 3, stride=2)
    y = b.node("GlobalAveragePool", [y])
    y = b.node("Flatten", [y], axis=1)
    w = b.rng.normal(0, 1 / np.sqrt(12), size=(7, 12)).astype(np.float32)
    bias = b.rng.normal(0, 0.1, size=7).astype(np.float32)
    return b.model(
        [("input", [1, 3, 29, 23])], [b.node("Gemm", [y, b.const(w), b.const(bias, "b")], transB=1)]
    )


def _dense(b: _Builder, x: str, k: int, n: int) -> str:
    """MatMul by a [k, n] weight then the bias Add, as exporters write a Linear layer."""
    w = b.rng.normal(0, 1 / np.sqrt(k), size=(k, n)).astype(np.float32)
    bias = b.rng.normal(0, 0.1, size=n).astype(np.float32)
    return b.node("Add", [b.node("MatMul", [x, b.const(w)]), b.const(bias, "b")])


def attention_block(tokens: int = 12, dim: int = 16, seed: int = 0) -> onnx.ModelProto:
    """One head of self-attention on [tokens, dim]: Q, K, V projections, softmax(Q K^T / sqrt(d)) V,
    the output projection and the residual Add."""
    b = _Builder(seed)
    q, k, v = (_dense(b, "input", dim, dim) for _ in range(3))
    kt = b.node("Transpose", [k], perm=[1, 0])
    s = b.node("Mul", [b.node("MatMul", [q, kt]), b.const(np.array(1 / np.sqrt(dim), np.float32), "scale")])
    p = b.node("Softmax", [s], axis=-1)
    y = _dense(b, b.node("MatMul", [p, v]), dim, dim)
    return b.model([("input", [tokens, dim])], [b.node("Add", [y, "input"])])


def ffn(tokens: int = 10, dim: int = 24, hidden: int = 40, seed: int = 0) -> onnx.ModelProto:
    """A transformer's feed-forward block on [tokens, dim]: Linear, Relu, Linear, residual Add."""
    b = _Builder(seed)
    h = b.node("Relu", [_dense(b, "input", dim, hidden)])
    y = _dense(b, h, hidden, dim)
    return b.model([("input", [tokens, dim])], [b.node("Add", [y, "input"])])


# --- quantization ----------------------------------------------------------------------------------
def calibration(model: onnx.ModelProto, seed: int, count: int = 8) -> Iterator[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    inputs = [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim]) for i in model.graph.input]
    for _ in range(count):
        yield {name: rng.normal(0, 1, size=shape).astype(np.float32) for name, shape in inputs}


def quantize(
    model: onnx.ModelProto,
    fmt: str = "qdq",
    activations: str = "uint8",
    per_channel: bool = False,
    seed: int = 0,
    reduce_range: bool = False,
) -> onnx.ModelProto:
    """``quantize_static`` of ``model``: ``fmt`` "qdq" or "qoperator", activations "int8"/"uint8",
    int8 weights per tensor or per channel (7-bit with ``reduce_range``), calibrated on seeded
    normal inputs (MinMax)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = calibration(model, seed)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "float.onnx", Path(tmp) / "quant.onnx"
        onnx.save(model, src)
        quantize_static(
            str(src),
            str(dst),
            Reader(),
            quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
            activation_type=QuantType.QUInt8 if activations == "uint8" else QuantType.QInt8,
            weight_type=QuantType.QInt8,
            per_channel=per_channel,
            reduce_range=reduce_range,
        )
        return onnx.load(dst)


def fixtures() -> dict[str, onnx.ModelProto]:
    """The committed whole-network fixtures: each network in QDQ and QOperator form.

    They run in the QEMU guest too, whose CPU (TCG) has AVX2 but no VNNI: there onnxruntime's
    uint8 x int8 GEMM adds product pairs in saturating int16 (docs/onnx.md), so the uint8 QDQ form
    uses 7-bit weights (``reduce_range``, the quantizer's option for such CPUs) and the QOperator form
    int8 activations; both are then exact on every x86 path."""
    import onnxruntime

    out = {}
    for name in FIXTURES:
        float_model = globals()[name]()
        out[f"{name}_qdq"] = quantize(float_model, "qdq", "uint8", per_channel=True, reduce_range=True)
        out[f"{name}_qop"] = quantize(float_model, "qoperator", "int8", per_channel=False)
    for model in out.values():  # calibration may change between releases: say which one quantized
        onnx.helper.set_model_props(model, {"quantized_by": f"onnxruntime {onnxruntime.__version__}"})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, model in fixtures().items():
        path = args.out / f"{name}.onnx"
        onnx.save(model, path)
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
