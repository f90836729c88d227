"""Quantized ONNX models through graph_from_onnx and the NPU (shim), exact against onnxruntime.

The op grid is built with onnx.helper and quantized by onnxruntime's quantize_static in QDQ and
QOperator form, int8 and uint8 activations, per-tensor and per-channel weights; the reference is
onnxruntime on one thread (QDQ with its QDQ fusion, QOperator with every optimization off).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from libaccel.compiler.onnx_frontend import OnnxModelError, graph_from_onnx
from libaccel.runtime import model as lm
from tools.convert import make_onnx_models as M
from vnpu_common.cli import ExitCode

MODELS = Path(__file__).parent / "models"
ROOT = Path(__file__).resolve().parents[2]

GRID = {
    "conv": lambda: M.conv_model(),
    "conv_stride2": lambda: M.conv_model(stride=2, k=3, size=9),
    "depthwise": lambda: M.conv_model(depthwise=True),
    "grouped_conv": lambda: M.conv_model(cin=8, cout=16, group=4),
    "matmul": lambda: M.matmul_model(),
    "gemm": lambda: M.gemm_model(),
    "add": lambda: M.binary_model("Add"),
    "mul": lambda: M.binary_model("Mul"),
    "maxpool": lambda: M.pool_model("MaxPool"),
    "avgpool": lambda: M.pool_model("AveragePool"),
    "global_avgpool": lambda: M.pool_model("GlobalAveragePool"),
    "concat": lambda: M.concat_model(),
    "add_scalar": lambda: M.binary_model("Add", (1, 8, 6, 6), (1,)),
    "sigmoid": lambda: M.activation_model("Sigmoid"),
    "leaky_relu": lambda: M.activation_model("LeakyRelu"),
    "transpose": lambda: M.layout_model("Transpose"),
    "pad": lambda: M.layout_model("Pad"),
    "flatten": lambda: M.layout_model("Flatten"),
    "resize": lambda: M.layout_model("Resize"),
    "resize_sizes": lambda: M.layout_model("ResizeSizes"),
}
# ops the NPU runs in each grid model (the rest is onnxruntime on the CPU, reported)
NPU_OPS = {
    "conv": {"QLinearConv"},
    "conv_stride2": {"QLinearConv"},
    "depthwise": {"QLinearConv"},
    "grouped_conv": {"QLinearConv"},
    "matmul": {"QLinearMatMul"},
    "gemm": {"QGemm"},
    "maxpool": {"QLinearConv", "MaxPool"},
    "add": {"QLinearAdd"},
    "mul": {"QLinearMul"},
    "global_avgpool": {"QLinearConv", "QLinearGlobalAveragePool"},
    "concat": {"QLinearConcat"},
    "add_scalar": {"QLinearAdd"},
    "sigmoid": {"QLinearSigmoid"},
    "leaky_relu": {"QLinearLeakyRelu"},
    "transpose": {"Transpose"},
    "pad": {"QLinearConv"},  # onnxruntime keeps a QDQ Pad in float; the QOperator Pad is on the NPU
    "flatten": {"Flatten", "QLinearMatMul"},  # NHWC -> NCHW order first: a TRANSPOSE, then the alias
    "resize": {"Resize"},
    "resize_sizes": {"Resize"},
}


def _check(path: Path, seed: int = 1, device: str = "shim") -> lm.ModelResult:
    inputs = lm.random_inputs(lm.input_specs(path), seed)
    result = lm.run_model(path, inputs, device=device)
    want = lm.reference_outputs(path, inputs)
    for name, w in want.items():
        assert result.outputs[name].dtype == w.dtype and result.outputs[name].shape == w.shape
        assert np.array_equal(result.outputs[name].view(np.uint8), w.view(np.uint8)), (
            f"{path.name}: {name} differs"
        )
    return result


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("activations", ["uint8", "int8"])
@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
@pytest.mark.parametrize("name", sorted(GRID))
def test_op_grid_exact(tmp_path: Path, name: str, fmt: str, activations: str, per_channel: bool) -> None:
    path = tmp_path / f"{name}.onnx"
    onnx.save(M.quantize(GRID[name](), fmt, activations, per_channel), path)
    result = _check(path)
    on_npu = {p.op for p in result.placement if p.npu}
    # onnxruntime's QDQ fusion leaves int8 Concat inputs' convolutions in float: they stay on the CPU
    if not (name == "concat" and fmt == "qdq" and activations == "int8"):
        assert NPU_OPS.get(name, set()) <= on_npu, result.report()
    for p in result.placement:
        assert p.npu or p.reason, p


@pytest.mark.parametrize("opset", [13, 21])
@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
def test_opsets_read(tmp_path: Path, opset: int, fmt: str) -> None:
    """The first and the last opset read: the quantizer writes the float model's opset."""
    float_model = M.conv_model()
    float_model.opset_import[0].version = opset
    path = tmp_path / "conv.onnx"
    onnx.save(M.quantize(float_model, fmt, "uint8", per_channel=True), path)
    assert onnx.load(path).opset_import[0].version == opset
    result = _check(path)
    assert [p.op for p in result.placement if p.npu] == ["QLinearConv"]


def test_fixtures_are_regenerated_identically(tmp_path: Path) -> None:
    """The committed networks are what the generator writes: the same graph, and with the onnxruntime
    release that quantized them, the same bytes (another release may calibrate differently)."""
    import onnxruntime

    M.main([str(tmp_path)])
    for path in MODELS.glob("*.onnx"):
        a, b = onnx.load(path), onnx.load(tmp_path / path.name)
        assert [n.op_type for n in a.graph.node] == [n.op_type for n in b.graph.node]
        made_by = {p.key: p.value for p in a.metadata_props}["quantized_by"]
        if made_by == f"onnxruntime {onnxruntime.__version__}":
            assert a.SerializeToString() == b.SerializeToString(), path.name


def test_layout_is_lowered_once() -> None:
    """NCHW activations are NHWC in the IR and filters are transposed; no node converts layouts."""
    og = graph_from_onnx(MODELS / "mobilenet_like_qop.onnx")
    conv = next(n for n in og.graph.nodes if n.op == "CONV_2D")
    x = og.graph.tensors[conv.inputs[0]]
    assert x.shape == (1, 32, 32, 3)  # [1, 3, 32, 32] in the file
    assert og.graph.tensors[conv.inputs[1]].shape == (8, 3, 3, 3)  # [Cout, KH, KW, Cin]
    assert not any(n.op in ("TRANSPOSE", "ONNX:Transpose") for n in og.graph.nodes)


def _accel(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "libaccel.tools.cli", "run", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)


def test_accel_run_text_report() -> None:
    r = _accel(str(MODELS / "resnet_like_qop.onnx"), "--compare")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1] == "placement: 12 of 14 nodes on the NPU, 2 on the CPU, 1 NPU partition(s)"
    assert "  on the NPU: QLinearConv x6, QLinearAdd x2, " in r.stdout  # the summary, by op type
    assert "QuantizeLinear has no NPU lowering" in r.stdout  # float -> int8 at the edge: the CPU's
    assert not any(line.startswith("  node ") for line in lines)
    nodes = _accel(str(MODELS / "resnet_like_qop.onnx"), "--nodes").stdout.splitlines()
    assert [line.split()[3] for line in nodes if "QLinearAdd" in line] == ["NPU0", "NPU0"]
    assert lines[-1] == "compare with onnxruntime: equal, 0 differing bytes"
    assert all(line == line.rstrip() for line in lines)


def test_accel_run_tflite(tmp_path: Path) -> None:
    """A .tflite model through the delegate: its placement, exact against BUILTIN_REF."""
    import modelgen

    path = tmp_path / "conv.tflite"
    path.write_bytes(modelgen.conv2d_model((1, 8, 8, 4), 8, kernel=3, stride=1, padding="SAME", act="RELU6"))
    r = _accel(str(path), "--compare", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["form"] == "tflite" and doc["partitions"] == 1 and doc["differing_bytes"] == 0
    assert [(p["op"], p["npu"], p["partition"]) for p in doc["placement"]] == [("CONV_2D", True, 0)]


def _float_model(opset: int = 17, dynamic: bool = False) -> onnx.ModelProto:
    m = M.conv_model()
    m.opset_import[0].version = opset
    if dynamic:
        m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    return m


def test_bad_models_one_line(tmp_path: Path) -> None:
    cases = {
        "opset.onnx": (M.quantize(M.conv_model(), "qoperator"), "the model imports no default-domain opset"),
        "float.onnx": (_float_model(), "float-only model: node 'conv3_node' (Conv) computes in float"),
    }
    opsets = cases["opset.onnx"][0].opset_import
    opsets.remove(next(o for o in opsets if o.domain in ("", "ai.onnx")))
    for name, (model, message) in cases.items():
        onnx.save(model, tmp_path / name)
        r = _accel(str(tmp_path / name))
        assert r.returncode == ExitCode.BAD_FILE and r.stderr.count("\n") == 1 and message in r.stderr, (
            r.stderr
        )
    (tmp_path / "junk.onnx").write_bytes(b"\x08\x01garbage")
    r = _accel(str(tmp_path / "junk.onnx"))
    assert (
        r.returncode == ExitCode.BAD_FILE and r.stderr.startswith("accel run: ") and r.stderr.count("\n") == 1
    )


def test_dynamic_shape_needs_and_takes_shape(tmp_path: Path) -> None:
    q = M.quantize(M.conv_model(), "qoperator")
    q.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    path = tmp_path / "dyn.onnx"
    onnx.save(q, path)
    with pytest.raises(
        OnnxModelError, match=r"input 'x' has a dynamic dimension 0 \(N\): fix it with --shape x="
    ):
        graph_from_onnx(path)
    r = _accel(str(path), "--shape", "x=1x8x10x10", "--compare")
    assert r.returncode == 0 and "0 differing bytes" in r.stdout, r.stderr


def test_float_scale_requantization_is_onnxruntimes() -> None:
    """The device's FLOAT_SCALE: float32(acc) * float32 scale, half to even; the exact real scale is not."""
    from device_model import numerics as nm

    acc = np.array([[5, 7, 9, -5, -7, 2**25 + 1]], dtype=np.int64)
    scale = np.array([[0.5]], dtype=np.float32)
    out = nm.requantize_float_scale(acc, None, scale, 0, -(2**31), 2**31 - 1)
    assert out.tolist() == [[2, 4, 4, -2, -4, 2**24]]  # ties to even; 2^25+1 rounds to 2^25 in float32


def test_qoperator_pad_clip_on_npu(tmp_path: Path) -> None:
    """A hand-written QOperator graph: uint8 Pad with a constant and Clip on stored values."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "s"),
        numpy_helper.from_array(np.array(128, np.uint8), "z"),
        numpy_helper.from_array(np.array([0, 0, 1, 0, 0, 0, 0, 2], np.int64), "pads"),
        numpy_helper.from_array(np.array(7, np.uint8), "pad_value"),
        numpy_helper.from_array(np.array(100, np.uint8), "lo"),
        numpy_helper.from_array(np.array(200, np.uint8), "hi"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("Pad", ["q", "pads", "pad_value"], ["p"], mode="constant"),
        helper.make_node("Clip", ["p", "lo", "hi"], ["c"]),
        helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 5])],
        [helper.make_tensor_value_info("t", TensorProto.UINT8, None)], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "pad_clip.onnx"
    onnx.save(model, path)
    result = _check(path)
    assert [(p.op, p.npu) for p in result.placement] == [
        ("QuantizeLinear", False), ("Pad", True), ("Clip", True), ("Transpose", True),
    ]  # fmt: skip
    assert result.outputs["t"].shape == (1, 5, 7, 3)


def test_refused_lowering_reports_its_reason(tmp_path: Path) -> None:
    """A per-channel broadcast Add stays on the CPU, exact, with the front end's reason."""
    path = tmp_path / "add_bcast.onnx"
    onnx.save(M.quantize(M.binary_model("Add", (1, 8, 6, 6), (1, 8, 1, 1)), "qoperator"), path)
    result = _check(path)
    add = next(p for p in result.placement if p.op == "QLinearAdd")
    assert not add.npu and "broadcast of [1, 8, 6, 6] and [1, 8, 1, 1]" in add.reason


def test_libaccel_run_model_random_inputs() -> None:
    """The package-level entry point: seeded random inputs when none are given, a placement report."""
    import libaccel

    a = libaccel.run_model(MODELS / "mobilenet_like_qop.onnx", device="shim", seed=4)
    b = libaccel.run_model(MODELS / "mobilenet_like_qop.onnx", device="shim", seed=4)
    assert a.outputs.keys() == b.outputs.keys() == {"softmax42"}
    assert np.array_equal(a.outputs["softmax42"], b.outputs["softmax42"])
    assert (
        a.report().splitlines()[0] == "placement: 12 of 15 nodes on the NPU, 3 on the CPU, 1 NPU partition(s)"
    )


def test_qlinear_mul_of_a_tensor_by_itself(tmp_path: Path) -> None:
    """x * x: both LUT2 operands are one tensor (the table's diagonal)."""
    from onnx import TensorProto, helper, numpy_helper

    params = (("s", 0.05, np.float32), ("z", 3, np.int8), ("ys", 0.2, np.float32), ("yz", -20, np.int8))
    inits = [numpy_helper.from_array(np.array(v, dtype=t), n) for n, v, t in params]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node(
            "QLinearMul", ["q", "s", "z", "q", "s", "z", "ys", "yz"], ["y"], domain="com.microsoft"
        ),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 6])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, None)], inits,
    )  # fmt: skip
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    path = tmp_path / "square.onnx"
    onnx.save(model, path)
    result = _check(path)
    assert [(p.op, p.npu) for p in result.placement] == [("QuantizeLinear", False), ("QLinearMul", True)]
