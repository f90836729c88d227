"""The dispatch library's dma-buf tensor buffers, driven through its C table (LiteRtDispatchGetApi)
with a runtime context made here: the wheel's libLiteRt.so is built without dma-buf support
(LiteRtCreateTensorBufferFromDmaBufBuffer returns kLiteRtStatusErrorUnsupported), so no LiteRT host
can hand one over. On vnpu.ko (the guest) a udmabuf input and output run exact against BUILTIN_REF;
on the shim registration is refused with a message."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import cffi
import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")

from conftest import MODELS  # noqa: E402

from libaccel import discovery  # noqa: E402
from libaccel.runtime.model import differing_bytes  # noqa: E402
from litert_vendor import abi, bytecode  # noqa: E402

HOST_MEMORY, DMA_BUF = 1, 4


class Runtime:
    """A LiteRtRuntimeContext over Python: tensor buffers are numbered; each is host memory (a numpy
    array) or a dma-buf fd."""

    def __init__(self, ffi: cffi.FFI) -> None:
        self.ffi = ffi
        self.host: dict[int, np.ndarray] = {}
        self.dmabuf: dict[int, int] = {}
        ctx = self.ctx = ffi.new("LiteRtRuntimeContext *")
        ctx.abi_header.struct_size = ffi.sizeof("LiteRtRuntimeContext")
        ctx.abi_header.major_version = abi.ABI_MAJOR
        self._keep = [
            self._set("create_tensor_buffer_requirements", self._requirements),
            self._set("get_tensor_buffer_type", self._type),
            self._set("get_tensor_buffer_packed_size", self._size),
            self._set("lock_tensor_buffer", self._lock),
            self._set("unlock_tensor_buffer", lambda buffer: 0),
            self._set("get_tensor_buffer_dma_buf_buffer", self._dmabuf),
            self._set("get_tensor_buffer_offset", self._offset),
        ]

    def _set(self, name: str, fn: Any) -> Any:
        callback = self.ffi.callback(self.ffi.typeof(getattr(self.ctx, name)), fn)
        setattr(self.ctx, name, callback)
        return callback

    def handle(self, number: int) -> Any:
        return self.ffi.cast("LiteRtTensorBuffer", number)

    def _number(self, buffer: Any) -> int:
        return int(self.ffi.cast("uintptr_t", buffer))

    def _requirements(self, n: int, types: Any, size: int, n_strides: int, strides: Any, out: Any) -> int:
        out[0] = self.ffi.cast("LiteRtTensorBufferRequirements", 1)
        return 0

    def _type(self, buffer: Any, out: Any) -> int:
        out[0] = DMA_BUF if self._number(buffer) in self.dmabuf else HOST_MEMORY
        return 0

    def _size(self, buffer: Any, out: Any) -> int:
        out[0] = self.host[self._number(buffer)].nbytes
        return 0

    def _lock(self, buffer: Any, addr: Any, mode: int) -> int:
        addr[0] = self.ffi.cast("void *", self.host[self._number(buffer)].ctypes.data)
        return 0

    def _dmabuf(self, buffer: Any, addr: Any, fd: Any) -> int:
        addr[0] = self.ffi.NULL
        fd[0] = self.dmabuf[self._number(buffer)]
        return 0

    def _offset(self, buffer: Any, out: Any) -> int:
        out[0] = 0
        return 0


@pytest.fixture
def dispatch(libs: str) -> tuple[cffi.FFI, Any, Runtime]:
    ffi = cffi.FFI()
    ffi.cdef(abi.LITERT_CDEF + "LiteRtStatus LiteRtDispatchGetApi(LiteRtDispatchApi *api);")
    lib = ffi.dlopen(str(Path(libs) / "libLiteRtDispatch_Vnpu.so"))
    api = ffi.new("LiteRtDispatchApi *")
    assert lib.LiteRtDispatchGetApi(api) == 0
    runtime = Runtime(ffi)
    assert api.interface.initialize(runtime.ctx, ffi.NULL, ffi.NULL) == 0
    return ffi, api.interface, runtime


def _resnet(exclusive_io: bool = False) -> tuple[bytes, list[np.ndarray], list[np.ndarray]]:
    """resnet_small's one partition as vnpu bytecode, seeded inputs, BUILTIN_REF's outputs;
    ``exclusive_io`` as the compiler plugin compiles (else its input and output share arena bytes
    with intermediates)."""
    from ai_edge_litert import interpreter

    from delegate_teflon.run import invoke, make_interpreter, random_inputs
    from libaccel.compiler.graph import graph_from_tflite
    from libaccel.compiler.lower import compile_partition
    from uapi import isa

    data = (MODELS / "resnet_small.tflite").read_bytes()
    graph = graph_from_tflite(data)
    compiled = compile_partition(
        graph, [n.index for n in graph.nodes], isa.SPEC.version, exclusive_io=exclusive_io
    )
    code = bytecode.pack("vnpu_partition_0", graph.inputs, graph.outputs, compiled)
    interp = make_interpreter(interpreter, data, [], None)
    inputs = random_inputs(interp.get_input_details(), seed=7)
    return code, inputs, invoke(interp, inputs)


def _device_and_invocation(ffi: cffi.FFI, iface: Any, runtime: Runtime, code: bytes) -> tuple[Any, Any]:
    device = ffi.new("LiteRtDispatchDeviceContext *")
    assert iface.device_context_create(runtime.ctx, ffi.NULL, device) == 0
    keep = ffi.from_buffer(code)
    mem = ffi.new("LiteRtMemBuffer *", {"fd": -1, "base_addr": keep, "offset": 0, "size": len(code)})
    inv = ffi.new("LiteRtDispatchInvocationContext *")
    status = iface.invocation_context_create(
        runtime.ctx, device[0], 2, mem, b"vnpu_partition_0", 1, 1, inv
    )  # fmt: skip
    assert status == 0
    return device[0], inv[0]


def test_the_shim_refuses_a_dmabuf_tensor_buffer(
    dispatch: tuple[cffi.FFI, Any, Runtime],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ffi, iface, runtime = dispatch
    monkeypatch.setenv("VNPU_DEVICE", "shim")
    code, _, _ = _resnet()
    device, inv = _device_and_invocation(ffi, iface, runtime, code)
    runtime.dmabuf[5] = 0  # never read: the shim refuses before asking LiteRT for the fd
    out = ffi.new("LiteRtTensorBufferHandle *")
    assert iface.register_tensor_buffer(device, runtime.handle(5), out) == 5  # kLiteRtStatusErrorUnsupported
    assert "a dma-buf tensor buffer needs PRIME import, which the in-process shim does not have" in (
        capsys.readouterr().err
    )
    assert iface.invocation_context_destroy(inv) == 0
    assert iface.device_context_destroy(device) == 0


@pytest.mark.skipif(
    not discovery.list_devices(), reason="no vnpu kernel device: this test runs in the QEMU guest"
)
@pytest.mark.parametrize("exclusive_io", [True, False], ids=["in-place", "copied"])
def test_dmabuf_input_and_output_on_vnpu_ko_are_exact(
    dispatch: tuple[cffi.FFI, Any, Runtime], monkeypatch: pytest.MonkeyPatch, exclusive_io: bool
) -> None:
    """In place (exclusive I/O, as the compiler plugin compiles) the job reads the input dma-buf and
    writes the output one directly: no COPY in its stream; otherwise it COPYs them, once each."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernel"))
    from dmabuf_sources import udmabuf_buffer

    from libaccel.device import Device
    from uapi import isa

    streams: list[list[str]] = []
    submit = Device.submit

    def recording(self: Device, jobs: Any) -> None:  # the library runs in this interpreter
        streams.append([i.op for i in isa.decode(jobs.cmd_bo.read(jobs.cmd_size))])
        submit(self, jobs)

    monkeypatch.setattr(Device, "submit", recording)
    ffi, iface, runtime = dispatch
    monkeypatch.setenv("VNPU_DEVICE", discovery.list_devices()[0].node)
    code, inputs, want = _resnet(exclusive_io)
    device, inv = _device_and_invocation(ffi, iface, runtime, code)
    pages = lambda n: -(-n // 4096) * 4096  # noqa: E731 - udmabuf takes whole pages
    src, dst = udmabuf_buffer(pages(inputs[0].nbytes)), udmabuf_buffer(pages(want[0].nbytes))
    try:
        src.view[: inputs[0].nbytes] = inputs[0].tobytes()
        dst.view[: want[0].nbytes] = b"\xaa" * want[0].nbytes
        runtime.dmabuf.update({1: src.fd, 2: dst.fd})
        handles = ffi.new("LiteRtTensorBufferHandle[2]")
        assert iface.register_tensor_buffer(device, runtime.handle(1), handles + 0) == 0
        assert iface.register_tensor_buffer(device, runtime.handle(2), handles + 1) == 0
        assert iface.attach_input(inv, 0, handles[0]) == 0
        assert iface.attach_output(inv, 0, handles[1]) == 0
        for _ in range(2):  # the import is once per registration, the copies per invoke
            assert iface.invoke(inv) == 0
            got = np.frombuffer(bytes(dst.view[: want[0].nbytes]), want[0].dtype).reshape(want[0].shape)
            assert differing_bytes(want[0], got) == 0
        assert len(streams) == 2 and streams[0] == streams[1]
        own = [i.op for i in isa.decode(bytecode.unpack(code).compiled.stream)].count("COPY")
        assert streams[0].count("COPY") == own + (0 if exclusive_io else 2), streams[0]
        for handle in handles:
            assert iface.unregister_tensor_buffer(device, handle) == 0
    finally:
        assert iface.invocation_context_destroy(inv) == 0
        assert iface.device_context_destroy(device) == 0
        src.close()
        dst.close()
