"""Read a TfLiteContext (tensors, nodes, builtin options) into libaccel.compiler's graph IR.

The conventions are :mod:`libaccel.compiler.graph`'s (TFLite's own): tensor and node indices are the
runtime's, options carry the schema's snake_case names with enums by name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from delegate_teflon.runtime_abi import RuntimeLayout, read_affine
from libaccel.compiler.graph import Graph, OpNode, QuantParams, TensorInfo

# enum TfLiteType (c_api_types.h) -> numpy dtype name. Note: not the schema's TensorType numbering.
TFLITE_TYPES: dict[int, str] = {
    1: "float32",
    2: "int32",
    3: "uint8",
    4: "int64",
    6: "bool",
    7: "int16",
    9: "int8",
    10: "float16",
    11: "float64",
    13: "uint64",
    16: "uint32",
    17: "uint16",
}
K_TFLITE_MMAP_RO = 1  # TfLiteAllocationType: constant data from the model file
K_TFLITE_DYNAMIC = 4  # TfLiteAllocationType: sized by its producer at run time
K_TFLITE_AFFINE_QUANTIZATION = 1
K_TFLITE_OPTIONAL_TENSOR = -1


def _all_op_names() -> dict[int, str]:
    """BuiltinOperator code -> name: the schema of the ``tflite`` package (a dependency), and the
    newer codes of ai_edge_litert's schema where it is installed (names for the placement report)."""
    import tflite

    names = dict(tflite.BUILTIN_OPCODE2NAME)
    try:
        from ai_edge_litert import schema_py_generated as schema
    except ImportError:
        return names
    for name, code in vars(schema.BuiltinOperator).items():
        if not name.startswith("_") and isinstance(code, int):
            names.setdefault(code, name)
    return names


OP_NAMES: dict[int, str] = _all_op_names()
KNOWN_OPS: frozenset[str] = frozenset(OP_NAMES.values())

ACTIVATIONS = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH", 5: "SIGN_BIT", 6: "SIGMOID"}
PADDINGS = {0: "UNKNOWN", 1: "SAME", 2: "VALID"}


def _int_array(ptr: Any) -> list[int]:
    if not ptr:
        return []
    return [ptr.data[i] for i in range(ptr.size)]


def read_tensor(
    ffi: Any, context: Any, index: int, layout: RuntimeLayout, copy_constants: bool = False
) -> TensorInfo:
    """One tensor's record. A constant's ``data`` is a read-only view of the runtime's buffer (the
    model's mmapped or in-memory flatbuffer, alive as long as the interpreter) unless
    ``copy_constants``: reading a model then costs no copy of its weights."""
    t = context.tensors[index]
    dtype = TFLITE_TYPES.get(t.type, f"tflite_type_{t.type}")
    shape = tuple(_int_array(t.dims))
    name = ffi.string(t.name).decode(errors="replace") if t.name else f"tensor{index}"
    quant = None
    q = t.quantization
    if q.type == K_TFLITE_AFFINE_QUANTIZATION and q.params:
        scales, zero_points, axis = read_affine(ffi, q.params, layout.float_array)
        if scales:
            if not zero_points:
                zero_points = [0] * len(scales)
            quant = QuantParams(tuple(scales), tuple(zero_points), axis)
    elif t.params.scale != 0.0:
        quant = QuantParams((t.params.scale,), (t.params.zero_point,), 0)
    data = None
    if t.allocation_type == K_TFLITE_MMAP_RO and t.data and dtype in TFLITE_TYPES.values():
        data = np.frombuffer(ffi.buffer(t.data, t.bytes), dtype=np.dtype(dtype)).reshape(shape)
        if copy_constants:
            data = data.copy()
        else:
            data.flags.writeable = False  # the model's own bytes: never written through the view
    return TensorInfo(index=index, name=name, dtype=dtype, shape=shape, quant=quant, data=data)


def _window_options(p: Any) -> dict[str, Any]:
    """The fields TfLiteConvParams, TfLiteDepthwiseConvParams and TfLitePoolParams share (same names)."""
    return {
        "padding": PADDINGS.get(p.padding, "UNKNOWN"),
        "stride_w": p.stride_width,
        "stride_h": p.stride_height,
        "fused_activation_function": ACTIVATIONS.get(p.activation, "?"),
    }


def _conv_options(p: Any) -> dict[str, Any]:
    """CONV_2D's options, which DEPTHWISE_CONV_2D's extend."""
    return {
        **_window_options(p),
        "dilation_w_factor": p.dilation_width_factor,
        "dilation_h_factor": p.dilation_height_factor,
    }


def _options(ffi: Any, op: str, builtin_data: Any) -> dict[str, Any]:
    """Decode ``builtin_data`` into the schema's option names (``fused_activation_function``...)."""
    if not builtin_data:
        return {}
    if op == "CONV_2D":
        return _conv_options(ffi.cast("TfLiteConvParams *", builtin_data))
    if op == "DEPTHWISE_CONV_2D":
        p = ffi.cast("TfLiteDepthwiseConvParams *", builtin_data)
        return {**_conv_options(p), "depth_multiplier": p.depth_multiplier}
    if op in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        p = ffi.cast("TfLitePoolParams *", builtin_data)
        return {**_window_options(p), "filter_width": p.filter_width, "filter_height": p.filter_height}
    if op == "FULLY_CONNECTED":
        p = ffi.cast("TfLiteFullyConnectedParams *", builtin_data)
        return {
            "fused_activation_function": ACTIVATIONS.get(p.activation, "?"),
            "weights_format": "DEFAULT" if p.weights_format == 0 else "SHUFFLED4x16INT8",
            "keep_num_dims": bool(p.keep_num_dims),
            "asymmetric_quantize_inputs": bool(p.asymmetric_quantize_inputs),
        }
    if op in ("ADD", "SUB"):
        p = ffi.cast("TfLiteAddParams *" if op == "ADD" else "TfLiteSubParams *", builtin_data)
        return {
            "fused_activation_function": ACTIVATIONS.get(p.activation, "?"),
            "pot_scale_int16": bool(p.pot_scale_int16),
        }
    if op == "MUL":
        p = ffi.cast("TfLiteMulParams *", builtin_data)
        return {"fused_activation_function": ACTIVATIONS.get(p.activation, "?")}
    if op == "CONCATENATION":
        p = ffi.cast("TfLiteConcatenationParams *", builtin_data)
        return {"axis": p.axis, "fused_activation_function": ACTIVATIONS.get(p.activation, "?")}
    if op == "RESHAPE":
        p = ffi.cast("TfLiteReshapeParams *", builtin_data)
        n = max(0, min(p.num_dimensions, 8))
        return {"new_shape": tuple(p.shape[i] for i in range(n))}
    if op == "LEAKY_RELU":
        return {"alpha": ffi.cast("TfLiteLeakyReluParams *", builtin_data).alpha}
    if op == "GELU":
        return {"approximate": bool(ffi.cast("TfLiteGeluParams *", builtin_data).approximate)}
    if op in ("DEPTH_TO_SPACE", "SPACE_TO_DEPTH"):
        return {"block_size": ffi.cast("TfLiteDepthToSpaceParams *", builtin_data).block_size}
    if op in ("MEAN", "SUM", "REDUCE_PROD"):
        p = ffi.cast("TfLiteReducerParams *", builtin_data)
        return {"keep_dims": bool(p.keep_dims)}
    if op == "PACK":
        p = ffi.cast("TfLitePackParams *", builtin_data)
        return {"values_count": p.values_count, "axis": p.axis}
    if op == "GATHER":
        p = ffi.cast("TfLiteGatherParams *", builtin_data)
        return {"axis": p.axis, "batch_dims": p.batch_dims}
    if op == "STRIDED_SLICE":
        p = ffi.cast("TfLiteStridedSliceParams *", builtin_data)
        return {
            "begin_mask": p.begin_mask,
            "end_mask": p.end_mask,
            "ellipsis_mask": p.ellipsis_mask,
            "new_axis_mask": p.new_axis_mask,
            "shrink_axis_mask": p.shrink_axis_mask,
            "offset": bool(p.offset),
        }
    if op == "TRANSPOSE_CONV":
        return _window_options(ffi.cast("TfLiteTransposeConvParams *", builtin_data))
    if op == "SOFTMAX":
        return {"beta": ffi.cast("TfLiteSoftmaxParams *", builtin_data).beta}
    if op == "RESIZE_BILINEAR":
        p = ffi.cast("TfLiteResizeBilinearParams *", builtin_data)
        return {"align_corners": bool(p.align_corners), "half_pixel_centers": bool(p.half_pixel_centers)}
    if op == "BATCH_MATMUL":
        p = ffi.cast("TfLiteBatchMatMulParams *", builtin_data)
        return {
            "adj_x": bool(p.adj_x),
            "adj_y": bool(p.adj_y),
            "asymmetric_quantize_inputs": bool(p.asymmetric_quantize_inputs),
        }
    if op == "RESIZE_NEAREST_NEIGHBOR":
        p = ffi.cast("TfLiteResizeNearestNeighborParams *", builtin_data)
        return {"align_corners": bool(p.align_corners), "half_pixel_centers": bool(p.half_pixel_centers)}
    return {}


def read_context(ffi: Any, context: Any, layout: RuntimeLayout, copy_constants: bool = False) -> Graph:
    """Decode the execution plan of ``context`` and every tensor its nodes touch.

    Constants are views of the runtime's buffers (see :func:`read_tensor`) unless ``copy_constants``:
    use the graph only while the interpreter lives, or copy.

    The graph's inputs are the non-constant tensors no node produces; its outputs the tensors no
    node consumes (the context does not say which tensors the model exposes; partitions do).
    """
    plan_ptr = ffi.new("TfLiteIntArray **")
    if context.GetExecutionPlan(context, plan_ptr) != 0:
        raise RuntimeError("TfLiteContext.GetExecutionPlan failed")
    plan = _int_array(plan_ptr[0])  # copied now: the runtime may reuse that array
    node_pp = ffi.new("TfLiteNode **")
    reg_pp = ffi.new("vnpu_registration_prefix **")
    nodes: list[OpNode] = []
    tensors: dict[int, TensorInfo] = {}
    for node_index in plan:
        if context.GetNodeAndRegistration(context, node_index, node_pp, reg_pp) != 0:
            raise RuntimeError(f"TfLiteContext.GetNodeAndRegistration failed for node {node_index}")
        node, reg = node_pp[0], reg_pp[0]
        if reg.custom_name and reg.builtin_code in (32, 51):  # CUSTOM, DELEGATE
            op = "CUSTOM:" + ffi.string(reg.custom_name).decode(errors="replace")
        else:
            op = OP_NAMES.get(reg.builtin_code, f"BUILTIN_{reg.builtin_code}")
        info = OpNode(
            index=node_index,
            op=op,
            inputs=tuple(_int_array(node.inputs)),
            outputs=tuple(_int_array(node.outputs)),
            options=_options(ffi, op, node.builtin_data),
        )
        nodes.append(info)
        for t in info.inputs + info.outputs:
            if t >= 0 and t not in tensors:
                tensors[t] = read_tensor(ffi, context, t, layout, copy_constants)
    produced = {t for n in nodes for t in n.outputs}
    consumed = {t for n in nodes for t in n.inputs}
    inputs = tuple(sorted(t for t in consumed if t >= 0 and t not in produced and not tensors[t].is_const))
    outputs = tuple(sorted(t for t in produced if t not in consumed))
    return Graph(tensors=tensors, nodes=nodes, inputs=inputs, outputs=outputs)


def dynamic_tensors(context: Any, graph: Graph) -> frozenset[int]:
    """The graph's tensors the runtime already allocates as kTfLiteDynamic (shapes set at run time)."""
    return frozenset(t for t in graph.tensors if context.tensors[t].allocation_type == K_TFLITE_DYNAMIC)
