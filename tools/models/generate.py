"""Write int8/uint8 TFLite models from Python descriptions (no TensorFlow needed).

The models are real TFLite flatbuffers, written with the schema's generated
Python (the ``tflite`` package) and ``flatbuffers``. Quantization is real:
weights are stored as int8/uint8 with per-tensor or per-channel scales, the
bias is int32 with scale = input_scale * filter_scale (what TFLite checks),
and output scales are chosen from the accumulator's expected spread so the
outputs use the int8 range instead of saturating.

Two levels of API:

* :class:`ModelBuilder`: tensors, buffers, operators, options by name, any graph;
* one-op builders (:func:`conv2d_model`, :func:`depthwise_conv2d_model`,
  :func:`fully_connected_model`, :func:`elementwise_model`, :func:`pool_model`,
  ...) returning the model as ``bytes``.

:func:`run_reference` runs a model on TFLite's reference kernels
(``OpResolverType.BUILTIN_REF``), the spec the NPU is bit-exact with, and
:func:`random_inputs` makes inputs for it.

Command line: ``python -m tools.models.generate OUT_DIR`` writes a small set of
sample models (see ``SAMPLES``).
"""

from __future__ import annotations

import argparse
import importlib
import math
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import flatbuffers
import numpy as np
import tflite

TENSOR_TYPES = {
    "float32": tflite.TensorType.FLOAT32,
    "int32": tflite.TensorType.INT32,
    "uint8": tflite.TensorType.UINT8,
    "int64": tflite.TensorType.INT64,
    "int16": tflite.TensorType.INT16,
    "int8": tflite.TensorType.INT8,
    "bool": tflite.TensorType.BOOL,
}
NP_TYPES = {
    "float32": np.float32,
    "int32": np.int32,
    "uint8": np.uint8,
    "int64": np.int64,
    "int16": np.int16,
    "int8": np.int8,
    "bool": np.bool_,
}

# op name -> options table name (module of the ``tflite`` package); ops absent need no options.
OPTIONS_TABLES = {
    "CONV_2D": "Conv2DOptions",
    "DEPTHWISE_CONV_2D": "DepthwiseConv2DOptions",
    "FULLY_CONNECTED": "FullyConnectedOptions",
    "ADD": "AddOptions",
    "SUB": "SubOptions",
    "MUL": "MulOptions",
    "AVERAGE_POOL_2D": "Pool2DOptions",
    "MAX_POOL_2D": "Pool2DOptions",
    "RESHAPE": "ReshapeOptions",
    "CONCATENATION": "ConcatenationOptions",
    "PAD": "PadOptions",
    "MEAN": "ReducerOptions",
    "STRIDED_SLICE": "StridedSliceOptions",
    "TRANSPOSE": "TransposeOptions",
    "RESIZE_NEAREST_NEIGHBOR": "ResizeNearestNeighborOptions",
    "QUANTIZE": "QuantizeOptions",
    "DEQUANTIZE": "DequantizeOptions",
    "SOFTMAX": "SoftmaxOptions",
    "HARD_SWISH": "HardSwishOptions",
    "SUM": "ReducerOptions",
    "SQUEEZE": "SqueezeOptions",
    "EXPAND_DIMS": "ExpandDimsOptions",
    "SPLIT": "SplitOptions",
    "SPLIT_V": "SplitVOptions",
    "SLICE": "SliceOptions",
    "DEPTH_TO_SPACE": "DepthToSpaceOptions",
    "SPACE_TO_DEPTH": "SpaceToDepthOptions",
    "SPACE_TO_BATCH_ND": "SpaceToBatchNDOptions",
    "BATCH_TO_SPACE_ND": "BatchToSpaceNDOptions",
    "PADV2": "PadV2Options",
    "LEAKY_RELU": "LeakyReluOptions",
    "TRANSPOSE_CONV": "TransposeConvOptions",
    "SHAPE": "ShapeOptions",
    "PACK": "PackOptions",
    "GATHER": "GatherOptions",
    "REDUCE_PROD": "ReducerOptions",
    "RESIZE_BILINEAR": "ResizeBilinearOptions",
    "BATCH_MATMUL": "BatchMatMulOptions",
    "ARG_MAX": "ArgMaxOptions",
}
# Option fields whose values are enum names in our dicts.
ENUM_FIELDS = {
    "padding": tflite.Padding,
    "fused_activation_function": tflite.ActivationFunctionType,
}
# Operator versions TFLite 2.14's resolvers register for int8 kernels (uint8 and float use 1).
INT8_OP_VERSIONS = {
    "CONV_2D": 3,
    "DEPTHWISE_CONV_2D": 3,
    "FULLY_CONNECTED": 4,
    "RESHAPE": 1,
    "HARD_SWISH": 1,
    "RELU_N1_TO_1": 1,
    "SQUEEZE": 1,
    "EXPAND_DIMS": 1,
    "DEPTH_TO_SPACE": 1,
}


def camel(name: str) -> str:
    """stride_w -> StrideW, the generated schema's accessor spelling."""
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


def snake(name: str) -> str:
    """DilationHFactor -> dilation_h_factor."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@dataclass(frozen=True)
class Quant:
    """Affine quantization of a tensor: one (scale, zero point) per tensor or per channel along ``axis``."""

    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    axis: int = 0

    @classmethod
    def tensor(cls, scale: float, zero_point: int) -> Quant:
        return cls((float(scale),), (int(zero_point),), 0)


@dataclass
class _Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    quant: Quant | None
    buffer: int


@dataclass
class _Op:
    op: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    options: dict[str, Any]
    version: int


@dataclass
class ModelBuilder:
    """A one-subgraph TFLite model under construction.

    ``add_tensor`` returns the tensor index, ``add_op`` appends an operator
    (options by their schema field names in snake_case, enums by name:
    ``padding="SAME"``, ``fused_activation_function="RELU6"``), ``build``
    returns the flatbuffer bytes.
    """

    description: str = "vnpu tools/models"
    tensors: list[_Tensor] = field(default_factory=list)
    buffers: list[bytes] = field(default_factory=lambda: [b""])  # buffer 0: the empty sentinel
    ops: list[_Op] = field(default_factory=list)

    def add_tensor(
        self,
        name: str,
        shape: Sequence[int],
        dtype: str,
        quant: Quant | None = None,
        data: np.ndarray | None = None,
    ) -> int:
        if dtype not in TENSOR_TYPES:
            raise ValueError(f"tensor {name!r}: unknown dtype {dtype!r}")
        shape = tuple(int(d) for d in shape)
        buffer = 0
        if data is not None:
            arr = np.asarray(data)
            if tuple(arr.shape) != shape:
                raise ValueError(f"tensor {name!r}: data has shape {arr.shape}, declared {shape}")
            self.buffers.append(np.ascontiguousarray(arr.astype(NP_TYPES[dtype])).tobytes())
            buffer = len(self.buffers) - 1
        self.tensors.append(_Tensor(name, shape, dtype, quant, buffer))
        return len(self.tensors) - 1

    def add_const(self, name: str, data: np.ndarray, dtype: str, quant: Quant | None = None) -> int:
        return self.add_tensor(name, np.shape(data), dtype, quant, data)

    def add_op(
        self,
        op: str,
        inputs: Sequence[int],
        outputs: Sequence[int],
        version: int | None = None,
        **options: Any,
    ) -> None:
        if not hasattr(tflite.BuiltinOperator, op):
            raise ValueError(f"unknown TFLite builtin operator {op!r}")
        if version is None:
            first = self.tensors[inputs[0]].dtype if inputs and inputs[0] >= 0 else "float32"
            version = INT8_OP_VERSIONS.get(op, 2) if first == "int8" else 1
        self.ops.append(_Op(op, tuple(inputs), tuple(outputs), dict(options), version))

    # --- serialization ----------------------------------------------------------
    def build(self, inputs: Sequence[int], outputs: Sequence[int]) -> bytes:
        b = flatbuffers.Builder(1024)
        buffers = [self._buffer(b, data) for data in self.buffers]
        tensors = [self._tensor(b, t) for t in self.tensors]
        codes: list[tuple[str, int]] = []
        for o in self.ops:
            if (o.op, o.version) not in codes:
                codes.append((o.op, o.version))
        operators = [self._operator(b, o, codes.index((o.op, o.version))) for o in self.ops]

        def vec_i32(start: Callable[[Any, int], None], values: Sequence[int]) -> int:
            start(b, len(values))
            for v in reversed(values):
                b.PrependInt32(int(v))
            return b.EndVector()

        def vec_off(start: Callable[[Any, int], None], offs: Sequence[int]) -> int:
            start(b, len(offs))
            for off in reversed(offs):
                b.PrependUOffsetTRelative(off)
            return b.EndVector()

        t_vec = vec_off(tflite.SubGraphStartTensorsVector, tensors)
        i_vec = vec_i32(tflite.SubGraphStartInputsVector, inputs)
        o_vec = vec_i32(tflite.SubGraphStartOutputsVector, outputs)
        op_vec = vec_off(tflite.SubGraphStartOperatorsVector, operators)
        name = b.CreateString("main")
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, t_vec)
        tflite.SubGraphAddInputs(b, i_vec)
        tflite.SubGraphAddOutputs(b, o_vec)
        tflite.SubGraphAddOperators(b, op_vec)
        tflite.SubGraphAddName(b, name)
        subgraph = tflite.SubGraphEnd(b)

        code_offs = []
        for op, version in codes:
            code = getattr(tflite.BuiltinOperator, op)
            tflite.OperatorCodeStart(b)
            tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            tflite.OperatorCodeAddBuiltinCode(b, code)
            tflite.OperatorCodeAddVersion(b, version)
            code_offs.append(tflite.OperatorCodeEnd(b))
        codes_vec = vec_off(tflite.ModelStartOperatorCodesVector, code_offs)
        sub_vec = vec_off(tflite.ModelStartSubgraphsVector, [subgraph])
        buf_vec = vec_off(tflite.ModelStartBuffersVector, buffers)
        desc = b.CreateString(self.description)
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, 3)
        tflite.ModelAddOperatorCodes(b, codes_vec)
        tflite.ModelAddSubgraphs(b, sub_vec)
        tflite.ModelAddDescription(b, desc)
        tflite.ModelAddBuffers(b, buf_vec)
        b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())

    @staticmethod
    def _buffer(b: flatbuffers.Builder, data: bytes) -> int:
        if not data:
            tflite.BufferStart(b)
            return tflite.BufferEnd(b)
        b.StartVector(1, len(data), 16)  # 16-byte alignment, as TFLite's converter writes
        b.head = b.head - len(data)
        b.Bytes[b.head : b.head + len(data)] = data
        vec = b.EndVector()
        tflite.BufferStart(b)
        tflite.BufferAddData(b, vec)
        return tflite.BufferEnd(b)

    @staticmethod
    def _tensor(b: flatbuffers.Builder, t: _Tensor) -> int:
        name = b.CreateString(t.name)
        tflite.TensorStartShapeVector(b, len(t.shape))
        for d in reversed(t.shape):
            b.PrependInt32(d)
        shape = b.EndVector()
        quant = None
        if t.quant is not None:
            tflite.QuantizationParametersStartScaleVector(b, len(t.quant.scales))
            for s in reversed(t.quant.scales):
                b.PrependFloat32(s)
            scales = b.EndVector()
            tflite.QuantizationParametersStartZeroPointVector(b, len(t.quant.zero_points))
            for z in reversed(t.quant.zero_points):
                b.PrependInt64(z)
            zps = b.EndVector()
            tflite.QuantizationParametersStart(b)
            tflite.QuantizationParametersAddScale(b, scales)
            tflite.QuantizationParametersAddZeroPoint(b, zps)
            tflite.QuantizationParametersAddQuantizedDimension(b, t.quant.axis)
            quant = tflite.QuantizationParametersEnd(b)
        tflite.TensorStart(b)
        tflite.TensorAddShape(b, shape)
        tflite.TensorAddType(b, TENSOR_TYPES[t.dtype])
        tflite.TensorAddBuffer(b, t.buffer)
        tflite.TensorAddName(b, name)
        if quant is not None:
            tflite.TensorAddQuantization(b, quant)
        return tflite.TensorEnd(b)

    @staticmethod
    def _options(b: flatbuffers.Builder, op: _Op) -> tuple[int, int | None]:
        table = OPTIONS_TABLES.get(op.op)
        if table is None:
            if op.options:
                raise ValueError(f"{op.op} takes no options, got {sorted(op.options)}")
            return 0, None
        module = importlib.import_module(f"tflite.{table}")
        vectors = {}
        for key, value in op.options.items():  # vectors must be written before the table starts
            if isinstance(value, list | tuple):
                getattr(module, f"{table}Start{camel(key)}Vector")(b, len(value))
                for v in reversed(value):
                    b.PrependInt32(int(v))
                vectors[key] = b.EndVector()
        getattr(module, f"{table}Start")(b)
        for key, value in op.options.items():
            adder = getattr(module, f"{table}Add{camel(key)}", None)
            if adder is None:
                raise ValueError(f"{op.op}: {table} has no field {key!r}")
            if key in vectors:
                value = vectors[key]
            elif key in ENUM_FIELDS:
                value = getattr(ENUM_FIELDS[key], value)
            adder(b, value)
        return getattr(tflite.BuiltinOptions, table), getattr(module, f"{table}End")(b)

    def _operator(self, b: flatbuffers.Builder, op: _Op, code_index: int) -> int:
        kind, options = self._options(b, op)
        tflite.OperatorStartInputsVector(b, len(op.inputs))
        for i in reversed(op.inputs):
            b.PrependInt32(i)
        ins = b.EndVector()
        tflite.OperatorStartOutputsVector(b, len(op.outputs))
        for i in reversed(op.outputs):
            b.PrependInt32(i)
        outs = b.EndVector()
        tflite.OperatorStart(b)
        tflite.OperatorAddOpcodeIndex(b, code_index)
        tflite.OperatorAddInputs(b, ins)
        tflite.OperatorAddOutputs(b, outs)
        if options is not None:
            tflite.OperatorAddBuiltinOptionsType(b, kind)
            tflite.OperatorAddBuiltinOptions(b, options)
        return tflite.OperatorEnd(b)


# --- quantization helpers -----------------------------------------------------
QMIN = {"int8": -128, "uint8": 0}
QMAX = {"int8": 127, "uint8": 255}
ACTIVATIONS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")


def activation_quant(rng: np.random.Generator, dtype: str, scale: float) -> Quant:
    """An activation tensor's quantization: ``scale`` and a random zero point in the middle of the range."""
    lo, hi = QMIN[dtype], QMAX[dtype]
    mid = (lo + hi) // 2
    return Quant.tensor(scale, int(rng.integers(mid - 40, mid + 41)))


def random_scale(rng: np.random.Generator, lo: float = 0.005, hi: float = 0.05) -> float:
    """A float32-representable scale, log-uniform in [lo, hi]."""
    return float(np.float32(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def quantized_filter(
    rng: np.random.Generator,
    shape: Sequence[int],
    dtype: str,
    per_channel: bool,
    axis: int,
    depth: int | None = None,
) -> tuple[np.ndarray, Quant]:
    """Random weights of ``shape`` and their quantization (int8: symmetric, zero point 0, as TFLite needs)."""
    channels = shape[axis]
    if dtype == "int8":
        data = rng.integers(-127, 128, size=shape).astype(np.int8)
        n = channels if per_channel else 1
        # With ``depth`` (chained layers): real weights ~ 1/sqrt(depth) keep activations O(1).
        lo, hi = (
            (0.002, 0.02) if depth is None else (0.5 / (74 * math.sqrt(depth)), 2 / (74 * math.sqrt(depth)))
        )
        scales = tuple(random_scale(rng, lo, hi) for _ in range(n))
        return data, Quant(scales, (0,) * n, axis if per_channel else 0)
    if per_channel:
        raise ValueError("TFLite has per-channel quantization only for int8 weights")
    data = rng.integers(0, 256, size=shape).astype(np.uint8)
    return data, Quant.tensor(random_scale(rng, 0.002, 0.02), int(rng.integers(100, 156)))


def quantized_bias(rng: np.random.Generator, in_scale: float, fq: Quant, cout: int, spread: float) -> tuple:
    """int32 bias with scale input_scale * filter_scale[c] (TFLite checks this), values ~ ``spread``."""
    scales = tuple(float(np.float32(in_scale * s)) for s in fq.scales)
    data = rng.integers(-int(spread), int(spread) + 1, size=(cout,)).astype(np.int32)
    return data, Quant(scales, (0,) * len(scales), 0)


def accumulator_output_scale(in_scale: float, fq: Quant, depth: int) -> float:
    """An output scale mapping the accumulator's expected standard deviation to ~40 quantized units.

    Inputs and weights are roughly uniform over 8 bits (standard deviation ~74),
    so a sum of ``depth`` products has a spread of ~74*74*sqrt(depth).
    """
    filter_scale = float(np.mean(fq.scales))
    return float(np.float32(in_scale * filter_scale * 74.0 * 74.0 * math.sqrt(depth) / 40.0))


def same_padding_out(size: int, k: int, stride: int, dilation: int, padding: str) -> int:
    effective = (k - 1) * dilation + 1
    if padding == "SAME":
        return (size + stride - 1) // stride
    return (size - effective + stride) // stride


# --- one-op models ----------------------------------------------------------------
def _pair(value: int | tuple[int, int]) -> tuple[int, int]:
    """A kernel, stride or dilation argument: one int for both axes, or (height, width)."""
    return (value, value) if isinstance(value, int) else (value[0], value[1])


def _conv_model(
    op: str,
    in_shape: Sequence[int],
    filter_shape: tuple[int, int, int, int],
    channel_axis: int,
    depth: int,
    bias_spread: float,
    stride: int | tuple[int, int],
    padding: str,
    per_channel: bool,
    act: str,
    seed: int,
    dtype: str,
    dilation: int | tuple[int, int],
    bias: bool,
    space_to_batch: bool = False,
    **op_options: int,
) -> bytes:
    """One CONV_2D or DEPTHWISE_CONV_2D: ``filter_shape`` [*, KH, KW, *] quantized along
    ``channel_axis``; ``depth`` terms per accumulator set the output scale. The random draws keep one
    order (input scale, filter, output scale, bias): tests and docs name their models by seed.
    ``space_to_batch`` writes a dilated convolution as the TensorFlow converter does:
    SPACE_TO_BATCH_ND -> the convolution undilated and VALID -> BATCH_TO_SPACE_ND."""
    rng = np.random.default_rng(seed)
    kh, kw = filter_shape[1:3]
    cout = filter_shape[channel_axis]
    sh, sw = _pair(stride)
    dh, dw = _pair(dilation)
    n, h, w, _ = in_shape
    oh, ow = same_padding_out(h, kh, sh, dh, padding), same_padding_out(w, kw, sw, dw, padding)
    m = ModelBuilder()
    iq = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, iq)
    wdata, wq = quantized_filter(rng, filter_shape, dtype, per_channel, channel_axis)
    wt = m.add_const("filter", wdata, dtype, wq)
    oq = activation_quant(rng, dtype, accumulator_output_scale(iq.scales[0], wq, depth))
    inputs = [x, wt]
    if bias:
        bdata, bq = quantized_bias(rng, iq.scales[0], wq, cout, bias_spread)
        inputs.append(m.add_const("bias", bdata, "int32", bq))
    y = m.add_tensor("output", (n, oh, ow, cout), dtype, oq)
    conv_out = y
    if space_to_batch:
        if (sh, sw) != (1, 1):
            raise ValueError("the converter's space-to-batch form needs stride 1")
        (pt, pb), (ct, cb) = space_to_batch_paddings(h, kh, dh, padding)
        (pl, pr), (cl, cr) = space_to_batch_paddings(w, kw, dw, padding)
        hs, ws = (h + pt + pb) // dh, (w + pl + pr) // dw
        block = m.add_const("block_shape", np.array([dh, dw], dtype=np.int32), "int32")
        xs = m.add_tensor("space_to_batch", (n * dh * dw, hs, ws, in_shape[3]), dtype, iq)
        pads = m.add_const("paddings", np.array([[pt, pb], [pl, pr]], dtype=np.int32), "int32")
        m.add_op("SPACE_TO_BATCH_ND", [x, block, pads], [xs])
        inputs[0] = xs
        conv_out = m.add_tensor("batch_conv", (n * dh * dw, hs - kh + 1, ws - kw + 1, cout), dtype, oq)
        padding, dh, dw = "VALID", 1, 1
    m.add_op(
        op,
        inputs,
        [conv_out],
        padding=padding,
        stride_h=sh,
        stride_w=sw,
        **op_options,
        dilation_h_factor=dh,
        dilation_w_factor=dw,
        fused_activation_function=act,
    )
    if space_to_batch:
        crops = m.add_const("crops", np.array([[ct, cb], [cl, cr]], dtype=np.int32), "int32")
        m.add_op("BATCH_TO_SPACE_ND", [conv_out, block, crops], [y])
    return m.build([x], [y])


def space_to_batch_paddings(size: int, kernel: int, dilation: int, padding: str) -> tuple[tuple, tuple]:
    """((pad before, pad after), (crop before, crop after)) of one spatial dimension in the converter's
    dilated convolution (TensorFlow's required_space_to_batch_paddings): SAME's padding of the dilated
    filter, plus what rounds the padded size up to a multiple of the dilation, cropped off again."""
    total = (kernel - 1) * dilation if padding == "SAME" else 0
    before, after = total // 2, total - total // 2
    extra = -(size + total) % dilation
    return (before, after + extra), (0, extra)


def conv2d_model(
    in_shape: Sequence[int],
    out_ch: int,
    kernel: int | tuple[int, int] = 3,
    stride: int | tuple[int, int] = 1,
    padding: str = "SAME",
    per_channel: bool = True,
    act: str = "NONE",
    seed: int = 0,
    dtype: str = "int8",
    dilation: int | tuple[int, int] = 1,
    bias: bool = True,
    space_to_batch: bool = False,
) -> bytes:
    """One CONV_2D: input [N,H,W,Cin] -> [N,OH,OW,out_ch], filter [out_ch,KH,KW,Cin] (with
    ``space_to_batch``, a dilated one in the converter's three-op form)."""
    kh, kw = _pair(kernel)
    cin = in_shape[3]
    depth = kh * kw * cin
    return _conv_model(
        "CONV_2D",
        in_shape,
        filter_shape=(out_ch, kh, kw, cin),
        channel_axis=0,
        depth=depth,
        bias_spread=74 * 74 * math.sqrt(depth),
        stride=stride,
        padding=padding,
        per_channel=per_channel,
        act=act,
        seed=seed,
        dtype=dtype,
        dilation=dilation,
        bias=bias,
        space_to_batch=space_to_batch,
    )


def depthwise_conv2d_model(
    in_shape: Sequence[int],
    depth_multiplier: int = 1,
    kernel: int | tuple[int, int] = 3,
    stride: int | tuple[int, int] = 1,
    padding: str = "SAME",
    per_channel: bool = True,
    act: str = "NONE",
    seed: int = 0,
    dtype: str = "int8",
    dilation: int | tuple[int, int] = 1,
    bias: bool = True,
    space_to_batch: bool = False,
) -> bytes:
    """One DEPTHWISE_CONV_2D: filter [1,KH,KW,Cin*depth_multiplier], per-channel along axis 3 (with
    ``space_to_batch``, a dilated one in the converter's three-op form)."""
    kh, kw = _pair(kernel)
    cout = in_shape[3] * depth_multiplier
    return _conv_model(
        "DEPTHWISE_CONV_2D",
        in_shape,
        filter_shape=(1, kh, kw, cout),
        channel_axis=3,
        depth=kh * kw,
        bias_spread=74 * 74 * kh,
        stride=stride,
        padding=padding,
        per_channel=per_channel,
        act=act,
        seed=seed,
        dtype=dtype,
        dilation=dilation,
        bias=bias,
        space_to_batch=space_to_batch,
        depth_multiplier=depth_multiplier,
    )


def transpose_conv_output(size: int, kernel: int, stride: int, padding: str) -> int:
    """Keras Conv2DTranspose's output size (deconv_output_length without output_padding)."""
    return size * stride if padding == "SAME" else size * stride + max(kernel - stride, 0)


def transpose_conv_model(
    in_shape: Sequence[int],
    out_ch: int,
    kernel: int | tuple[int, int] = 3,
    stride: int | tuple[int, int] = 2,
    padding: str = "SAME",
    per_channel: bool = True,
    act: str = "NONE",
    seed: int = 0,
    dtype: str = "int8",
    bias: bool = True,
    out_hw: tuple[int, int] | None = None,
) -> bytes:
    """One TRANSPOSE_CONV (inputs: output_shape, filter [out_ch,KH,KW,Cin], input, optional bias),
    output [N, *out_hw, out_ch] (default: Keras Conv2DTranspose's size for the padding)."""
    rng = np.random.default_rng(seed)
    kh, kw = _pair(kernel)
    sh, sw = _pair(stride)
    n, h, w, cin = in_shape
    if out_hw is None:
        out_hw = (transpose_conv_output(h, kh, sh, padding), transpose_conv_output(w, kw, sw, padding))
    m = ModelBuilder()
    iq = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, iq)
    wdata, wq = quantized_filter(rng, (out_ch, kh, kw, cin), dtype, per_channel, 0)
    wt = m.add_const("filter", wdata, dtype, wq)
    depth = max(1, kh * kw * cin // (sh * sw))  # products per output, on average
    oq = activation_quant(rng, dtype, accumulator_output_scale(iq.scales[0], wq, depth))
    out_shape = (n, out_hw[0], out_hw[1], out_ch)
    shape = m.add_const("output_shape", np.array(out_shape, dtype=np.int32), "int32")
    inputs = [shape, wt, x]
    if bias:
        bdata, bq = quantized_bias(rng, iq.scales[0], wq, out_ch, 74 * 74 * math.sqrt(depth))
        inputs.append(m.add_const("bias", bdata, "int32", bq))
    y = m.add_tensor("output", out_shape, dtype, oq)
    m.add_op(
        "TRANSPOSE_CONV",
        inputs,
        [y],
        padding=padding,
        stride_h=sh,
        stride_w=sw,
        fused_activation_function=act,
    )
    return m.build([x], [y])


def fully_connected_model(
    batch: int,
    in_features: int,
    out_features: int,
    act: str = "NONE",
    seed: int = 0,
    dtype: str = "int8",
    per_channel: bool = False,
    bias: bool = True,
    in_shape: Sequence[int] | None = None,
) -> bytes:
    """One FULLY_CONNECTED: input [batch, in_features] (or ``in_shape``) -> [batch, out_features]."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    iq = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape or (batch, in_features), dtype, iq)
    wdata, wq = quantized_filter(rng, (out_features, in_features), dtype, per_channel, 0)
    wt = m.add_const("filter", wdata, dtype, wq)
    oq = activation_quant(rng, dtype, accumulator_output_scale(iq.scales[0], wq, in_features))
    b = -1
    if bias:
        bdata, bq = quantized_bias(rng, iq.scales[0], wq, out_features, 74 * 74 * math.sqrt(in_features))
        b = m.add_const("bias", bdata, "int32", bq)
    y = m.add_tensor("output", (batch, out_features), dtype, oq)
    m.add_op("FULLY_CONNECTED", [x, wt, b] if b >= 0 else [x, wt], [y], fused_activation_function=act)
    return m.build([x], [y])


def elementwise_model(
    op: str,
    shape1: Sequence[int],
    shape2: Sequence[int] | None = None,
    act: str = "NONE",
    seed: int = 0,
    dtype: str = "int8",
) -> bytes:
    """One ADD, SUB or MUL of two variable inputs (``shape2`` may broadcast against ``shape1``)."""
    if op not in ("ADD", "SUB", "MUL"):
        raise ValueError(f"elementwise_model: {op!r} is not ADD, SUB or MUL")
    rng = np.random.default_rng(seed)
    shape2 = tuple(shape1) if shape2 is None else tuple(shape2)
    out_shape = tuple(np.broadcast_shapes(tuple(shape1), shape2))
    m = ModelBuilder()
    q1 = activation_quant(rng, dtype, random_scale(rng, 0.01, 0.1))
    q2 = activation_quant(rng, dtype, random_scale(rng, 0.01, 0.1))
    a = m.add_tensor("input1", shape1, dtype, q1)
    c = m.add_tensor("input2", shape2, dtype, q2)
    if op == "MUL":
        out_scale = q1.scales[0] * q2.scales[0] * 74 * 74 / 60
    else:
        out_scale = (q1.scales[0] + q2.scales[0]) * 1.2
    y = m.add_tensor("output", out_shape, dtype, activation_quant(rng, dtype, float(np.float32(out_scale))))
    m.add_op(op, [a, c], [y], fused_activation_function=act)
    return m.build([a, c], [y])


def pool_model(
    op: str,
    in_shape: Sequence[int],
    filter_size: int | tuple[int, int] = 2,
    stride: int | tuple[int, int] = 2,
    padding: str = "VALID",
    act: str = "NONE",
    seed: int = 0,
    dtype: str = "int8",
) -> bytes:
    """One AVERAGE_POOL_2D or MAX_POOL_2D (input and output share scale and zero point, as TFLite needs)."""
    if op not in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        raise ValueError(f"pool_model: {op!r} is not a pooling op")
    rng = np.random.default_rng(seed)
    fh, fw = _pair(filter_size)
    sh, sw = _pair(stride)
    n, h, w, c = in_shape
    oh, ow = same_padding_out(h, fh, sh, 1, padding), same_padding_out(w, fw, sw, 1, padding)
    m = ModelBuilder()
    q = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, q)
    y = m.add_tensor("output", (n, oh, ow, c), dtype, q)
    m.add_op(
        op,
        [x],
        [y],
        padding=padding,
        stride_h=sh,
        stride_w=sw,
        filter_height=fh,
        filter_width=fw,
        fused_activation_function=act,
    )
    return m.build([x], [y])


def activation_model(op: str, shape: Sequence[int], seed: int = 0, dtype: str = "int8") -> bytes:
    """One RELU, RELU6, LOGISTIC, TANH or HARD_SWISH (LOGISTIC/TANH: TFLite's fixed output quantization)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    iq = activation_quant(rng, dtype, random_scale(rng, 0.01, 0.08))
    x = m.add_tensor("input", shape, dtype, iq)
    if op == "LOGISTIC":
        oq = Quant.tensor(1 / 256, -128 if dtype == "int8" else 0)
    elif op == "TANH":
        oq = Quant.tensor(1 / 128, 0 if dtype == "int8" else 128)
    else:
        oq = activation_quant(rng, dtype, random_scale(rng, 0.01, 0.08))
    y = m.add_tensor("output", shape, dtype, oq)
    m.add_op(op, [x], [y])
    return m.build([x], [y])


def reshape_model(
    in_shape: Sequence[int], out_shape: Sequence[int], seed: int = 0, dtype: str = "int8"
) -> bytes:
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    q = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, q)
    s = m.add_const("shape", np.array(out_shape, dtype=np.int32), "int32")
    y = m.add_tensor("output", out_shape, dtype, q)
    m.add_op("RESHAPE", [x, s], [y], new_shape=list(out_shape))
    return m.build([x], [y])


def concat_model(shapes: Sequence[Sequence[int]], axis: int, seed: int = 0, dtype: str = "int8") -> bytes:
    """CONCATENATION of variable inputs sharing one quantization (what an exact copy needs)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    q = activation_quant(rng, dtype, random_scale(rng))
    xs = [m.add_tensor(f"input{i}", s, dtype, q) for i, s in enumerate(shapes)]
    out_shape = list(shapes[0])
    out_shape[axis] = sum(s[axis] for s in shapes)
    y = m.add_tensor("output", out_shape, dtype, q)
    m.add_op("CONCATENATION", xs, [y], axis=axis, fused_activation_function="NONE")
    return m.build(xs, [y])


def pad_model(
    in_shape: Sequence[int], paddings: Sequence[Sequence[int]], seed: int = 0, dtype: str = "int8"
) -> bytes:
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    q = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, q)
    p = m.add_const("paddings", np.array(paddings, dtype=np.int32), "int32")
    out_shape = [d + lo + hi for d, (lo, hi) in zip(in_shape, paddings, strict=True)]
    y = m.add_tensor("output", out_shape, dtype, q)
    m.add_op("PAD", [x, p], [y])
    return m.build([x], [y])


def transpose_model(
    in_shape: Sequence[int], perm: Sequence[int], seed: int = 0, dtype: str = "int8"
) -> bytes:
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    q = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, q)
    p = m.add_const("perm", np.array(perm, dtype=np.int32), "int32")
    y = m.add_tensor("output", [in_shape[i] for i in perm], dtype, q)
    m.add_op("TRANSPOSE", [x, p], [y])
    return m.build([x], [y])


def strided_slice_model(
    in_shape: Sequence[int],
    begin: Sequence[int],
    end: Sequence[int],
    strides: Sequence[int],
    begin_mask: int = 0,
    end_mask: int = 0,
    seed: int = 0,
    dtype: str = "int8",
) -> bytes:
    """One STRIDED_SLICE with positive strides (the output shape is computed as TFLite does)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    q = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, q)
    out = []
    for i, d in enumerate(in_shape):
        b = 0 if begin_mask >> i & 1 else begin[i]
        e = d if end_mask >> i & 1 else end[i]
        b = min(max(b + d if b < 0 else b, 0), d)
        e = min(max(e + d if e < 0 else e, 0), d)
        out.append(max(0, -(-(e - b) // strides[i])))
    consts = (("begin", begin), ("end", end), ("strides", strides))
    ins = [x] + [m.add_const(n, np.array(v, dtype=np.int32), "int32") for n, v in consts]
    y = m.add_tensor("output", out, dtype, q)
    m.add_op("STRIDED_SLICE", ins, [y], begin_mask=begin_mask, end_mask=end_mask)
    return m.build([x], [y])


def converter_flatten(m: ModelBuilder, x: int, out_shape: Sequence[int]) -> int:
    """The TensorFlow converter's Keras ``Flatten``: ``RESHAPE(x, PACK([SHAPE(x)[0], -1]))``.

    The shape operand is computed (SHAPE -> STRIDED_SLICE -> PACK), so TFLite treats the RESHAPE's
    output as dynamic; ``out_shape`` is the shape the model declares for it. Returns its index.
    """
    t = m.tensors[x]
    shape = m.add_tensor(f"{t.name}/shape", (len(t.shape),), "int32")
    m.add_op("SHAPE", [x], [shape], version=1, out_type=tflite.TensorType.INT32)
    ends = [
        m.add_const(f"{t.name}/{n}", np.array([v], np.int32), "int32") for n, v in (("begin", 0), ("end", 1))
    ]
    stride = m.add_const(f"{t.name}/stride", np.array([1], np.int32), "int32")
    batch = m.add_tensor(f"{t.name}/batch", (), "int32")
    m.add_op("STRIDED_SLICE", [shape, *ends, stride], [batch], version=1, shrink_axis_mask=1)
    rest = m.add_const(f"{t.name}/rest", np.array(-1, np.int32), "int32")
    packed = m.add_tensor(f"{t.name}/packed", (2,), "int32")
    m.add_op("PACK", [batch, rest], [packed], version=1, values_count=2, axis=0)
    y = m.add_tensor(f"{t.name}/flat", out_shape, t.dtype, t.quant)
    m.add_op("RESHAPE", [x, packed], [y], version=1)
    return y


def space_to_batch_tile_conv_model(
    in_shape: Sequence[int] = (1, 8, 8, 4), out_ch: int = 6, seed: int = 0
) -> bytes:
    """SPACE_TO_BATCH_ND (block 2) -> TILE (multiples 1) -> 1x1 CONV_2D with the converter's placeholder
    shapes: every tensor after the input is stored with the input's batch, not ``4 * N``. Nothing
    infers TILE's output, so its stored shape cannot be trusted below the corrected one."""
    rng = np.random.default_rng(seed)
    n, h, w, c = in_shape
    m = ModelBuilder()
    iq = activation_quant(rng, "int8", random_scale(rng))
    x = m.add_tensor("input", in_shape, "int8", iq)
    block = m.add_const("block_shape", np.array([2, 2], np.int32), "int32")
    pads = m.add_const("paddings", np.zeros((2, 2), np.int32), "int32")
    xs = m.add_tensor("space_to_batch", (n, h // 2, w // 2, c), "int8", iq)
    m.add_op("SPACE_TO_BATCH_ND", [x, block, pads], [xs])
    multiples = m.add_const("multiples", np.ones(4, np.int32), "int32")
    tiled = m.add_tensor("tiled", (n, h // 2, w // 2, c), "int8", iq)
    m.add_op("TILE", [xs, multiples], [tiled])
    wdata, wq = quantized_filter(rng, (out_ch, 1, 1, c), "int8", False, 0)
    wt = m.add_const("filter", wdata, "int8", wq)
    bdata, bq = quantized_bias(rng, iq.scales[0], wq, out_ch, 8.0)
    bias = m.add_const("bias", bdata, "int32", bq)
    y = m.add_tensor("output", (n, h // 2, w // 2, out_ch), "int8", activation_quant(rng, "int8", 0.5))
    m.add_op(
        "CONV_2D",
        [tiled, wt, bias],
        [y],
        padding="VALID",
        stride_h=1,
        stride_w=1,
        fused_activation_function="NONE",
    )
    return m.build([x], [y])


def flatten_fc_model(in_shape: Sequence[int], out_features: int, seed: int = 0, dtype: str = "int8") -> bytes:
    """The converter's Flatten (:func:`converter_flatten`) then FULLY_CONNECTED: a classifier head."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    iq = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, iq)
    features = int(np.prod(in_shape[1:]))
    flat = converter_flatten(m, x, (in_shape[0], features))
    wdata, wq = quantized_filter(rng, (out_features, features), dtype, False, 0)
    w = m.add_const("filter", wdata, dtype, wq)
    oq = activation_quant(rng, dtype, accumulator_output_scale(iq.scales[0], wq, features))
    y = m.add_tensor("output", (in_shape[0], out_features), dtype, oq)
    m.add_op("FULLY_CONNECTED", [flat, w], [y], fused_activation_function="NONE")
    return m.build([x], [y])


def quantize_model(
    shape: Sequence[int], in_dtype: str = "int8", out_dtype: str = "int8", seed: int = 0
) -> bytes:
    """One QUANTIZE: 8-bit requantization, or float32 -> 8-bit when ``in_dtype`` is float32."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    iq = None if in_dtype == "float32" else activation_quant(rng, in_dtype, random_scale(rng, 0.01, 0.1))
    x = m.add_tensor("input", shape, in_dtype, iq)
    y = m.add_tensor(
        "output", shape, out_dtype, activation_quant(rng, out_dtype, random_scale(rng, 0.01, 0.1))
    )
    m.add_op("QUANTIZE", [x], [y])
    return m.build([x], [y])


def mean_model(
    in_shape: Sequence[int],
    axes: Sequence[int] = (1, 2),
    keep_dims: bool = True,
    seed: int = 0,
    dtype: str = "int8",
    same_quant: bool = False,
    op: str = "MEAN",
) -> bytes:
    """One MEAN (or SUM) over ``axes`` (the output keeps them as size 1 with ``keep_dims``); a SUM's
    output scale grows with the number of values summed, so the outputs do not saturate."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    iq = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, iq)
    a = m.add_const("axis", np.array(axes, dtype=np.int32), "int32")
    norm = [ax % len(in_shape) for ax in axes]
    out = [1 if i in norm else d for i, d in enumerate(in_shape)]
    if not keep_dims:
        out = [d for i, d in enumerate(in_shape) if i not in norm]
    grow = math.prod(in_shape[i] for i in norm) ** 0.5 if op == "SUM" else 1.0
    oq = (
        iq
        if same_quant
        else activation_quant(rng, dtype, random_scale(rng, iq.scales[0] * 0.3 * grow, iq.scales[0] * grow))
    )
    y = m.add_tensor("output", out, dtype, oq)
    m.add_op(op, [x, a], [y], keep_dims=keep_dims)
    return m.build([x], [y])


def resize_nearest_model(
    in_shape: Sequence[int],
    out_hw: Sequence[int],
    align_corners: bool = False,
    half_pixel_centers: bool = False,
    seed: int = 0,
    dtype: str = "int8",
) -> bytes:
    """One RESIZE_NEAREST_NEIGHBOR to ``out_hw`` (input and output share the quantization)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    q = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, q)
    size = m.add_const("size", np.array(out_hw, dtype=np.int32), "int32")
    y = m.add_tensor("output", (in_shape[0], out_hw[0], out_hw[1], in_shape[3]), dtype, q)
    m.add_op(
        "RESIZE_NEAREST_NEIGHBOR",
        [x, size],
        [y],
        align_corners=align_corners,
        half_pixel_centers=half_pixel_centers,
    )
    return m.build([x], [y])


def layout_model(
    op: str,
    in_shape: Sequence[int],
    out_shapes: Sequence[Sequence[int]],
    consts: Sequence[tuple[str, Sequence[int] | np.ndarray]] = (),
    input_at: int = 0,
    seed: int = 0,
    dtype: str = "int8",
    **options: Any,
) -> bytes:
    """One data-movement op (SPLIT, SLICE, DEPTH_TO_SPACE, SPACE_TO_BATCH_ND, SQUEEZE, ...): one
    variable input at position ``input_at`` among int32 constant operands ``consts`` (name, values),
    outputs of ``out_shapes``, every tensor quantized alike (these ops copy bytes)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    q = activation_quant(rng, dtype, random_scale(rng))
    x = m.add_tensor("input", in_shape, dtype, q)
    ins = [m.add_const(name, np.array(v, dtype=np.int32), "int32") for name, v in consts]
    ins.insert(input_at, x)
    ys = [m.add_tensor(f"output{k}", s, dtype, q) for k, s in enumerate(out_shapes)]
    m.add_op(op, ins, ys, **options)
    return m.build([x], ys)


def softmax_model(shape: Sequence[int], seed: int = 0) -> bytes:
    """One int8 SOFTMAX (the NPU runs rows of up to 511 values; :func:`log_softmax_model` is a CPU op)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    x = m.add_tensor("input", shape, "int8", activation_quant(rng, "int8", random_scale(rng)))
    y = m.add_tensor("output", shape, "int8", Quant.tensor(1 / 256, -128))
    m.add_op("SOFTMAX", [x], [y], beta=1.0)
    return m.build([x], [y])


def log_softmax_model(shape: Sequence[int], seed: int = 0) -> bytes:
    """One int8 LOG_SOFTMAX: an op the NPU does not run (a CPU-fallback case)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    x = m.add_tensor("input", shape, "int8", activation_quant(rng, "int8", random_scale(rng)))
    y = m.add_tensor("output", shape, "int8", Quant.tensor(16 / 256, 127))
    m.add_op("LOG_SOFTMAX", [x], [y])
    return m.build([x], [y])


# --- whole networks ----------------------------------------------------------------------
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


# --- running -----------------------------------------------------------------------
def _interpreter_module(runtime: str) -> Any:
    if runtime == "tflite_runtime":
        import tflite_runtime.interpreter as mod
    elif runtime == "ai_edge_litert":
        import ai_edge_litert.interpreter as mod
    else:
        raise ValueError(f"unknown runtime {runtime!r} (tflite_runtime or ai_edge_litert)")
    return mod


def reference_interpreter(
    model: bytes, runtime: str = "tflite_runtime", delegates: Sequence[Any] = ()
) -> Any:
    """An allocated interpreter for ``model`` on TFLite's reference kernels (BUILTIN_REF)."""
    mod = _interpreter_module(runtime)
    interp = mod.Interpreter(
        model_content=model,
        experimental_op_resolver_type=mod.OpResolverType.BUILTIN_REF,
        experimental_delegates=list(delegates) or None,
    )
    interp.allocate_tensors()
    return interp


def random_inputs(model: bytes, seed: int = 0) -> list[np.ndarray]:
    """Uniformly random inputs over each input's full integer range (as Mesa's Teflon tests do)."""
    from libaccel.compiler.graph import graph_from_tflite

    g = graph_from_tflite(model)
    rng = np.random.default_rng(seed)
    out = []
    for i in g.inputs:
        t = g.tensors[i]
        dt = np.dtype(NP_TYPES[t.dtype])
        if dt.kind in "iu":
            info = np.iinfo(dt)
            out.append(rng.integers(info.min, int(info.max) + 1, size=t.shape).astype(dt))
        else:
            out.append(rng.standard_normal(t.shape).astype(dt))
    return out


def run_reference(
    model: bytes, inputs: Sequence[np.ndarray], runtime: str = "tflite_runtime", delegates: Sequence[Any] = ()
) -> list[np.ndarray]:
    """Run ``model`` once on BUILTIN_REF (plus ``delegates``); its outputs in the model's order."""
    interp = reference_interpreter(model, runtime, delegates)
    for detail, value in zip(interp.get_input_details(), inputs, strict=True):
        interp.set_tensor(detail["index"], value)
    interp.invoke()
    return [interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()]


# --- samples -------------------------------------------------------------------------
SAMPLES: dict[str, Callable[[], bytes]] = {
    "conv2d_int8_per_channel": lambda: conv2d_model((1, 16, 16, 8), 16, 3, 1, "SAME", True, "RELU6", 1),
    "conv2d_uint8": lambda: conv2d_model((1, 12, 12, 4), 8, 3, 2, "VALID", False, "RELU", 2, "uint8"),
    "depthwise_int8": lambda: depthwise_conv2d_model((1, 16, 16, 8), 1, 3, 2, "SAME", True, "RELU6", 3),
    "fully_connected_int8": lambda: fully_connected_model(1, 64, 10, "NONE", 4),
    "add_int8": lambda: elementwise_model("ADD", (1, 8, 8, 16), None, "NONE", 5),
    "avgpool_int8": lambda: pool_model("AVERAGE_POOL_2D", (1, 8, 8, 16), 2, 2, "VALID", "NONE", 6),
    "softmax_int8": lambda: softmax_model((1, 10), 7),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the sample int8 TFLite models")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--check", action="store_true", help="also run each on TFLite's reference kernels")
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, make in SAMPLES.items():
        data = make()
        path = args.out_dir / f"{name}.tflite"
        path.write_bytes(data)
        if args.check:
            run_reference(data, random_inputs(data))
        print(f"{path} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
