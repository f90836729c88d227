"""The Python half of libLiteRtCompilerPlugin_Vnpu.so: LiteRT's Partition and Compile.

``Partition`` reads the subgraph through LiteRT's accessors (:mod:`litert_vendor.model_reader`) and
asks the project's partitioner (:func:`libaccel.compiler.partition.place`, the rules the TFLite
delegate uses) which ops run on the NPU; each NPU run becomes one LiteRT partition. ``Compile``
compiles each partition subgraph with libaccel's compiler into one bytecode module
(:mod:`litert_vendor.bytecode`) whose function is ``vnpu_partition_<i>``.

Errors go to stderr as one line (LiteRT's status codes carry no message) and LiteRT gets an error
status; nothing raises into C.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from libaccel.compiler import partition
from libaccel.compiler.lower import compile_partition
from litert_vendor import abi, bytecode
from litert_vendor.model_reader import SubgraphReader
from uapi import isa
from vnpu_common import config

LIBRARY = "libLiteRtCompilerPlugin_Vnpu.so"
ENV_REPORT = config.LITERT_REPORT.name  # 1: print the placement report of each Partition on stderr

STATUS_OK = 0
STATUS_INVALID_ARGUMENT = 1
STATUS_RUNTIME_FAILURE = 3
STATUS_COMPILATION = 504
STATUS_UNSUPPORTED_COMPILER_VERSION = 4001


@dataclass
class Plugin:
    reader: SubgraphReader


@dataclass
class _State:
    ffi: Any = None
    plugins: dict[int, Plugin] = field(default_factory=dict)
    next_handle: int = 0
    results: dict[int, list[Any]] = field(default_factory=dict)  # result address -> what it points to


_state = _State()


def _fail(message: str, status: int = STATUS_RUNTIME_FAILURE) -> int:
    print(f"{LIBRARY}: {message}", file=sys.stderr, flush=True)
    return status


def _soc_model_error(ffi: Any, soc_model: Any) -> str | None:
    if soc_model == ffi.NULL:
        return None
    name = ffi.string(soc_model).decode(errors="replace")
    if name in ("", abi.SOC_MODEL):
        return None
    return f"SoC model {name!r} is not vnpu's (it has one: {abi.SOC_MODEL!r})"


def partition_subgraph(reader: SubgraphReader, subgraph: Any) -> list[tuple[Any, int]]:
    """(LiteRtOp, partition number) of each op the partitioner puts on the NPU."""
    graph, ops, dynamic = reader.read(subgraph)
    rules = partition.Rules(dynamic=dynamic, strict=partition.strict_default())
    placed = partition.numbered(partition.place(graph, rules))
    if config.LITERT_REPORT.get():
        report = partition.format_report(
            placed, "vnpu LiteRT placement", len(partition.partition_runs(placed))
        )
        print(report, file=sys.stderr, flush=True)
    return [(ops[p.node], p.partition) for p in placed if p.npu and p.partition is not None]


def compile_subgraph(reader: SubgraphReader, subgraph: Any, function: str) -> bytes:
    """One partition subgraph, whole, as bytecode for DISPATCH_OP function ``function``."""
    graph, _ops, _dynamic = reader.read(subgraph)
    # Exclusive I/O: the dispatch library can then run a dma-buf tensor buffer in place, no COPY.
    compiled = compile_partition(
        graph, [n.index for n in graph.nodes], isa.SPEC.version, list(graph.outputs), exclusive_io=True
    )
    bound = {b.index for b in compiled.inputs}
    missing = sorted(bound - set(graph.inputs))
    if missing:
        raise ValueError(f"{function}: compiled inputs {missing} are not inputs of the partition")
    return bytecode.pack(function, graph.inputs, graph.outputs, compiled)


def install(ffi: Any, lib: Any) -> None:
    """Bind the extern "Python" callbacks (run once, by the library's init code)."""
    del lib
    _state.ffi = ffi

    @ffi.def_extern()
    def vnpu_plugin_create(context: Any) -> int:
        try:
            handle = _state.next_handle
            _state.next_handle += 1
            _state.plugins[handle] = Plugin(SubgraphReader(ffi, context))
            return handle
        except Exception as e:  # noqa: BLE001 - nothing may raise into LiteRT
            _fail(f"cannot create the plugin: {type(e).__name__}: {e}")
            return -1

    @ffi.def_extern()
    def vnpu_plugin_destroy(handle: int) -> None:
        _state.plugins.pop(handle, None)

    @ffi.def_extern()
    def vnpu_plugin_partition(handle: int, soc_model: Any, subgraph: Any, selected_ops: Any) -> int:
        plugin = _state.plugins.get(handle)
        if plugin is None:
            return _fail(f"no plugin {handle}", STATUS_INVALID_ARGUMENT)
        problem = _soc_model_error(ffi, soc_model)
        if problem:
            return _fail(problem, STATUS_UNSUPPORTED_COMPILER_VERSION)
        try:
            for op, number in partition_subgraph(plugin.reader, subgraph):
                status = plugin.reader.context.push_op(selected_ops, op, number)
                if status != 0:
                    return _fail(f"LiteRT's push_op failed with status {status}")
        except Exception as e:  # noqa: BLE001
            return _fail(f"Partition failed: {type(e).__name__}: {e}")
        return STATUS_OK

    @ffi.def_extern()
    def vnpu_plugin_compile(handle: int, soc_model: Any, partitions: Any, result: Any) -> int:
        plugin = _state.plugins.get(handle)
        if plugin is None:
            return _fail(f"no plugin {handle}", STATUS_INVALID_ARGUMENT)
        problem = _soc_model_error(ffi, soc_model)
        if problem:
            return _fail(problem, STATUS_UNSUPPORTED_COMPILER_VERSION)
        try:
            codes, names = [], []
            for i, subgraph in enumerate(plugin.reader.subgraphs(partitions)):
                name = f"vnpu_partition_{i}"
                codes.append(compile_subgraph(plugin.reader, subgraph, name))
                names.append(name)
        except Exception as e:  # noqa: BLE001
            return _fail(f"Compile failed: {type(e).__name__}: {e}", STATUS_COMPILATION)
        result[0] = _new_result(ffi, codes, names)
        return STATUS_OK

    @ffi.def_extern()
    def vnpu_plugin_destroy_result(result: Any) -> None:
        _state.results.pop(int(ffi.cast("uintptr_t", result)), None)


def _new_result(ffi: Any, codes: list[bytes], names: list[str]) -> Any:
    """A vnpu_compiled_result with one bytecode module and one call per partition, kept alive in
    ``_state.results`` until LiteRT destroys it."""
    n = len(codes)
    code_bufs = [ffi.from_buffer(c) for c in codes]
    name_bufs = [ffi.new("char[]", s.encode()) for s in names]
    keep: list[Any] = [codes, code_bufs, name_bufs]
    r = ffi.new("vnpu_compiled_result *")
    arrays = {
        "byte_code": ffi.new(
            "const void *[]", [ffi.cast("const void *", b) for b in code_bufs] or [ffi.NULL]
        ),
        "byte_code_size": ffi.new("size_t[]", [len(c) for c in codes] or [0]),
        "call_info": ffi.new("const char *[]", name_bufs or [ffi.NULL]),
        "call_info_size": ffi.new("size_t[]", [len(s) for s in names] or [0]),
        "call_byte_code": ffi.new("size_t[]", list(range(n)) or [0]),
    }
    for key, value in arrays.items():
        setattr(r, key, value)
        keep.append(value)
    r.num_byte_code = n
    r.num_calls = n
    keep.append(r)
    _state.results[int(ffi.cast("uintptr_t", r))] = keep
    return r
