"""The ONNX front end: quantized .onnx models into the compiler's one IR (:class:`Graph`).

:func:`graph_from_onnx` reads a model in either form onnxruntime's quantizer writes:

* **QOperator** (QLinearConv, QLinearMatMul, QGemm, QLinearAdd, ..., MaxPool, Flatten): read as it is;
* **QDQ** (QuantizeLinear/DequantizeLinear around float ops): first rewritten into the QOperator form
  by onnxruntime's own QDQ fusion (graph optimizations at ORT_ENABLE_EXTENDED, the level that holds
  its QDQ selectors and nothing that changes layouts). That is the form onnxruntime executes such a
  model in, so each fused node is the very kernel the reference runs; a hand-written copy of its
  selector rules could only drift from them.

The layout is lowered once, here: every 4-D activation is NHWC in the IR (ONNX's NCHW transposed),
convolution filters are transposed into the IR's [Cout, KH, KW, Cin] / [1, KH, KW, C] at read time,
and nothing below knows the model was ONNX. Nodes with an NPU lowering become the IR's ops
(QLinearConv -> CONV_2D / DEPTHWISE_CONV_2D, QLinearMatMul and QGemm with a constant weight ->
FULLY_CONNECTED, all with the ``requant`` option "float": the ISA's FLOAT_SCALE; QLinearAdd/Mul/
Sigmoid/LeakyRelu, 8-bit Relu/Clip -> LOOKUP/LOOKUP2 tables of onnxruntime's own kernel;
QLinearGlobalAveragePool -> MEAN; QLinearConcat, MaxPool, Transpose, Pad, nearest Resize, Flatten/
Reshape -> their data-movement ops; docs/onnx.md has the table). A lowering the compiler refuses
leaves the whole ONNX node to the CPU with the compiler's reason. The QDQ groups the fusion leaves in
float around Add, Mul, MaxPool and Concat (:func:`select_qdq_groups`) become tables of that float
computation; float Conv/MatMul/Gemm groups stay on the CPU (float32 sums are not the NPU's). Every
other node becomes an IR node named ``ONNX:<op_type>`` that the compiler does not lower;
:mod:`libaccel.runtime.model` runs it on the CPU in onnxruntime, in ONNX's own layout.

Shapes and element types of every tensor are taken from onnxruntime running the model once on ones
(contrib ops such as QLinearAdd are unknown to ``onnx.shape_inference``); ``shapes`` fixes dynamic
input dimensions first. Bad models raise :class:`OnnxModelError` with a one-line message naming the
node (or input) and the reason.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from libaccel.compiler.graph import Graph, OpNode, QuantParams, TensorInfo

OPSETS = range(13, 22)  # the default-domain opsets whose ops are read as they are (13 to 21)
QUANTIZED_TYPES = ("int8", "uint8", "int16", "uint16")  # a tensor of these makes a model quantized
FLOAT_TYPES = ("float16", "float32", "float64", "bfloat16")
NCHW_TO_NHWC = (0, 2, 3, 1)
_QDQ = ("QuantizeLinear", "DequantizeLinear")
_PASS_THROUGH = (
    "MaxPool",
    "Flatten",
    "Reshape",
    "Transpose",
    "Squeeze",
    "Unsqueeze",
    "Pad",
    "Resize",
    "Relu",
    "Clip",
)


class OnnxModelError(ValueError):
    """The model cannot be read or run: the message is one line naming the node and the reason."""


@dataclass
class OnnxGraph:
    """A model in the IR: ``graph``, plus what running its CPU nodes and its edges needs."""

    graph: Graph
    model: Any  # the (QOperator-form, shape-fixed) onnx.ModelProto the IR was read from
    onnx_nodes: dict[int, Any]  # IR node index -> its onnx.NodeProto (every node, NPU or not)
    names: dict[str, int]  # ONNX tensor name -> IR tensor index
    layouts: dict[int, tuple[int, ...]] = field(default_factory=dict)  # IR tensor -> perm from ONNX
    form: str = "qoperator"  # the form the file was in: "qoperator" or "qdq"
    info: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)  # ONNX name -> (dtype, shape)
    cpu_reasons: dict[int, str] = field(default_factory=dict)  # IR node -> why its lowering was refused
    # id(op node) -> the DequantizeLinear/QuantizeLinear nodes of its QDQ group, read with it
    absorbed: dict[int, list[Any]] = field(default_factory=dict)

    def to_ir(self, index: int, value: np.ndarray) -> np.ndarray:
        """An ONNX-layout value of IR tensor ``index`` in the IR's layout."""
        return layout_to_ir(value, self.layouts.get(index))

    def to_onnx(self, index: int, value: np.ndarray) -> np.ndarray:
        return layout_to_onnx(value, self.layouts.get(index))


def layout_to_ir(value: np.ndarray, perm: Sequence[int] | None) -> np.ndarray:
    """An ONNX-layout value in the IR's layout, ``perm`` being its tensor's ``OnnxGraph.layouts``."""
    return np.ascontiguousarray(value.transpose(perm)) if perm else value


def layout_to_onnx(value: np.ndarray, perm: Sequence[int] | None) -> np.ndarray:
    """An IR-layout value back in ONNX's layout (the inverse of :func:`layout_to_ir`)."""
    return np.ascontiguousarray(value.transpose(np.argsort(perm))) if perm else value


def _attrs(node: Any) -> dict[str, Any]:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _label(node: Any) -> str:
    return f"node {node.name!r} ({node.op_type})" if node.name else f"a {node.op_type} node"


def load_model(model: str | Path | bytes | Any) -> Any:
    """The model (path, bytes or ModelProto), its text checked (:func:`_check_text`).

    The graph itself is onnxruntime's to judge (:func:`_session`); not onnx.checker's, which refuses
    models onnxruntime runs, such as an output declared without a shape.
    """
    import onnx

    if not isinstance(model, onnx.ModelProto):
        try:
            if isinstance(model, bytes):
                model = onnx.load_from_string(model)
            else:
                model = onnx.load(str(model))
        except Exception as e:  # protobuf's DecodeError and friends: one line, not a traceback
            raise OnnxModelError(f"not an ONNX model: {type(e).__name__}: {e}".splitlines()[0]) from None
    _check_text(model, "the model")
    _check_quant_inputs(model)
    return model


def _check_quant_inputs(model: Any) -> None:
    """Every constant scale and zero point of a quantized op holds at least one value.

    onnxruntime checks the rest of these operands, but its contrib QLinearSoftmax reads the first
    value of an empty one (found by mutating the test networks: a SIGSEGV in the probe run).
    """
    sizes = {t.name: int(np.prod(t.dims)) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output:
            value = next((a.t for a in n.attribute if a.name == "value"), None)
            if value is not None:
                sizes[n.output[0]] = int(np.prod(value.dims))
    for n in model.graph.node:
        for name in _qparam_names(n):
            if sizes.get(name) == 0:
                raise OnnxModelError(f"{_label(n)}: quantization parameter {name!r} is empty")


def _qparam_names(node: Any) -> list[str]:
    """The scale and zero-point inputs of a quantized op (its activations' and its weight's)."""
    ins, outs = _Reader._QIO.get(node.op_type, ([], []))
    params = [p for _, s, z in (*ins, *outs) for p in (s, z)]
    if node.op_type == "QLinearConv":  # the filter's scale and zero point
        params += [4, 5]
    if node.op_type == "QLinearConcat":  # y_scale, y_zp, then (x, scale, zp) triples
        params = [0, 1] + [p for k in range(2, len(node.input), 3) for p in (k + 1, k + 2)]
    return [node.input[p] for p in params if p < len(node.input) and node.input[p]]


def _check_text(msg: Any, where: str) -> None:
    """Every string field of ``msg`` (recursively) is UTF-8 text.

    ONNX's proto2 schema lets protobuf parse any bytes as a string; the first access decodes them,
    so a damaged name would surface as a UnicodeDecodeError deep in a reader (and onnxruntime's
    Python session prints an "EP Error" banner on stdout before it fails).
    """
    try:
        fields = msg.ListFields()
    except UnicodeDecodeError:
        raise OnnxModelError(f"{where} has a string that is not UTF-8 text") from None
    for fd, value in fields:
        # Python's protobuf hands back a singular string that is not UTF-8 as bytes, and raises
        # UnicodeDecodeError for one in a repeated field. String attributes are bytes in the schema
        # but text by the spec: onnxruntime quotes them in its errors, which its Python wrapper then
        # fails to decode.
        text = fd.type == fd.TYPE_STRING
        if text or (fd.type == fd.TYPE_BYTES and fd.containing_type.name == "AttributeProto"):
            try:
                items = [value] if isinstance(value, str | bytes) else list(value)
                for item in items:
                    if isinstance(item, bytes) and (text or item.decode() is None):
                        raise UnicodeDecodeError("utf-8", item, 0, 1, "a string read as bytes")
            except UnicodeDecodeError:
                raise OnnxModelError(f"{where}.{fd.name} is not UTF-8 text") from None
        if fd.message_type is None:
            continue
        if hasattr(value, "ListFields"):
            _check_text(value, f"{where}.{fd.name}")
        else:  # a repeated message field
            for i, item in enumerate(value):
                _check_text(item, f"{where}.{fd.name}[{i}]")


def model_opset(model: Any) -> int:
    """The model's default-domain opset; OnnxModelError when it imports none."""
    versions = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    v = versions.get("ai.onnx")
    if v is None:
        raise OnnxModelError("the model imports no default-domain opset")
    return int(v)


def _schema_key(schema: Any) -> tuple[Any, ...]:
    """What an op's meaning is read from: its attributes (with defaults), its inputs and outputs."""
    attrs = tuple(sorted((k, int(a.type), a.required, a.default_value.SerializeToString())
                         for k, a in schema.attributes.items()))  # fmt: skip
    params = tuple((p.name, p.type_str, int(p.option)) for p in (*schema.inputs, *schema.outputs))
    return attrs, params, schema.min_input, schema.max_input, schema.min_output, schema.max_output


def opset_change(op_type: str, opset: int) -> str:
    """Why a default-domain ``op_type`` at ``opset`` is not read as it is ("" when it is).

    Outside :data:`OPSETS` an op is read when onnx.defs gives it, at the model's opset, the schema
    it has at the nearest end of that window: the same version, or a later one that only allows
    more types (as opset 22 did for many ops: bfloat16) with the same attributes, inputs and outputs.
    """
    import onnx.defs

    if opset in OPSETS:
        return ""
    bound = OPSETS.start if opset < OPSETS.start else OPSETS.stop - 1
    window = f"opsets {OPSETS.start} to {OPSETS.stop - 1}"
    try:
        here = onnx.defs.get_schema(op_type, opset)
    except onnx.defs.SchemaError:
        return f"{op_type} has no schema at opset {opset}"
    try:
        there = onnx.defs.get_schema(op_type, bound)
    except onnx.defs.SchemaError:
        return f"{op_type} of opset {opset} is not in {window}"
    if here.since_version == there.since_version:
        return ""
    old, new = (there, here) if opset > bound else (here, there)
    types_old = {t.type_param_str: set(t.allowed_type_strs) for t in old.type_constraints}
    types_new = {t.type_param_str: set(t.allowed_type_strs) for t in new.type_constraints}
    if _schema_key(old) == _schema_key(new) and types_old.keys() == types_new.keys():
        if all(types_old[k] <= types_new[k] for k in types_old):
            return ""
    since = here.since_version
    return f"{op_type} of opset {opset} (its schema of opset {since}) is not the {op_type} of {window}"


def fix_shapes(model: Any, shapes: dict[str, tuple[int, ...]] | None) -> None:
    """Set the graph inputs' dimensions from ``shapes``; OnnxModelError for one still dynamic."""
    shapes = dict(shapes or {})
    inits = {t.name for t in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        dims = inp.type.tensor_type.shape.dim
        if inp.name in shapes:
            want = shapes.pop(inp.name)
            if len(want) != len(dims):
                raise OnnxModelError(f"--shape {inp.name}: {len(want)} dimensions, the input has {len(dims)}")
            for d, v in zip(dims, want, strict=True):
                if d.HasField("dim_value") and d.dim_value != v:
                    raise OnnxModelError(f"--shape {inp.name}: dimension {d.dim_value} is fixed, not {v}")
                d.dim_value = int(v)
        for i, d in enumerate(dims):
            if d.HasField("dim_value") and d.dim_value < 0:
                raise OnnxModelError(f"input {inp.name!r}: dimension {i} is {d.dim_value}, not a size")
            if not d.HasField("dim_value"):  # a dim_value of 0 is a size: an empty tensor
                raise OnnxModelError(
                    f"input {inp.name!r} has a dynamic dimension {i} ({d.dim_param or '?'}): "
                    f"fix it with --shape {inp.name}="
                    + "x".join(str(x.dim_value if x.HasField("dim_value") else 1) for x in dims)
                )
    if shapes:
        raise OnnxModelError(f"--shape names no model input: {', '.join(sorted(shapes))}")


def _is_qdq(model: Any) -> bool:
    """QDQ form: a DequantizeLinear of an activation feeds a float op (not only graph outputs)."""
    inits = {t.name for t in model.graph.initializer}
    consumers: dict[str, list[str]] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n.op_type)
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear" and n.input and n.output and n.input[0] not in inits:
            if any(op not in _QDQ for op in consumers.get(n.output[0], [])):
                return True
    return False


def _session_options(level: str = "disable") -> Any:
    import onnxruntime as ort

    # onnxruntime's own warnings would break the CLI's one-line errors: no warnings, no telemetry
    # (on a read-only home, as in the QEMU guest, it warns that it cannot store its device id)
    # (on a read-only home, as in the QEMU guest, it warns that it cannot store its device id); and
    # not its error log either: every error it reports reaches the caller as an exception, which
    # becomes OnnxModelError's one line
    ort.set_default_logger_severity(4)
    ort.disable_telemetry_events()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4
    so.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    }[level]
    return so


def _session(model: Any, level: str = "disable", optimized: Path | None = None) -> Any:
    import onnxruntime as ort

    so = _session_options(level)
    if optimized is not None:
        so.optimized_model_filepath = str(optimized)
    try:
        return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime's Fail/InvalidGraph: its first line names the node
        raise OnnxModelError(f"onnxruntime rejects the model: {str(e).splitlines()[0]}") from None


def reference_session(model: Any) -> Any:
    """The model in onnxruntime as the reference runs it: a QDQ model with its QDQ fusion
    (ORT_ENABLE_EXTENDED), a QOperator one with every graph optimization off."""
    return _session(model, "extended" if _is_qdq(model) else "disable")


def node_session(
    model: Any, node: Any, info: dict[str, tuple[str, tuple[int, ...]]]
) -> tuple[Any, list[str]]:
    """A session running ``node`` of ``model`` alone (its constants included), and its input names;
    ``info`` gives each non-constant input's (dtype, shape)."""
    import onnx
    import onnx.numpy_helper
    from onnx import helper

    consts = {t.name: t for t in model.graph.initializer}
    for n in model.graph.node:  # Constant nodes' values become the one-node model's initializers
        if n.op_type == "Constant" and n.output[0] in node.input and "value" in _attrs(n):
            value = _attrs(n)["value"]
            consts[n.output[0]] = onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(value), n.output[0])
    inputs: list[Any] = []
    inits = []
    for name in node.input:
        if not name:
            continue
        if name in consts:
            inits.append(consts[name])
        elif name not in [i.name for i in inputs]:
            dtype, shape = info[name]
            elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
            inputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
    outputs = [onnx.ValueInfoProto(name=o) for o in node.output if o]
    graph = helper.make_graph([node], "one_node", inputs, outputs, inits)
    m = helper.make_model(graph, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    return _session(m), [i.name for i in inputs]


def qoperator_form(model: Any) -> Any:
    """The QOperator form of a QDQ model: onnxruntime's QDQ fusion (ORT_ENABLE_EXTENDED)."""
    import onnx

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "fused.onnx"
        _session(model, "extended", out)
        return onnx.load(str(out))


def _probe(model: Any) -> dict[str, tuple[str, tuple[int, ...]]]:
    """(dtype, shape) of every node output, from onnxruntime running the model once on ones: a
    run-time scale of one is valid where zero is not, and an integer Div or Mod divides by one."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    listed = {o.name for o in m.graph.output}
    for n in m.graph.node:
        for o in n.output:
            if o and o not in listed:
                m.graph.output.append(onnx.ValueInfoProto(name=o))
                listed.add(o)
    sess = _session(m)
    feeds = {}
    for i in sess.get_inputs():
        dtype = _ort_dtype(i.type)
        feeds[i.name] = np.ones([int(d) for d in i.shape], dtype=dtype)
    names = [o.name for o in sess.get_outputs()]
    try:
        values = sess.run(names, feeds)
    except Exception as e:
        raise OnnxModelError(f"onnxruntime cannot run the model: {str(e).splitlines()[0]}") from None
    out = {
        name: (str(v.dtype), tuple(int(d) for d in v.shape)) for name, v in zip(names, values, strict=True)
    }
    for name, v in feeds.items():
        out[name] = (str(v.dtype), v.shape)
    return out


def _ort_dtype(type_str: str) -> np.dtype:
    names = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
             "tensor(uint8)": np.uint8, "tensor(int8)": np.int8, "tensor(uint16)": np.uint16,
             "tensor(int16)": np.int16, "tensor(uint32)": np.uint32, "tensor(int32)": np.int32,
             "tensor(uint64)": np.uint64, "tensor(int64)": np.int64, "tensor(bool)": np.bool_}  # fmt: skip
    if type_str not in names:
        raise OnnxModelError(f"input type {type_str} is not supported")
    return np.dtype(names[type_str])


QDQ_GROUP_OPS = ("Add", "Mul", "MaxPool", "Concat")  # float ops a QDQ group is lowered around
_FLOAT_SUMS = ("Conv", "MatMul", "Gemm", "GlobalAveragePool", "AveragePool")  # float QDQ ops left alone
# float QDQ ops taken, with ``float_sums``, as the QLinear op of their bytes (at most 1 unit off)
FLOAT_SUM_GROUP_OPS = ("Conv", "MatMul")


@dataclass
class QdqGroup:
    """DequantizeLinear nodes -> a float ``op`` -> one QuantizeLinear, as onnxruntime's QDQ fusion
    leaves it (on x86 it fuses int8 groups only where it can convert their Q/DQ pairs to uint8)."""

    op: Any
    dqs: list[Any]  # the DequantizeLinear feeding each non-constant input of ``op``, in input order
    q: Any


def select_qdq_groups(
    model: Any,
    consts: dict[str, np.ndarray],
    info: dict[str, tuple[str, tuple[int, ...]]],
    ops: tuple[str, ...] = QDQ_GROUP_OPS,
) -> dict[int, QdqGroup]:
    """The QDQ groups of a QOperator-form model around an op of :data:`QDQ_GROUP_OPS`, by id(op).

    onnxruntime computes such a group in float between its DequantizeLinear and QuantizeLinear; the
    op is elementwise or selects its inputs' values (Add, Mul, MaxPool, Concat), so the group is a
    function of one or two stored bytes per element, and the reader lowers it as tables of that
    very float computation (:meth:`_Reader._read_group`). A group's DequantizeLinear outputs and
    its op's output are read by the group alone; its scales and zero points are constants, one each
    (a constant weight's may be per channel). ``ops`` adds :data:`FLOAT_SUM_GROUP_OPS` for
    ``float_sums`` (:meth:`_Reader._group_sum`)."""
    nodes = [n for n in model.graph.node if n.op_type != "Constant"]
    producer = {o: n for n in nodes for o in n.output if o}
    consumers: dict[str, list[Any]] = {}
    for n in nodes:
        for t in n.input:
            consumers.setdefault(t, []).append(n)
    graph_outputs = {o.name for o in model.graph.output}

    def per_tensor(node: Any) -> bool:
        params = [t for t in node.input[1:3] if t]
        return all(t in consts and np.asarray(consts[t]).size == 1 for t in params)

    groups: dict[int, QdqGroup] = {}
    for n in nodes:
        if n.op_type not in ops or n.domain not in ("", "ai.onnx") or len(n.output) != 1:
            continue
        readers = consumers.get(n.output[0], [])
        if len(readers) != 1 or readers[0].op_type != "QuantizeLinear" or n.output[0] in graph_outputs:
            continue
        q = readers[0]
        if not per_tensor(q) or info.get(q.output[0], ("",))[0] not in ("int8", "uint8"):
            continue
        dqs = []
        for t in n.input:
            if not t or t in consts:
                continue
            p = producer.get(t)
            if p is None or p.op_type != "DequantizeLinear" or len(consumers[t]) != 1 or t in graph_outputs:
                break
            if not per_tensor(p) or info.get(p.input[0], ("",))[0] not in ("int8", "uint8"):
                if p.input[0] not in consts:
                    break
            dqs.append(p)
        else:
            if any(d.input[0] not in consts for d in dqs):
                groups[id(n)] = QdqGroup(n, dqs, q)
    return groups


class _Reader:
    """One pass over a QOperator-form model, building the IR."""

    def __init__(
        self, model: Any, info: dict[str, tuple[str, tuple[int, ...]]], float_sums: bool = False
    ) -> None:
        from onnx import numpy_helper

        self.model = model
        self.info = info
        self.float_sums = float_sums
        self.opset = model_opset(model)
        self.consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        for n in model.graph.node:  # Constant nodes are constants too
            if n.op_type == "Constant" and "value" in _attrs(n):
                self.consts[n.output[0]] = numpy_helper.to_array(_attrs(n)["value"])
        self.tensors: dict[int, TensorInfo] = {}
        self.names: dict[str, int] = {}
        self.layouts: dict[int, tuple[int, ...]] = {}
        self.nodes: list[OpNode] = []
        self.onnx_nodes: dict[int, Any] = {}
        self.quant: dict[str, QuantParams] = {}
        self.cpu_reasons: dict[int, str] = {}
        self.groups: dict[int, QdqGroup] = {}
        self.absorbed: dict[int, list[Any]] = {}  # id(op node) -> the DQ/Q nodes read with it
        self._refused = ""

    # --- tensors ---------------------------------------------------------------------------
    def _new(self, name: str, dtype: str, shape: tuple[int, ...], quant: QuantParams | None,
             data: np.ndarray | None) -> int:  # fmt: skip
        index = len(self.tensors)
        self.tensors[index] = TensorInfo(index, name, dtype, tuple(int(d) for d in shape), quant, data)
        return index

    def tensor(self, name: str) -> int:
        """The IR tensor of ONNX tensor ``name`` (4-D activations NHWC; constants as stored)."""
        if name in self.names:
            return self.names[name]
        if name in self.consts:
            arr = self.consts[name]
            index = self._new(name, str(arr.dtype), arr.shape, self.quant.get(name), arr)
        else:
            if name not in self.info:
                raise OnnxModelError(f"tensor {name!r} has no known type or shape")
            dtype, shape = self.info[name]
            perm = NCHW_TO_NHWC if len(shape) == 4 else None
            ir_shape = tuple(shape[p] for p in perm) if perm else shape
            index = self._new(name, dtype, ir_shape, self.quant.get(name), None)
            if perm:
                self.layouts[index] = perm
        self.names[name] = index
        return index

    def const_value(self, node: Any, name: str, what: str) -> np.ndarray:
        if name not in self.consts:
            raise OnnxModelError(f"{_label(node)}: {what} {name!r} is not a constant")
        return self.consts[name]

    def qparams(self, node: Any, scale: str, zp: str | None, axis: int = 0) -> QuantParams:
        s = np.atleast_1d(self.const_value(node, scale, "scale")).astype(np.float32).reshape(-1)
        # onnxruntime runs any scale; the NPU's requantization (and the meaning of the model) needs
        # positive normal floats: zero, a negative, NaN, infinity or a subnormal is a broken model.
        bad = ~(np.isfinite(s) & (s >= np.finfo(np.float32).tiny)) if s.size else np.array([True])
        if bad.any():
            value = s[np.argmax(bad)] if s.size else "empty"
            raise OnnxModelError(f"{_label(node)}: scale {scale!r} is {value}, not a positive finite number")
        if not zp:
            z = np.zeros(s.shape, np.int64)
        else:
            z = np.atleast_1d(self.const_value(node, zp, "zero point")).reshape(-1)
            if z.dtype.kind not in "iu":
                raise OnnxModelError(f"{_label(node)}: zero point {zp!r} is {z.dtype}, not an integer type")
        if z.size == 1 and s.size > 1:
            z = np.repeat(z, s.size)
        if z.size != s.size:
            raise OnnxModelError(
                f"{_label(node)}: {z.size} zero points ({zp!r}) for {s.size} scales ({scale!r})"
            )
        return QuantParams(tuple(float(v) for v in s), tuple(int(v) for v in z), axis)

    # --- quantization of activations --------------------------------------------------------
    _QIO: dict[str, tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]] = {
        # op: ([(tensor, scale, zp) inputs], [(tensor, scale, zp) outputs]) as input positions
        "QLinearConv": ([(0, 1, 2)], [(0, 6, 7)]),
        "QLinearMatMul": ([(0, 1, 2), (3, 4, 5)], [(0, 6, 7)]),
        "QGemm": ([(0, 1, 2), (3, 4, 5)], [(0, 7, 8)]),
        "QLinearAdd": ([(0, 1, 2), (3, 4, 5)], [(0, 6, 7)]),
        "QLinearMul": ([(0, 1, 2), (3, 4, 5)], [(0, 6, 7)]),
        "QLinearAveragePool": ([(0, 1, 2)], [(0, 3, 4)]),
        "QLinearGlobalAveragePool": ([(0, 1, 2)], [(0, 3, 4)]),
        "QLinearSigmoid": ([(0, 1, 2)], [(0, 3, 4)]),
        "QLinearLeakyRelu": ([(0, 1, 2)], [(0, 3, 4)]),
        "QLinearSoftmax": ([(0, 1, 2)], [(0, 3, 4)]),
        "QuantizeLinear": ([], [(0, 1, 2)]),
        "DequantizeLinear": ([(0, 1, 2)], []),
    }

    def collect_quant(self) -> None:
        """Every 8-bit activation's (scale, zero point) from the Q* ops that read or write it, carried
        through the ops that only move bytes (MaxPool, Flatten, ...)."""
        for n in self.model.graph.node:
            if self._runtime_qparam(n):
                continue  # its tensors get no quantization: the node stays on the CPU
            ins, outs = self._QIO.get(n.op_type, ([], []))
            for t, s, z in ins:
                if t < len(n.input) and n.input[t] not in self.consts:
                    self.quant.setdefault(n.input[t], self.qparams(n, n.input[s], _get(n.input, z)))
            for t, s, z in outs:
                self.quant.setdefault(n.output[t], self.qparams(n, n.input[s], _get(n.input, z)))
            if n.op_type == "QLinearConcat":  # y_scale, y_zp, then (x, scale, zp) triples
                self.quant.setdefault(n.output[0], self.qparams(n, n.input[0], n.input[1]))
                for k in range(2, len(n.input), 3):
                    self.quant.setdefault(n.input[k], self.qparams(n, n.input[k + 1], n.input[k + 2]))
        for _ in range(2):  # forward then backward through byte-moving ops
            for n in self.model.graph.node:
                if n.op_type in _PASS_THROUGH and n.input[0] in self.quant:
                    self.quant.setdefault(n.output[0], self.quant[n.input[0]])
            for n in reversed(self.model.graph.node):
                if n.op_type in _PASS_THROUGH and n.output[0] in self.quant:
                    self.quant.setdefault(n.input[0], self.quant[n.output[0]])
        # 8-bit integers that no Q-op gives a scale (plain int8/uint8 data) stand for themselves:
        # scale 1, zero point 0; the byte-moving and byte-comparing ops do not depend on it
        identity = QuantParams((1.0,), (0,), 0)
        for n in self.model.graph.node:
            if n.op_type in _PASS_THROUGH:
                for name in (n.input[0], n.output[0]):
                    if self.info.get(name, ("",))[0] in ("int8", "uint8"):
                        self.quant.setdefault(name, identity)

    def _runtime_qparam(self, node: Any) -> str:
        """A scale or zero point of ``node`` fed at run time (not a constant), or ""."""
        return next((name for name in _qparam_names(node) if name not in self.consts), "")

    def _cpu_only(self, node: Any) -> str:
        """Why ``node`` stays on the CPU before any lowering is tried ("" when it may not)."""
        if (not node.domain or node.domain == "ai.onnx") and hasattr(self, f"_read_{node.op_type}"):
            if why := opset_change(node.op_type, self.opset):
                return why
        if name := self._runtime_qparam(node):
            return f"quantization parameter {name!r} is fed at run time (the NPU's is compiled in)"
        for name in [*node.input, *node.output]:
            if name and name in self.info and 0 in self.info[name][1]:
                return f"tensor {name!r} is empty ({list(self.info[name][1])}): nothing for the NPU to do"
        return ""

    # --- nodes ----------------------------------------------------------------------------------
    def add(self, node: Any, op: str, inputs: list[int], options: dict[str, Any] | None = None) -> None:
        outputs = [self.tensor(o) for o in node.output if o]
        index = len(self.nodes)
        self.nodes.append(OpNode(index, op, tuple(inputs), tuple(outputs), options or {}))
        self.onnx_nodes[index] = node

    def cpu(self, node: Any) -> None:
        inputs = [self.tensor(i) if i else -1 for i in node.input]
        self.add(node, f"ONNX:{node.op_type}", inputs)

    def read(self) -> None:
        self.collect_quant()
        ops = QDQ_GROUP_OPS + (FLOAT_SUM_GROUP_OPS if self.float_sums else ())
        self.groups = select_qdq_groups(self.model, self.consts, self.info, ops)
        members = {id(m): g for g in self.groups.values() for m in (*g.dqs, g.q)}
        done: set[int] = set()
        dequantized = {n.output[0]: True for n in self.model.graph.node if n.op_type == "DequantizeLinear"}
        for node in self.model.graph.node:
            if node.op_type == "Constant" or id(node) in done:
                continue
            if id(node) in members:
                continue  # read with its group's op (or on the CPU right before and after it)
            group = self.groups.get(id(node))
            if group is None:
                reason = ""
                if node.op_type in _FLOAT_SUMS and any(dequantized.get(t) for t in node.input):
                    reason = (
                        f"onnxruntime computes this QDQ {node.op_type} in float32 (its int8 Q/DQ pair is "
                        "not converted to uint8 for a fused kernel): the NPU's integer sums are not "
                        "bit-exact with float32 sums"
                    )
                self._read_node(node, getattr(self, f"_read_{node.op_type}", None), reason=reason)
                continue
            if self._read_node(node, lambda n, g=group: self._read_group(g), cpu=False):
                self.absorbed[id(node)] = [*group.dqs, group.q]
                done.add(id(group.q))
                continue
            reason = self._refused
            self._refused = ""
            for m in group.dqs:  # the group runs on the CPU as onnxruntime's nodes, in order
                self._read_node(m, None)
            self._read_node(node, None, reason=reason)
            self._read_node(group.q, None)
            done.add(id(group.q))

    def _read_node(self, node: Any, reader: Any, cpu: bool = True, reason: str = "") -> bool:
        """Lower ``node`` with ``reader`` (True when the compiler takes every IR node it made); else,
        with ``cpu``, add it as a CPU node with the reason. A refused lowering leaves no trace."""
        from libaccel.compiler.partition import check_support

        reason = reason or self._cpu_only(node)
        mark = (len(self.nodes), dict(self.names), dict(self.tensors), dict(self.layouts))
        if not reason and reader is not None and reader(node):
            made = self.nodes[mark[0] :]
            refused = [r for r in (check_support(self.graph(), n) for n in made) if not r.ok]
            if not refused:
                return True
            reason = refused[0].reason
            # a lowering the compiler refuses: the ONNX node runs on the CPU as a whole
            del self.nodes[mark[0] :]
            for i in [i for i in self.onnx_nodes if i >= mark[0]]:
                del self.onnx_nodes[i]
            self.names, self.tensors, self.layouts = mark[1], mark[2], mark[3]
        if not cpu:
            self._refused = reason or self._refused
            return False
        self.cpu(node)
        if reason or self._refused:
            self.cpu_reasons[len(self.nodes) - 1] = reason or self._refused
        self._refused = ""
        return False

    def graph(self) -> Graph:
        return Graph(self.tensors, self.nodes, (), ())

    def _filter(self, node: Any, name: str, scale: str, zp: str | None, axis: int) -> TensorInfo:
        w = self.const_value(node, name, "weight")
        q = self.qparams(node, scale, zp, axis)
        return TensorInfo(-1, name, str(w.dtype), w.shape, q, w)

    def _const_tensor(self, t: TensorInfo, data: np.ndarray, axis: int) -> int:
        q = t.quant
        assert q is not None
        quant = QuantParams(q.scales, q.zero_points, axis)
        return self._new(t.name + ":nhwc", str(data.dtype), data.shape, quant, np.ascontiguousarray(data))

    def _pads(self, node: Any, attrs: dict[str, Any], kernel: list[int]) -> dict[str, Any] | None:
        """Explicit 2-D pads: ONNX's ``pads``, or those ``auto_pad`` implies (SAME_UPPER puts the odd
        one at the end, SAME_LOWER at the start; VALID none), for a ``kernel`` of [KH, KW]."""
        auto = attrs.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            shape = self.info.get(node.input[0], ("", ()))[1]
            if len(shape) != 4:
                return None
            strides = list(attrs.get("strides", [1, 1]))
            dil = list(attrs.get("dilations", [1, 1]))
            pads = [0, 0, 0, 0]
            for i in range(2):
                size = shape[2 + i]
                out = -(-size // strides[i])
                total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - size)
                small = total // 2
                pads[i], pads[2 + i] = (
                    (small, total - small) if auto == "SAME_UPPER" else (total - small, small)
                )
        elif auto == "VALID":
            pads = [0, 0, 0, 0]
        elif auto == "NOTSET":
            pads = list(attrs.get("pads", [0, 0, 0, 0]))
        else:
            self._refused = f"auto_pad {auto!r} is not one of ONNX's"
            return None
        if len(pads) != 4:
            return None
        return dict(
            padding="EXPLICIT", pad_top=pads[0], pad_left=pads[1], pad_bottom=pads[2], pad_right=pads[3]
        )

    def _read_QLinearConv(self, node: Any) -> bool:  # noqa: N802
        attrs = _attrs(node)
        if node.input[3] not in self.consts:
            self._refused = f"the filter {node.input[3]!r} is not a constant"
            return False
        if len(self.info.get(node.input[0], ("", ()))[1]) != 4:
            self._refused = "not a 2-D convolution (the input is not 4-D)"
            return False
        w = self._filter(node, node.input[3], node.input[4], _get(node.input, 5), 0)
        if len(w.shape) != 4:
            return False
        pads = self._pads(node, attrs, list(w.shape[2:]))
        if pads is None:
            return False
        cout, cin_g, kh, kw = w.shape
        group = int(attrs.get("group", 1))
        strides = list(attrs.get("strides", [1, 1]))
        dil = list(attrs.get("dilations", [1, 1]))
        cin = self.info[node.input[0]][1][1]
        options: dict[str, Any] = dict(stride_h=strides[0], stride_w=strides[1], dilation_h_factor=dil[0],
                                       dilation_w_factor=dil[1], requant="float", **pads)  # fmt: skip
        assert w.data is not None
        if group == 1:
            op, data, axis = "CONV_2D", w.data.transpose(0, 2, 3, 1), 0
        elif group == cin and cin_g == 1:
            op, axis = "DEPTHWISE_CONV_2D", 3
            data = w.data.transpose(1, 2, 3, 0)  # [C*dm, 1, KH, KW] -> [1, KH, KW, C*dm]
            options["depth_multiplier"] = cout // cin
        else:
            return self._grouped_conv(node, w, group, options)
        inputs = [self.tensor(node.input[0]), self._const_tensor(w, data, axis)]
        if len(node.input) > 8 and node.input[8]:
            inputs.append(self.tensor(node.input[8]))
        self.add(node, op, inputs, options)
        return True

    def _grouped_conv(self, node: Any, w: TensorInfo, group: int, options: dict[str, Any]) -> bool:
        """A grouped convolution as one CONV_2D per group: SLICE the group's input channels, convolve
        with its filters (and scales, and bias), CONCATENATION of the outputs along C."""
        x, y = node.input[0], node.output[0]
        cout, cin_g = w.shape[0], w.shape[1]
        n, cin, h, wd = self.info[x][1]
        _, _, oh, ow = self.info[y][1]
        if cin != cin_g * group or cout % group:
            return False
        cout_g = cout // group
        assert w.data is not None and w.quant is not None
        x_ir, y_ir = self.tensor(x), self.tensor(y)
        bias = self.consts.get(node.input[8]) if len(node.input) > 8 and node.input[8] else None
        start, outs = len(self.nodes), []
        for g in range(group):
            begin = self._new(
                f"{y}:g{g}:begin", "int32", (4,), None, np.array([0, 0, 0, g * cin_g], np.int32)
            )
            size = self._new(f"{y}:g{g}:size", "int32", (4,), None, np.array([n, h, wd, cin_g], np.int32))
            xs = self._internal(x_ir, (n, h, wd, cin_g), f"g{g}")
            self.nodes.append(OpNode(len(self.nodes), "SLICE", (x_ir, begin, size), (xs,)))
            cs = slice(g * cout_g, (g + 1) * cout_g)
            q = w.quant
            wq = q if q.per_tensor else QuantParams(q.scales[cs], q.zero_points[cs], 0)
            part = TensorInfo(-1, f"{w.name}:g{g}", w.dtype, (cout_g, cin_g, *w.shape[2:]), wq, w.data[cs])
            inputs = [xs, self._const_tensor(part, w.data[cs].transpose(0, 2, 3, 1), 0)]
            if bias is not None:
                inputs.append(
                    self._new(f"{y}:g{g}:bias", "int32", (cout_g,), None, np.asarray(bias[cs], np.int32))
                )
            ys = self._internal(y_ir, (n, oh, ow, cout_g), f"g{g}")
            self.nodes.append(OpNode(len(self.nodes), "CONV_2D", tuple(inputs), (ys,), dict(options)))
            outs.append(ys)
        self.nodes.append(OpNode(len(self.nodes), "CONCATENATION", tuple(outs), (y_ir,), {"axis": 3}))
        for i in range(start, len(self.nodes)):
            self.onnx_nodes[i] = node
        return True

    def _fc(self, node: Any, a: str, b_data: np.ndarray, w: TensorInfo, bias: str | None) -> bool:
        """A [K, N] constant right operand as FULLY_CONNECTED's [N, K] filter."""
        if a in self.consts:
            self._refused = "a constant left operand (not lowered)"
            return False
        if b_data.ndim != 2:
            self._refused = (
                f"a {b_data.ndim}-D right operand (a batched MatMul): FULLY_CONNECTED's weight is 2-D"
            )
            return False
        if len(self.info.get(a, ("", ()))[1]) == 4 or len(self.info.get(node.output[0], ("", ()))[1]) == 4:
            # rows of a 4-D (NCHW) operand are not rows of its NHWC bytes: left to the CPU
            self._refused = "MatMul of a 4-D operand"
            return False
        q = w.quant
        assert q is not None
        if not q.per_tensor and len(q.scales) != b_data.shape[1]:
            return False
        filt = self._new(w.name + ":t", str(b_data.dtype), (b_data.shape[1], b_data.shape[0]),
                         QuantParams(q.scales, q.zero_points, 0), np.ascontiguousarray(b_data.T))  # fmt: skip
        inputs = [self.tensor(a), filt]
        if bias:
            inputs.append(self.tensor(bias))
        self.add(node, "FULLY_CONNECTED", inputs, {"requant": "float"})
        return True

    def _read_QLinearMatMul(self, node: Any) -> bool:  # noqa: N802
        if node.input[3] not in self.consts:
            self._refused = (
                f"the right operand {node.input[3]!r} is not a constant (FULLY_CONNECTED's weight)"
            )
            return False
        w = self._filter(node, node.input[3], node.input[4], node.input[5], 1)
        assert w.data is not None
        return self._fc(node, node.input[0], w.data, w, None)

    def _read_QGemm(self, node: Any) -> bool:  # noqa: N802
        attrs = _attrs(node)
        if (
            attrs.get("transA", 0)
            or float(attrs.get("alpha", 1.0)) != 1.0
            or node.input[3] not in self.consts
        ):
            return False
        if len(node.input) < 9 or not node.input[7]:
            return False  # no output scale: a float output
        w = self._filter(
            node, node.input[3], node.input[4], node.input[5], 0 if attrs.get("transB", 0) else 1
        )
        assert w.data is not None
        data = w.data.T if attrs.get("transB", 0) else w.data
        return self._fc(node, node.input[0], data, w, _get(node.input, 6))

    def _read_MaxPool(self, node: Any) -> bool:  # noqa: N802
        attrs = _attrs(node)
        x = self.info.get(node.input[0])
        if x is None or x[0] not in ("int8", "uint8") or len(x[1]) != 4:
            return False
        if len(node.output) > 1 and node.output[1]:
            self._refused = "MaxPool's Indices output: the NPU's MAXPOOL writes the maxima only"
            return False
        if any(d != 1 for d in attrs.get("dilations", [1, 1])):
            self._refused = f"MaxPool with dilations {list(attrs['dilations'])}: the NPU's MAXPOOL has none"
            return False
        k = list(attrs["kernel_shape"])
        s = list(attrs.get("strides", [1, 1]))
        pads = self._pads(node, attrs, k)
        if pads is None:
            return False
        # ceil_mode: the extra last window (onnxruntime's output shape says which) is padding at the
        # end, which never wins a max; the planner refuses a window that covers no input
        out = self.info.get(node.output[0], ("", ()))[1]
        if len(out) == 4:
            for i, (begin, end) in enumerate((("pad_top", "pad_bottom"), ("pad_left", "pad_right"))):
                short = (out[2 + i] - 1) * s[i] + k[i] - (x[1][2 + i] + pads[begin] + pads[end])
                if short > 0:
                    pads[end] += short
        options = dict(filter_height=k[0], filter_width=k[1], stride_h=s[0], stride_w=s[1], **pads)
        self.add(node, "MAX_POOL_2D", [self.tensor(node.input[0])], options)
        return True

    # --- data movement in ONNX's element order ------------------------------------------------------
    def _internal(self, like: int, shape: tuple[int, ...], what: str) -> int:
        """A new IR tensor of ``like``'s type and quantization (no ONNX name: a layout intermediate)."""
        t = self.tensors[like]
        return self._new(f"{t.name}:{what}", t.dtype, shape, t.quant, None)

    def _permute(self, src: int, perm: tuple[int, ...], dst: int | None = None) -> int:
        """``src`` transposed by ``perm`` (into ``dst``, or a new tensor): TRANSPOSE, or a RESHAPE
        alias when only size-1 dimensions move (the bytes are the same)."""
        shape = self.tensors[src].shape
        out_shape = tuple(shape[p] for p in perm)
        if dst is None:
            dst = self._internal(src, out_shape, "t")
        moved = [p for p in perm if shape[p] != 1]
        if moved == sorted(moved):
            self.nodes.append(OpNode(len(self.nodes), "RESHAPE", (src,), (dst,)))
        else:
            p = self._new(
                f"{self.tensors[dst].name}:perm", "int32", (len(perm),), None, np.array(perm, np.int32)
            )
            self.nodes.append(OpNode(len(self.nodes), "TRANSPOSE", (src, p), (dst,)))
        return dst

    def _onnx_order(self, name: str) -> int:
        """IR tensor holding ONNX tensor ``name``'s elements in ONNX's order."""
        index = self.tensor(name)
        perm = self.layouts.get(index)
        return index if perm is None else self._permute(index, tuple(int(p) for p in np.argsort(perm)))

    def _movement(self, node: Any, build: Any) -> bool:
        """Run ``build()`` (it appends IR nodes) and map them all to ``node``; False if it declines."""
        x = self.info.get(node.input[0])
        if x is None or x[0] not in ("int8", "uint8") or node.input[0] in self.consts:
            return False
        start = len(self.nodes)
        if not build():
            return False
        for i in range(start, len(self.nodes)):
            self.onnx_nodes[i] = node
        return True

    def _to_output(self, src: int, name: str) -> None:
        """Write ONNX-ordered ``src`` into ONNX output ``name`` (its IR layout)."""
        dst = self.tensor(name)
        perm = self.layouts.get(dst)
        if perm is None:
            self.nodes.append(OpNode(len(self.nodes), "RESHAPE", (src,), (dst,)))
            return
        onnx_shape = self.info[name][1]
        if self.tensors[src].shape != tuple(onnx_shape):
            tmp = self._internal(src, tuple(onnx_shape), "r")
            self.nodes.append(OpNode(len(self.nodes), "RESHAPE", (src,), (tmp,)))
            src = tmp
        self._permute(src, perm, dst)

    def _reshape(self, node: Any) -> bool:
        """Flatten / Reshape: ONNX's element order, so a 4-D NHWC tensor is transposed back first
        (a no-op alias when its C or H*W is 1, as after a global pool)."""
        return self._movement(
            node, lambda: self._to_output(self._onnx_order(node.input[0]), node.output[0]) or True
        )

    _read_Flatten = _reshape  # noqa: N815
    _read_Reshape = _reshape  # noqa: N815
    _read_Squeeze = _reshape  # noqa: N815
    _read_Unsqueeze = _reshape  # noqa: N815

    def _read_Transpose(self, node: Any) -> bool:  # noqa: N802
        """One TRANSPOSE from the input's IR layout to the output's (the layout perms folded in)."""
        x, y = node.input[0], node.output[0]
        rank = len(self.info.get(x, ("", ()))[1])
        t = [int(p) for p in _attrs(node).get("perm", list(range(rank))[::-1])]

        def build() -> bool:
            src, dst = self.tensor(x), self.tensor(y)
            inv_in = np.argsort(self.layouts.get(src, tuple(range(rank))))
            out_perm = self.layouts.get(dst, tuple(range(rank)))
            self._permute(src, tuple(int(inv_in[t[out_perm[i]]]) for i in range(rank)), dst)
            return True

        return self._movement(node, build)

    def _read_Resize(self, node: Any) -> bool:  # noqa: N802
        """Nearest-neighbour Resize over H and W: RESIZE_NEAREST_NEIGHBOR with the index maps onnxruntime
        itself computes (its kernel run on probes whose values are the row and the column index), so
        every coordinate_transformation_mode and nearest_mode is onnxruntime's. Linear stays on the CPU:
        onnxruntime interpolates 8-bit values in float."""
        attrs = _attrs(node)
        if attrs.get("mode", b"nearest") not in (b"nearest", "nearest"):
            self._refused = "linear Resize: onnxruntime interpolates 8-bit values in float"
            return False
        x, y = node.input[0], node.output[0]
        shape_x, shape_y = self.info.get(x, ("", ()))[1], self.info.get(y, ("", ()))[1]
        if len(shape_x) != 4 or len(shape_y) != 4 or shape_x[:2] != shape_y[:2]:
            return False
        if any(i and i not in self.consts for i in node.input[1:]):
            return False
        n, c, h, w = shape_x
        probe_rows = np.broadcast_to(np.arange(h, dtype=np.float32)[:, None], (h, w))
        probe_cols = np.broadcast_to(np.arange(w, dtype=np.float32)[None, :], (h, w))
        maps = []
        for probe in (probe_rows, probe_cols):
            feed = np.ascontiguousarray(np.broadcast_to(probe, (n, c, h, w)))
            maps.append(self._run(node, {x: feed})[0, 0])
        rows = tuple(int(v) for v in maps[0][:, 0])
        cols = tuple(int(v) for v in maps[1][0, :])

        def build() -> bool:
            size = self._new(f"{y}:size", "int32", (2,), None, np.array(shape_y[2:], np.int32))
            options = {"source_rows": rows, "source_cols": cols}
            self.nodes.append(
                OpNode(
                    len(self.nodes),
                    "RESIZE_NEAREST_NEIGHBOR",
                    (self.tensor(x), size),
                    (self.tensor(y),),
                    options,
                )
            )
            return True

        return self._movement(node, build)

    def _read_Pad(self, node: Any) -> bool:  # noqa: N802
        """PADV2 with ONNX's constant (default 0, used as stored), pads renumbered to the IR layout."""
        attrs = _attrs(node)
        mode = attrs.get("mode", b"constant")
        if mode not in (b"constant", "constant") or len(node.input) < 2 or node.input[1] not in self.consts:
            return False
        if len(node.input) > 3 and node.input[3]:
            return False  # axes: not read
        x, y = node.input[0], node.output[0]
        rank = len(self.info.get(x, ("", ()))[1])
        pads = (
            np.asarray(self.consts[node.input[1]], dtype=np.int64).reshape(2, rank).T
        )  # [rank, (begin, end)]
        value = 0
        if len(node.input) > 2 and node.input[2]:
            if node.input[2] not in self.consts:
                return False
            value = int(np.asarray(self.consts[node.input[2]]).reshape(-1)[0])

        def build() -> bool:
            src, dst = self.tensor(x), self.tensor(y)
            perm = self.layouts.get(src, tuple(range(rank)))
            ir_pads = np.array([pads[p] for p in perm], dtype=np.int32)
            p = self._new(f"{y}:pads", "int32", ir_pads.shape, None, ir_pads)
            t = self.tensors[dst]
            v = self._new(f"{y}:value", t.dtype, (), t.quant, np.array(value, dtype=t.dtype))
            self.nodes.append(OpNode(len(self.nodes), "PADV2", (src, p, v), (dst,)))
            return True

        return self._movement(node, build)

    # --- ops given to the NPU as tables of onnxruntime's own kernel ----------------------------------
    def _run(self, node: Any, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """``node`` run alone in onnxruntime on ``feeds`` (its first output)."""
        sess, _ = node_session(self.model, node, {k: (str(v.dtype), v.shape) for k, v in feeds.items()})
        return np.asarray(sess.run(None, feeds)[0])

    def _byte_io(self, node: Any, names: list[str]) -> str | None:
        """The common 8-bit type of the named tensors (all activations), else None (with the reason)."""
        if any(n in self.consts for n in names):
            self._refused = "a constant operand (not lowered)"
            return None
        types = {self.info[n][0] for n in names if n in self.info}
        if len(types) != 1 or not types <= {"int8", "uint8"} or any(n not in self.info for n in names):
            return None
        return types.pop()

    def _table_tensor(self, name: str, dtype: str, table: np.ndarray) -> int:
        return self._new(name + ":table", dtype, (table.size,), None, np.ascontiguousarray(table.reshape(-1)))

    def _read_binary(self, node: Any) -> bool:
        """QLinearAdd / QLinearMul as LOOKUP2: onnxruntime's result for every pair of input bytes.

        MLAS computes an element from the two stored bytes alone, but with different arithmetic for a
        one-element operand (its scalar path folds it into a constant first), so the table is made by
        the path the model's shapes take: equal shapes, or a one-element operand. Other broadcasts stay
        on the CPU."""
        a, b, y = node.input[0], node.input[3], node.output[0]
        if a != b and (a in self.consts) != (b in self.consts):
            return self._binary_const(node, a, b, y)
        dtype = self._byte_io(node, [a, b, y])
        if dtype is None:
            return False
        shape_a, shape_b = self.info[a][1], self.info[b][1]
        v = (np.arange(256) + (-128 if dtype == "int8" else 0)).astype(dtype)
        size_a, size_b = int(np.prod(shape_a)), int(np.prod(shape_b))
        if a == b:  # x op x: only the diagonal is ever read
            table = np.zeros((256, 256), dtype=dtype)
            table[np.arange(256), np.arange(256)] = self._run(node, {a: v})
        elif size_a == 1:
            table = np.stack([self._run(node, {a: v[i : i + 1], b: v}) for i in range(256)])
        elif size_b == 1:
            table = np.stack([self._run(node, {a: v, b: v[j : j + 1]}) for j in range(256)], axis=1)
        elif shape_a == shape_b:
            table = self._run(node, {a: np.repeat(v, 256), b: np.tile(v, 256)}).reshape(256, 256)
        else:
            self._refused = (
                f"broadcast of {list(shape_a)} and {list(shape_b)} (onnxruntime splits it by spans)"
            )
            return False
        table_index = self._table_tensor(y, dtype, table)
        self.add(node, "LOOKUP2", [self.tensor(a), self.tensor(b), table_index])
        return True

    def _binary_const(self, node: Any, a: str, b: str, y: str) -> bool:
        """QLinearAdd / QLinearMul of an activation and a constant: a one-element constant as
        LOOKUP (the node run on every byte of the activation, by onnxruntime's one-element path), a
        bias as LOOKUP2 with the constant's stored bytes as its operand. The bias must fill the
        activation's trailing dimensions (a ``[N]`` bias of an ``[M, N]`` activation):
        onnxruntime's broadcaster then takes each row as a span of both operands, the equal-shape
        path the table is made by."""
        import onnx

        const, x = (a, b) if a in self.consts else (b, a)
        dtype = self._byte_io(node, [x, y])
        data = np.asarray(self.consts[const])
        if dtype is None:
            return False
        if str(data.dtype) != dtype:
            self._refused = f"a {data.dtype} constant operand of {dtype} activations"
            return False
        v = _bytes(dtype)
        if data.size == 1 and int(np.prod(self.info[x][1])) > 1:  # a function of x's byte alone
            table = self._run(node, {x: v})
            self.add(node, "LOOKUP", [self.tensor(x), self._table_tensor(y, dtype, table)])
            return True
        shape_x = tuple(self.info[x][1])
        trailing = tuple(data.shape)
        while trailing[:1] == (1,):
            trailing = trailing[1:]
        fills = len(data.shape) <= len(shape_x) and shape_x[len(shape_x) - len(trailing) :] == trailing
        if not fills:
            shapes = [list(self.info[a][1]) if a == x else list(data.shape)]
            shapes.append(list(self.info[b][1]) if b == x else list(data.shape))
            self._refused = f"broadcast of {shapes[0]} and {shapes[1]} (onnxruntime splits it by spans)"
            return False
        # the table: the node with the constant fed as an input, on every byte pair
        probe = onnx.NodeProto()
        probe.CopyFrom(node)
        fed = const + ":bytes"
        probe.input[list(node.input).index(const)] = fed
        pairs = {a if a == x else fed: np.repeat(v, 256), b if b == x else fed: np.tile(v, 256)}
        table = self._run(probe, pairs).reshape(256, 256)
        rank = len(shape_x)
        stored = data.reshape((1,) * (rank - data.ndim) + data.shape)
        if rank == 4:
            stored = stored.transpose(NCHW_TO_NHWC)
        k = 0 if const == a else 3
        q = self.qparams(node, node.input[k + 1], _get(node.input, k + 2))
        c = self._new(fed, dtype, stored.shape, q, np.ascontiguousarray(stored))
        operands = [c, self.tensor(x)] if const == a else [self.tensor(x), c]
        self.add(node, "LOOKUP2", [*operands, self._table_tensor(y, dtype, table)])
        return True

    _read_QLinearAdd = _read_binary  # noqa: N815
    _read_QLinearMul = _read_binary  # noqa: N815

    def _read_unary(self, node: Any) -> bool:
        """QLinearSigmoid / QLinearLeakyRelu as LOOKUP: onnxruntime builds a 256-entry table itself."""
        x, y = node.input[0], node.output[0]
        dtype = self._byte_io(node, [x, y])
        if dtype is None:
            return False
        v = (np.arange(256) + (-128 if dtype == "int8" else 0)).astype(dtype)
        table = self._run(node, {x: v})
        self.add(node, "LOOKUP", [self.tensor(x), self._table_tensor(y, dtype, table)])
        return True

    _read_QLinearSigmoid = _read_unary  # noqa: N815
    _read_QLinearLeakyRelu = _read_unary  # noqa: N815
    _read_Relu = _read_unary  # noqa: N815  (8-bit Relu and Clip compare stored values)

    def _read_Clip(self, node: Any) -> bool:  # noqa: N802
        """Clip as a LOOKUP of onnxruntime's kernel: its bounds must be constants to be tabulated."""
        for bound, name in zip(("min", "max"), node.input[1:3], strict=False):
            if name and name not in self.consts:
                self._refused = f"Clip's {bound} {name!r} is fed at run time (the NPU's table is compiled in)"
                return False
        return self._read_unary(node)

    def _read_QLinearGlobalAveragePool(self, node: Any) -> bool:  # noqa: N802
        """MEAN over H, W with onnxruntime's scale (the compiler's MEAN with ``requant`` "float")."""
        x, y = node.input[0], node.output[0]
        if (
            self._byte_io(node, [x, y]) is None
            or len(self.info[x][1]) != 4
            or _attrs(node).get("channels_last", 0)
        ):
            return False
        axes = self._new(y + ":axes", "int32", (2,), None, np.array([1, 2], np.int32))
        self.add(node, "MEAN", [self.tensor(x), axes], {"keep_dims": True, "requant": "float"})
        return True

    def _read_QLinearConcat(self, node: Any) -> bool:  # noqa: N802
        """CONCATENATION; an input quantized unlike the output first goes through LOOKUP with the table
        onnxruntime's kernel uses for it (its concat requantizes each such input by a lookup)."""
        from onnx import helper

        y = node.output[0]
        xs = list(node.input[2::3])
        dtype = self._byte_io(node, [*xs, y])
        if dtype is None or len(node.input) < 5 or (len(node.input) - 2) % 3:
            return False
        rank = len(self.info[y][1])
        axis = int(_attrs(node).get("axis", 0))
        axis = axis + rank if axis < 0 else axis
        ir_axis = NCHW_TO_NHWC.index(axis) if rank == 4 else axis
        out_q = self.quant.get(y)
        v = (np.arange(256) + (-128 if dtype == "int8" else 0)).astype(dtype)
        inputs = []
        for k in range(2, len(node.input), 3):
            x = node.input[k]
            xq = self.qparams(node, node.input[k + 1], node.input[k + 2])
            index = self.tensor(x)
            if xq != out_q:
                ins = [*node.input[:2], *node.input[k : k + 3]]
                one = helper.make_node("QLinearConcat", ins, [y + ":one"], domain=node.domain, axis=0)
                table = self._table_tensor(x, dtype, self._run(one, {x: v}))
                rescaled = self._new(f"{x}:rescaled", dtype, self.tensors[index].shape, out_q, None)
                self.nodes.append(OpNode(len(self.nodes), "LOOKUP", (index, table), (rescaled,)))
                self.onnx_nodes[len(self.nodes) - 1] = node
                index = rescaled
            inputs.append(index)
        self.add(node, "CONCATENATION", inputs, {"axis": ir_axis})
        return True

    # --- QDQ groups onnxruntime computes in float ----------------------------------------------
    def _run_nodes(self, nodes: list[Any], feeds: dict[str, np.ndarray], out: str) -> np.ndarray:
        """``nodes`` (with the constants they read) run in onnxruntime, no graph optimization: the
        float kernels the reference runs them with; ``out`` flattened."""
        import onnx
        from onnx import helper, numpy_helper

        produced = {o for n in nodes for o in n.output}
        reads = dict.fromkeys(t for n in nodes for t in n.input if t and t not in produced)
        inits = [numpy_helper.from_array(np.asarray(self.consts[t]), t) for t in reads if t not in feeds]
        inputs = [
            helper.make_tensor_value_info(t, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
            for t, v in feeds.items()
        ]
        graph = helper.make_graph(list(nodes), "qdq_group", inputs, [onnx.ValueInfoProto(name=out)], inits)
        m = helper.make_model(graph, opset_imports=list(self.model.opset_import))
        m.ir_version = self.model.ir_version
        return np.asarray(_session(m).run([out], feeds)[0]).reshape(-1)

    def _requant_table(self, dq: Any, q: Any) -> np.ndarray:
        """Q(DQ(v)) for every byte v of ``dq``'s input: the value a selecting op (MaxPool, Concat)
        passes through, requantized as the float group does."""
        from onnx import helper

        dtype = self.info[dq.input[0]][0]
        requant = helper.make_node("QuantizeLinear", [dq.output[0], *q.input[1:]], [q.output[0]])
        requant.attribute.extend(q.attribute)
        return self._run_nodes([dq, requant], {dq.input[0]: _bytes(dtype)}, q.output[0])

    def _requantized(self, g: QdqGroup, dq: Any, src: int, dst: int | None) -> int:
        """``src`` (``dq``'s input in the IR) requantized into the group's output type and scale: a
        LOOKUP, or ``src`` itself when the table is the identity."""
        y = g.q.output[0]
        table = self._requant_table(dq, g.q)
        same = self.tensors[src].dtype == self.info[y][0] and np.array_equal(table, _bytes(self.info[y][0]))
        if same and dst is None:
            return src
        if dst is None:
            dst = self._new(f"{self.tensors[src].name}:requant", self.info[y][0], self.tensors[src].shape,
                            self.quant.get(y), None)  # fmt: skip
        table_index = self._table_tensor(f"{y}:{self.tensors[src].name}", self.info[y][0], table)
        self.nodes.append(OpNode(len(self.nodes), "LOOKUP", (src, table_index), (dst,)))
        return dst

    def _read_group(self, g: QdqGroup) -> bool:
        """A :class:`QdqGroup` on the NPU, every IR node mapped to the group's op."""
        start = len(self.nodes)
        readers = {"MaxPool": self._group_pool, "Concat": self._group_concat}
        readers |= dict.fromkeys(FLOAT_SUM_GROUP_OPS, self._group_sum)
        reader = readers.get(g.op.op_type, self._group_binary)
        if not reader(g):
            return False
        for i in range(start, len(self.nodes)):
            self.onnx_nodes[i] = g.op
        return True

    def _group_sum(self, g: QdqGroup) -> bool:
        """A float Conv or MatMul group as the QLinearConv / QLinearMatMul of its stored bytes: the
        NPU's exact integer sum requantized once, where onnxruntime sums the dequantized values in
        float32 before its QuantizeLinear, so an output can be 1 unit off (taken with ``float_sums``)."""
        from onnx import helper

        op = g.op
        dq_of = {d.output[0]: d for d in g.dqs}
        x, w = dq_of.get(op.input[0]), dq_of.get(op.input[1])
        if x is None or w is None or w.input[0] not in self.consts or x.input[0] in self.consts:
            self._refused = "its weight is not a constant quantized by a DequantizeLinear"
            return False
        if any(len(d.input) < 3 or not d.input[2] for d in (x, w, g.q)):
            self._refused = "a zero point is implicit"
            return False
        inputs = [*x.input[:3], *w.input[:3], *g.q.input[1:3]]
        if op.op_type == "Conv" and len(op.input) > 2 and op.input[2]:
            b = dq_of.get(op.input[2])
            if b is None or b.input[0] not in self.consts or self.consts[b.input[0]].dtype != np.int32:
                self._refused = "its bias is not an int32 constant quantized by a DequantizeLinear"
                return False
            # QLinearConv's bias is in units of x_scale * w_scale, as quantize_static writes it
            want = np.float32(self.consts[x.input[1]]) * np.asarray(self.consts[w.input[1]], np.float32)
            zp = self.consts.get(b.input[2]) if len(b.input) > 2 and b.input[2] else None
            scale = np.asarray(self.consts[b.input[1]], np.float32)
            a, c = np.ravel(scale), np.ravel(want)
            same = a.size in (1, c.size) or c.size == 1
            if (zp is not None and np.any(zp != 0)) or not same or not np.all(a == c):
                self._refused = "its bias is not quantized by x_scale * w_scale"
                return False
            inputs.append(b.input[0])
        y, x_type = g.q.output[0], self.info[x.input[0]][0]
        out = y
        if self.info[y][0] != x_type:  # the output's Q converted to the other 8-bit type (zero point +-128)
            out = f"{y}:{x_type}"
            self.info[out] = (x_type, self.info[y][1])
            zp = int(np.asarray(self.consts[g.q.input[2]]).ravel()[0]) + (128 if x_type == "int8" else -128)
            self.consts[f"{out}:zero_point"] = np.array(
                zp - 256 if x_type == "int8" and zp > 127 else zp, x_type
            )
            inputs[7] = f"{out}:zero_point"
        qop = "QLinearConv" if op.op_type == "Conv" else "QLinearMatMul"
        node = helper.make_node(qop, inputs, [out], name=op.name)
        if op.op_type == "Conv":
            node.attribute.extend(op.attribute)
        if out != y:
            self.quant[out] = self.qparams(node, inputs[6], inputs[7])
        if not (self._read_QLinearConv(node) if qop == "QLinearConv" else self._read_QLinearMatMul(node)):
            return False
        if out != y:  # the same values in the output's type: each byte XOR 0x80
            table = (_bytes(x_type).view(np.uint8) ^ np.uint8(0x80)).view(self.info[y][0])
            index = self._table_tensor(f"{y}:flip", self.info[y][0], table)
            self.nodes.append(OpNode(len(self.nodes), "LOOKUP", (self.tensor(out), index), (self.tensor(y),)))
        return True

    def _group_pool(self, g: QdqGroup) -> bool:
        """MAX_POOL_2D on the stored bytes (a dequantization keeps their order), then the requantization."""
        from onnx import helper

        (dq,) = g.dqs
        x, y = dq.input[0], g.q.output[0]
        mid = f"{g.op.output[0]}:bytes"
        self.info[mid] = (self.info[x][0], self.info[g.op.output[0]][1])
        if x in self.quant:
            self.quant[mid] = self.quant[x]
        pool = helper.make_node("MaxPool", [x], [mid], name=g.op.name)
        pool.attribute.extend(g.op.attribute)
        if len(g.op.output) > 1 or not self._read_MaxPool(pool):
            return False
        table = self._requant_table(dq, g.q)
        if self.info[x][0] == self.info[y][0] and np.array_equal(table, _bytes(self.info[y][0])):
            self.nodes[-1] = OpNode(self.nodes[-1].index, "MAX_POOL_2D", self.nodes[-1].inputs,
                                    (self.tensor(y),), self.nodes[-1].options)  # fmt: skip
        else:
            self._requantized(g, dq, self.tensor(mid), self.tensor(y))
        return True

    def _group_concat(self, g: QdqGroup) -> bool:
        """Each input requantized by its table (Q(DQ_i(v))), then CONCATENATION."""
        if len(g.dqs) != len([t for t in g.op.input if t]) or any(d.input[0] in self.consts for d in g.dqs):
            self._refused = "a constant input of a QDQ Concat (not lowered)"
            return False
        y = g.q.output[0]
        rank = len(self.info[y][1])
        axis = int(_attrs(g.op).get("axis", 0))
        axis = axis + rank if axis < 0 else axis
        ir_axis = NCHW_TO_NHWC.index(axis) if rank == 4 else axis
        inputs = [self._requantized(g, dq, self.tensor(dq.input[0]), None) for dq in g.dqs]
        self.nodes.append(
            OpNode(len(self.nodes), "CONCATENATION", tuple(inputs), (self.tensor(y),), {"axis": ir_axis})
        )
        return True

    def _group_binary(self, g: QdqGroup) -> bool:
        """Add / Mul as LOOKUP (one activation and a one-value constant) or LOOKUP2 (two operands,
        a constant one as its stored bytes): the float group's result for every byte (pair)."""
        y = g.q.output[0]
        rank = len(self.info[y][1])
        dq_of = {d.output[0]: d for d in g.dqs}
        operands = []  # (the byte tensor's name, is it a constant)
        for t in g.op.input:
            d = dq_of.get(t)
            if d is None:
                if np.asarray(self.consts[t]).size != 1:
                    self._refused = f"a float constant operand {t!r} of more than one value"
                    return False
                continue  # a one-value float constant: part of the table
            operands.append((d.input[0], d.input[0] in self.consts))
        nodes = [*g.dqs, g.op, g.q]
        activations = list(dict.fromkeys(n for n, c in operands if not c))
        one_byte = [n for n, c in operands if c and np.asarray(self.consts[n]).size == 1]
        if len(activations) == 1 and all(not c or n in one_byte for n, c in operands):
            # x op x, or x op a one-value constant: a function of x's byte alone
            (x,) = activations
            table = self._run_nodes(nodes, {x: _bytes(self.info[x][0])}, y)
            table_index = self._table_tensor(y, self.info[y][0], table)
            self.nodes.append(
                OpNode(len(self.nodes), "LOOKUP", (self.tensor(x), table_index), (self.tensor(y),))
            )
            return True
        (a, _), (b, _) = operands
        types = [str(self.consts[n].dtype) if c else self.info[n][0] for n, c in operands]
        va, vb = _bytes(types[0]), _bytes(types[1])
        feeds = {a: np.repeat(va, 256), b: np.tile(vb, 256)}
        table = self._run_nodes(nodes, feeds, y).reshape(256, 256)
        inputs = []
        for (name, const), d in zip(operands, [dq_of[t] for t in g.op.input if t in dq_of], strict=True):
            if not const:
                if len(self.info[name][1]) != rank:
                    self._refused = f"operands of rank {len(self.info[name][1])} and {rank}"
                    return False
                inputs.append(self.tensor(name))
                continue
            data = np.asarray(self.consts[name])
            if rank == 4:
                data = data.reshape((1,) * (4 - data.ndim) + data.shape).transpose(NCHW_TO_NHWC)
            q = self.qparams(d, d.input[1], _get(d.input, 2))
            inputs.append(
                self._new(f"{name}:bytes", str(data.dtype), data.shape, q, np.ascontiguousarray(data))
            )
        self.nodes.append(
            OpNode(
                len(self.nodes),
                "LOOKUP2",
                (*inputs, self._table_tensor(y, self.info[y][0], table)),
                (self.tensor(y),),
            )
        )
        return True


def _get(seq: Any, i: int) -> str | None:
    return seq[i] if i < len(seq) and seq[i] else None


def _bytes(dtype: str) -> np.ndarray:
    """Every value of an 8-bit type, in the order the ISA's LUT indexes a table."""
    return (np.arange(256) + (-128 if dtype == "int8" else 0)).astype(dtype)


def graph_from_onnx(
    model: str | Path | bytes | Any,
    shapes: dict[str, tuple[int, ...]] | None = None,
    float_sums: bool = False,
) -> OnnxGraph:
    """Read a quantized ONNX model (path, bytes or ModelProto) into the IR; see the module docstring.

    ``float_sums``: the QDQ Conv and MatMul groups onnxruntime computes in float32 are lowered too,
    as the integer QLinear op of their bytes, at most 1 quantized unit from onnxruntime's outputs
    (by default they stay on the CPU, and every NPU output is bit-exact)."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(load_model(model))
    model_opset(m)
    fix_shapes(m, shapes)
    form = "qdq" if _is_qdq(m) else "qoperator"
    if form == "qdq":
        m = qoperator_form(m)
    info = _probe(m)
    reader = _Reader(m, info, float_sums)
    reader.read()
    types = {name: dtype for name, (dtype, _) in info.items()}
    types |= {name: str(v.dtype) for name, v in reader.consts.items()}
    computing = [n for n in m.graph.node if n.op_type != "Constant"]
    if not computing:
        raise OnnxModelError("the graph is empty")
    # a model with an 8- or 16-bit integer tensor anywhere (an activation or a weight, as with
    # MatMulInteger or a lone DequantizeLinear) is quantized, even where its nodes stay on the CPU
    if not any(t in QUANTIZED_TYPES for t in types.values()):
        first = next((n for n in computing if any(types.get(o) in FLOAT_TYPES for o in n.output)), None)
        if first is not None:
            raise OnnxModelError(
                f"float-only model: {_label(first)} computes in float; "
                "quantize it first (onnxruntime.quantization.quantize_static)"
            )
    inputs = tuple(reader.tensor(i.name) for i in m.graph.input if i.name not in reader.consts)
    outputs = tuple(reader.tensor(o.name) for o in m.graph.output)
    graph = Graph(reader.tensors, reader.nodes, inputs, outputs)
    return OnnxGraph(
        graph,
        m,
        reader.onnx_nodes,
        reader.names,
        reader.layouts,
        form,
        info,
        reader.cpu_reasons,
        reader.absorbed,
    )
