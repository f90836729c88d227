"""The TFLite flatbuffer writer (:class:`ModelBuilder`) and the quantization helpers the models share.

The models are real TFLite flatbuffers, written with the schema's generated
Python (the ``tflite`` package) and ``flatbuffers``. Quantization is real:
weights are stored as int8/uint8 with per-tensor or per-channel scales, the
bias is int32 with scale = input_scale * filter_scale (what TFLite checks),
and output scales are chosen from the accumulator's expected spread so the
outputs use the int8 range instead of saturating.
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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
    "GELU": "GeluOptions",
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
    "RELU_0_TO_1": 1,
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

    description: str = "vnpu modelgen"
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
