"""vnpu as a LiteRT vendor: the compiler plugin under the wheel's apply_plugin_main and aot_compile,
the dispatch library under LiteRT's CompiledModel and benchmark tool, the bytecode's checks."""

from __future__ import annotations

import ctypes
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ai_edge_litert")

from ai_edge_litert import interpreter  # noqa: E402

from delegate_teflon.run import invoke, make_interpreter, random_inputs  # noqa: E402
from libaccel.runtime.model import differing_bytes  # noqa: E402
from litert_vendor import abi, bytecode, tools  # noqa: E402

MODELS = Path(__file__).resolve().parents[1] / "corpus" / "models"


@pytest.fixture(scope="module")
def compiled_resnet(libs: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("litert") / "resnet_small_npu.tflite"
    tools.apply_plugin(MODELS / "resnet_small.tflite", out, libs)
    return out


def _dispatch_ops(path: Path) -> list[bytes]:
    """The custom options of each DISPATCH_OP node of the model at ``path``."""
    import tflite

    m = tflite.Model.GetRootAs(path.read_bytes(), 0)
    sg = m.Subgraphs(0)
    out = []
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        if m.OperatorCodes(op.OpcodeIndex()).CustomCode() == b"DISPATCH_OP":
            out.append(bytes(op.CustomOptionsAsNumpy()))
    return out


def test_header_layouts_match_litert_2_3() -> None:
    # LiteRT's own static_asserts (64-bit) for the tables and structs the libraries exchange.
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(abi.LITERT_CDEF)
    assert ffi.sizeof("LiteRtCompilerContext") == abi.COMPILER_CONTEXT_SIZE == 1048
    assert ffi.sizeof("LiteRtRuntimeContext") == abi.RUNTIME_CONTEXT_SIZE == 400
    assert ffi.sizeof("LiteRtDispatchApi") == 56
    assert ffi.offsetof("LiteRtDispatchApi", "interface") == 24
    assert ffi.sizeof("LiteRtRankedTensorType") == 72
    assert ffi.sizeof("LiteRtLayout") == 68
    assert ffi.offsetof("LiteRtCompilerContext", "get_num_model_subgraphs") == 8
    assert ffi.offsetof("LiteRtCompilerContext", "get_op_code") == 72
    assert ffi.sizeof("LiteRtQuantizationPerChannel") == 32


def test_libraries_export_the_vendor_entry_points(libs: str) -> None:
    plugin = ctypes.CDLL(os.path.join(libs, "libLiteRtCompilerPlugin_Vnpu.so"))
    plugin.LiteRtGetCompilerPluginSocManufacturer.restype = ctypes.c_char_p
    assert plugin.LiteRtGetCompilerPluginSocManufacturer() == b"Vnpu"
    version = (ctypes.c_int * 3)()
    assert plugin.LiteRtGetCompilerPluginVersion(version) == 0
    assert tuple(version) == abi.API_VERSION
    assert ctypes.CDLL(os.path.join(libs, "libLiteRtDispatch_Vnpu.so")).LiteRtDispatchGetApi


def test_apply_plugin_main_writes_dispatch_ops(compiled_resnet: Path) -> None:
    ops = _dispatch_ops(compiled_resnet)
    assert len(ops) == 1  # every node of resnet_small runs on the NPU: one partition
    assert b"vnpu_partition_0" in ops[0]


@pytest.mark.parametrize("model", ["resnet_small", "mobilenet", "dilated_concat", "transformer_block"])
def test_the_plugin_places_as_the_partitioner_does_on_the_file(model: str, libs: str, tmp_path: Path) -> None:
    # The plugin reads the graph through LiteRT's accessors; the partitioner must decide as it does
    # on the graph graph_from_tflite reads from the same file (the TFLite delegate's placement).
    from libaccel.compiler import graph_from_tflite, partition

    source = MODELS / f"{model}.tflite"
    placed = partition.place(graph_from_tflite(source.read_bytes()), partition.Rules(strict=True))
    log = tools.apply_plugin(source, tmp_path / "m.tflite", libs)
    npu = sum(p.npu for p in placed)
    assert f"selected {npu} ops, from a total of {len(placed)} ops." in log


@pytest.mark.parametrize("model", ["resnet_small", "ds_cnn_kws", "mobilenet_v2"])
def test_compiled_model_on_the_npu_equals_builtin_ref(
    model: str, libs: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VNPU_DEVICE", "shim")
    source = MODELS / f"{model}.tflite"
    compiled = tmp_path / f"{model}_npu.tflite"
    tools.apply_plugin(source, compiled, libs)
    assert _dispatch_ops(compiled)
    interp = make_interpreter(interpreter, source.read_bytes(), [], None)  # BUILTIN_REF
    inputs = random_inputs(interp.get_input_details(), seed=3)
    want = invoke(interp, inputs)
    got = tools.run_compiled(compiled, inputs, libs)
    assert [differing_bytes(w, g.reshape(w.shape)) for w, g in zip(want, got, strict=True)] == [0] * len(want)


@pytest.mark.parametrize("model", ["resnet_small", "ds_cnn_kws"])
def test_compiled_model_jit_of_a_plain_model_equals_builtin_ref(
    model: str, libs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A plain .tflite: LiteRT's CompiledModel applies the compiler plugin in ``libs`` itself.
    monkeypatch.setenv("VNPU_DEVICE", "shim")
    source = MODELS / f"{model}.tflite"
    assert not _dispatch_ops(source)
    interp = make_interpreter(interpreter, source.read_bytes(), [], None)  # BUILTIN_REF
    inputs = random_inputs(interp.get_input_details(), seed=5)
    want = invoke(interp, inputs)
    got = tools.run_compiled(source, inputs, libs)
    assert [differing_bytes(w, g.reshape(w.shape)) for w, g in zip(want, got, strict=True)] == [0] * len(want)


def test_vendor_options_parse() -> None:
    from litert_vendor.dispatch import VendorOptions, parse_options

    assert parse_options("") == VendorOptions()
    assert parse_options("device=/dev/accel/accel0") == VendorOptions(device="/dev/accel/accel0")
    assert parse_options(" device = shim ;\n") == VendorOptions(device="shim")
    with pytest.raises(ValueError, match="unknown vnpu option 'colour' \\(known: device\\)"):
        parse_options("colour=red")
    with pytest.raises(ValueError, match="'device' is not key=value"):
        parse_options("device")


def test_benchmark_tool_runs_the_compiled_model(compiled_resnet: Path, libs: str) -> None:
    tool = tools.litert_dir() / "tools" / "benchmark_litert_model.py"
    env = dict(os.environ, VNPU_DEVICE="shim")
    args = [sys.executable, str(tool), f"--model={compiled_resnet}", "--use_npu"]
    args += [f"--dispatch_library_path={libs}", "--require_full_delegation", "--num_runs=5"]
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=False, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Fully accelerated:     True" in done.stdout
    assert "Inference (avg):" in done.stdout


def _patched(path: Path, out: Path, edit: bytes, at: int) -> Path:
    """A copy of ``path`` with ``edit`` written over the vnpu bytecode at bytecode offset ``at``."""
    data = bytearray(path.read_bytes())
    start = data.find(bytecode.MAGIC)
    assert start >= 0
    data[start + at : start + at + len(edit)] = edit
    out.write_bytes(bytes(data))
    return out


def _run_in_subprocess(model: Path, libs: str) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys, numpy as np\n"
        "from litert_vendor import tools\n"
        "from ai_edge_litert.compiled_model import CompiledModel\n"
        f"tools.run_compiled({str(model)!r}, [np.zeros((1, 32, 32, 3), np.int8)], {libs!r})\n"
    )
    env = dict(os.environ, VNPU_DEVICE="shim", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)


def test_a_bytecode_of_another_version_is_refused(compiled_resnet: Path, libs: str, tmp_path: Path) -> None:
    bad = _patched(compiled_resnet, tmp_path / "v2.tflite", struct.pack("<I", 2), 8)
    done = _run_in_subprocess(bad, libs)
    assert done.returncode != 0
    assert "vnpu bytecode format version 2; this library reads version 1" in done.stderr


def test_a_corrupted_bytecode_is_refused(compiled_resnet: Path, libs: str, tmp_path: Path) -> None:
    data = compiled_resnet.read_bytes()
    start = data.find(bytecode.MAGIC)
    (header_size,) = struct.unpack_from("<I", data, start + 12)
    bad = _patched(compiled_resnet, tmp_path / "crc.tflite", b"\xff\xff\xff\xff", 16 + header_size + 200)
    done = _run_in_subprocess(bad, libs)
    assert done.returncode != 0
    assert "CRC-32 does not match" in done.stderr


def test_bytecode_round_trip_and_refusals() -> None:
    from libaccel.compiler.graph import graph_from_tflite
    from libaccel.compiler.lower import compile_partition
    from uapi import isa

    graph = graph_from_tflite((MODELS / "resnet_small.tflite").read_bytes())
    compiled = compile_partition(graph, [n.index for n in graph.nodes], isa.SPEC.version)
    code = bytecode.pack("vnpu_partition_0", graph.inputs, graph.outputs, compiled)
    back = bytecode.unpack(code)
    assert (back.function, back.inputs, back.outputs) == ("vnpu_partition_0", graph.inputs, graph.outputs)
    assert back.compiled.stream == compiled.stream
    with pytest.raises(bytecode.BytecodeError, match="shorter than its 16-byte prefix"):
        bytecode.unpack(code[:10])
    with pytest.raises(bytecode.BytecodeError, match="truncated"):
        bytecode.unpack(code[:-1])
    with pytest.raises(bytecode.BytecodeError, match="another vendor"):
        bytecode.unpack(b"QNNCTX00" + code[8:])
    header_size = struct.unpack_from("<I", code, 12)[0]
    header = json.loads(code[16 : 16 + header_size])
    header["compiler_version"] = "0.0.1"
    raw = json.dumps(header).encode()
    other = code[:12] + struct.pack("<I", len(raw)) + raw + code[16 + header_size :]
    with pytest.raises(bytecode.BytecodeError, match="compiled by compiler 0.0.1"):
        bytecode.unpack(other)


def test_aot_compile_with_the_vnpu_backend(tmp_path: Path) -> None:
    from ai_edge_litert.aot.aot_compile import aot_compile

    import litert_vendor.aot_backend as vnpu_aot

    aot_compile(
        str(MODELS / "resnet_small.tflite"),
        output_dir=tmp_path,
        target=vnpu_aot.VnpuTarget(),
        keep_going=False,
    )
    (out,) = tmp_path.glob("*.tflite")
    assert _dispatch_ops(out)
