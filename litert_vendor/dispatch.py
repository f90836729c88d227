"""The Python half of libLiteRtDispatch_Vnpu.so: LiteRT's dispatch API on a vnpu device.

* device context: one open :class:`~libaccel.device.Device`, chosen by the one device rule
  (:func:`libaccel.discovery.resolve`): the ``device`` of the ``vnpu`` opaque options LiteRT passes
  (:func:`vendor_options`), else ``$VNPU_DEVICE``, else the first kernel device, else the shim;
* invocation context: a DISPATCH_OP's bytecode (:mod:`litert_vendor.bytecode`) loaded once into a
  :class:`~libaccel.compiler.runner.PartitionRunner` (weights, arena and command stream BOs);
* tensor buffers: host memory, copied into the arena before the job and out of it after; a
  dma-buf (vnpu.ko only) imported by PRIME once at registration, its bytes never touched by the CPU:
  the partition reads an input from, and writes an output to, its dma-buf in place (the stream's
  addresses of that tensor moved into the imported BO, :class:`~libaccel.compiler.relocation.Moved`)
  when the tensor has its arena bytes to itself (``IoBinding.exclusive``); otherwise the invoke's
  job COPYs it into the arena first or out of it last (:func:`dmabuf_stream`). The shim has no
  PRIME import: it refuses them.

Errors go to stderr as one line and LiteRT gets an error status; nothing raises into C.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from libaccel import discovery
from libaccel.bo import BufferObject
from libaccel.compiler.relocation import Moved, Region, relocate
from libaccel.compiler.runner import PartitionRunner
from libaccel.device import Device
from libaccel.job import Job, JobBo
from litert_vendor import bytecode
from uapi import isa

LIBRARY = "libLiteRtDispatch_Vnpu.so"

STATUS_OK = 0
STATUS_INVALID_ARGUMENT = 1
STATUS_RUNTIME_FAILURE = 3
STATUS_UNSUPPORTED = 5
STATUS_NOT_FOUND = 6
STATUS_INCOMPATIBLE_BYTECODE = 4002
_HOST_MEMORY = 1  # kLiteRtTensorBufferTypeHostMemory
_DMA_BUF = 4  # kLiteRtTensorBufferTypeDmaBuf
_UINT8 = isa.SPEC.dtypes["UINT8"].code
_LOCK_READ, _LOCK_WRITE = 0, 1


# The payload identifier of vnpu's entry in LiteRT's opaque options (LiteRtCreateOpaqueOptions).
OPTIONS_IDENTIFIER = "vnpu"
OPTION_KEYS = ("device",)


@dataclass(frozen=True)
class VendorOptions:
    """vnpu's per-model options: the TFLite delegate's keys, with the same meaning."""

    device: str | None = None  # a node path, "kernel" or "shim"; None: the device rule's default


def parse_options(text: str) -> VendorOptions:
    """The payload of the ``vnpu`` opaque options: a NUL-terminated string of ``key=value`` items,
    separated by ``;`` or newlines (``"device=/dev/accel/accel0"``). Raises ValueError naming an
    unknown key or an item without ``=``."""
    values: dict[str, str] = {}
    for item in text.replace("\n", ";").split(";"):
        item = item.strip()
        if not item:
            continue
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq:
            raise ValueError(f"vnpu option {item!r} is not key=value")
        if key not in OPTION_KEYS:
            raise ValueError(f"unknown vnpu option {key!r} (known: {', '.join(OPTION_KEYS)})")
        values[key] = value.strip()
    return VendorOptions(device=values.get("device") or None)


@dataclass
class Registered:
    """A registered tensor buffer: LiteRT's, and for a dma-buf the BO imported over its pages."""

    buffer: Any  # LiteRtTensorBuffer
    imported: BufferObject | None = None
    offset: int = 0  # where the tensor starts in the dma-buf


@dataclass
class DeviceContext:
    device: Device
    runtime: Any  # const LiteRtRuntimeContext *
    buffers: dict[int, Registered] = field(default_factory=dict)  # by LiteRtTensorBufferHandle
    next_buffer: int = 1


def _span_tensor(slot: int, va: int, nbytes: int) -> bytes:
    # ``nbytes`` contiguous bytes as one [1, 1, 1, nbytes] uint8 tensor: COPY moves them as they are.
    return isa.encode(
        "TENSOR", slot=slot, dtype=_UINT8, va=va, n=1, h=1, w=1, c=nbytes,
        stride_n=nbytes, stride_h=nbytes, stride_w=nbytes, stride_c=1, zero_point=0,
    )  # fmt: skip


def dmabuf_stream(
    stream: bytes, copies_in: list[tuple[int, int, int]], copies_out: list[tuple[int, int, int]]
) -> bytes:
    """``stream`` (VAs patched in, ending in END) with COPYs around it: each (src VA, dst VA, bytes)
    of ``copies_in`` before it, of ``copies_out`` after its last instruction. The partition's own
    instructions define every slot they use before using it, so slots 0 and 1 are free here."""
    end = isa.encode("END")
    if not stream.endswith(end):
        raise DispatchError(
            "the partition's command stream does not end in END", STATUS_INCOMPATIBLE_BYTECODE
        )

    def copies(spans: list[tuple[int, int, int]]) -> bytes:
        return b"".join(
            _span_tensor(0, src, n) + _span_tensor(1, dst, n) + isa.encode("COPY", src=0, dst=1)
            for src, dst, n in spans
        )

    return copies(copies_in) + stream[: -len(end)] + copies(copies_out) + end


@dataclass
class DmabufJob:
    """The job an invocation runs on its dma-buf tensor buffers, for one set of attached buffers."""

    key: tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]  # (inputs, outputs) attached
    cmd: BufferObject
    job: Job


@dataclass
class Invocation:
    device: DeviceContext
    code: bytecode.Bytecode
    runner: PartitionRunner
    inputs: dict[int, int] = field(default_factory=dict)  # DISPATCH_OP input -> buffer handle
    outputs: dict[int, int] = field(default_factory=dict)
    dmabuf_job: DmabufJob | None = None

    def close_dmabuf_job(self) -> None:
        if self.dmabuf_job is not None:
            self.dmabuf_job.cmd.close()
            self.dmabuf_job = None

    def close(self) -> None:
        self.close_dmabuf_job()
        self.runner.close()


@dataclass
class _State:
    devices: dict[int, DeviceContext] = field(default_factory=dict)
    invocations: dict[int, Invocation] = field(default_factory=dict)
    next_handle: int = 1
    options: VendorOptions = field(default_factory=VendorOptions)


_state = _State()


class DispatchError(Exception):
    def __init__(self, message: str, status: int = STATUS_RUNTIME_FAILURE) -> None:
        super().__init__(message)
        self.status = status


def _fail(message: str, status: int) -> int:
    print(f"{LIBRARY}: {message}", file=sys.stderr, flush=True)
    return status


def _guarded(fn: Any) -> Any:
    """Run ``fn``; turn any exception into one stderr line and a LiteRT status."""

    def wrapper(*args: Any) -> int:
        try:
            fn(*args)
        except DispatchError as e:
            return _fail(str(e), e.status)
        except bytecode.BytecodeError as e:
            return _fail(str(e), STATUS_INCOMPATIBLE_BYTECODE)
        except Exception as e:  # noqa: BLE001 - nothing may raise into LiteRT
            return _fail(f"{fn.__name__}: {type(e).__name__}: {e}", STATUS_RUNTIME_FAILURE)
        return STATUS_OK

    wrapper.__name__ = fn.__name__
    return wrapper


def _new_handle() -> int:
    handle = _state.next_handle
    _state.next_handle += 1
    return handle


def _key(ffi: Any, handle: Any) -> int:
    return int(ffi.cast("uintptr_t", handle))


def install(ffi: Any, lib: Any) -> None:
    """Bind the extern "Python" callbacks (run once, by the library's init code)."""
    del lib

    def device_of(handle: Any) -> DeviceContext:
        ctx = _state.devices.get(_key(ffi, handle))
        if ctx is None:
            raise DispatchError("no such device context", STATUS_INVALID_ARGUMENT)
        return ctx

    def invocation_of(handle: Any) -> Invocation:
        inv = _state.invocations.get(_key(ffi, handle))
        if inv is None:
            raise DispatchError("no such invocation context", STATUS_INVALID_ARGUMENT)
        return inv

    def check_runtime(runtime: Any) -> None:
        header = runtime.abi_header
        if header.major_version != 1 or header.struct_size < 400:
            raise DispatchError(
                f"LiteRT's runtime context is ABI {header.major_version}.{header.minor_version}, "
                f"{header.struct_size} bytes; this library needs ABI 1.x, at least 400 bytes (LiteRT 2.3)",
                4000,
            )

    def vendor_options(runtime: Any, options: Any) -> VendorOptions:
        """The ``vnpu`` entry of ``options``' opaque options, parsed; none there: the defaults."""
        if options == ffi.NULL:
            return VendorOptions()
        opaque = ffi.new("LiteRtOpaqueOptions *")
        if runtime.get_opaque_options(options, opaque) != 0 or opaque[0] == ffi.NULL:
            return VendorOptions()
        payload = ffi.new("void **")
        if runtime.find_opaque_options_data(opaque[0], OPTIONS_IDENTIFIER.encode(), payload) != 0:
            return VendorOptions()  # kLiteRtStatusErrorNotFound: no vnpu entry
        if payload[0] == ffi.NULL:
            raise DispatchError("the vnpu opaque options have no payload (give a key=value string)", 1)
        try:
            return parse_options(ffi.string(ffi.cast("const char *", payload[0])).decode())
        except (ValueError, UnicodeDecodeError) as e:
            raise DispatchError(str(e), STATUS_INVALID_ARGUMENT) from None

    @ffi.def_extern(error=STATUS_RUNTIME_FAILURE)
    @_guarded
    def vnpu_dispatch_initialize(runtime: Any, environment: Any, options: Any) -> None:
        check_runtime(runtime)
        _state.options = vendor_options(runtime, options)

    @ffi.def_extern(error=STATUS_RUNTIME_FAILURE)
    @_guarded
    def vnpu_dispatch_device_context_create(runtime: Any, options: Any, out: Any) -> None:
        check_runtime(runtime)
        # The device context's own options win over those LiteRT gave at initialization.
        chosen = vendor_options(runtime, options)
        which = chosen.device if chosen.device is not None else _state.options.device
        try:
            device = Device.open(discovery.resolve(which))
        except OSError as e:
            named = f" {which!r}" if which else ""
            raise DispatchError(f"cannot open the vnpu device{named}: {e}", STATUS_NOT_FOUND) from None
        handle = _new_handle()
        _state.devices[handle] = DeviceContext(device, runtime)
        out[0] = ffi.cast("LiteRtDispatchDeviceContext", handle)

    @ffi.def_extern(error=STATUS_RUNTIME_FAILURE)
    @_guarded
    def vnpu_dispatch_device_context_destroy(handle: Any) -> None:
        ctx = _state.devices.pop(_key(ffi, handle), None)
        if ctx is not None:
            for key, inv in list(_state.invocations.items()):
                if inv.device is ctx:
                    inv.close()
                    del _state.invocations[key]
            ctx.device.close()

    def requirements(inv: Invocation, tensor: int, what: str, tensor_type: Any, out: Any) -> None:
        try:
            binding = (
                inv.runner.compiled.input(tensor) if what == "input" else inv.runner.compiled.output(tensor)
            )
            nbytes = binding.nbytes
        except KeyError:
            nbytes = 0  # an input the partition does not read: any buffer does
        if tensor_type != ffi.NULL and nbytes:
            layout = tensor_type.layout
            shape = tuple(int(layout.dimensions[i]) for i in range(layout.rank))
            if int(np.prod(shape, dtype=np.int64)) != int(np.prod(binding.shape, dtype=np.int64)):
                raise DispatchError(
                    f"{inv.code.function} {what} tensor {tensor} has shape {list(shape)}; it was compiled "
                    f"for {list(binding.shape)} (compile the model again for the new shape)",
                    STATUS_UNSUPPORTED,
                )
        types = ffi.new("LiteRtTensorBufferType[1]", [_HOST_MEMORY])
        status = inv.device.runtime.create_tensor_buffer_requirements(1, types, nbytes, 0, ffi.NULL, out)
        if status != 0:
            raise DispatchError(f"LiteRT's create_tensor_buffer_requirements failed with status {status}")

    def io_tensor(inv: Invocation, index: int, what: str) -> int:
        order = inv.code.inputs if what == "input" else inv.code.outputs
        if not 0 <= index < len(order):
            raise DispatchError(f"{inv.code.function} has {len(order)} {what}s, no {what} {index}", 1000)
        return order[index]

    @ffi.def_extern(error=STATUS_RUNTIME_FAILURE)
    @_guarded
    def vnpu_dispatch_get_input_requirements(handle: Any, index: int, tensor_type: Any, out: Any) -> None:
        inv = invocation_of(handle)
        requirements(inv, io_tensor(inv, index, "input"), "input", tensor_type, out)

    @ffi.def_extern(error=STATUS_RUNTIME_FAILURE)
    @_guarded
    def vnpu_dispatch_get_output_requirements(handle: Any, index: int, tensor_type: Any, out: Any) -> None:
        inv = invocation_of(handle)
        requirements(inv, io_tensor(inv, index, "output"), "output", tensor_type, out)

    @ffi.def_extern(error=STATUS_RUNTIME_FAILURE)
    @_guarded
    def vnpu_dispatch_register_tensor_buffer(handle: Any, buffer: Any, out: Any) -> None:
        ctx = device_of(handle)
        kind = ffi.new("LiteRtTensorBufferType *")
        if ctx.runtime.get_tensor_buffer_type(buffer, kind) != 0:
            raise DispatchError("LiteRT's get_tensor_buffer_type failed")
        if kind[0] == _HOST_MEMORY:
            registered = Registered(buffer)
        elif kind[0] == _DMA_BUF:
            registered = import_dmabuf(ctx, buffer)
        else:
            raise DispatchError(
                f"tensor buffer type {int(kind[0])} is not supported: this library takes host memory (1) "
                "and, on vnpu.ko, dma-buf (4)",
                STATUS_UNSUPPORTED,
            )
        number = ctx.next_buffer
        ctx.next_buffer += 1
        ctx.buffers[number] = registered
        out[0] = number

    def import_dmabuf(ctx: DeviceContext, buffer: Any) -> Registered:
        if ctx.device.kind == discovery.SHIM:
            raise DispatchError(
                "a dma-buf tensor buffer needs PRIME import, which the in-process shim does not have (its "
                "device reaches only its own memory): use vnpu.ko (a /dev/accel node) or host-memory buffers",
                STATUS_UNSUPPORTED,
            )
        addr, fd, offset = ffi.new("void **"), ffi.new("int *"), ffi.new("size_t *")
        status = ctx.runtime.get_tensor_buffer_dma_buf_buffer(buffer, addr, fd)
        if status != 0:
            raise DispatchError(f"LiteRT's get_tensor_buffer_dma_buf_buffer failed with status {status}")
        if ctx.runtime.get_tensor_buffer_offset(buffer, offset) != 0:
            raise DispatchError("LiteRT's get_tensor_buffer_offset failed")
        try:
            bo = ctx.device.import_dmabuf(int(fd[0]))
        except OSError as e:
            raise DispatchError(
                f"PRIME import of dma-buf fd {int(fd[0])} failed: {e}", STATUS_RUNTIME_FAILURE
            ) from None
        return Registered(buffer, bo, int(offset[0]))

    @ffi.def_extern(error=STATUS_RUNTIME_FAILURE)
    @_guarded
    def vnpu_dispatch_unregister_tensor_buffer(handle: Any, buffer: int) -> None:
        registered = device_of(handle).buffers.pop(int(buffer), None)
        if registered is None:
            raise DispatchError(f"no tensor buffer {int(buffer)} is registered", STATUS_NOT_FOUND)
        if registered.imported is not None:
            registered.imported.close()

    @ffi.def_extern(error=STATUS_RUNTIME_FAILURE)
    @_guarded
    def vnpu_dispatch_invocation_context_create(
        runtime: Any, handle: Any, exec_type: int, mem: Any, function: Any, n_in: int, n_out: int, out: Any
    ) -> None:
        ctx = device_of(handle)
        if exec_type != ffi.integer_const("kLiteRtDispatchExecutableTypeMlModel"):
            raise DispatchError(
                f"executable type {exec_type} is not vnpu bytecode (2, an ML model)", STATUS_UNSUPPORTED
            )
        if mem == ffi.NULL or mem.base_addr == ffi.NULL:
            raise DispatchError("no bytecode buffer", STATUS_INVALID_ARGUMENT)
        data = ffi.buffer(ffi.cast("const char *", mem.base_addr) + mem.offset, mem.size)
        code = bytecode.unpack(memoryview(data))
        name = ffi.string(function).decode(errors="replace") if function != ffi.NULL else ""
        if name != code.function:
            raise DispatchError(
                f"the bytecode holds function {code.function!r}, not {name!r}", STATUS_NOT_FOUND
            )
        if (n_in, n_out) != (len(code.inputs), len(code.outputs)):
            raise DispatchError(
                f"{name}: the DISPATCH_OP has {n_in} inputs and {n_out} outputs, the bytecode "
                f"{len(code.inputs)} and {len(code.outputs)}",
                STATUS_INVALID_ARGUMENT,
            )
        try:
            runner = PartitionRunner(ctx.device, code.compiled)
        except ValueError as e:
            raise DispatchError(f"{name}: {e}", STATUS_INCOMPATIBLE_BYTECODE) from None
        number = _new_handle()
        _state.invocations[number] = Invocation(ctx, code, runner)
        out[0] = ffi.cast("LiteRtDispatchInvocationContext", number)

    @ffi.def_extern(error=STATUS_RUNTIME_FAILURE)
    @_guarded
    def vnpu_dispatch_invocation_context_destroy(handle: Any) -> None:
        inv = _state.invocations.pop(_key(ffi, handle), None)
        if inv is not None:
            inv.close()

    def attach(handle: Any, index: int, buffer: int, what: str) -> None:
        inv = invocation_of(handle)
        io_tensor(inv, index, what)
        if int(buffer) not in inv.device.buffers:
            raise DispatchError(f"no tensor buffer {int(buffer)} is registered", STATUS_NOT_FOUND)
        (inv.inputs if what == "input" else inv.outputs)[index] = int(buffer)

    @ffi.def_extern(error=STATUS_RUNTIME_FAILURE)
    @_guarded
    def vnpu_dispatch_attach_input(handle: Any, index: int, buffer: int) -> None:
        attach(handle, index, buffer, "input")

    @ffi.def_extern(error=STATUS_RUNTIME_FAILURE)
    @_guarded
    def vnpu_dispatch_attach_output(handle: Any, index: int, buffer: int) -> None:
        attach(handle, index, buffer, "output")

    @ffi.def_extern(error=STATUS_RUNTIME_FAILURE)
    @_guarded
    def vnpu_dispatch_detach_input(handle: Any, index: int, buffer: int) -> None:
        invocation_of(handle).inputs.pop(index, None)

    @ffi.def_extern(error=STATUS_RUNTIME_FAILURE)
    @_guarded
    def vnpu_dispatch_detach_output(handle: Any, index: int, buffer: int) -> None:
        invocation_of(handle).outputs.pop(index, None)

    def locked(inv: Invocation, number: int, mode: int) -> tuple[Any, Any]:
        rt = inv.device.runtime
        buffer = inv.device.buffers[number].buffer
        size, addr = ffi.new("size_t *"), ffi.new("void **")
        if (
            rt.get_tensor_buffer_packed_size(buffer, size) != 0
            or rt.lock_tensor_buffer(buffer, addr, mode) != 0
        ):
            raise DispatchError(f"LiteRT could not lock tensor buffer {number}")
        return buffer, ffi.buffer(addr[0], size[0])

    @ffi.def_extern(error=STATUS_RUNTIME_FAILURE)
    @_guarded
    def vnpu_dispatch_invoke(handle: Any) -> None:
        inv = invocation_of(handle)
        missing = [i for i in range(len(inv.code.inputs)) if i not in inv.inputs] + [
            i for i in range(len(inv.code.outputs)) if i not in inv.outputs
        ]
        if missing:
            raise DispatchError(
                f"{inv.code.function}: inputs/outputs {missing} have no tensor buffer attached", 4
            )
        buffers = inv.device.buffers
        with_dmabufs = any(
            buffers[n].imported is not None for n in (*inv.inputs.values(), *inv.outputs.values())
        )
        copy_inputs(inv)
        if with_dmabufs:
            run_with_dmabufs(inv)
        else:
            inv.runner.submit_and_wait()
        copy_outputs(inv)

    def copy_inputs(inv: Invocation) -> None:
        """Host-memory inputs into the arena (dma-buf ones are the job's to copy)."""
        rt = inv.device.runtime
        for index, number in inv.inputs.items():
            if inv.device.buffers[number].imported is not None:
                continue
            tensor = inv.code.inputs[index]
            try:
                view = inv.runner.input_view(tensor)
            except KeyError:
                continue  # an input the partition does not read
            buffer, data = locked(inv, number, _LOCK_READ)
            try:
                flat = view.reshape(-1).view(np.uint8)
                if len(data) < flat.nbytes:
                    raise DispatchError(f"input {index}: buffer of {len(data)} bytes, needs {flat.nbytes}")
                flat[...] = np.frombuffer(data, dtype=np.uint8, count=flat.nbytes)
            finally:
                rt.unlock_tensor_buffer(buffer)

    def dmabuf_span(inv: Invocation, number: int, nbytes: int, what: str) -> tuple[BufferObject, int]:
        registered = inv.device.buffers[number]
        bo = registered.imported
        assert bo is not None
        if registered.offset + nbytes > bo.size:
            raise DispatchError(
                f"{what}: dma-buf of {bo.size} bytes from offset {registered.offset}, needs {nbytes}",
                STATUS_INVALID_ARGUMENT,
            )
        return bo, bo.va + registered.offset

    def dmabuf_job(inv: Invocation) -> DmabufJob:
        """The job of the attached dma-bufs: the partition's stream with each exclusive I/O tensor's
        addresses moved into its dma-buf, and COPYs for the others (made once per attachment set)."""
        key = (tuple(sorted(inv.inputs.items())), tuple(sorted(inv.outputs.items())))
        if inv.dmabuf_job is not None and inv.dmabuf_job.key == key:
            return inv.dmabuf_job
        runner, arena_va = inv.runner, inv.runner.arena.va
        compiled = runner.compiled
        moved: list[Moved] = []
        copies_in: list[tuple[int, int, int]] = []
        copies_out: list[tuple[int, int, int]] = []
        bos = [JobBo(runner.weights), JobBo(runner.arena, read=True, write=True)]
        for index, number in inv.inputs.items():
            if inv.device.buffers[number].imported is None:
                continue
            try:
                binding = compiled.input(inv.code.inputs[index])
            except KeyError:
                continue  # an input the partition does not read
            bo, va = dmabuf_span(inv, number, binding.nbytes, f"input {index}")
            if binding.exclusive:
                moved.append(Moved(Region.ARENA, binding.offset, binding.nbytes, va))
            else:
                copies_in.append((va, arena_va + binding.offset, binding.nbytes))
            bos.append(JobBo(bo))
        for index, number in inv.outputs.items():
            if inv.device.buffers[number].imported is None:
                continue
            binding = compiled.output(inv.code.outputs[index])
            bo, va = dmabuf_span(inv, number, binding.nbytes, f"output {index}")
            if binding.exclusive:
                moved.append(Moved(Region.ARENA, binding.offset, binding.nbytes, va))
                # Read too: a node of the partition may consume an output another has written.
                bos.append(JobBo(bo, read=True, write=True))
            else:
                copies_out.append((arena_va + binding.offset, va, binding.nbytes))
                bos.append(JobBo(bo, read=False, write=True))
        bases = {Region.WEIGHTS: runner.weights.va, Region.ARENA: arena_va}
        stream = relocate(compiled.stream, compiled.relocations, bases, moved)
        stream = dmabuf_stream(stream, copies_in, copies_out)
        cmd = inv.device.device.create_bo_with(stream, read_only=True)
        inv.close_dmabuf_job()
        inv.dmabuf_job = DmabufJob(key, cmd, Job(cmd, len(stream), [JobBo(cmd), *bos]))
        return inv.dmabuf_job

    def run_with_dmabufs(inv: Invocation) -> None:
        """One job on the dma-bufs: the partition reading and writing them in place where it can,
        with COPYs into and out of the arena for the tensors that must stay there."""
        made = dmabuf_job(inv)
        inv.device.device.submit(made.job)
        made.cmd.wait(timeout=inv.runner.timeout).raise_for_status()

    def copy_outputs(inv: Invocation) -> None:
        """The arena's outputs into host-memory buffers (the job wrote the dma-buf ones)."""
        rt = inv.device.runtime
        for index, number in inv.outputs.items():
            if inv.device.buffers[number].imported is not None:
                continue
            view = inv.runner.output_view(inv.code.outputs[index])
            buffer, data = locked(inv, number, _LOCK_WRITE)
            try:
                flat = view.reshape(-1).view(np.uint8)
                if len(data) < flat.nbytes:
                    raise DispatchError(f"output {index}: buffer of {len(data)} bytes, needs {flat.nbytes}")
                np.frombuffer(data, dtype=np.uint8, count=flat.nbytes)[...] = flat
            finally:
                rt.unlock_tensor_buffer(buffer)
