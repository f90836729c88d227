"""An onnxruntime OrtGraph (the EP's view of a model or of a fused subgraph) as an onnx ModelProto.

Read through OrtApi's graph accessors (``vnpu_ort_abi.h``): the nodes in onnxruntime's topological
order with their attributes, the graph's inputs and outputs with their types and shapes, every node
output's type and shape as onnxruntime inferred it (as value_info: onnx shape inference knows no
``com.microsoft`` op), the opsets, and every constant initializer a node reads, with its value. The
ModelProto is what :func:`libaccel.compiler.onnx_frontend.graph_from_onnx` reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


class OrtCallError(RuntimeError):
    """An OrtApi call returned an error status; the message is onnxruntime's."""


@dataclass
class Api:
    """The OrtApi table and the cffi handles to call it with."""

    ffi: Any
    ort: Any  # const OrtApi *

    def check(self, status: Any, what: str) -> None:
        if status != self.ffi.NULL:
            message = self.ffi.string(self.ort.GetErrorMessage(status)).decode(errors="replace")
            self.ort.ReleaseStatus(status)
            raise OrtCallError(f"{what}: {message}")

    def string(self, call: Any, obj: Any, what: str) -> str:
        out = self.ffi.new("const char **")
        self.check(call(obj, out), what)
        return self.ffi.string(out[0]).decode() if out[0] != self.ffi.NULL else ""

    def array(self, count_call: Any, get_call: Any, obj: Any, ctype: str, what: str) -> list[Any]:
        n = self.ffi.new("size_t *")
        self.check(count_call(obj, n), what)
        items = self.ffi.new(f"{ctype}[]", max(int(n[0]), 1))
        self.check(get_call(obj, items, n[0]), what)
        return [items[i] for i in range(int(n[0]))]

    def tensor_type(self, info: Any) -> tuple[int, list[int]]:
        """(ONNX element type, dims with -1 for a dynamic one) of an OrtTensorTypeAndShapeInfo."""
        ffi, ort = self.ffi, self.ort
        elem = ffi.new("ONNXTensorElementDataType *")
        self.check(ort.GetTensorElementType(info, elem), "GetTensorElementType")
        rank = ffi.new("size_t *")
        self.check(ort.GetDimensionsCount(info, rank), "GetDimensionsCount")
        dims = ffi.new("int64_t[]", max(int(rank[0]), 1))
        self.check(ort.GetDimensions(info, dims, rank[0]), "GetDimensions")
        return int(elem[0]), [int(dims[i]) for i in range(int(rank[0]))]

    def value_array(self, value: Any) -> np.ndarray:
        """A tensor OrtValue's contents (a copy) as a numpy array."""
        import onnx

        ffi, ort = self.ffi, self.ort
        info = ffi.new("OrtTensorTypeAndShapeInfo **")
        self.check(ort.GetTensorTypeAndShape(value, info), "GetTensorTypeAndShape")
        try:
            elem, dims = self.tensor_type(info[0])
        finally:
            ort.ReleaseTensorTypeAndShapeInfo(info[0])
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))
        size = ffi.new("size_t *")
        self.check(ort.GetTensorSizeInBytes(value, size), "GetTensorSizeInBytes")
        data = ffi.new("const void **")
        self.check(ort.GetTensorData(value, data), "GetTensorData")
        raw = bytes(ffi.buffer(data[0], int(size[0]))) if size[0] else b""
        return np.frombuffer(raw, dtype=dtype).reshape(dims).copy()


def _value_info(api: Api, vi: Any) -> Any:
    import onnx

    name = api.string(api.ort.GetValueInfoName, vi, "GetValueInfoName")
    type_info = api.ffi.new("const OrtTypeInfo **")
    api.check(api.ort.GetValueInfoTypeInfo(vi, type_info), f"GetValueInfoTypeInfo({name})")
    tensor = api.ffi.new("const OrtTensorTypeAndShapeInfo **")
    api.check(api.ort.CastTypeInfoToTensorInfo(type_info[0], tensor), f"CastTypeInfoToTensorInfo({name})")
    if tensor[0] == api.ffi.NULL:
        raise OrtCallError(f"value {name!r} is not a tensor")
    elem, dims = api.tensor_type(tensor[0])
    shape = [d if d >= 0 else f"{name}_dim{k}" for k, d in enumerate(dims)]
    return onnx.helper.make_tensor_value_info(name, elem, shape)


def _attribute(api: Api, attr: Any) -> Any:
    import onnx

    ffi, ort = api.ffi, api.ort
    name = api.string(ort.OpAttr_GetName, attr, "OpAttr_GetName")
    kind = ffi.new("OrtOpAttrType *")
    api.check(ort.OpAttr_GetType(attr, kind), f"OpAttr_GetType({name})")
    kind = int(kind[0])
    if kind == ffi.integer_const("ORT_OP_ATTR_TENSOR"):
        value = ffi.new("OrtValue **")
        api.check(ort.OpAttr_GetTensorAttributeAsOrtValue(attr, value), f"attribute {name}")
        try:
            return onnx.helper.make_attribute(name, onnx.numpy_helper.from_array(api.value_array(value[0])))
        finally:
            ort.ReleaseValue(value[0])
    sizes = {"ORT_OP_ATTR_INT": ("int64_t", 1), "ORT_OP_ATTR_FLOAT": ("float", 1)}
    arrays = {"ORT_OP_ATTR_INTS": "int64_t", "ORT_OP_ATTR_FLOATS": "float", "ORT_OP_ATTR_STRING": "char"}
    by_value = {ffi.integer_const(k): v for k, v in sizes.items()}
    by_array = {ffi.integer_const(k): v for k, v in arrays.items()}
    out = ffi.new("size_t *")
    if kind in by_value:
        ctype, _ = by_value[kind]
        buf = ffi.new(f"{ctype} *")
        api.check(ort.ReadOpAttr(attr, kind, buf, ffi.sizeof(ctype), out), f"ReadOpAttr({name})")
        return onnx.helper.make_attribute(name, buf[0])
    if kind in by_array:
        ctype = by_array[kind]
        # The first call, with no room, tells the size in bytes (as an error status).
        status = ort.ReadOpAttr(attr, kind, ffi.NULL, 0, out)
        if status != ffi.NULL:
            ort.ReleaseStatus(status)
        nbytes = int(out[0])
        buf = ffi.new(f"{ctype}[]", max(nbytes // ffi.sizeof(ctype), 1))
        if nbytes:
            api.check(ort.ReadOpAttr(attr, kind, buf, nbytes, out), f"ReadOpAttr({name})")
        if ctype == "char":
            return onnx.helper.make_attribute(name, ffi.string(buf, nbytes).decode())
        values = [buf[i] for i in range(nbytes // ffi.sizeof(ctype))]
        kind_proto = onnx.AttributeProto.INTS if ctype == "int64_t" else onnx.AttributeProto.FLOATS
        return onnx.helper.make_attribute(name, values, attr_type=kind_proto)
    raise OrtCallError(f"attribute {name!r} of type {kind} is not read by the vnpu EP")


def model_from_graph(api: Api, graph: Any) -> tuple[Any, list[Any]]:
    """(the onnx ModelProto of ``graph``, its OrtNode pointers in the same order as its nodes)."""
    import onnx

    ffi, ort = api.ffi, api.ort
    nodes = api.array(ort.Graph_GetNumNodes, ort.Graph_GetNodes, graph, "const OrtNode *", "Graph_GetNodes")
    initializers: dict[str, Any] = {}
    node_protos = []
    value_infos: list[Any] = []
    for node in nodes:
        op = api.string(ort.Node_GetOperatorType, node, "Node_GetOperatorType")
        domain = api.string(ort.Node_GetDomain, node, "Node_GetDomain")
        name = api.string(ort.Node_GetName, node, "Node_GetName")
        ins = api.array(ort.Node_GetNumInputs, ort.Node_GetInputs, node, "const OrtValueInfo *", op)
        outs = api.array(ort.Node_GetNumOutputs, ort.Node_GetOutputs, node, "const OrtValueInfo *", op)
        attrs = api.array(ort.Node_GetNumAttributes, ort.Node_GetAttributes, node, "const OrtOpAttr *", op)
        in_names = []
        for vi in ins:
            if vi == ffi.NULL:
                in_names.append("")  # an optional input left out
                continue
            vname = api.string(ort.GetValueInfoName, vi, "GetValueInfoName")
            in_names.append(vname)
            constant = ffi.new("bool *")
            api.check(ort.ValueInfo_IsConstantInitializer(vi, constant), "ValueInfo_IsConstantInitializer")
            if constant[0] and vname not in initializers:
                value = ffi.new("const OrtValue **")
                api.check(ort.ValueInfo_GetInitializerValue(vi, value), f"initializer {vname}")
                initializers[vname] = onnx.numpy_helper.from_array(api.value_array(value[0]), vname)
        out_names = ["" if vi == ffi.NULL else api.string(ort.GetValueInfoName, vi, "name") for vi in outs]
        for vi in outs:  # onnxruntime's own types and shapes, contrib ops' included
            if vi != ffi.NULL:
                try:
                    value_infos.append(_value_info(api, vi))
                except OrtCallError:
                    pass  # not a tensor (a sequence, a map): left without a type
        proto = onnx.helper.make_node(op, in_names, out_names, name=name or None, domain=domain or None)
        proto.attribute.extend(_attribute(api, a) for a in attrs)
        node_protos.append(proto)
    inputs = api.array(ort.Graph_GetNumInputs, ort.Graph_GetInputs, graph, "const OrtValueInfo *", "inputs")
    outputs = api.array(
        ort.Graph_GetNumOutputs, ort.Graph_GetOutputs, graph, "const OrtValueInfo *", "outputs"
    )
    graph_inputs = [v for v in (_value_info(api, vi) for vi in inputs) if v.name not in initializers]
    graph_outputs = [_value_info(api, vi) for vi in outputs]
    n_sets = ffi.new("size_t *")
    api.check(ort.Graph_GetNumOperatorSets(graph, n_sets), "Graph_GetNumOperatorSets")
    domains = ffi.new("const char *[]", max(int(n_sets[0]), 1))
    versions = ffi.new("int64_t[]", max(int(n_sets[0]), 1))
    api.check(ort.Graph_GetOperatorSets(graph, domains, versions, n_sets[0]), "Graph_GetOperatorSets")
    opsets = [
        onnx.helper.make_opsetid(ffi.string(domains[i]).decode(), int(versions[i]))
        for i in range(int(n_sets[0]))
    ]
    ir = ffi.new("int64_t *")
    api.check(ort.Graph_GetOnnxIRVersion(graph, ir), "Graph_GetOnnxIRVersion")
    g = onnx.helper.make_graph(
        node_protos, "vnpu_ep", graph_inputs, graph_outputs, list(initializers.values())
    )
    outputs_named = {v.name for v in graph_outputs}
    g.value_info.extend(v for v in value_infos if v.name not in outputs_named)
    model = onnx.helper.make_model(g, opset_imports=opsets)
    model.ir_version = int(ir[0])
    return model, nodes
