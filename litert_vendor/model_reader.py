"""A LiteRT subgraph as the compiler's :class:`~libaccel.compiler.graph.Graph`, read through the
accessor table LiteRT hands a compiler plugin (``LiteRtCompilerContext``).

The graph follows :mod:`libaccel.compiler.graph`'s conventions (what :func:`graph_from_tflite` reads
from a file): op names are TFLite's builtin names (LiteRT's op codes are TFLite's), options take the
schema's snake_case names and enum names. Tensors are numbered in the order the subgraph's inputs,
then its ops' inputs and outputs, first name them; ``-1`` is an absent optional input. An open
batch dimension (-1 first) reads as 1, the batch TFLite gives it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from delegate_teflon.context_reader import TFLITE_TYPES
from libaccel.compiler.graph import Graph, OpNode, QuantParams, TensorInfo, _enum_names
from libaccel.compiler.tflite_check import DTYPES


class ReaderError(RuntimeError):
    """A LiteRT accessor failed: which one, on what, with its status."""


# LiteRtElementType values are TfLiteType's: the delegate's table of them names the graph's dtypes.
ELEMENT_TYPES = TFLITE_TYPES

# Per op: (option key, accessor suffix, kind). The accessor is get_<prefix>_<suffix>_option.
_CONV = (
    ("padding", "padding", "padding"),
    ("stride_w", "stride_w", "int32_t"),
    ("stride_h", "stride_h", "int32_t"),
    ("fused_activation_function", "fused_activation", "activation"),
)
_DILATION = (("dilation_w_factor", "dilation_w", "int32_t"), ("dilation_h_factor", "dilation_h", "int32_t"))
_POOL = (
    ("padding", "padding", "padding"),
    ("stride_w", "stride_w", "int32_t"),
    ("stride_h", "stride_h", "int32_t"),
    ("filter_width", "filter_width", "int32_t"),
    ("filter_height", "filter_height", "int32_t"),
    ("fused_activation_function", "fused_activation", "activation"),
)
_ACTIVATION = (("fused_activation_function", "fused_activation", "activation"),)
_KEEP_DIMS = (("keep_dims", "keep_dims", "bool"),)
_RESIZE = (("align_corners", "align_corners", "bool"), ("half_pixel_centers", "half_pixel_center", "bool"))
OPTIONS: dict[str, tuple[str, tuple[tuple[str, str, str], ...]]] = {
    "CONV_2D": ("conv_2d", _CONV + _DILATION),
    "DEPTHWISE_CONV_2D": (
        "depthwise_conv_2d",
        _CONV + _DILATION + (("depth_multiplier", "depth_multiplier", "int32_t"),),
    ),
    "TRANSPOSE_CONV": ("transpose_conv", _CONV),
    "ADD": ("add", _ACTIVATION),
    "SUB": ("sub", _ACTIVATION),
    "MUL": ("mul", _ACTIVATION),
    "DIV": ("div", _ACTIVATION),
    "FULLY_CONNECTED": (
        "fully_connected",
        _ACTIVATION
        + (
            ("weights_format", "weights_format", "weights_format"),
            ("keep_num_dims", "keep_num_dims", "bool"),
            ("asymmetric_quantize_inputs", "asymmetric_quantize_input", "bool"),
        ),
    ),
    "AVERAGE_POOL_2D": ("average_pool_2d", _POOL),
    "MAX_POOL_2D": ("max_pool_2d", _POOL),
    "L2_POOL_2D": ("l2_pool_2d", _POOL),
    "CONCATENATION": ("concatenation", (("axis", "axis", "int32_t"),) + _ACTIVATION),
    "SOFTMAX": ("softmax", (("beta", "beta", "float"),)),
    "LEAKY_RELU": ("leaky_relu", (("alpha", "alpha", "float"),)),
    "MEAN": ("mean", _KEEP_DIMS),
    "SUM": ("sum", _KEEP_DIMS),
    "REDUCE_MAX": ("reduce_max", _KEEP_DIMS),
    "REDUCE_MIN": ("reduce_min", _KEEP_DIMS),
    "RESIZE_BILINEAR": ("resize_bilinear", _RESIZE),
    "RESIZE_NEAREST_NEIGHBOR": ("resize_nearest_neighbor", _RESIZE),
    "BATCH_MATMUL": (
        "batch_matmul",
        (
            ("adj_x", "adj_x", "bool"),
            ("adj_y", "adj_y", "bool"),
            ("asymmetric_quantize_inputs", "asymmetric_quantize_input", "bool"),
        ),
    ),
    "RESHAPE": ("reshape", (("new_shape", "new_shape", "ints"),)),
    "SQUEEZE": ("squeeze", (("squeeze_dims", "dims", "ints"),)),
    "PACK": ("pack", (("axis", "axis", "int32_t"), ("values_count", "values_count", "int32_t"))),
    "UNPACK": ("unpack", (("axis", "axis", "int32_t"), ("num", "num", "int32_t"))),
    "GATHER": ("gather", (("axis", "axis", "int32_t"), ("batch_dims", "batch_dims", "int32_t"))),
    "STRIDED_SLICE": (
        "strided_slice",
        (
            ("begin_mask", "begin_mask", "int32_t"),
            ("end_mask", "end_mask", "int32_t"),
            ("shrink_axis_mask", "shrink_axis_mask", "int32_t"),
            ("ellipsis_mask", "ellipsis_mask", "int32_t"),
            ("new_axis_mask", "new_axis_mask", "int32_t"),
            ("offset", "offset", "bool"),
        ),
    ),
    "DEPTH_TO_SPACE": ("depth_to_space", (("block_size", "block_size", "int32_t"),)),
    "SPACE_TO_DEPTH": ("space_to_depth", (("block_size", "block_size", "int32_t"),)),
    "SPLIT": ("split", (("num_splits", "num_splits", "int32_t"),)),
    "GELU": ("gelu", (("approximate", "approximate", "bool"),)),
}


def _tflite_enums() -> dict[str, dict[int, str]]:
    import tflite

    return {
        "op": _enum_names(tflite.BuiltinOperator),
        "padding": _enum_names(tflite.Padding),
        "activation": _enum_names(tflite.ActivationFunctionType),
        "weights_format": _enum_names(tflite.FullyConnectedOptionsWeightsFormat),
    }


@dataclass
class SubgraphReader:
    """Reads subgraphs through ``context`` (a cdata ``const LiteRtCompilerContext *``) with ``ffi``."""

    ffi: Any
    context: Any
    enums: dict[str, dict[int, str]] = field(default_factory=_tflite_enums)

    def _call(self, name: str, *args: Any) -> None:
        status = getattr(self.context, name)(*args)
        if status != 0:
            raise ReaderError(f"LiteRT's {name} failed with status {status}")

    def _get(self, name: str, ctype: str, *args: Any) -> Any:
        out = self.ffi.new(ctype + " *")
        self._call(name, *args, out)
        return out[0]

    def read(self, subgraph: Any) -> tuple[Graph, list[Any], frozenset[int]]:
        """(graph, the LiteRtOp of each node by index, tensors whose shape only run time knows)."""
        numbers: dict[int, int] = {}
        tensors: dict[int, TensorInfo] = {}
        dynamic: set[int] = set()

        def number(t: Any) -> int:
            if t == self.ffi.NULL:
                return -1
            key = int(self.ffi.cast("uintptr_t", t))
            if key not in numbers:
                numbers[key] = len(numbers)
                info, is_dynamic = self._tensor(numbers[key], t)
                tensors[info.index] = info
                if is_dynamic:
                    dynamic.add(info.index)
            return numbers[key]

        n_in = self._get("get_num_subgraph_inputs", "LiteRtParamIndex", subgraph)
        inputs = tuple(
            number(self._get("get_subgraph_input", "LiteRtTensor", subgraph, i)) for i in range(n_in)
        )
        ops, nodes = [], []
        for i in range(self._get("get_num_subgraph_ops", "LiteRtParamIndex", subgraph)):
            op = self._get("get_subgraph_op", "LiteRtOp", subgraph, i)
            n_op_in = self._get("get_num_op_inputs", "LiteRtParamIndex", op)
            op_inputs = tuple(
                number(self._get("get_op_input", "LiteRtTensor", op, j)) for j in range(n_op_in)
            )
            n_op_out = self._get("get_num_op_outputs", "LiteRtParamIndex", op)
            op_outputs = tuple(
                number(self._get("get_op_output", "LiteRtTensor", op, j)) for j in range(n_op_out)
            )
            name = self._op_name(op)
            options = self._options(name, op)
            if name == "REDUCE_PROD" and op_inputs and op_outputs:
                # No accessor for its keep_dims: the output's rank says it.
                options["keep_dims"] = len(tensors[op_outputs[0]].shape) == len(tensors[op_inputs[0]].shape)
            ops.append(op)
            nodes.append(OpNode(i, name, op_inputs, op_outputs, options))
        n_out = self._get("get_num_subgraph_outputs", "LiteRtParamIndex", subgraph)
        outputs = tuple(
            number(self._get("get_subgraph_output", "LiteRtTensor", subgraph, i)) for i in range(n_out)
        )
        return Graph(tensors, nodes, inputs, outputs), ops, frozenset(dynamic)

    def subgraphs(self, model: Any) -> list[Any]:
        """The subgraphs of ``model`` (a LiteRtModel), in order."""
        count = self._get("get_num_model_subgraphs", "LiteRtParamIndex", model)
        return [self._get("get_model_subgraph", "LiteRtSubgraph", model, i) for i in range(count)]

    def _op_name(self, op: Any) -> str:
        code = self._get("get_op_code", "LiteRtOpCode", op)
        name = self.enums["op"].get(code, f"BUILTIN_{code}")
        if name == "CUSTOM":
            custom = self._get("get_custom_code", "const char *", op)
            name = "CUSTOM:" + (
                self.ffi.string(custom).decode(errors="replace") if custom != self.ffi.NULL else ""
            )
        return name

    def _options(self, name: str, op: Any) -> dict[str, Any]:
        prefix, fields = OPTIONS.get(name, ("", ()))
        out: dict[str, Any] = {}
        for key, suffix, kind in fields:
            getter = getattr(self.context, f"get_{prefix}_{suffix}_option")
            if kind == "ints":
                data, size = self.ffi.new("const int32_t **"), self.ffi.new("int32_t *")
                if getter(op, data, size) == 0 and data[0] != self.ffi.NULL:
                    out[key] = tuple(int(data[0][i]) for i in range(size[0]))
                continue
            ctype = {"int32_t": "int32_t", "bool": "bool", "float": "float"}.get(kind, "uint32_t")
            value = self.ffi.new(ctype + " *")
            if getter(op, value) != 0:
                continue  # no options table: the schema defaults hold
            v = value[0]
            if kind in self.enums:
                v = self.enums[kind].get(int(v), int(v))
            elif kind == "float":
                # LiteRT hands a float32; the flatbuffer reader widens the same float32 to a double.
                v = float(np.float32(v))
            out[key] = v
        return out

    def _tensor(self, index: int, t: Any) -> tuple[TensorInfo, bool]:
        name_p = self._get("get_tensor_name", "const char *", t)
        name = self.ffi.string(name_p).decode(errors="replace") if name_p != self.ffi.NULL else f"t{index}"
        if self._get("get_tensor_type_id", "LiteRtTensorTypeId", t) == self.ffi.integer_const(
            "kLiteRtRankedTensorType"
        ):
            ranked = self._get("get_ranked_tensor_type", "LiteRtRankedTensorType", t)
            element = int(ranked.element_type)
            shape = tuple(int(ranked.layout.dimensions[i]) for i in range(ranked.layout.rank))
            if shape and shape[0] < 0:
                # A batch the model leaves open (shape_signature -1): LiteRT hands the signature,
                # TFLite runs it as 1 until resized; compile for 1 (the dispatch library refuses
                # buffers of another size).
                shape = (1, *shape[1:])
            is_dynamic = any(d < 0 for d in shape)
        else:
            element = int(self._get("get_unranked_tensor_type", "LiteRtUnrankedTensorType", t).element_type)
            shape, is_dynamic = (), True
        dtype = ELEMENT_TYPES.get(element, f"type{element}")
        return TensorInfo(
            index, name, dtype, shape, self._quant(t), self._weights(t, dtype, shape)
        ), is_dynamic

    def _quant(self, t: Any) -> QuantParams | None:
        kind = self._get("get_quantization_type_id", "LiteRtQuantizationTypeId", t)
        if kind == self.ffi.integer_const("kLiteRtQuantizationPerTensor"):
            q = self._get("get_per_tensor_quantization", "LiteRtQuantizationPerTensor", t)
            return QuantParams((float(q.scale),), (int(q.zero_point),))
        if kind == self.ffi.integer_const("kLiteRtQuantizationPerChannel"):
            q = self._get("get_per_channel_quantization", "LiteRtQuantizationPerChannel", t)
            n = int(q.num_channels)
            return QuantParams(
                tuple(float(q.scales[i]) for i in range(n)),
                tuple(int(q.zero_points[i]) for i in range(n)),
                int(q.quantized_dimension),
            )
        return None

    def _weights(self, t: Any, dtype: str, shape: tuple[int, ...]) -> np.ndarray | None:
        weights = self.ffi.new("LiteRtWeights *")
        if self.context.get_tensor_weights(t, weights) != 0 or weights[0] == self.ffi.NULL:
            return None
        addr, size = self.ffi.new("const void **"), self.ffi.new("size_t *")
        self._call("get_weights_bytes", weights[0], addr, size)
        if size[0] == 0 or dtype not in DTYPES:
            return None
        raw = bytes(self.ffi.buffer(addr[0], size[0]))
        return np.frombuffer(raw, dtype=DTYPES[dtype]).reshape(shape).copy()
