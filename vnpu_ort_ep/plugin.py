"""The EP's logic: the Python side of libvnpu_ort_ep.so's exports and callbacks.

Life cycle (onnxruntime's plugin EP interface, ``vnpu_ort_abi.h``):

1. ``CreateEpFactories``: one OrtEpFactory, ``VnpuExecutionProvider`` of vendor "vnpu".
2. ``GetSupportedDevices``: one OrtEpDevice, on the host's CPU hardware device (the NPU is reached
   through the device the ``device`` option names, not through a device onnxruntime enumerates);
   its metadata names the default device.
3. ``CreateEp``: the session's options (``ep.vnpuexecutionprovider.<key>``): ``device`` (shim,
   kernel or a node path; default: a kernel device if there is one, else the shim), ``strict``.
4. ``GetCapability``: the OrtGraph as an onnx ModelProto, read by the ONNX front end, placed by the
   one partitioner (:func:`libaccel.model.onnx_placement`); each NPU partition's original nodes
   (a fused QOperator node covers its DequantizeLinear -> op -> QuantizeLinear group) are one fused
   node. A graph the front end cannot read is left to the CPU EP, the reason in onnxruntime's log.
5. ``Compile``: each fused subgraph read the same way, compiled and loaded once
   (:class:`libaccel.model.OnnxProgram`); ``Compute`` copies its inputs in, runs one NPU job, and
   writes the outputs.
"""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vnpu_ort_ep import EP_NAME
from vnpu_ort_ep.graph_reader import Api, model_from_graph

VENDOR = "vnpu"
VERSION = "0.1.0"
OPTION_KEYS = ("device", "strict")

_ffi: Any = None
_lib: Any = None
_keep: list[Any] = []  # cdata onnxruntime holds pointers to (strings, the factory)


class OptionError(ValueError):
    """A bad EP option: the message names it and what is expected."""


@dataclass
class Factory:
    api: Api
    struct: Any
    ep_api: Any
    logger: Any


@dataclass
class Program:
    """A compiled fused node: its onnxruntime input/output names and the loaded program."""

    name: str
    input_names: list[str]
    output_names: list[str]
    program: Any
    npu_nodes: int


@dataclass
class Ep:
    factory: Factory
    struct: Any
    logger: Any
    device: Any
    target: str
    strict: bool
    programs: dict[str, Program] = field(default_factory=dict)  # fused node name -> program
    infos: dict[int, tuple[Any, Program]] = field(default_factory=dict)  # OrtNodeComputeInfo address
    claimed: list[str] = field(default_factory=list)  # names of the nodes GetCapability claimed
    report: str = ""

    def log(self, level: str, message: str) -> None:
        _log(self.factory.api, self.logger, level, message)


_factories: dict[int, Factory] = {}
_eps: dict[int, Ep] = {}


def _addr(ptr: Any) -> int:
    return int(_ffi.cast("uintptr_t", ptr))


def _cstr(text: str) -> Any:
    s = _ffi.new("char[]", text.encode())
    _keep.append(s)
    return s


def _log(api: Api, logger: Any, level: str, message: str) -> None:
    if logger == _ffi.NULL:
        return
    severity = _ffi.integer_const(f"ORT_LOGGING_LEVEL_{level.upper()}")
    status = api.ort.Logger_LogMessage(
        logger, severity, message.encode(), b"vnpu_ort_ep/plugin.py", 0, b"vnpu"
    )
    if status != _ffi.NULL:
        api.ort.ReleaseStatus(status)


def _error(api: Api, code: str, message: str) -> Any:
    return api.ort.CreateStatus(_ffi.integer_const(code), message.encode())


def default_device() -> str:
    """The EP's device when the option is not given: a kernel device if there is one, else the shim."""
    from libaccel import discovery

    return "kernel" if discovery.list_devices() else discovery.SHIM


def parse_options(values: dict[str, str]) -> tuple[str, bool]:
    """(the device to open, checked; strict) from the EP's options."""
    from libaccel.device import checked_device
    from libaccel.errors import AccelError

    device = values.get("device", "") or default_device()
    strict_text = values.get("strict", "false").lower()
    if strict_text not in ("true", "false", "1", "0"):
        raise OptionError(f"vnpu EP: option 'strict' = {strict_text!r}: expected true or false")
    if device not in ("shim", "kernel") and not device.startswith("/"):
        raise OptionError(
            f"vnpu EP: option 'device' = {device!r}: expected shim, kernel or an absolute device node path"
        )
    try:
        target = checked_device(device)
    except (AccelError, OSError) as e:
        raise OptionError(f"vnpu EP: option 'device' = {device!r}: {e}") from None
    return target, strict_text in ("true", "1")


def _session_option(api: Api, options: Any, key: str) -> str | None:
    full = f"ep.{EP_NAME.lower()}.{key}".encode()
    has = _ffi.new("int *")
    api.check(api.ort.HasSessionConfigEntry(options, full, has), "HasSessionConfigEntry")
    if not has[0]:
        return None
    size = _ffi.new("size_t *", 0)
    status = api.ort.GetSessionConfigEntry(options, full, _ffi.NULL, size)  # asks for the size
    if status != _ffi.NULL:
        api.ort.ReleaseStatus(status)
    buf = _ffi.new("char[]", max(int(size[0]), 1))
    api.check(api.ort.GetSessionConfigEntry(options, full, buf, size), "GetSessionConfigEntry")
    return _ffi.string(buf).decode()


# --- the factory --------------------------------------------------------------------------------


def create_factories(
    registered_name: Any, api_base: Any, logger: Any, factories: Any, max_factories: int, num_factories: Any
) -> Any:
    version = _ffi.integer_const("VNPU_ORT_API_VERSION")
    ort = api_base.GetApi(version)
    if ort == _ffi.NULL:
        print(f"vnpu EP: onnxruntime offers no OrtApi of version {version}", file=sys.stderr)
        return _ffi.NULL
    api = Api(_ffi, ort)
    if max_factories < 1:
        return _error(api, "ORT_INVALID_ARGUMENT", "vnpu EP: no room for its factory")
    struct = _ffi.new("OrtEpFactory *")
    struct.ort_version_supported = version
    struct.GetName = _lib.vnpu_factory_get_name
    struct.GetVendor = _lib.vnpu_factory_get_vendor
    struct.GetSupportedDevices = _lib.vnpu_factory_get_supported_devices
    struct.CreateEp = _lib.vnpu_factory_create_ep
    struct.ReleaseEp = _lib.vnpu_factory_release_ep
    struct.GetVendorId = _lib.vnpu_factory_get_vendor_id
    struct.GetVersion = _lib.vnpu_factory_get_version
    struct.IsStreamAware = _lib.vnpu_factory_is_stream_aware
    struct.ValidateCompiledModelCompatibilityInfo = _lib.vnpu_factory_validate_compiled_model
    struct.CreateAllocator = _lib.vnpu_factory_create_allocator
    struct.ReleaseAllocator = _lib.vnpu_factory_release_allocator
    struct.CreateDataTransfer = _lib.vnpu_factory_create_data_transfer
    struct.CreateSyncStreamForDevice = _lib.vnpu_factory_create_sync_stream
    factory = Factory(api, struct, ort.GetEpApi(), logger)
    _factories[_addr(struct)] = factory
    factories[0] = struct
    num_factories[0] = 1
    return _ffi.NULL


def release_factory(struct: Any) -> Any:
    _factories.pop(_addr(struct), None)
    return _ffi.NULL


def _factory(ptr: Any) -> Factory:
    return _factories[_addr(ptr)]


def get_supported_devices(
    this: Any, devices: Any, num_devices: int, ep_devices: Any, max_ep_devices: int, num_ep_devices: Any
) -> Any:
    f = _factory(this)
    num_ep_devices[0] = 0
    cpu = _ffi.integer_const("OrtHardwareDeviceType_CPU")
    for i in range(num_devices):
        if num_ep_devices[0] >= max_ep_devices:
            break
        if f.api.ort.HardwareDevice_Type(devices[i]) != cpu:
            continue
        metadata = _ffi.new("OrtKeyValuePairs **")
        f.api.ort.CreateKeyValuePairs(metadata)
        f.api.ort.AddKeyValuePair(metadata[0], b"device", default_device().encode())
        out = _ffi.new("OrtEpDevice **")
        status = f.ep_api.CreateEpDevice(this, devices[i], metadata[0], _ffi.NULL, out)
        f.api.ort.ReleaseKeyValuePairs(metadata[0])
        if status != _ffi.NULL:
            return status
        ep_devices[num_ep_devices[0]] = out[0]
        num_ep_devices[0] += 1
        break  # one NPU device
    return _ffi.NULL


def create_ep(
    this: Any, devices: Any, metadata: Any, num_devices: int, session_options: Any, logger: Any, out: Any
) -> Any:
    from libaccel import Device

    f = _factory(this)
    out[0] = _ffi.NULL
    values = {k: v for k in OPTION_KEYS if (v := _session_option(f.api, session_options, k)) is not None}
    try:
        target, strict = parse_options(values)
    except OptionError as e:
        return _error(f.api, "ORT_INVALID_ARGUMENT", str(e))
    struct = _ffi.new("OrtEp *")
    struct.ort_version_supported = _ffi.integer_const("VNPU_ORT_API_VERSION")
    struct.GetName = _lib.vnpu_ep_get_name
    struct.GetCapability = _lib.vnpu_ep_get_capability
    struct.Compile = _lib.vnpu_ep_compile
    struct.ReleaseNodeComputeInfos = _lib.vnpu_ep_release_node_compute_infos
    ep = Ep(f, struct, logger, Device.open(target), target, strict)
    _eps[_addr(struct)] = ep
    ep.log("info", f"vnpu EP: device {target}")
    out[0] = struct
    return _ffi.NULL


def release_ep(this: Any, struct: Any) -> None:
    ep = _eps.pop(_addr(struct), None)
    if ep is None:
        return
    for p in ep.programs.values():
        p.program.close()
    ep.device.close()


# --- the EP -------------------------------------------------------------------------------------


def npu_groups(model: Any, og: Any, placed: list[Any]) -> list[list[int]]:
    """The original model's node indices of each NPU partition, in partition order.

    A node of the front end's (QOperator) model keeps the name of the node it was fused from
    (onnxruntime's QDQ fusion names a QLinearConv after its Conv), and stands for that node's QDQ
    node unit, as onnxruntime forms it: the node, the DequantizeLinear nodes that feed it and the
    QuantizeLinear nodes that read its outputs. (The fusion renames tensors, converting int8 Q/DQ
    pairs to uint8, so names of nodes, not of tensors, tie the two models together.)"""
    nodes = list(model.graph.node)
    by_name = {n.name: k for k, n in enumerate(nodes) if n.name}
    producer = {out: k for k, n in enumerate(nodes) for out in n.output if out}
    consumers: dict[str, list[int]] = {}
    for k, n in enumerate(nodes):
        for t in n.input:
            consumers.setdefault(t, []).append(k)
    runs: dict[int, set[int]] = {}
    for p in placed:
        if not p.npu:
            continue
        name = og.onnx_nodes[p.node].name
        if name not in by_name:
            raise ValueError(f"the front end's node {name!r} has no node of that name in onnxruntime's graph")
        k = by_name[name]
        group = runs.setdefault(p.partition, set())
        group.add(k)
        for t in nodes[k].input:
            if t in producer and nodes[producer[t]].op_type == "DequantizeLinear":
                group.add(producer[t])
        for t in nodes[k].output:
            readers = consumers.get(t, [])
            if readers and all(nodes[r].op_type == "QuantizeLinear" for r in readers):
                group.update(readers)
    return [sorted(g) for _, g in sorted(runs.items())]


def group_model(model: Any, typed: Any, group: list[int]) -> Any:
    """The sub-model of ``model``'s nodes ``group``, as onnxruntime hands a fused node to Compile:
    its inputs the tensors it reads and no node of it computes, its outputs the ones read outside
    it or by the graph; shapes from ``typed`` (``model`` after onnx shape inference)."""
    import onnx

    nodes = [model.graph.node[k] for k in group]
    inits = {t.name: t for t in model.graph.initializer}
    produced = {o for n in nodes for o in n.output if o}
    outside = {t for k, n in enumerate(model.graph.node) if k not in group for t in n.input}
    outside |= {o.name for o in model.graph.output}
    infos = {
        v.name: v for v in list(typed.graph.value_info) + list(typed.graph.input) + list(typed.graph.output)
    }
    reads = [t for n in nodes for t in n.input if t]
    ins = list(dict.fromkeys(t for t in reads if t not in produced and t not in inits))
    outs = [o for n in nodes for o in n.output if o and o in outside]
    missing = [t for t in ins + outs if t not in infos]
    if missing:
        raise ValueError(f"no type and shape for tensor {missing[0]!r}")
    g = onnx.helper.make_graph(
        nodes,
        "vnpu_group",
        [infos[t] for t in ins],
        [infos[t] for t in outs],
        [inits[t] for t in dict.fromkeys(reads) if t in inits],
    )
    sub = onnx.helper.make_model(g, opset_imports=model.opset_import)
    sub.ir_version = model.ir_version
    return sub


def runs_on_npu(sub: Any, strict: bool) -> str | None:
    """None when the front end reads ``sub`` alone with every node on the NPU, else the reason:
    Compile reads each fused node's subgraph by itself, so a group is claimed only if it can."""
    from libaccel.compiler import onnx_frontend as fe
    from libaccel.model import onnx_placement

    og = fe.graph_from_onnx(sub)
    cpu = [p for p in onnx_placement(og, strict) if not p.npu]
    return f"{cpu[0].op}: {cpu[0].reason}" if cpu else None


def get_capability(this: Any, graph: Any, support: Any) -> Any:
    from libaccel.compiler import onnx_frontend as fe
    from libaccel.compiler import partition
    from libaccel.model import onnx_placement

    ep = _eps[_addr(this)]
    api = ep.factory.api
    try:
        model, nodes = model_from_graph(api, graph)
        og = fe.graph_from_onnx(model)
        placed = onnx_placement(og, ep.strict)
        groups = npu_groups(model, og, placed)
    except Exception as e:  # noqa: BLE001 - a graph the EP cannot read runs on the CPU EP
        if ep.strict:
            raise
        ep.log("warning", f"vnpu EP: the graph stays on the CPU: {type(e).__name__}: {e}")
        return _ffi.NULL
    import onnx

    runs = len(partition.partition_runs(placed))
    ep.report = partition.format_report(placed, "vnpu EP placement (front end)", runs)
    ep.log("info", ep.report)
    typed = onnx.shape_inference.infer_shapes(model)
    for group in groups:
        if not group:
            continue
        try:
            reason = runs_on_npu(group_model(model, typed, group), ep.strict)
        except Exception as e:  # noqa: BLE001 - such a group stays on the CPU EP
            reason = f"{type(e).__name__}: {e}"
        if reason is not None:
            names = ", ".join(model.graph.node[k].name or model.graph.node[k].op_type for k in group)
            ep.log("warning", f"vnpu EP: nodes [{names}] stay on the CPU: their subgraph alone: {reason}")
            continue
        array = _ffi.new("const OrtNode *[]", [nodes[k] for k in group])
        api.check(
            ep.factory.ep_api.EpGraphSupportInfo_AddNodesToFuse(support, array, len(group), _ffi.NULL),
            "EpGraphSupportInfo_AddNodesToFuse",
        )
        ep.claimed.extend(model.graph.node[k].name for k in group)
    ep.log("info", f"vnpu EP: claimed {len(ep.claimed)} of {len(model.graph.node)} nodes")
    return _ffi.NULL


def compile_graphs(this: Any, graphs: Any, fused_nodes: Any, count: int, infos: Any, ctx_nodes: Any) -> Any:
    from libaccel.compiler import onnx_frontend as fe
    from libaccel.model import OnnxProgram

    ep = _eps[_addr(this)]
    api = ep.factory.api
    for i in range(count):
        name = api.string(api.ort.Node_GetName, fused_nodes[i], "Node_GetName")
        ins = api.array(
            api.ort.Node_GetNumInputs,
            api.ort.Node_GetInputs,
            fused_nodes[i],
            "const OrtValueInfo *",
            "fused node inputs",
        )
        outs = api.array(
            api.ort.Node_GetNumOutputs,
            api.ort.Node_GetOutputs,
            fused_nodes[i],
            "const OrtValueInfo *",
            "fused node outputs",
        )
        model, _ = model_from_graph(api, graphs[i])
        og = fe.graph_from_onnx(model)
        program = OnnxProgram(og, ep.device, strict=ep.strict)
        npu = sum(p.npu for p in program.placement)
        if npu == 0:
            program.close()
            return _error(api, "ORT_EP_FAIL", f"vnpu EP: fused node {name!r} has no node the NPU runs")
        if npu != len(program.placement):
            # onnxruntime's fusion of the subgraph alone can leave boundary Q/DQ nodes in float
            cpu = ", ".join(p.op for p in program.placement if not p.npu)
            ep.log("warning", f"vnpu EP: {name}: {cpu} run in onnxruntime inside the fused node")
        compiled = Program(
            name,
            [api.string(api.ort.GetValueInfoName, v, "name") for v in ins],
            [api.string(api.ort.GetValueInfoName, v, "name") for v in outs],
            program,
            npu,
        )
        ep.programs[name] = compiled
        info = _ffi.new("OrtNodeComputeInfo *")
        info.ort_version_supported = _ffi.integer_const("VNPU_ORT_API_VERSION")
        info.CreateState = _lib.vnpu_compute_create_state
        info.Compute = _lib.vnpu_compute
        info.ReleaseState = _lib.vnpu_compute_release_state
        ep.infos[_addr(info)] = (info, compiled)
        infos[i] = info
        ep.log(
            "info",
            f"vnpu EP: {name}: {npu} node(s) in {program.partitions} NPU job(s), "
            f"compiled in {program.compile_ms:.1f} ms",
        )
    return _ffi.NULL


def release_infos(this: Any, infos: Any, count: int) -> None:
    ep = _eps.get(_addr(this))
    if ep is not None:
        for i in range(count):
            ep.infos.pop(_addr(infos[i]), None)


def _program_of(info: Any) -> Program:
    address = _addr(info)
    for ep in _eps.values():
        if address in ep.infos:
            return ep.infos[address][1]
    raise KeyError("unknown OrtNodeComputeInfo")


def create_state(this: Any, context: Any, state: Any) -> Any:
    state[0] = _ffi.cast("void *", this)  # the compute info names its program
    return _ffi.NULL


def compute(this: Any, state: Any, context: Any) -> Any:
    import onnx

    p = _program_of(this)
    ep = next(e for e in _eps.values() if _addr(this) in e.infos)
    api = ep.factory.api
    ffi, ort = _ffi, api.ort
    feeds: dict[str, np.ndarray] = {}
    wanted = {p.program.og.graph.tensors[i].name for i in p.program.og.graph.inputs}
    for k, name in enumerate(p.input_names):
        if name not in wanted:
            continue  # a constant the program holds
        value = ffi.new("const OrtValue **")
        api.check(ort.KernelContext_GetInput(context, k, value), f"input {name}")
        info = ffi.new("OrtTensorTypeAndShapeInfo **")
        api.check(ort.GetTensorTypeAndShape(value[0], info), "GetTensorTypeAndShape")
        try:
            elem, dims = api.tensor_type(info[0])
        finally:
            ort.ReleaseTensorTypeAndShapeInfo(info[0])
        data = ffi.new("const void **")
        api.check(ort.GetTensorData(value[0], data), "GetTensorData")
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))
        count = int(np.prod(dims)) if dims else 1
        feeds[name] = np.frombuffer(ffi.buffer(data[0], count * dtype.itemsize), dtype).reshape(dims)
    results = p.program.run(feeds)
    for k, name in enumerate(p.output_names):
        result = np.ascontiguousarray(results[name])
        dims = ffi.new("int64_t[]", list(result.shape) or [0])
        value = ffi.new("OrtValue **")
        api.check(ort.KernelContext_GetOutput(context, k, dims, result.ndim, value), f"output {name}")
        data = ffi.new("void **")
        api.check(ort.GetTensorMutableData(value[0], data), "GetTensorMutableData")
        ffi.memmove(data[0], result.tobytes(), result.nbytes)
    return ffi.NULL


# --- binding ------------------------------------------------------------------------------------


def _guarded(what: str, fn: Any, error: Any) -> Any:
    """``fn`` with every exception turned into an OrtStatus naming it (or ``error``): onnxruntime
    gets a failed call, never a Python exception through C."""

    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc(file=sys.stderr)
            api = next(iter(_factories.values())).api if _factories else None
            if error == "status" and api is not None:
                return _error(api, "ORT_EP_FAIL", f"vnpu EP: {what}: {type(e).__name__}: {e}")
            return _ffi.NULL if error == "status" else error

    return call


def install(ffi: Any, lib: Any) -> None:
    """Bind the Python implementations to libvnpu_ort_ep.so's exports and callbacks."""
    global _ffi, _lib
    _ffi, _lib = ffi, lib
    names = {
        "name": _cstr(EP_NAME),
        "vendor": _cstr(VENDOR),
        "version": _cstr(VERSION),
    }
    ffi.def_extern(name="CreateEpFactories")(_guarded("CreateEpFactories", create_factories, "status"))
    ffi.def_extern(name="ReleaseEpFactory")(_guarded("ReleaseEpFactory", release_factory, "status"))
    ffi.def_extern(name="vnpu_factory_get_name")(lambda this: names["name"])
    ffi.def_extern(name="vnpu_factory_get_vendor")(lambda this: names["vendor"])
    ffi.def_extern(name="vnpu_factory_get_vendor_id")(lambda this: 0)
    ffi.def_extern(name="vnpu_factory_get_version")(lambda this: names["version"])
    ffi.def_extern(name="vnpu_factory_is_stream_aware")(lambda this: False)

    def not_applicable(this: Any, devices: Any, count: int, info: Any, out: Any) -> Any:
        out[0] = ffi.integer_const("OrtCompiledModelCompatibility_EP_NOT_APPLICABLE")
        return ffi.NULL

    def none_out(*args: Any) -> Any:  # the EP computes in host memory: no allocator, copier, stream
        args[-1][0] = ffi.NULL
        return ffi.NULL

    ffi.def_extern(name="vnpu_factory_validate_compiled_model")(not_applicable)
    ffi.def_extern(name="vnpu_factory_create_allocator")(none_out)
    ffi.def_extern(name="vnpu_factory_release_allocator")(lambda this, allocator: None)
    ffi.def_extern(name="vnpu_factory_create_data_transfer")(none_out)
    ffi.def_extern(name="vnpu_factory_create_sync_stream")(none_out)
    ffi.def_extern(name="vnpu_factory_get_supported_devices")(
        _guarded("GetSupportedDevices", get_supported_devices, "status")
    )
    ffi.def_extern(name="vnpu_factory_create_ep")(_guarded("CreateEp", create_ep, "status"))
    ffi.def_extern(name="vnpu_factory_release_ep")(_guarded("ReleaseEp", release_ep, None))
    ffi.def_extern(name="vnpu_ep_get_name")(lambda this: names["name"])
    ffi.def_extern(name="vnpu_ep_get_capability")(_guarded("GetCapability", get_capability, "status"))
    ffi.def_extern(name="vnpu_ep_compile")(_guarded("Compile", compile_graphs, "status"))
    ffi.def_extern(name="vnpu_ep_release_node_compute_infos")(_guarded("release", release_infos, None))
    ffi.def_extern(name="vnpu_compute_create_state")(_guarded("CreateState", create_state, "status"))
    ffi.def_extern(name="vnpu_compute")(_guarded("Compute", compute, "status"))
    ffi.def_extern(name="vnpu_compute_release_state")(lambda this, state: None)
