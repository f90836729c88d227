"""The compiler's graph IR: what the delegate (or a .tflite file) hands the compiler.

This module is the contract between the TFLite delegate (``delegate_teflon``,
which builds a :class:`Graph` from the runtime's ``TfLiteContext``) and the
compiler (:mod:`libaccel.compiler`). Conventions, all TFLite's:

* tensor indices are the model's tensor indices; ``-1`` in an op's inputs
  means an absent optional input (CONV_2D without bias);
* shapes are TFLite's (NHWC for 4-D activations; CONV_2D filters
  [Cout, KH, KW, Cin]; DEPTHWISE_CONV_2D filters [1, KH, KW, Cout];
  FULLY_CONNECTED filters [Cout, K]);
* ``dtype`` is the TFLite type in lower case: "int8", "uint8", "int16",
  "int32", "int64", "float32", "bool";
* ``quant`` is the tensor's affine quantization (None when the tensor has
  none); per-tensor quantization has one scale and zero point, per-channel
  one per slice along ``axis`` (TFLite's ``quantized_dimension``);
* ``data`` holds a constant tensor's values (weights, biases, shape
  operands) as a numpy array of the tensor's shape and dtype, else None;
* ``op`` is the TFLite builtin operator name ("CONV_2D"), ``options`` the
  builtin options by their schema field names in snake_case, with enums as
  their names: ``{"padding": "SAME", "stride_w": 1, "stride_h": 1,
  "dilation_w_factor": 1, "dilation_h_factor": 1,
  "fused_activation_function": "RELU6"}``. Per op:

  - CONV_2D: padding, stride_w, stride_h, dilation_w_factor, dilation_h_factor, fused_activation_function
  - DEPTHWISE_CONV_2D: the same plus depth_multiplier
  - FULLY_CONNECTED: fused_activation_function, keep_num_dims, weights_format ("DEFAULT")
  - ADD, SUB, MUL: fused_activation_function
  - AVERAGE_POOL_2D, MAX_POOL_2D: padding, stride_w, stride_h, filter_width, filter_height,
    fused_activation_function
  - CONCATENATION: axis, fused_activation_function
  - RESHAPE: new_shape (tuple, may be absent: the output shape is what counts)
  - MEAN: keep_dims
  - TRANSPOSE_CONV: padding, stride_w, stride_h, fused_activation_function (inputs: output_shape,
    filter [Cout, KH, KW, Cin], input, optional bias)
  - STRIDED_SLICE: begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_axis_mask, offset
  - RESIZE_NEAREST_NEIGHBOR: align_corners, half_pixel_centers
  - LEAKY_RELU: alpha (required: no default is assumed)
  - SOFTMAX: beta (required: the schema's default 0 is never what a model means)
  - RESIZE_BILINEAR: align_corners, half_pixel_centers
  - BATCH_MATMUL: adj_x, adj_y
  - ARG_MAX, MAXIMUM, MINIMUM, PRELU: none needed (ARG_MAX's output dtype is the output tensor's)
  - SUM: keep_dims (MEAN and SUM read it from the output's shape)
  - shape computations folded by :mod:`libaccel.compiler.shape_folding`: PACK (values_count, axis),
    GATHER (axis, batch_dims), REDUCE_PROD (keep_dims), SHAPE (none: the output's dtype says)
  - DEPTH_TO_SPACE, SPACE_TO_DEPTH: block_size (checked against the shapes when present)
  - SPLIT, SPLIT_V, SLICE, SQUEEZE, EXPAND_DIMS, SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND, PADV2: none
    needed (sizes come from the constant operands and the output shapes)
  - from the ONNX front end (:mod:`libaccel.compiler.onnx_frontend`): ``requant`` "float" on CONV_2D,
    DEPTHWISE_CONV_2D and FULLY_CONNECTED (onnxruntime's float32-scale requantization, the ISA's
    FLOAT_SCALE; absent or "fixed": TFLite's), and padding "EXPLICIT" with pad_top, pad_left,
    pad_bottom, pad_right on convolutions and pools (ONNX's ``pads``); ``source_rows``/``source_cols``
    (the input index of each output row/column) on RESIZE_NEAREST_NEIGHBOR
  Missing keys take the schema defaults (:data:`OPTION_DEFAULTS`).

:func:`graph_from_tflite` reads a .tflite flatbuffer into this IR.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from libaccel.compiler.tflite_check import DTYPES, check_tflite

# Schema defaults of the options the compiler reads, for a delegate that leaves them out.
OPTION_DEFAULTS: dict[str, Any] = {
    "padding": "SAME",
    "stride_w": 1,
    "stride_h": 1,
    "dilation_w_factor": 1,
    "dilation_h_factor": 1,
    "depth_multiplier": 0,
    "fused_activation_function": "NONE",
    "filter_width": 1,
    "filter_height": 1,
    "keep_num_dims": False,
    "weights_format": "DEFAULT",
    "axis": 0,
    "keep_dims": False,
    "align_corners": False,
    "half_pixel_centers": False,
    "begin_mask": 0,
    "end_mask": 0,
    "ellipsis_mask": 0,
    "new_axis_mask": 0,
    "shrink_axis_mask": 0,
    "offset": False,
    "approximate": False,
}


@dataclass(frozen=True)
class QuantParams:
    """Affine quantization: real = scale * (q - zero_point), per tensor or per slice along ``axis``."""

    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    axis: int = 0

    def __post_init__(self) -> None:
        if not self.scales or len(self.scales) != len(self.zero_points):
            raise ValueError(
                f"quantization needs as many scales as zero points (>= 1): "
                f"{len(self.scales)} scales, {len(self.zero_points)} zero points"
            )

    @property
    def per_tensor(self) -> bool:
        return len(self.scales) == 1

    @property
    def scale(self) -> float:
        """The per-tensor scale (ValueError when per-channel)."""
        if not self.per_tensor:
            raise ValueError(f"per-channel quantization ({len(self.scales)} scales) has no single scale")
        return self.scales[0]

    @property
    def zero_point(self) -> int:
        if not self.per_tensor and any(z != self.zero_points[0] for z in self.zero_points):
            raise ValueError("per-channel zero points differ: no single zero point")
        return self.zero_points[0]


@dataclass
class TensorInfo:
    """One tensor of the graph."""

    index: int
    name: str
    dtype: str
    shape: tuple[int, ...]
    quant: QuantParams | None = None
    data: np.ndarray | None = None

    @property
    def is_const(self) -> bool:
        return self.data is not None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def itemsize(self) -> int:
        return np.dtype(DTYPES[self.dtype]).itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize


@dataclass
class OpNode:
    """One operator: TFLite builtin name, tensor indices in and out, builtin options."""

    index: int
    op: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    options: dict[str, Any] = field(default_factory=dict)

    def option(self, name: str) -> Any:
        return self.options.get(name, OPTION_DEFAULTS.get(name))


@dataclass
class Graph:
    """A model's (sub)graph: tensors by index, operators in execution order, graph inputs and outputs."""

    tensors: dict[int, TensorInfo]
    nodes: list[OpNode]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]

    def node(self, index: int) -> OpNode:
        for n in self.nodes:
            if n.index == index:
                return n
        raise KeyError(f"graph has no node {index}")

    def tensor(self, index: int) -> TensorInfo:
        try:
            return self.tensors[index]
        except KeyError:
            raise KeyError(f"graph has no tensor {index}") from None

    def content_hash(self, node_indices: tuple[int, ...] | None = None) -> str:
        """A SHA-256 of everything that determines compiled code for ``node_indices`` (default: all).

        Covers the nodes (op, options, wiring) and every tensor they touch
        (type, shape, quantization, constant bytes), so equal hashes mean the
        same compiled partition whichever runtime built the graph.
        """
        h = hashlib.sha256()
        if node_indices is None:
            nodes = self.nodes
        else:
            by_index = {n.index: n for n in self.nodes}
            try:
                nodes = [by_index[i] for i in node_indices]
            except KeyError as e:
                raise KeyError(f"graph has no node {e.args[0]}") from None
        seen: set[int] = set()
        # The structure goes in as one repr per node and tensor; the bulky parts (per-channel scales,
        # constant bytes) go in as raw buffers, one update each, with their lengths in the repr so
        # that the byte stream stays unambiguous. A warm delegate load pays this on every model.
        for n in nodes:
            h.update(repr((n.op, n.inputs, n.outputs, sorted(n.options.items()))).encode())
            for t in (*n.inputs, *n.outputs):
                if t < 0 or t in seen:
                    continue
                seen.add(t)
                info = self.tensors[t]
                q = info.quant
                data = None if info.data is None else np.ascontiguousarray(info.data)
                h.update(
                    repr(
                        (
                            t,
                            info.dtype,
                            info.shape,
                            None if q is None else (len(q.scales), q.axis),
                            None if data is None else (data.dtype.str, data.nbytes),
                        )
                    ).encode()
                )
                if q is not None:
                    h.update(np.asarray(q.scales, dtype=np.float64).tobytes())
                    h.update(np.asarray(q.zero_points, dtype=np.int64).tobytes())
                if data is not None:
                    h.update(data.reshape(-1).view(np.uint8))
        return h.hexdigest()


# --- reading .tflite flatbuffers -------------------------------------------------------
def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _enum_names(enum_cls: type) -> dict[int, str]:
    return {v: k for k, v in vars(enum_cls).items() if not k.startswith("_") and isinstance(v, int)}


_SKIP_ACCESSORS = ("Init", "GetRootAs")


def _read_options(table: Any) -> dict[str, Any]:
    """Every scalar and int-vector field of a builtin-options table, by snake_case name."""
    import tflite

    enums = {
        "padding": _enum_names(tflite.Padding),
        "fused_activation_function": _enum_names(tflite.ActivationFunctionType),
        "weights_format": _enum_names(tflite.FullyConnectedOptionsWeightsFormat),
    }
    out: dict[str, Any] = {}
    cls = type(table)
    for name in dir(cls):
        if not name[:1].isupper() or name.startswith(_SKIP_ACCESSORS) or "BufferHasIdentifier" in name:
            continue
        if name.endswith(("Length", "IsNone")):
            continue
        if name.endswith("AsNumpy"):
            key = _snake(name[: -len("AsNumpy")])
            value = getattr(table, name)()
            out[key] = tuple(int(v) for v in value) if isinstance(value, np.ndarray) else ()
            continue
        if hasattr(cls, name + "AsNumpy"):
            continue  # a vector element accessor
        value = getattr(table, name)()
        key = _snake(name)
        if key in enums:
            value = enums[key].get(value, value)
        out[key] = value
    return out


def graph_from_tflite(model: bytes, subgraph: int = 0) -> Graph:
    """Read subgraph ``subgraph`` of a .tflite flatbuffer into a :class:`Graph`.

    Raises :class:`~libaccel.compiler.tflite_check.ModelError` (a ValueError) for a buffer that
    is not a well-formed TFLite model, and ValueError for a subgraph it does not have.
    """
    import tflite

    data = bytes(model)
    check_tflite(data)
    m = tflite.Model.GetRootAs(data, 0)
    if subgraph >= m.SubgraphsLength():
        raise ValueError(f"model has {m.SubgraphsLength()} subgraphs, no subgraph {subgraph}")
    sg = m.Subgraphs(subgraph)
    type_names = {v: k.lower() for k, v in vars(tflite.TensorType).items() if not k.startswith("_")}
    op_names = _enum_names(tflite.BuiltinOperator)
    options_names = _enum_names(tflite.BuiltinOptions)

    tensors: dict[int, TensorInfo] = {}
    for i in range(sg.TensorsLength()):
        t = sg.Tensors(i)
        dtype = type_names.get(t.Type(), f"type{t.Type()}")
        shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        quant = None
        q = t.Quantization()
        if q is not None and q.ScaleLength() > 0:
            quant = QuantParams(
                tuple(float(s) for s in q.ScaleAsNumpy()),
                tuple(int(z) for z in q.ZeroPointAsNumpy())
                if q.ZeroPointLength()
                else (0,) * q.ScaleLength(),
                int(q.QuantizedDimension()),
            )
        arr = None
        buf = m.Buffers(t.Buffer()) if t.Buffer() < m.BuffersLength() else None
        if buf is not None and buf.DataLength() > 0 and dtype in DTYPES:
            raw = buf.DataAsNumpy().tobytes()
            arr = np.frombuffer(raw, dtype=DTYPES[dtype]).reshape(shape).copy()
        # Names are labels only: a byte that is not UTF-8 must not make the model unreadable.
        name = t.Name().decode(errors="replace") if t.Name() else f"t{i}"
        tensors[i] = TensorInfo(i, name, dtype, shape, quant, arr)

    nodes = []
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        code = m.OperatorCodes(op.OpcodeIndex())
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        name = op_names.get(builtin, f"BUILTIN_{builtin}")
        if name == "CUSTOM":
            name = "CUSTOM:" + (code.CustomCode() or b"").decode(errors="replace")
        options: dict[str, Any] = {}
        kind = op.BuiltinOptionsType()
        if kind:
            table_name = options_names[kind]
            table = getattr(tflite, table_name)()
            opts = op.BuiltinOptions()
            table.Init(opts.Bytes, opts.Pos)
            options = _read_options(table)
        ins = tuple(int(x) for x in op.InputsAsNumpy()) if op.InputsLength() else ()
        outs = tuple(int(x) for x in op.OutputsAsNumpy()) if op.OutputsLength() else ()
        nodes.append(OpNode(i, name, ins, outs, options))
    ins = tuple(int(x) for x in sg.InputsAsNumpy()) if sg.InputsLength() else ()
    outs = tuple(int(x) for x in sg.OutputsAsNumpy()) if sg.OutputsLength() else ()
    return Graph(tensors, nodes, ins, outs)
