"""The EP's logic: the Python side of libvnpu_ort_ep.so's exports and callbacks.

Life cycle (onnxruntime's plugin EP interface, ``vnpu_ort_abi.h``):

1. ``CreateEpFactories``: one OrtEpFactory, ``VnpuExecutionProvider`` of vendor "vnpu".
2. ``GetSupportedDevices``: one OrtEpDevice, on the host's CPU hardware device (the NPU is reached
   through the device the ``device`` option names, not through a device onnxruntime enumerates);
   its metadata names the default device.
3. ``CreateEp``: the session's options (``ep.vnpuexecutionprovider.<key>``): ``device`` (shim,
   kernel or a node path; default: a kernel device if there is one, else the shim), ``strict``,
   ``exact``, ``verbose``.
4. ``GetCapability``: the OrtGraph as an onnx ModelProto, read by the ONNX front end, placed by the
   one partitioner (:func:`libaccel.runtime.model.onnx_placement`); each NPU partition's original nodes
   (a fused QOperator node covers its DequantizeLinear -> op -> QuantizeLinear group) are one fused
   node. A graph the front end cannot read is left to the CPU EP, the reason in onnxruntime's log.
5. ``Compile``: each fused node's partition compiled from the whole model's front-end graph and
   loaded once (with ``ep.context_enable=1`` also an EPContext node, :mod:`vnpu_ort_ep.context`;
   an EPContext node's payload is loaded as it is); ``Compute`` copies its inputs in, runs one NPU
   job, and writes the outputs; with ``verbose``, a fused node holding a float-sum group then logs
   how many of its output bytes differ from the CPU EP's float computation (:class:`Reference`).
"""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vnpu_ort_ep import EP_NAME, context
from vnpu_ort_ep.graph_reader import Api, model_from_graph

VENDOR = "vnpu"
VERSION = "0.1.0"
OPTION_KEYS = ("device", "strict", "exact", "verbose")
CONTEXT_KEYS = ("context_enable", "context_embed_mode", "context_file_path")

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
    """A compiled fused node: its onnxruntime input/output names, its plan and its loaded partition."""

    name: str
    input_names: list[str]
    output_names: list[str]
    plan: Any  # Plan
    runner: Any  # libaccel.compiler.PartitionRunner
    npu_nodes: int
    reference: Any = None  # Reference, with the verbose option when the partition has float sums


@dataclass
class ContextOptions:
    """onnxruntime's EP context session entries, as this EP reads them."""

    enable: bool = False  # ep.context_enable: make an EPContext node for each compiled fused node
    embed: bool = False  # ep.context_embed_mode (onnxruntime's default 0: the payload in a file)
    file_path: str = ""  # ep.context_file_path


@dataclass
class Ep:
    factory: Factory
    struct: Any
    logger: Any
    device: Any
    target: str
    strict: bool
    context: ContextOptions = field(default_factory=lambda: ContextOptions())
    model_path: str = ""  # the model's file, as GetCapability's graph names it ("" for bytes)
    # exact: the QDQ Conv/MatMul groups onnxruntime computes in float stay on the CPU EP (else the
    # NPU takes them, at most 1 quantized unit from the CPU EP's outputs)
    exact: bool = False
    # verbose: after each run of a fused node with a float-sum group, log how many of its output
    # bytes differ from the CPU EP's float computation of the same nodes on the same inputs
    verbose: bool = False
    programs: dict[str, Program] = field(default_factory=dict)  # fused node name -> program
    plans: dict[frozenset[str], Any] = field(default_factory=dict)  # group key -> Plan, for Compile
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


def _flag(values: dict[str, str], key: str) -> bool:
    text = values.get(key, "false").lower()
    if text not in ("true", "false", "1", "0"):
        raise OptionError(f"vnpu EP: option {key!r} = {text!r}: expected true or false")
    return text in ("true", "1")


def parse_options(values: dict[str, str]) -> tuple[str, bool]:
    """(the device to open, checked; strict) from the EP's options."""
    from libaccel.device import checked_device
    from libaccel.errors import AccelError

    device = values.get("device", "") or default_device()
    strict = _flag(values, "strict")
    if device not in ("shim", "kernel") and not device.startswith("/"):
        raise OptionError(
            f"vnpu EP: option 'device' = {device!r}: expected shim, kernel or an absolute device node path"
        )
    try:
        target = checked_device(device)
    except (AccelError, OSError) as e:
        raise OptionError(f"vnpu EP: option 'device' = {device!r}: {e}") from None
    return target, strict


def _session_option(api: Api, options: Any, key: str) -> str | None:
    """The EP's own option ``key`` (``ep.vnpuexecutionprovider.<key>``), None when not set."""
    return _session_entry(api, options, f"ep.{EP_NAME.lower()}.{key}")


def context_options(values: dict[str, str | None]) -> ContextOptions:
    """The EP context entries (keys without the ``ep.`` prefix), checked."""
    flags = {}
    for key, default in (("context_enable", "0"), ("context_embed_mode", "0")):
        text = values.get(key) or default
        if text not in ("0", "1"):
            raise OptionError(f"vnpu EP: session config entry 'ep.{key}' = {text!r}: expected 0 or 1")
        flags[key] = text == "1"
    return ContextOptions(
        flags["context_enable"], flags["context_embed_mode"], values.get("context_file_path") or ""
    )


def _session_entry(api: Api, options: Any, key: str) -> str | None:
    full = key.encode()
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
    entries = {k: _session_entry(f.api, session_options, f"ep.{k}") for k in CONTEXT_KEYS}
    try:
        target, strict = parse_options(values)
        exact = _flag(values, "exact")
        verbose = _flag(values, "verbose")
        context = context_options(entries)
    except OptionError as e:
        return _error(f.api, "ORT_INVALID_ARGUMENT", str(e))
    struct = _ffi.new("OrtEp *")
    struct.ort_version_supported = _ffi.integer_const("VNPU_ORT_API_VERSION")
    struct.GetName = _lib.vnpu_ep_get_name
    struct.GetCapability = _lib.vnpu_ep_get_capability
    struct.Compile = _lib.vnpu_ep_compile
    struct.ReleaseNodeComputeInfos = _lib.vnpu_ep_release_node_compute_infos
    ep = Ep(f, struct, logger, Device.open(target), target, strict, context, exact=exact, verbose=verbose)
    _eps[_addr(struct)] = ep
    ep.log("info", f"vnpu EP: device {target}")
    out[0] = struct
    return _ffi.NULL


def release_ep(this: Any, struct: Any) -> None:
    ep = _eps.pop(_addr(struct), None)
    if ep is None:
        return
    for p in ep.programs.values():
        p.runner.close()
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


@dataclass
class Edge:
    """A tensor at a fused node's edge: onnxruntime's name for it, the IR tensor holding it in the
    whole-model program, and how its bytes differ (onnxruntime's QDQ fusion on x86 turns an int8
    Q/DQ pair into uint8 with the zero point moved by 128: the same values, each byte XOR 0x80)."""

    name: str
    ir: int
    flip: bool
    dtype: str  # the IR tensor's
    shape: tuple[int, ...]  # the IR tensor's (its layout's)
    perm: tuple[int, ...] | None  # the ONNX-to-IR layout permutation (OnnxGraph.layouts), if any


@dataclass
class Plan:
    """A claimed group: the IR nodes of its NPU partition in the whole model's front-end graph, and
    the fused node's inputs and outputs in onnxruntime's names and types."""

    og: Any  # None for a plan loaded from an EPContext node
    run: tuple[int, ...]
    inputs: dict[str, Edge]
    outputs: dict[str, Edge]
    compiled: Any = None  # the CompiledPartition of an EPContext node's payload
    error: str = ""  # why an EPContext node cannot run (Compile fails the session with it)


def _original_tensor(model: Any, og: Any, fused_name: str, types: dict[str, Any]) -> str:
    """The tensor of onnxruntime's graph ``model`` that the front end's (fused) tensor stands for.

    The fusion keeps node names and renames tensors: the fused tensor's producer has the name of an
    original node; its output is that tensor, or, when it is float (a fused QLinear op stands for
    its float op), the output of the one QuantizeLinear that reads it."""
    producer = {o: n for n in og.model.graph.node for o in n.output if o}
    if fused_name not in producer:
        if fused_name in {i.name for i in model.graph.input}:
            return fused_name
        raise ValueError(f"the front end's tensor {fused_name!r} is no output and no graph input")
    fused_node = producer[fused_name]
    by_name = {n.name: n for n in model.graph.node if n.name}
    if fused_node.name not in by_name:
        raise ValueError(
            f"the front end's node {fused_node.name!r} has no node of that name in onnxruntime's graph"
        )
    original = by_name[fused_node.name]
    tensor = original.output[list(fused_node.output).index(fused_name)]
    if types.get(tensor) in ("int8", "uint8"):
        return tensor
    readers = [n for n in model.graph.node if tensor in n.input]
    if len(readers) != 1 or readers[0].op_type != "QuantizeLinear":
        raise ValueError(
            f"tensor {tensor!r} of node {original.name!r} is not quantized by one QuantizeLinear"
        )
    return readers[0].output[0]


def edge_plan(model: Any, og: Any, run: tuple[int, ...], group: list[int]) -> Plan:
    """How the fused node of ``group`` (original node indices) runs ``run`` (IR nodes): each of its
    partition's inputs and outputs tied to a tensor at the group's edge; ValueError when one is not."""
    import onnx

    types = {
        v.name: onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name
        for v in [*model.graph.input, *model.graph.output, *model.graph.value_info]
        if v.type.tensor_type.elem_type
    }
    nodes = [model.graph.node[k] for k in group]
    inits = {t.name for t in model.graph.initializer}
    produced = {o for n in nodes for o in n.output if o}
    members = set(group)
    outside = {t for k, n in enumerate(model.graph.node) if k not in members for t in n.input}
    outside |= {o.name for o in model.graph.output}
    ins = {t for n in nodes for t in n.input if t and t not in produced and t not in inits}
    outs = {o for o in produced if o in outside}
    graph = og.graph
    in_run = set(run)
    made = {t for k in run for t in graph.node(k).outputs}
    read = {t for k in run for t in graph.node(k).inputs if t >= 0}
    read_after = {t for n in graph.nodes if n.index not in in_run for t in n.inputs} | set(graph.outputs)
    part_ins = sorted(t for t in read - made if graph.tensors[t].data is None)
    part_outs = sorted(t for t in made if t in read_after)

    def edge(index: int) -> Edge:
        fused = graph.tensors[index].name
        name = _original_tensor(model, og, fused, types)
        mine, theirs = og.info[fused][0], types.get(name)
        if mine != theirs and {mine, theirs} != {"int8", "uint8"}:
            raise ValueError(f"tensor {name!r} is {theirs} in onnxruntime's graph, {mine} in the front end's")
        t = graph.tensors[index]
        perm = og.layouts.get(index)
        return Edge(name, index, mine != theirs, t.dtype, tuple(t.shape), tuple(perm) if perm else None)

    inputs = {e.name: e for e in map(edge, part_ins)}
    outputs = {e.name: e for e in map(edge, part_outs) if e.name in outs}
    if missing := sorted(set(inputs) - ins):
        raise ValueError(f"the NPU partition reads {missing[0]!r}, which is not an input of the group")
    if missing := sorted(outs - set(outputs)):
        raise ValueError(f"the group's output {missing[0]!r} is not an output of its NPU partition")
    return Plan(og, tuple(run), inputs, outputs)


def _group_key(names: Any) -> frozenset[str]:
    """A group by its nodes' output tensors: unique in a graph, and the same in GetCapability's
    graph and in the fused node's subgraph that Compile gets."""
    return frozenset(o for n in names for o in n.output if o)


def _left(ep: Ep, model: Any, group: list[int], reason: str) -> None:
    names = ", ".join(model.graph.node[k].name or model.graph.node[k].op_type for k in group)
    ep.log("warning", f"vnpu EP: nodes [{names}] stay on the CPU: {reason}")


def keep_cpu_fusions(model: Any, og: Any, groups: list[list[int]], plans: dict[int, Plan]) -> dict[int, str]:
    """The planned groups not to claim (by index, with the reason), so that every node left to the
    CPU EP computes as in the CPU EP's own run of the model.

    On x86 onnxruntime fuses an int8 QDQ group into its integer kernel (QLinearMatMul, QLinearConv,
    ...) only after converting the group's input Q/DQ pair to uint8, which needs the QuantizeLinear:
    a claimed group that holds it would leave that CPU group in float, and its result would change.
    A group whose int8 output (a converted pair: ``Edge.flip``) feeds such a fused CPU node stays on
    the CPU too, and so does one whose converted input a fused CPU node quantizes; dropping one
    group can expose another, so this repeats until nothing changes."""
    nodes = list(model.graph.node)
    fused_ops = {n.name: n.op_type for n in og.model.graph.node if n.name}
    consumers: dict[str, list[int]] = {}
    for k, n in enumerate(nodes):
        for t in n.input:
            consumers.setdefault(t, []).append(k)
    producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    dropped: dict[int, str] = {}
    changed = True
    while changed:
        changed = False
        claimed = {k for g, plan in plans.items() if g not in dropped for k in groups[g]}
        for g, plan in plans.items():
            if g in dropped:
                continue
            for name, edge in plan.outputs.items():
                if not edge.flip:
                    continue
                readers = [r for r in consumers.get(name, []) if r not in claimed]
                ops = [c for r in readers for c in (consumers.get(nodes[r].output[0], [])
                       if nodes[r].op_type == "DequantizeLinear" else [r])]  # fmt: skip
                for c in ops:
                    fused = fused_ops.get(nodes[c].name, nodes[c].op_type)
                    if c not in claimed and fused != nodes[c].op_type:
                        dropped[g] = (
                            f"its output {name!r} feeds {nodes[c].name!r}, which the CPU EP runs as {fused} "
                            "only with the QuantizeLinear of that tensor in its own graph"
                        )
                        changed = True
                        break
                if g in dropped:
                    break
            for name, edge in plan.inputs.items():  # the same for the CPU group that quantizes an input
                q = producer.get(name)
                if g in dropped or not edge.flip or q is None or nodes[q].op_type != "QuantizeLinear":
                    continue
                p = producer.get(nodes[q].input[0])
                fused = fused_ops.get(nodes[p].name, nodes[p].op_type) if p is not None else ""
                if p is not None and p not in claimed and fused != nodes[p].op_type:
                    dropped[g] = (
                        f"its input {name!r} comes from {nodes[p].name!r}, which the CPU EP runs as {fused} "
                        "only with the DequantizeLinear of that tensor in its own graph"
                    )
                    changed = True
    return dropped


def get_capability(this: Any, graph: Any, support: Any) -> Any:
    from libaccel.compiler import onnx_frontend as fe
    from libaccel.compiler import partition
    from libaccel.runtime.model import onnx_placement

    ep = _eps[_addr(this)]
    api = ep.factory.api
    model, nodes = model_from_graph(api, graph)
    ep.model_path = _model_path(api, graph)
    if any(context.is_ours(n, EP_NAME) for n in model.graph.node):
        return _claim_contexts(ep, model, nodes, support)
    try:
        og = fe.graph_from_onnx(model, float_sums=not ep.exact)
        placed = onnx_placement(og, ep.strict)
        groups = npu_groups(model, og, placed)
    except Exception as e:  # noqa: BLE001 - a graph the EP cannot read runs on the CPU EP
        if ep.strict:
            raise
        ep.log("warning", f"vnpu EP: the graph stays on the CPU: {type(e).__name__}: {e}")
        return _ffi.NULL
    runs = partition.partition_runs(placed)
    ep.report = partition.format_report(placed, "vnpu EP placement (front end)", len(runs))
    ep.log("info", ep.report)
    plans: dict[int, Plan] = {}
    for k, (run, group) in enumerate(zip(runs, groups, strict=True)):
        try:
            plans[k] = edge_plan(model, og, run, group)
        except ValueError as e:  # such a group stays on the CPU EP
            _left(ep, model, group, str(e))
    for k, reason in keep_cpu_fusions(model, og, groups, plans).items():
        del plans[k]
        _left(ep, model, groups[k], reason)
    for k, plan in plans.items():
        _fuse(ep, model, nodes, groups[k], plan, support)
    ep.log("info", f"vnpu EP: claimed {len(ep.claimed)} of {len(model.graph.node)} nodes")
    return _ffi.NULL


def _fuse(ep: Ep, model: Any, nodes: list[Any], group: list[int], plan: Plan, support: Any) -> None:
    """Claim ``group`` (node indices) as one fused node that runs ``plan``."""
    options = _ffi.new("OrtNodeFusionOptions *")
    options.ort_version_supported = _ffi.integer_const("VNPU_ORT_API_VERSION")
    # the weights are compiled in: the fused (and EPContext) node need not take the initializers
    options.drop_constant_initializers = True
    array = _ffi.new("const OrtNode *[]", [nodes[k] for k in group])
    ep.factory.api.check(
        ep.factory.ep_api.EpGraphSupportInfo_AddNodesToFuse(support, array, len(group), options),
        "EpGraphSupportInfo_AddNodesToFuse",
    )
    ep.plans[_group_key(model.graph.node[k] for k in group)] = plan
    ep.claimed.extend(model.graph.node[k].name for k in group)


def _model_path(api: Api, graph: Any) -> str:
    out = _ffi.new("const char **")
    api.check(api.ort.Graph_GetModelPath(graph, out), "Graph_GetModelPath")
    return _ffi.string(out[0]).decode() if out[0] != _ffi.NULL else ""


def _claim_contexts(ep: Ep, model: Any, nodes: list[Any], support: Any) -> Any:
    """An EPContext model: each of the EP's EPContext nodes is one fused node whose payload is its
    compiled partition, read and checked now; one that cannot run is claimed with its reason, for
    Compile to fail the session with (onnxruntime only logs a GetCapability error)."""
    for k, node in enumerate(model.graph.node):
        if not context.is_ours(node, EP_NAME):
            continue
        try:
            if ep.context.enable:
                raise context.ContextError(
                    "vnpu EP: ep.context_enable=1 on a model that is already an EPContext model: "
                    "give the original model, or leave ep.context_enable unset"
                )
            compiled, ins, outs = context.load(node, ep.model_path, ep.device.params.isa_version)
        except context.ContextError as e:
            _fuse(ep, model, nodes, [k], Plan(None, (), {}, {}, error=str(e)), support)
            continue
        inputs = {d["name"]: Edge(**d) for d in ins}
        outputs = {d["name"]: Edge(**d) for d in outs}
        _fuse(
            ep,
            model,
            nodes,
            [k],
            Plan(None, tuple(compiled.node_indices), inputs, outputs, compiled),
            support,
        )
    ep.log("info", f"vnpu EP: EPContext model: claimed {len(ep.claimed)} of {len(model.graph.node)} nodes")
    return _ffi.NULL


def compile_graphs(this: Any, graphs: Any, fused_nodes: Any, count: int, infos: Any, ctx_nodes: Any) -> Any:
    """Each fused node runs the NPU partition GetCapability planned for it, compiled from the whole
    model's front-end graph: the group's QDQ context (the QuantizeLinear upstream, the fusion's
    int8-to-uint8 conversion) is the whole model's, as onnxruntime's CPU EP runs it."""
    from libaccel.compiler import PartitionRunner, compile_cached

    ep = _eps[_addr(this)]
    api = ep.factory.api
    for i in range(count):
        name = api.string(api.ort.Node_GetName, fused_nodes[i], "Node_GetName")
        ins = api.array(api.ort.Node_GetNumInputs, api.ort.Node_GetInputs, fused_nodes[i],
                        "const OrtValueInfo *", "fused node inputs")  # fmt: skip
        outs = api.array(api.ort.Node_GetNumOutputs, api.ort.Node_GetOutputs, fused_nodes[i],
                         "const OrtValueInfo *", "fused node outputs")  # fmt: skip
        sub, _ = model_from_graph(api, graphs[i])
        plan = ep.plans.get(_group_key(sub.graph.node))
        if plan is None:
            return _error(
                api, "ORT_EP_FAIL", f"vnpu EP: fused node {name!r} is no group GetCapability claimed"
            )
        if plan.error:
            return _error(api, "ORT_INVALID_GRAPH", plan.error)
        input_names = [api.string(api.ort.GetValueInfoName, v, "name") for v in ins]
        output_names = [api.string(api.ort.GetValueInfoName, v, "name") for v in outs]
        if missing := [n for n in output_names if n not in plan.outputs]:
            return _error(
                api, "ORT_EP_FAIL", f"vnpu EP: fused node {name!r}: no NPU value for output {missing[0]!r}"
            )
        if plan.compiled is not None:  # an EPContext node's: compiled already
            compiled = plan.compiled
        else:
            compiled, _ = compile_cached(plan.og.graph, list(plan.run), ep.device.params.isa_version)
            if ep.context.enable:
                if ctx_nodes == _ffi.NULL:
                    return _error(api, "ORT_EP_FAIL", "vnpu EP: onnxruntime gave no room for EPContext nodes")
                ctx_nodes[i] = _context_node(ep, name, compiled, plan, input_names, output_names)
        program = Program(
            name, input_names, output_names, plan, PartitionRunner(ep.device, compiled), len(plan.run)
        )
        if ep.verbose:
            _verbose_reference(ep, program)
        ep.programs[name] = program
        info = _ffi.new("OrtNodeComputeInfo *")
        info.ort_version_supported = _ffi.integer_const("VNPU_ORT_API_VERSION")
        info.CreateState = _lib.vnpu_compute_create_state
        info.Compute = _lib.vnpu_compute
        info.ReleaseState = _lib.vnpu_compute_release_state
        ep.infos[_addr(info)] = (info, program)
        infos[i] = info
        ep.log("info", f"vnpu EP: {name}: {len(plan.run)} IR node(s) in one NPU job")
    return _ffi.NULL


def _context_node(
    ep: Ep, name: str, compiled: Any, plan: Plan, input_names: list[str], output_names: list[str]
) -> Any:
    """The EPContext node (an OrtNode onnxruntime takes ownership of) of one compiled fused node."""
    api = ep.factory.api
    ctx_path = context.context_model_path(ep.model_path, ep.context.file_path)
    attrs = context.make_attributes(
        EP_NAME,
        name,
        compiled,
        [plan.inputs[n] for n in input_names if n in plan.inputs],
        [plan.outputs[n] for n in output_names],
        ep.context.embed,
        ctx_path,
    )
    made = _ffi.new("OrtOpAttr *[]", len(attrs))
    try:
        for k, (key, value) in enumerate(attrs.items()):
            out = _ffi.new("OrtOpAttr **")
            if isinstance(value, int):
                data = _ffi.new("int64_t *", value)
                kind = _ffi.integer_const("ORT_OP_ATTR_INT")
                status = api.ort.CreateOpAttr(key.encode(), data, 1, kind, out)
            else:
                raw = _ffi.new("char[]", value.encode())
                kind = _ffi.integer_const("ORT_OP_ATTR_STRING")
                status = api.ort.CreateOpAttr(key.encode(), raw, len(value.encode()), kind, out)
            api.check(status, f"CreateOpAttr({key})")
            made[k] = out[0]
        editor = api.ort.GetModelEditorApi()
        if editor == _ffi.NULL:
            raise RuntimeError(
                "this onnxruntime has no model editor API (a minimal build) for EPContext nodes"
            )
        c_ins = [_ffi.new("char[]", n.encode()) for n in input_names]
        c_outs = [_ffi.new("char[]", n.encode()) for n in output_names]
        node = _ffi.new("OrtNode **")
        api.check(
            editor.CreateNode(
                context.EP_CONTEXT_OP.encode(), context.EP_CONTEXT_DOMAIN.encode(), name.encode(),
                _ffi.new("const char *[]", c_ins), len(c_ins),
                _ffi.new("const char *[]", c_outs), len(c_outs),
                made, len(attrs), node,
            ),
            "CreateNode(EPContext)",
        )  # fmt: skip
    finally:
        for k in range(len(attrs)):  # CreateNode takes (and NULLs) the ones it copied
            if made[k] != _ffi.NULL:
                api.ort.ReleaseOpAttr(made[k])
    ep.log(
        "info",
        f"vnpu EP: {name}: EPContext node ({'embedded' if ep.context.embed else attrs['ep_cache_context']})",
    )
    return node[0]


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


def _flip(value: np.ndarray, flip: bool, dtype: str) -> np.ndarray:
    """``value``'s bytes as ``dtype`` (int8 <-> uint8: each byte XOR 0x80, the same quantized value)."""
    return (value.view(np.uint8) ^ np.uint8(0x80)).view(dtype) if flip else value.view(dtype)


def compute(this: Any, state: Any, context: Any) -> Any:
    import onnx

    from libaccel.compiler.onnx_frontend import layout_to_ir, layout_to_onnx

    p = _program_of(this)
    ep = next(e for e in _eps.values() if _addr(this) in e.infos)
    api = ep.factory.api
    ffi, ort = _ffi, api.ort
    feeds: dict[int, np.ndarray] = {}
    seen: dict[str, np.ndarray] = {}  # the verbose report's: the front end's types, ONNX's layout
    for k, name in enumerate(p.input_names):
        edge = p.plan.inputs.get(name)
        if edge is None:
            continue  # read by the group's nodes the NPU partition stands for (a constant, a DQ)
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
        arr = np.frombuffer(ffi.buffer(data[0], count * dtype.itemsize), dtype).reshape(dims)
        seen[name] = _flip(arr, edge.flip, edge.dtype)
        feeds[edge.ir] = layout_to_ir(seen[name], edge.perm)
    values = p.runner.run(feeds)
    made: dict[str, np.ndarray] = {}
    for k, name in enumerate(p.output_names):
        edge = p.plan.outputs[name]
        ir_value = values[edge.ir].reshape(edge.shape)
        own = np.dtype("int8" if edge.dtype == "uint8" else "uint8") if edge.flip else np.dtype(edge.dtype)
        made[name] = layout_to_onnx(ir_value, edge.perm)
        result = np.ascontiguousarray(_flip(made[name], edge.flip, own.name))
        dims = ffi.new("int64_t[]", list(result.shape) or [0])
        value = ffi.new("OrtValue **")
        api.check(ort.KernelContext_GetOutput(context, k, dims, result.ndim, value), f"output {name}")
        data = ffi.new("void **")
        api.check(ort.GetTensorMutableData(value[0], data), "GetTensorMutableData")
        ffi.memmove(data[0], result.tobytes(), result.nbytes)
    if p.reference is not None:
        ep.log("warning", compare(p.reference, seen, made).line(p.name, p.reference.groups))
    return ffi.NULL


def _verbose_reference(ep: Ep, program: Program) -> None:
    """``program``'s :class:`Reference` for the verbose report, or the reason there is none."""
    plan = program.plan
    if plan.og is None:
        ep.log("warning", f"vnpu EP: {program.name}: no verbose report for an EPContext node (no front end)")
        return
    try:
        program.reference = reference(plan.og, plan)
    except ValueError as e:
        ep.log("warning", f"vnpu EP: {program.name}: no verbose report: {e}")


# --- verbose: the float-sum groups against the CPU EP's float computation ------------------------


@dataclass
class Reference:
    """A fused node as onnxruntime's CPU EP computes it: the front end's (QOperator-form) nodes of
    its partition in an onnxruntime session of their own, where a float-sum group is its
    DequantizeLinear -> float op -> QuantizeLinear as onnxruntime's fusion left it."""

    session: Any  # onnxruntime.InferenceSession
    inputs: dict[str, str]  # the fused node's input (onnxruntime's name) -> the session's input
    outputs: dict[str, str]  # the fused node's output -> the session's output
    groups: list[str]  # the float-sum groups' ops, as "MatMul 'name'"


@dataclass
class Difference:
    """The fused node's outputs against its :class:`Reference`'s."""

    differing: int  # bytes
    total: int
    max_units: int  # the largest difference of one stored value

    def line(self, name: str, groups: list[str]) -> str:
        return (
            f"vnpu EP: {name} (float-sum groups: {', '.join(groups)}): {self.differing} of {self.total} "
            f"bytes differ from the CPU EP's float computation (max {self.max_units} unit"
            f"{'' if self.max_units == 1 else 's'})"
        )


def float_sum_groups(og: Any, run: tuple[int, ...]) -> list[Any]:
    """The ops of the QDQ groups in ``run`` (IR nodes) that onnxruntime computes in float32 and the
    NPU as integer sums (``graph_from_onnx(float_sums=True)``), once each, in order."""
    from libaccel.compiler.onnx_frontend import FLOAT_SUM_GROUP_OPS

    ops: dict[int, Any] = {}
    for k in run:
        node = og.onnx_nodes[k]
        if node.op_type in FLOAT_SUM_GROUP_OPS and id(node) in og.absorbed:
            ops.setdefault(id(node), node)
    return list(ops.values())


def reference(og: Any, plan: Plan) -> Reference | None:
    """The :class:`Reference` of ``plan``'s fused node, None when its partition has no float-sum
    group (its output is then bit-exact by construction); ValueError when its nodes are no graph."""
    import onnx
    import onnxruntime

    groups = float_sum_groups(og, plan.run)
    if not groups:
        return None
    members = {id(og.onnx_nodes[k]) for k in plan.run}
    members |= {id(m) for k in plan.run for m in og.absorbed.get(id(og.onnx_nodes[k]), [])}
    nodes = [n for n in og.model.graph.node if id(n) in members]
    produced = {o for n in nodes for o in n.output if o}
    read = {t for n in nodes for t in n.input if t}
    constants = [n for n in og.model.graph.node if n.op_type == "Constant" and set(n.output) & read]
    inits = [t for t in og.model.graph.initializer if t.name in read]
    tensor = {e.ir: og.graph.tensors[e.ir].name for e in [*plan.inputs.values(), *plan.outputs.values()]}
    inputs = {name: tensor[e.ir] for name, e in plan.inputs.items()}
    outputs = {name: tensor[e.ir] for name, e in plan.outputs.items()}
    known = produced | {o for n in constants for o in n.output} | {t.name for t in inits}
    if missing := sorted(read - known - set(inputs.values())):
        raise ValueError(f"the partition's nodes read {missing[0]!r}, which is no input of the fused node")
    if missing := sorted(set(outputs.values()) - produced):
        raise ValueError(f"the fused node's output {missing[0]!r} is no output of the partition's nodes")

    def value(name: str) -> Any:
        dtype, shape = og.info[name]
        elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        return onnx.helper.make_tensor_value_info(name, elem, shape)

    graph = onnx.helper.make_graph(
        [*constants, *nodes],
        "vnpu_reference",
        [value(n) for n in dict.fromkeys(inputs.values())],
        [value(n) for n in dict.fromkeys(outputs.values())],
        inits,
    )
    model = onnx.helper.make_model(graph, opset_imports=og.model.opset_import, ir_version=og.model.ir_version)
    options = onnxruntime.SessionOptions()
    # the nodes as the fusion left them (it ran when the front end read the model), one thread
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    labels = [f"{n.op_type} {n.name!r}" if n.name else n.op_type for n in groups]
    return Reference(session, inputs, outputs, labels)


def compare(ref: Reference, inputs: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> Difference:
    """``outputs`` (the fused node's, in the front end's types and ONNX's layout) against ``ref``'s
    run on ``inputs`` (likewise)."""
    feeds = {ref.inputs[name]: value for name, value in inputs.items() if name in ref.inputs}
    names = list(dict.fromkeys(ref.outputs.values()))
    want = dict(zip(names, ref.session.run(names, feeds), strict=True))
    differing = total = units = 0
    for name, got in outputs.items():
        w = want[ref.outputs[name]]
        g = np.asarray(got).reshape(w.shape).view(w.dtype)
        differing += int((g.view(np.uint8) != w.view(np.uint8)).sum())
        total += int(w.nbytes)
        if w.size:
            units = max(units, int(np.abs(g.astype(np.int64) - w.astype(np.int64)).max()))
    return Difference(differing, total, units)


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
