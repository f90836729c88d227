"""The delegate's logic: the Python side of libteflon.so's C entry points and callbacks.

Life cycle (TFLite's, as in Mesa's teflon ``tfl_device.c``):

1. ``tflite_plugin_create_delegate``: parse the options, open the device, hand back a zeroed
   ``TfLiteDelegate`` whose ``Prepare`` is :func:`_delegate_prepare`.
2. ``Prepare(context, delegate)``: read the graph, place each node (NPU or CPU, and why), print the
   placement report at ``log_level=verbose``, and give the NPU nodes to
   ``ReplaceNodeSubsetsWithDelegateKernels``; TFLite groups them into partitions, one kernel each.
3. kernel ``init``: record the partition (its nodes, inputs, outputs) from ``TfLiteDelegateParams``;
   kernel ``prepare``: compile it (libaccel.compiler, disk-cached); kernel ``invoke``: copy the inputs
   in, one submit, copy the outputs out.

Every callback is a cffi ``extern "Python"`` function, so it takes the GIL itself: TFLite's Python
``invoke()`` releases the GIL before calling into the runtime. An exception never crosses into C:
it becomes ``kTfLiteError`` plus a message through the runtime's ``ReportError``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import itertools
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from delegate_teflon import compiler_bridge
from delegate_teflon.context_reader import KNOWN_OPS, read_context
from delegate_teflon.options import DelegateOptions, OptionError, parse_options
from delegate_teflon.placement import Placement, format_report, place
from delegate_teflon.runtime_abi import RuntimeLayout, identify
from libaccel.compiler.graph import Graph

K_TFLITE_OK = 0
K_TFLITE_ERROR = 1

_ffi: Any = None
_lib: Any = None
_lock = threading.Lock()
_handles = itertools.count(1)


@dataclass
class DelegateState:
    """One delegate instance (one ``load_delegate`` call)."""

    options: DelegateOptions
    struct: Any  # the TfLiteDelegate, kept alive here
    device: Any = None
    # Per TfLiteContext (an interpreter may prepare several subgraphs): the graph read at Prepare,
    # held only while ReplaceNodeSubsetsWithDelegateKernels creates the kernels.
    # With the model's compile-cache key (compiler_bridge.model_key).
    graphs: dict[int, tuple[Graph, RuntimeLayout, str]] = field(default_factory=dict)

    def log(self, level: str, message: str) -> None:
        if level == "info" and self.options.quiet:
            return
        if level == "verbose" and not self.options.verbose:
            return
        print(message, file=sys.stderr, flush=True)


@dataclass
class PartitionKernel:
    """One delegate kernel: a partition of NPU nodes, compiled at its first prepare."""

    delegate: DelegateState
    handle: int
    graph: Graph  # the partition: its nodes, inputs (non-constant), outputs
    model_key: str = ""  # the whole model's compile-cache key, from which the partition's derives
    runner: Any = None
    error: str = ""


@dataclass(frozen=True)
class PrepareRecord:
    """What one delegate Prepare saw and decided (for tests and tools in the same process)."""

    graph: Graph | None  # None unless keep_last_graph (then it holds a copy of every constant)
    layout: RuntimeLayout
    placements: list[Placement]


_delegates: dict[int, DelegateState] = {}  # address of the TfLiteDelegate -> state
_last_prepare: PrepareRecord | None = None
#: Keep the whole graph (constants included) in :func:`last_prepare`'s record; tests and tools set it.
keep_last_graph = False


def last_prepare() -> PrepareRecord | None:
    """The graph, runtime layout and placement of the most recent delegate Prepare in this process."""
    return _last_prepare


_kernels: dict[int, PartitionKernel] = {}  # handle stored in TfLiteNode.user_data -> kernel


def _addr(ptr: Any) -> int:
    return int(_ffi.cast("uintptr_t", ptr))


def _report(context: Any, message: str) -> None:
    _lib.vnpu_report(context, message.encode())


def _open_device(options: DelegateOptions) -> Any:
    from libaccel import Device

    return Device.open(options.device)


# --- exported entry points ---------------------------------------------------------------
def create_delegate(keys: Any, values: Any, count: int, report_error: Any) -> Any:
    def fail(message: str) -> Any:
        _lib.vnpu_call_report_error(report_error, message.encode())
        return _ffi.NULL

    try:
        pairs = [(_ffi.string(keys[i]).decode(), _ffi.string(values[i]).decode()) for i in range(count)]
        options = parse_options(pairs, KNOWN_OPS)
    except OptionError as e:
        return fail(str(e))
    except UnicodeDecodeError as e:
        return fail(f"vnpu delegate: an option key or value is not UTF-8 ({e})")
    try:
        device = _open_device(options)
    except Exception as e:  # noqa: BLE001 - any failure to open is a bad 'device' value for the user
        return fail(f"vnpu delegate: cannot open device {options.device or '(default)'!r}: {e}")
    struct = _ffi.new("TfLiteDelegate *")  # zeroed: no buffer handles, no flags, no opaque builder
    struct.Prepare = _lib.vnpu_delegate_prepare
    state = DelegateState(options=options, struct=struct, device=device)
    with _lock:
        _delegates[_addr(struct)] = state
    state.log("verbose", f"vnpu delegate: created on {device.backend.kind} device {device.backend.path}")
    return struct


def destroy_delegate(delegate: Any) -> None:
    with _lock:
        state = _delegates.pop(_addr(delegate), None)
        if state is None:
            return
        orphans = [_kernels.pop(h) for h, k in list(_kernels.items()) if k.delegate is state]
    for kernel in orphans:  # kernels whose interpreter outlives the delegate (normally none)
        _close_runner(kernel)
    if state.device is not None:
        state.device.close()


# --- TfLiteDelegate.Prepare ----------------------------------------------------------------
def _delegate_prepare(context: Any, delegate: Any) -> int:
    global _last_prepare
    state = _delegates.get(_addr(delegate))
    if state is None:
        _report(context, "vnpu delegate: Prepare called with an unknown TfLiteDelegate")
        return K_TFLITE_ERROR
    layout = identify(_ffi, _lib, context)
    # The constants are views of the runtime's model buffer (no copy); a kept graph needs its own.
    graph = read_context(_ffi, context, layout, copy_constants=keep_last_graph)
    key = compiler_bridge.model_key(graph, state.device)
    checks = compiler_bridge.SupportChecks(key, state.options.cache_dir)
    placements = place(graph, state.options, checks.check)
    checks.save()
    _last_prepare = PrepareRecord(graph if keep_last_graph else None, layout, placements)
    state.log("verbose", f"vnpu delegate: runtime {layout.describe()}")
    state.log("verbose", format_report(placements, layout.distribution))
    npu_nodes = [p.node for p in placements if p.npu]
    if not npu_nodes:
        state.log(
            "info",
            f"vnpu delegate: no node of this graph ({len(placements)} nodes) can run on the "
            "NPU; the whole model runs on the CPU (log_level=verbose says why)",
        )
        return K_TFLITE_OK
    array = _ffi.new("TfLiteIntArray *", {"size": len(npu_nodes), "data": npu_nodes})
    # The runtime calls the kernels' init from inside this call; after it, each kernel holds its own
    # partition and the whole graph can go.
    state.graphs[_addr(context)] = (graph, layout, key)
    try:
        status = _lib.vnpu_replace_nodes(context, layout.registration, array, delegate)
    finally:
        del state.graphs[_addr(context)]
    if status != K_TFLITE_OK:
        _report(context, "vnpu delegate: ReplaceNodeSubsetsWithDelegateKernels failed")
    return status


# --- delegate kernel callbacks ---------------------------------------------------------------
def _int_list(ptr: Any) -> list[int]:
    return [ptr.data[i] for i in range(ptr.size)] if ptr else []


def _kernel_init(context: Any, buffer: Any, length: int) -> Any:
    params = _ffi.cast("TfLiteDelegateParams *", buffer)
    state = _delegates.get(_addr(params.delegate))
    if state is None or _addr(context) not in state.graphs:
        _report(context, "vnpu delegate: kernel init for a delegate or graph it did not prepare")
        return _ffi.NULL
    whole, _layout, key = state.graphs[_addr(context)]
    node_ids = set(_int_list(params.nodes_to_replace))
    nodes = [n for n in whole.nodes if n.index in node_ids]
    inputs = tuple(t for t in _int_list(params.input_tensors) if t >= 0 and not whole.tensors[t].is_const)
    outputs = tuple(_int_list(params.output_tensors))
    used = {t for n in nodes for t in (*n.inputs, *n.outputs) if t >= 0}
    # Own copies of the tensor records: the constants (views of the model) are dropped once the
    # weights are uploaded (see _kernel_prepare).
    tensors = {t: dataclasses.replace(whole.tensors[t]) for t in sorted(used)}
    part = Graph(tensors=tensors, nodes=nodes, inputs=inputs, outputs=outputs)
    with _lock:
        handle = next(_handles)
        kernel = PartitionKernel(delegate=state, handle=handle, graph=part, model_key=key)
        _kernels[handle] = kernel
    state.log(
        "verbose",
        f"vnpu delegate: NPU partition {handle}: nodes {sorted(node_ids)}, "
        f"inputs {list(inputs)}, outputs {list(outputs)}",
    )
    return _ffi.cast("void *", handle)


def _close_runner(kernel: PartitionKernel) -> None:
    """Free the partition's BOs now (weights, arena, stream), not when the device closes."""
    runner, kernel.runner = kernel.runner, None
    if runner is not None and not kernel.delegate.device.backend.closed:
        runner.close()


def _kernel_free(context: Any, buffer: Any) -> None:
    with _lock:
        kernel = _kernels.pop(_addr(buffer), None)
    if kernel is not None:
        _close_runner(kernel)


def _kernel_of(context: Any, node: Any) -> PartitionKernel | None:
    kernel = _kernels.get(_addr(node.user_data))
    if kernel is None:
        _report(context, "vnpu delegate: delegate node has no partition (its init failed)")
    return kernel


def _kernel_prepare(context: Any, node: Any) -> int:
    kernel = _kernel_of(context, node)
    if kernel is None:
        return K_TFLITE_ERROR
    # The runtime's shapes must still be the ones the partition was read with (no dynamic resizing).
    for t in (*kernel.graph.inputs, *kernel.graph.outputs):
        shape = tuple(_int_list(context.tensors[t].dims))
        if shape != kernel.graph.tensors[t].shape:
            _report(
                context,
                f"vnpu delegate: tensor {t} changed shape to {shape} after delegation "
                f"(was {kernel.graph.tensors[t].shape}); the NPU partition needs fixed shapes",
            )
            return K_TFLITE_ERROR
    if kernel.runner is None:
        state = kernel.delegate
        start = time.perf_counter()
        compiled, hit = compiler_bridge.compile_partition(
            kernel.graph, state.device, state.options.cache_dir, model=kernel.model_key or None
        )
        if not hit:
            _return_freed_memory()  # the compiler's temporaries, before the BOs take their place
        kernel.runner = compiler_bridge.make_runner(compiled, state.device)
        # The weights live in the runner's BO now: the compiled weights go with ``compiled``; of the
        # partition, invoke needs only its inputs' and outputs' records (shape, dtype), so the rest
        # (constants' views, per-channel scales, options) goes too.
        del compiled
        g = kernel.graph
        io = {t: dataclasses.replace(g.tensors[t], data=None) for t in (*g.inputs, *g.outputs)}
        kernel.graph = Graph(tensors=io, nodes=[], inputs=g.inputs, outputs=g.outputs)
        how = "loaded from the compile cache" if hit else "compiled"
        ms = 1000 * (time.perf_counter() - start)
        state.log(
            "verbose", f"vnpu delegate: NPU partition {kernel.handle}: {how} and uploaded in {ms:.1f} ms"
        )
    return K_TFLITE_OK


def _return_freed_memory() -> None:
    """Give memory the allocator holds but no longer uses back to the system (glibc's malloc_trim).

    A compile frees MBs of small and medium blocks that glibc keeps in its heap; without this they
    would still be resident when the weights BO is filled, and count twice in the peak."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            _malloc_trim = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):  # not glibc: nothing to do
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim: Any = None


def _tensor_view(context: Any, index: int, info: Any) -> np.ndarray:
    t = context.tensors[index]
    if not t.data:
        raise RuntimeError(f"tensor {index} ({info.name}) has no buffer at invoke")
    return np.frombuffer(_ffi.buffer(t.data, t.bytes), dtype=np.dtype(info.dtype)).reshape(info.shape)


def _kernel_invoke(context: Any, node: Any) -> int:
    kernel = _kernel_of(context, node)
    if kernel is None or kernel.runner is None:
        return K_TFLITE_ERROR
    g = kernel.graph
    inputs = {t: _tensor_view(context, t, g.tensors[t]) for t in g.inputs}
    outputs = {t: _tensor_view(context, t, g.tensors[t]) for t in g.outputs}
    compiler_bridge.run(kernel.runner, inputs, outputs)
    return K_TFLITE_OK


# --- binding ------------------------------------------------------------------------------------
def _guarded(name: str, fn: Any, failure: Any) -> Any:
    """Wrap a callback so no exception reaches C: report it to the runtime and return ``failure``."""

    def wrapper(context: Any, *args: Any) -> Any:
        try:
            return fn(context, *args)
        except Exception as e:  # noqa: BLE001 - the boundary with C: everything becomes a TfLite error
            message = f"vnpu delegate: {name}: {type(e).__name__}: {e}"
            try:
                _report(context, message)
            finally:
                traceback.print_exc(file=sys.stderr)
            return failure

    return wrapper


def install(ffi: Any, lib: Any) -> None:
    """Bind the Python implementations to libteflon.so's entry points and callbacks."""
    global _ffi, _lib
    _ffi, _lib = ffi, lib

    def create(keys: Any, values: Any, count: int, report_error: Any) -> Any:
        try:
            return create_delegate(keys, values, count, report_error)
        except Exception as e:  # noqa: BLE001 - never let load_delegate crash the process
            traceback.print_exc(file=sys.stderr)
            lib.vnpu_call_report_error(report_error, f"vnpu delegate: internal error: {e}".encode())
            return ffi.NULL

    def destroy(delegate: Any) -> None:
        try:
            destroy_delegate(delegate)
        except Exception:  # noqa: BLE001
            traceback.print_exc(file=sys.stderr)

    ffi.def_extern(name="tflite_plugin_create_delegate")(create)
    ffi.def_extern(name="tflite_plugin_destroy_delegate")(destroy)
    ffi.def_extern(name="vnpu_delegate_prepare", error=K_TFLITE_ERROR)(
        _guarded("Prepare", _delegate_prepare, K_TFLITE_ERROR)
    )
    ffi.def_extern(name="vnpu_kernel_init")(_guarded("init", _kernel_init, ffi.NULL))
    ffi.def_extern(name="vnpu_kernel_free")(_guarded("free", _kernel_free, None))
    ffi.def_extern(name="vnpu_kernel_prepare", error=K_TFLITE_ERROR)(
        _guarded("prepare", _kernel_prepare, K_TFLITE_ERROR)
    )
    ffi.def_extern(name="vnpu_kernel_invoke", error=K_TFLITE_ERROR)(
        _guarded("invoke", _kernel_invoke, K_TFLITE_ERROR)
    )
