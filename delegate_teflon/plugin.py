"""The delegate's logic: the Python side of libteflon.so's C entry points and callbacks.

Life cycle (TFLite's, as in Mesa's teflon ``tfl_device.c``):

1. ``tflite_plugin_create_delegate``: parse the options, open the device, hand back a zeroed
   ``TfLiteDelegate`` whose ``Prepare`` is :func:`_delegate_prepare`.
2. ``Prepare(context, delegate)``: read the graph, place each node (NPU or CPU, and why), print the
   placement report at ``log_level=verbose``, and give the NPU nodes to
   ``ReplaceNodeSubsetsWithDelegateKernels``; TFLite groups them into partitions, one kernel each.
3. kernel ``init``: record the partition (its nodes, inputs, outputs) from ``TfLiteDelegateParams``;
   kernel ``prepare``: compile it (libaccel.compiler, disk-cached); kernel ``invoke``: copy the inputs
   in, one submit, copy the outputs out. The first invoke is :func:`_kernel_invoke`'s, which
   prepares the others in the kernel's ``vnpu_partition`` for libteflon.so's C to run alone
   (``vnpu_invoke``; :func:`_kernel_run` is its submit on the shim).

Every callback is a cffi ``extern "Python"`` function, so it takes the GIL itself: TFLite's Python
``invoke()`` releases the GIL before calling into the runtime. An exception never crosses into C:
it becomes ``kTfLiteError`` plus a message through the runtime's ``ReportError``.

Signals: Python runs a signal's handler in the main thread at its next bytecode, which during a
delegated invoke is one of the invoke's callbacks. There the handler (``KeyboardInterrupt`` for
Ctrl-C) would break off the job midway, and its exception could only become ``kTfLiteError`` (a
``RuntimeError`` from ``invoke()``). So the invoke's callbacks hold the handlers back
(:func:`_holding_signals`), the invoke ends, and the handlers run in the caller's frame once
``invoke()`` has returned, as they would without the delegate (libteflon.so's ``vnpu_deferred``).
"""

from __future__ import annotations

import _signal  # signal's functions without the enum conversions, which cost 2-10x more
import ctypes
import dataclasses
import itertools
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from delegate_teflon import compiler_bridge
from delegate_teflon.context_reader import K_TFLITE_DYNAMIC, KNOWN_OPS, dynamic_tensors, read_context
from delegate_teflon.options import DelegateOptions, OptionError, parse_options
from delegate_teflon.placement import write_placement
from delegate_teflon.runtime_abi import RuntimeLayout, identify
from libaccel.backends.kernel import KernelBackend
from libaccel.compiler import partition
from libaccel.compiler.graph import Graph
from libaccel.compiler.partition import Placement
from libaccel.compiler.reference import annotate_reference
from libaccel.compiler.shape_folding import fold_shapes
from libaccel.job import run_failure
from vnpu_common import probe

K_TFLITE_OK = 0
K_TFLITE_ERROR = 1
# TfLiteDelegateFlags: the delegate takes graphs with dynamic tensors (the converter's shape
# subgraphs make some); it leaves the nodes whose shapes are not static on the CPU.
K_TFLITE_DELEGATE_FLAGS_ALLOW_DYNAMIC_TENSORS = 1

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
    # Per TfLiteContext (an interpreter may prepare several subgraphs): what Prepare made, held only
    # while ReplaceNodeSubsetsWithDelegateKernels creates the kernels.
    graphs: dict[int, PreparedGraph] = field(default_factory=dict)

    def log(self, level: str, message: str) -> None:
        if level == "info" and self.options.quiet:
            return
        if level == "verbose" and not self.options.verbose:
            return
        print(message, file=sys.stderr, flush=True)


@dataclass
class PreparedPartition:
    """A partition compiled and uploaded at delegate Prepare, waiting for its kernel's init."""

    graph: Graph  # its inputs' and outputs' records only
    runner: Any
    how: str  # "compiled" or "loaded from the compile cache"
    ms: float


@dataclass
class PreparedGraph:
    """The graph one delegate Prepare read (shape-folded) and the partitions it made ready."""

    graph: Graph
    model_key: str
    registration: int  # the runtime's TfLiteRegistration layout (runtime_abi)
    partitions: dict[tuple[int, ...], PreparedPartition] = field(default_factory=dict)


@dataclass
class PartitionKernel:
    """One delegate kernel: a partition of NPU nodes, compiled at its first prepare."""

    delegate: DelegateState
    handle: int
    graph: Graph  # the partition: its nodes, inputs (non-constant), outputs
    model_key: str = ""  # the whole model's compile-cache key, from which the partition's derives
    runner: Any = None
    error: str = ""
    invokes: int = 0
    # The kernel's vnpu_partition (TfLiteNode.user_data, owned by libteflon.so's C) and the invoke
    # prepared in it (_prepare_invoke): the runtime's buffers of the inputs then the outputs it was
    # made for, and the arrays it points into.
    partition: Any = None
    prepared: tuple[Any, ...] = ()
    arena: Any = None  # the arena's mapping as a char[] (keeps the copies' addresses alive)


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
_NO_PARTITION = "vnpu delegate: delegate node has no partition (its init failed)"


def _addr(ptr: Any) -> int:
    return int(_ffi.cast("uintptr_t", ptr))


def _report(context: Any, message: str) -> None:
    _lib.vnpu_report(context, message.encode())


def _open_device(options: DelegateOptions) -> Any:
    """The 'device' option's device, else the rule every tool has (libaccel.discovery.resolve):
    $VNPU_DEVICE, else the first kernel device, else the shim, said on stderr unless quiet. So a
    host that gives no options at all (Mesa's test harness) gets a working delegate."""
    from libaccel import Device

    return Device.open(options.device, quiet=options.quiet)


# --- exported entry points ---------------------------------------------------------------
def create_delegate(keys: Any, values: Any, count: int, report_error: Any) -> Any:
    def fail(message: str) -> Any:
        # Once: the host's report_error (load_delegate's ValueError in Python) shows it where the host
        # gives one; stderr only for a host that passes NULL for it.
        if report_error == _ffi.NULL:
            print(message, file=sys.stderr, flush=True)
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
        # No 'device' option: the error names where the default came from ($VNPU_DEVICE, or none found).
        which = f"device {options.device!r}" if options.device else "the device"
        return fail(f"vnpu delegate: cannot open {which}: {e}")
    struct = _ffi.new("TfLiteDelegate *")  # zeroed: no buffer handles, no opaque builder
    struct.Prepare = _lib.vnpu_delegate_prepare
    struct.flags = K_TFLITE_DELEGATE_FLAGS_ALLOW_DYNAMIC_TENSORS
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
    state = _delegates.get(_addr(delegate))
    if state is None:
        _report(context, "vnpu delegate: Prepare called with an unknown TfLiteDelegate")
        return K_TFLITE_ERROR
    try:
        prepared, npu_nodes = _plan_delegation(state, context)
    except Exception as e:  # noqa: BLE001 - nothing is delegated yet: the CPU runs the whole graph
        if state.options.strict:  # tests: a planner or compile error fails the interpreter's creation
            traceback.print_exc(file=sys.stderr)
            _report(context, f"vnpu delegate: Prepare failed in strict mode: {type(e).__name__}: {e}")
            return K_TFLITE_ERROR
        state.log(
            "info",
            f"vnpu delegate: Prepare failed ({type(e).__name__}: {e}); the whole graph runs on the CPU",
        )
        if state.options.verbose:
            traceback.print_exc(file=sys.stderr)
        return K_TFLITE_OK
    if not npu_nodes:
        return K_TFLITE_OK
    array = _ffi.new("TfLiteIntArray *", {"size": len(npu_nodes), "data": npu_nodes})
    # The runtime calls the kernels' init from inside this call; each takes its prepared partition,
    # and the whole graph goes after it.
    state.graphs[_addr(context)] = prepared
    try:
        status = _lib.vnpu_replace_nodes(context, prepared.registration, array, delegate)
    finally:
        del state.graphs[_addr(context)]
        for part in prepared.partitions.values():  # partitions no kernel took (none normally)
            if part.runner is not None:
                part.runner.close()
    if status != K_TFLITE_OK:
        _report(context, "vnpu delegate: ReplaceNodeSubsetsWithDelegateKernels failed")
    return status


def _plan_delegation(state: DelegateState, context: Any) -> tuple[PreparedGraph, list[int]]:
    """Read and fold the graph, place its nodes, compile and upload each NPU partition.

    Everything that can fail happens here, before any node is given to the NPU: a partition that
    does not compile or upload is named in one ``info`` line and its nodes stay on the CPU.
    """
    global _last_prepare
    layout = identify(_ffi, _lib, context)
    # The constants are views of the runtime's model buffer (no copy); a kept graph needs its own.
    raw = read_context(_ffi, context, layout, copy_constants=keep_last_graph)
    folded = fold_shapes(raw, dynamic_tensors(context, raw))
    graph = annotate_reference(folded.graph, layout.distribution)
    key = compiler_bridge.model_key(graph, state.device)
    checks = compiler_bridge.SupportChecks(key, state.options.cache_dir, state.options.strict)
    opts = state.options
    rules = partition.Rules(opts.allow_ops, opts.deny_ops, frozenset(folded.dynamic), strict=opts.strict)
    placements = partition.place(graph, rules, checks.check)
    checks.save()
    _last_prepare = PrepareRecord(graph if keep_last_graph else None, layout, placements)
    state.log("verbose", f"vnpu delegate: runtime {layout.describe()}")
    prepared = PreparedGraph(graph=graph, model_key=key, registration=layout.registration)
    npu = [p.node for p in placements if p.npu]
    preview = bool(context.PreviewDelegatePartitioning)
    while npu and preview:
        failed = None
        for nodes, inputs, outputs in _preview_partitions(context, npu):
            if nodes in prepared.partitions:
                continue
            try:
                prepared.partitions[nodes] = _prepare_partition(state, prepared, nodes, inputs, outputs)
            except Exception as e:  # noqa: BLE001 - any failure: these nodes stay on the CPU
                if opts.strict:
                    raise
                failed = (nodes, f"{type(e).__name__}: {e}")
                break
        if failed is None:
            break
        nodes, reason = failed
        ops = ", ".join(sorted({graph.node(n).op for n in nodes}))
        state.log("info", f"vnpu delegate: nodes {list(nodes)} ({ops}) stay on the CPU: {reason}")
        placements = partition.demote(placements, nodes, f"its partition failed: {reason}")
        npu = [n for n in npu if n not in nodes]
    _last_prepare = PrepareRecord(graph if keep_last_graph else None, layout, placements)
    title = f"vnpu delegate: placement ({layout.distribution})"
    state.log("verbose", partition.format_report(placements, title))
    if state.options.placement_file is not None:
        try:
            write_placement(state.options.placement_file, placements, layout.distribution)
        except OSError as e:
            state.log("info", f"vnpu delegate: cannot write the placement file: {e}")
    if not npu:
        state.log(
            "info",
            f"vnpu delegate: no node of this graph ({len(placements)} nodes) can run on the "
            "NPU; the whole model runs on the CPU (log_level=verbose says why)",
        )
    return prepared, npu


def _preview_partitions(
    context: Any, nodes: list[int]
) -> list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    """The partitions TFLite will make of ``nodes`` (its PreviewDelegatePartitioning)."""
    array = _ffi.new("TfLiteIntArray *", {"size": len(nodes), "data": nodes})
    params = _ffi.new("TfLiteDelegateParams **")
    count = _ffi.new("int *")
    if context.PreviewDelegatePartitioning(context, array, params, count) != K_TFLITE_OK:
        raise RuntimeError("TfLiteContext.PreviewDelegatePartitioning failed")
    out = []
    for i in range(count[0]):
        p = params[0][i]
        out.append(
            (
                tuple(sorted(_int_list(p.nodes_to_replace))),
                tuple(_int_list(p.input_tensors)),
                tuple(_int_list(p.output_tensors)),
            )
        )
    return out


def _partition_graph(
    whole: Graph, nodes: tuple[int, ...], inputs: tuple[int, ...], outputs: tuple[int, ...]
) -> Graph:
    """One partition's graph: its nodes, its non-constant inputs, its outputs, own tensor records."""
    node_ids = set(nodes)
    part_nodes = [n for n in whole.nodes if n.index in node_ids]
    ins = tuple(t for t in inputs if t >= 0 and not whole.tensors[t].is_const)
    used = {t for n in part_nodes for t in (*n.inputs, *n.outputs) if t >= 0}
    # Own copies of the records: the constants (views of the model) go once the weights are uploaded.
    tensors = {t: dataclasses.replace(whole.tensors[t]) for t in sorted(used)}
    return Graph(tensors=tensors, nodes=part_nodes, inputs=ins, outputs=tuple(outputs))


def _io_only(g: Graph) -> Graph:
    """Of a compiled partition, invoke needs only its inputs' and outputs' records (shape, dtype)."""
    io = {t: dataclasses.replace(g.tensors[t], data=None) for t in (*g.inputs, *g.outputs)}
    return Graph(tensors=io, nodes=[], inputs=g.inputs, outputs=g.outputs)


def _compile_and_upload(state: DelegateState, part: Graph, model_key: str) -> tuple[Any, str, float]:
    """Compile (through the cache) and upload one partition: (runner, how, milliseconds)."""
    start = time.perf_counter()
    compiled, hit = compiler_bridge.compile_partition(
        part, state.device, state.options.cache_dir, model=model_key or None
    )
    if not hit:
        _return_freed_memory()  # the compiler's temporaries, before the BOs take their place
    runner = compiler_bridge.make_runner(compiled, state.device)
    # The weights live in the runner's BO now; the compiled weights go with ``compiled``.
    del compiled
    how = "loaded from the compile cache" if hit else "compiled"
    return runner, how, 1000 * (time.perf_counter() - start)


def _prepare_partition(
    state: DelegateState,
    prepared: PreparedGraph,
    nodes: tuple[int, ...],
    inputs: tuple[int, ...],
    outputs: tuple[int, ...],
) -> PreparedPartition:
    part = _partition_graph(prepared.graph, nodes, inputs, outputs)
    runner, how, ms = _compile_and_upload(state, part, prepared.model_key)
    return PreparedPartition(graph=_io_only(part), runner=runner, how=how, ms=ms)


# --- delegate kernel callbacks ---------------------------------------------------------------
def _int_list(ptr: Any) -> list[int]:
    return [ptr.data[i] for i in range(ptr.size)] if ptr else []


def _kernel_init(context: Any, buffer: Any, length: int) -> Any:
    params = _ffi.cast("TfLiteDelegateParams *", buffer)
    state = _delegates.get(_addr(params.delegate))
    if state is None or _addr(context) not in state.graphs:
        _report(context, "vnpu delegate: kernel init for a delegate or graph it did not prepare")
        return _ffi.NULL
    prepared = state.graphs[_addr(context)]
    nodes = tuple(sorted(_int_list(params.nodes_to_replace)))
    ready = prepared.partitions.pop(nodes, None)
    with _lock:
        handle = next(_handles)
        if ready is not None:
            kernel = PartitionKernel(delegate=state, handle=handle, graph=ready.graph, runner=ready.runner)
        else:  # no preview of this partition (a runtime without it): compiled at the kernel's prepare
            part = _partition_graph(
                prepared.graph,
                nodes,
                tuple(_int_list(params.input_tensors)),
                tuple(_int_list(params.output_tensors)),
            )
            kernel = PartitionKernel(delegate=state, handle=handle, graph=part, model_key=prepared.model_key)
        _kernels[handle] = kernel
    state.log(
        "verbose",
        f"vnpu delegate: NPU partition {handle}: nodes {list(nodes)}, "
        f"inputs {list(kernel.graph.inputs)}, outputs {list(kernel.graph.outputs)}",
    )
    if ready is not None:
        state.log(
            "verbose", f"vnpu delegate: NPU partition {handle}: {ready.how} and uploaded in {ready.ms:.1f} ms"
        )
    return _ffi.cast("void *", handle)


def _close_runner(kernel: PartitionKernel) -> None:
    """Free the partition's BOs now (weights, arena, stream), not when the device closes."""
    _unprepare(kernel)
    runner, kernel.runner = kernel.runner, None
    kernel.arena = None
    if runner is not None and not kernel.delegate.device.backend.closed:
        runner.close()


def _kernel_free(context: Any, buffer: Any) -> None:
    with _lock:
        kernel = _kernels.pop(_addr(buffer), None)
    if kernel is not None:
        _close_runner(kernel)


def _kernel_of(context: Any, node: Any) -> PartitionKernel | None:
    partition = _ffi.cast("vnpu_partition *", node.user_data)
    kernel = _kernels.get(partition.handle) if partition != _ffi.NULL else None
    if kernel is None:
        _report(context, _NO_PARTITION)
        return None
    kernel.partition = partition
    return kernel


def _kernel_prepare(context: Any, node: Any) -> int:
    kernel = _kernel_of(context, node)
    if kernel is None:
        return K_TFLITE_ERROR
    _unprepare(kernel)  # shapes and buffers may change from here on: the next invoke is Python's
    # The runtime's input shapes must still be the ones the partition was compiled for.
    for t in kernel.graph.inputs:
        shape = tuple(_int_list(context.tensors[t].dims))
        if shape != kernel.graph.tensors[t].shape:
            _report(
                context,
                f"vnpu delegate: tensor {t} changed shape to {shape} after delegation "
                f"(was {kernel.graph.tensors[t].shape}); the NPU partition needs fixed shapes",
            )
            return K_TFLITE_ERROR
    # The outputs get their static shapes: a tensor TFLite made dynamic (a RESHAPE's output whose
    # shape was data) or whose model shape is a placeholder is sized here, so the CPU nodes after
    # the partition and the interpreter see its real shape.
    for t in kernel.graph.outputs:
        want = kernel.graph.tensors[t].shape
        tensor = context.tensors[t]
        if tensor.allocation_type == K_TFLITE_DYNAMIC or tuple(_int_list(tensor.dims)) != want:
            dims = _ffi.new("int[]", list(want) or [0])
            if _lib.vnpu_resize_tensor(context, t, len(want), dims) != K_TFLITE_OK:
                _report(context, f"vnpu delegate: cannot resize output tensor {t} to {list(want)}")
                return K_TFLITE_ERROR
    if kernel.runner is None:
        state = kernel.delegate
        kernel.runner, how, ms = _compile_and_upload(state, kernel.graph, kernel.model_key)
        kernel.graph = _io_only(kernel.graph)
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


def _unprepare(kernel: PartitionKernel) -> None:
    """The next invoke of ``kernel`` is Python's (which prepares the invoke again)."""
    if kernel.partition is not None:
        kernel.partition.ready = 0
    kernel.prepared = ()


def _prepare_invoke(context: Any, kernel: PartitionKernel, buffers: list[Any]) -> None:
    """Prepare the invoke for the runtime's buffers ``buffers`` (inputs, then outputs) in the
    kernel's vnpu_partition: a memcpy of each tensor's bytes to or from its place in the arena
    (same dtype and shape, both dense), and the SUBMIT and BO_WAIT arguments. From the next invoke
    on, C runs it alone (libteflon.so's vnpu_invoke) until the runtime moves a buffer or prepares
    the kernel again; with ``log_level=verbose`` every invoke stays Python's, to time its parts.
    The vnpu_partition is the one record of the prepared invoke: Python's invoke reads it too."""
    g, runner, p = kernel.graph, kernel.runner, kernel.partition
    p.ready = 0
    if kernel.arena is None:
        kernel.arena = _ffi.from_buffer("char[]", runner.arena.map())
    io = (*g.inputs, *g.outputs)
    copies = _ffi.new("vnpu_copy[]", len(io))
    for k, (t, data) in enumerate(zip(io, buffers, strict=True)):
        info = g.tensors[t]
        offset, nbytes = runner.io_span(t)
        if data == _ffi.NULL:
            raise RuntimeError(f"tensor {t} ({info.name}) has no buffer at invoke")
        if context.tensors[t].bytes != nbytes:
            raise RuntimeError(
                f"tensor {t} ({info.name}) has {context.tensors[t].bytes} bytes, the partition {nbytes}"
            )
        arena, tensor = kernel.arena + offset, _ffi.cast("char *", data)
        copies[k].dst, copies[k].src = (arena, tensor) if k < len(g.inputs) else (tensor, arena)
        copies[k].size = nbytes
    tensors, data = _ffi.new("int[]", io), _ffi.new("void *[]", buffers)
    kernel.prepared = (copies, tensors, data)
    p.io_count, p.io_tensors, p.io_data = len(io), tensors, data
    p.in_count, p.copies_in = len(g.inputs), copies
    p.out_count, p.copies_out = len(g.outputs), copies + len(g.inputs)
    p.submit, p.wait, p.timeout_ns = runner.submit_arg, runner.wait_arg, runner.prepared.timeout_ns
    backend = kernel.delegate.device.backend
    p.fd = backend.fileno() if isinstance(backend, KernelBackend) else -1
    p.ready = not kernel.delegate.options.verbose


def _copy(copies: Any, count: int) -> None:
    for k in range(count):
        _ffi.memmove(copies[k].dst, copies[k].src, copies[k].size)


def _kernel_invoke(context: Any, node: Any) -> int:
    """Python's invoke: the first of a kernel, every one at log_level=verbose, and the one after
    the runtime moved a buffer (vnpu_invoke in C runs the others)."""
    probe.mark("delegate.entry")
    kernel = _kernel_of(context, node)
    if kernel is None or kernel.runner is None:
        return K_TFLITE_ERROR
    g = kernel.graph
    start = time.perf_counter()
    tensors = context.tensors
    buffers = [tensors[t].data for t in (*g.inputs, *g.outputs)]
    p = kernel.partition
    if not kernel.prepared or any(b != p.io_data[k] for k, b in enumerate(buffers)):
        _prepare_invoke(context, kernel, buffers)
    _copy(p.copies_in, p.in_count)
    t1 = time.perf_counter()
    kernel.runner.submit_and_wait()
    t2 = time.perf_counter()
    _copy(p.copies_out, p.out_count)
    probe.mark("delegate.exit")
    kernel.invokes += 1
    if kernel.delegate.options.verbose:
        t3 = time.perf_counter()
        kernel.delegate.log(
            "verbose",
            f"vnpu delegate: NPU partition {kernel.handle}: invoke {kernel.invokes} took "
            f"{1000 * (t3 - start):.2f} ms (copy in {1000 * (t1 - start):.2f}, NPU job "
            f"{1000 * (t2 - t1):.2f}, copy out {1000 * (t3 - t2):.2f})",
        )
    return K_TFLITE_OK


def _kernel_run(context: Any, handle: int) -> int:
    """The job of C's invoke on a backend C cannot reach by itself (the shim): SUBMIT and wait."""
    probe.mark("delegate.entry")
    kernel = _kernels.get(handle)
    if kernel is None or kernel.runner is None:
        _report(context, _NO_PARTITION)
        return K_TFLITE_ERROR
    kernel.runner.submit_and_wait()
    probe.mark("delegate.exit")
    return K_TFLITE_OK


def _kernel_failed(context: Any, handle: int, result: int, step: int) -> int:
    """C's run of the job failed: ``result`` and ``step`` are vnpu_prepared_run()'s, whose wait
    struct is the runner's. Raises what Python's invoke would have, for _guarded to report."""
    kernel = _kernels.get(handle)
    if kernel is None or kernel.runner is None:
        _report(context, _NO_PARTITION)
        return K_TFLITE_ERROR
    raise run_failure(result, step, kernel.runner.wait_arg)


def prepared_invokes() -> dict[int, int]:
    """Each live kernel's handle -> the invokes libteflon.so's C ran without Python (for tests and
    tools in the same process)."""
    with _lock:
        return {h: int(k.partition.c_invokes) for h, k in _kernels.items() if k.partition is not None}


# --- signals during an invoke -----------------------------------------------------------------
_MAIN_THREAD = threading.main_thread().ident
_SIGNALS = tuple(sorted(int(s) for s in signal.valid_signals()))
# What waits for the end of the invoke: a signal whose handler was held back, or the exception a
# handler raised as a callback began. Only the main thread (the one that runs handlers) adds to it.
_held: list[int | BaseException] = []
_holding = False  # the main thread is inside an invoke callback
_originals: dict[int, Any] = {}  # signal -> the handler _hold stands in for


def _defer(what: int | BaseException) -> None:
    """Keep ``what`` for :func:`_run_deferred`; libteflon.so ends the invoke and calls it after."""
    _held.append(what)
    if not _lib.vnpu_deferred:
        _lib.vnpu_deferred = 1


def _hold(signum: int, frame: Any) -> None:
    """The handler of every signal Python handles while an invoke callback runs."""
    if _holding:
        _defer(signum)
    else:  # its original's restore was itself interrupted: stand in for it
        _originals[signum](signum, frame)


def _run_deferred() -> None:
    """Run what the invoke held back, in the caller's frame (libteflon.so's pending call, after the
    runtime's invoke returned): each signal's handler as it is now, or the exception."""
    held = list(_held)
    _held.clear()
    for what in held:
        if isinstance(what, BaseException):
            raise what
        handler = signal.getsignal(what)
        if callable(handler):
            handler(what, sys._getframe(1))


def _defer_exception(kind: Any, value: BaseException, tb: Any) -> None:
    """cffi's onerror for the invoke callbacks: an exception outside :func:`_guarded`'s, which is a
    signal handler's as the callback began (its first bytecode runs the handlers due)."""
    _defer(value)


def _holding_signals(fn: Any) -> Any:
    """Run ``fn`` with every Python signal handler replaced by :func:`_hold`, so no handler runs in
    the middle of the job (an interrupted shim job would leave its core busy and its file waiting)."""

    def wrapper(context: Any, *args: Any) -> Any:
        global _holding
        if threading.get_ident() != _MAIN_THREAD:  # no handler runs in this thread
            return fn(context, *args)
        swapped: list[int] = []
        try:
            for signum in _SIGNALS:
                handler = _signal.getsignal(signum)
                if handler is _hold:  # left by an interrupted restore: _originals has the handler
                    swapped.append(signum)
                elif callable(handler):
                    _originals[signum] = handler
                    _signal.signal(signum, _hold)
                    swapped.append(signum)
            _holding = True
            return fn(context, *args)
        finally:
            _holding = False
            for signum in swapped:
                _signal.signal(signum, _originals[signum])

    return wrapper


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
            message = f"vnpu delegate: internal error: {type(e).__name__}: {e}"
            print(message, file=sys.stderr, flush=True)
            lib.vnpu_call_report_error(report_error, message.encode())
            return ffi.NULL

    def destroy(delegate: Any) -> None:
        try:
            destroy_delegate(delegate)
        except Exception:  # noqa: BLE001
            traceback.print_exc(file=sys.stderr)

    ffi.def_extern(name="vnpu_plugin_create")(create)
    ffi.def_extern(name="vnpu_plugin_destroy")(destroy)
    ffi.def_extern(name="vnpu_delegate_prepare", error=K_TFLITE_ERROR)(
        _guarded("Prepare", _delegate_prepare, K_TFLITE_ERROR)
    )
    ffi.def_extern(name="vnpu_kernel_init")(_guarded("init", _kernel_init, ffi.NULL))
    ffi.def_extern(name="vnpu_kernel_free")(_guarded("free", _kernel_free, None))
    ffi.def_extern(name="vnpu_kernel_prepare", error=K_TFLITE_ERROR)(
        _guarded("prepare", _kernel_prepare, K_TFLITE_ERROR)
    )
    # The invoke's callbacks: a signal's handler runs after the invoke (see "Signals" above).
    for name, fn in (
        ("vnpu_kernel_invoke", _kernel_invoke),
        ("vnpu_kernel_run", _kernel_run),
        ("vnpu_kernel_failed", _kernel_failed),
    ):
        ffi.def_extern(name=name, error=K_TFLITE_ERROR, onerror=_defer_exception)(
            _holding_signals(_guarded("invoke", fn, K_TFLITE_ERROR))
        )
