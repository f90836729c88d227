"""What the ONNX front end reads rather than refuses: run-time operands, integer-only and 16-bit
models, empty tensors, opsets outside 13-21, and MaxPool with ceil_mode or auto_pad SAME on the NPU.
Each model runs exact against onnxruntime."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from libaccel.compiler.onnx_frontend import OnnxModelError, graph_from_onnx
from libaccel.runtime import model as lm
from tools.convert import make_onnx_models as M
from vnpu_common.cli import ExitCode

ROOT = Path(__file__).resolve().parents[2]
T = {
    np.int8: TensorProto.INT8,
    np.uint8: TensorProto.UINT8,
    np.float32: TensorProto.FLOAT,
    np.int16: TensorProto.INT16,
    np.int32: TensorProto.INT32,
}


def _vi(name: str, dtype: type, shape: list[int | str] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, T[dtype], shape)


def _model(
    nodes: list, inputs: list, outputs: list, inits: dict[str, np.ndarray] | None = None, opset: int = 17
) -> onnx.ModelProto:
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    graph = helper.make_graph(nodes, "g", inputs, outputs, init)
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def _run(
    tmp_path: Path,
    model: onnx.ModelProto,
    inputs: dict[str, np.ndarray] | None = None,
    shapes: dict[str, tuple[int, ...]] | None = None,
) -> lm.ModelResult:
    """The model on the shim, every output byte-equal to onnxruntime's; the placement has reasons."""
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    if inputs is None:
        inputs = lm.random_inputs(lm.input_specs(path, shapes), 3)
    result = lm.run_model(path, inputs, shapes=shapes)
    want = lm.reference_outputs(path, inputs, shapes)
    for name, w in want.items():
        got = result.outputs[name]
        assert got.dtype == w.dtype and got.shape == w.shape, name
        assert np.array_equal(got.view(np.uint8), w.view(np.uint8)), name
    assert all(p.npu or p.reason for p in result.placement), result.report()
    return result


def _placed(result: lm.ModelResult) -> list[tuple[str, bool]]:
    return [(p.op, p.npu) for p in result.placement]


def _accel(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "libaccel.tools.cli", "run", *args], capture_output=True, text=True, cwd=ROOT
    )


def test_clip_with_run_time_bounds_runs_on_the_cpu(tmp_path: Path) -> None:
    """int8 Clip whose min is a graph input: the CPU, with the reason; no crash, in accel run either."""
    model = _model(
        [helper.make_node("Clip", ["x", "lo"], ["y"])],
        [_vi("x", np.int8, [2, 5]), _vi("lo", np.int8, [])],
        [_vi("y", np.int8, [2, 5])],
    )
    result = _run(tmp_path, model)
    assert _placed(result) == [("Clip", False)]
    assert "Clip's min 'lo' is fed at run time" in result.placement[0].reason
    r = _accel(str(tmp_path / "m.onnx"), "--compare")
    assert r.returncode == 0 and "0 differing bytes" in r.stdout, r.stderr


def test_constant_clip_of_plain_int8_on_the_npu(tmp_path: Path) -> None:
    """8-bit data no Q-op scales stands for itself (scale 1, zero point 0): Clip and MaxPool of it."""
    nodes = [
        helper.make_node("Clip", ["x", "lo", "hi"], ["c"]),
        helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
    ]
    model = _model(
        nodes,
        [_vi("x", np.int8, [1, 3, 6, 6])],
        [_vi("y", np.int8, None)],
        {"lo": np.int8(-20), "hi": np.int8(90)},
    )
    assert _placed(_run(tmp_path, model)) == [("Clip", True), ("MaxPool", True)]


@pytest.mark.parametrize("op", ["Div", "Mod"])
def test_integer_div_and_mod_are_read(tmp_path: Path, op: str) -> None:
    """The shape probe runs on ones, so an integer divisor is never zero there."""
    model = _model(
        [helper.make_node(op, ["a", "b"], ["y"])],
        [_vi("a", np.int8, [3, 4]), _vi("b", np.int8, [3, 4])],
        [_vi("y", np.int8, [3, 4])],
    )
    rng = np.random.default_rng(0)
    b = rng.integers(1, 20, (3, 4)).astype(np.int8) * rng.choice([-1, 1], (3, 4)).astype(np.int8)
    result = _run(tmp_path, model, {"a": rng.integers(-128, 128, (3, 4)).astype(np.int8), "b": b})
    assert _placed(result) == [(op, False)]


def _integer_models() -> dict[str, onnx.ModelProto]:
    w = np.arange(-6, 6, dtype=np.int8).reshape(4, 3)
    return {
        "MatMulInteger": _model(
            [helper.make_node("MatMulInteger", ["a", "w", "az"], ["y"])],
            [_vi("a", np.uint8, [2, 4])],
            [_vi("y", np.int32, None)],
            {"w": w, "az": np.uint8(128)},
        ),
        "ConvInteger": _model(
            [helper.make_node("ConvInteger", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
            [_vi("x", np.uint8, [1, 2, 5, 5])],
            [_vi("y", np.int32, None)],
            {"w": np.arange(36, dtype=np.uint8).reshape(2, 2, 3, 3)},
        ),
        "DequantizeLinear": _model(
            [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])],
            [_vi("x", np.uint8, [3, 4])],
            [_vi("y", np.float32, None)],
            {"s": np.float32(0.5), "z": np.uint8(100)},
        ),
        "QuantizeLinear": _model(
            [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])],
            [_vi("x", np.float32, [3, 4])],
            [_vi("y", np.int16, None)],
            {"s": np.float32(0.001), "z": np.int16(-3)},
            opset=21,
        ),
    }


@pytest.mark.parametrize("op", sorted(_integer_models()))
def test_integer_and_16_bit_models_are_not_float_only(tmp_path: Path, op: str) -> None:
    result = _run(tmp_path, _integer_models()[op])
    assert _placed(result) == [(op, False)]
    assert "no NPU lowering" in result.placement[0].reason


def test_float_model_is_still_refused(tmp_path: Path) -> None:
    with pytest.raises(
        OnnxModelError, match=r"float-only model: node 'conv3_node' \(Conv\) computes in float"
    ):
        graph_from_onnx(M.conv_model())


def test_a_dimension_of_size_zero_is_a_size(tmp_path: Path) -> None:
    """An empty input reads (its nodes on the CPU: nothing to compute); --shape takes a 0."""
    model = _model(
        [helper.make_node("Relu", ["x"], ["y"])], [_vi("x", np.int8, [0, 3, 4])], [_vi("y", np.int8, None)]
    )
    result = _run(tmp_path, model)
    assert result.outputs["y"].shape == (0, 3, 4)
    assert "tensor 'x' is empty ([0, 3, 4])" in result.placement[0].reason
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    onnx.save(model, tmp_path / "dyn.onnx")
    with pytest.raises(OnnxModelError, match="dynamic dimension 0"):
        graph_from_onnx(tmp_path / "dyn.onnx")
    r = _accel(str(tmp_path / "dyn.onnx"), "--shape", "x=0x3x4", "--compare")
    assert r.returncode == 0 and "0 differing bytes" in r.stdout, r.stderr
    assert _placed(_run(tmp_path, model, shapes={"x": (2, 3, 4)})) == [("Relu", True)]


@pytest.mark.parametrize("opset", [11, 22])
def test_opsets_outside_the_window_read_unchanged_ops(tmp_path: Path, opset: int) -> None:
    """QLinearConv's schema is opset 10's up to now: read at opset 11 and 22 as at 17."""
    model = M.quantize(M.conv_model(), "qoperator", "uint8", per_channel=False)
    model.opset_import[0].version = opset
    assert [p.op for p in _run(tmp_path, model).placement if p.npu] == ["QLinearConv"]


def test_an_op_whose_schema_changed_stays_on_the_cpu(tmp_path: Path) -> None:
    """Opset 11's Resize is not opset 13's (its schema of opset 11): the CPU, with why."""
    nodes = [helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="nearest")]
    model = _model(
        nodes,
        [_vi("x", np.uint8, [1, 2, 3, 3])],
        [_vi("y", np.uint8, None)],
        {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2, 2], np.float32)},
        opset=11,
    )
    result = _run(tmp_path, model)
    assert not result.placement[0].npu
    assert "Resize of opset 11 (its schema of opset 11) is not the Resize of opsets 13 to 21" in (
        result.placement[0].reason
    )
    model.opset_import[0].version = 13
    assert _placed(_run(tmp_path, model)) == [("Resize", True)]
    model.opset_import.pop(0)
    with pytest.raises(OnnxModelError, match="imports no default-domain opset"):
        graph_from_onnx(model)


def _maxpool(**attrs: object) -> onnx.ModelProto:
    outputs = ["y", "i"] if attrs.pop("indices", False) else ["y"]
    return _model(
        [helper.make_node("MaxPool", ["x"], outputs, **attrs)],
        [_vi("x", np.uint8, [1, 3, 8, 9])],
        [
            _vi(o, np.uint8, None) if o == "y" else helper.make_tensor_value_info(o, TensorProto.INT64, None)
            for o in outputs
        ],
    )


@pytest.mark.parametrize(
    "attrs",
    [
        dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        dict(kernel_shape=[2, 2], strides=[3, 3], ceil_mode=1, pads=[1, 0, 0, 1]),
        dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_UPPER"),
        dict(kernel_shape=[3, 2], strides=[2, 1], auto_pad="SAME_LOWER"),
    ],
    ids=["ceil", "ceil_pads", "same_upper", "same_lower"],
)
def test_maxpool_ceil_mode_and_auto_pad_on_the_npu(tmp_path: Path, attrs: dict) -> None:
    assert _placed(_run(tmp_path, _maxpool(**attrs))) == [("MaxPool", True)]


@pytest.mark.parametrize(
    ("attrs", "reason"),
    [
        (
            dict(kernel_shape=[2, 2], dilations=[2, 2]),
            "MaxPool with dilations [2, 2]: the NPU's MAXPOOL has none",
        ),
        (dict(kernel_shape=[2, 2], indices=True), "MaxPool's Indices output"),
    ],
    ids=["dilations", "indices"],
)
def test_maxpool_forms_off_the_npu_say_why(tmp_path: Path, attrs: dict, reason: str) -> None:
    result = _run(tmp_path, _maxpool(**attrs))
    assert not result.placement[0].npu and reason in result.placement[0].reason


def _qlinear_conv(auto_pad: str, stride: int) -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    inits = {
        "xs": np.float32(0.02),
        "xz": np.uint8(120),
        "w": rng.integers(-60, 60, (4, 3, 3, 3)).astype(np.int8),
        "ws": np.float32(0.01),
        "wz": np.int8(0),
        "ys": np.float32(0.05),
        "yz": np.uint8(128),
    }
    conv = helper.make_node(
        "QLinearConv",
        ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"],
        ["y"],
        auto_pad=auto_pad,
        strides=[stride, stride],
    )
    return _model([conv], [_vi("x", np.uint8, [1, 3, 7, 8])], [_vi("y", np.uint8, None)], inits)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("stride", [1, 2])
def test_qlinearconv_auto_pad_on_the_npu(tmp_path: Path, auto_pad: str, stride: int) -> None:
    assert _placed(_run(tmp_path, _qlinear_conv(auto_pad, stride))) == [("QLinearConv", True)]


def test_qlinearmatmul_forms_off_the_npu_say_why(tmp_path: Path) -> None:
    """A 3-D constant weight (a batched MatMul) and a run-time weight: the CPU, each with its reason."""
    params = {
        "as": np.float32(0.02),
        "az": np.uint8(128),
        "bs": np.float32(0.01),
        "bz": np.int8(0),
        "ys": np.float32(0.1),
        "yz": np.uint8(100),
    }
    ins = ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
    w3 = np.arange(2 * 4 * 5, dtype=np.int8).reshape(2, 4, 5) - 20
    batched = _model(
        [helper.make_node("QLinearMatMul", ins, ["y"])],
        [_vi("a", np.uint8, [2, 3, 4])],
        [_vi("y", np.uint8, None)],
        params | {"b": w3},
    )
    result = _run(tmp_path, batched)
    assert "a 3-D right operand (a batched MatMul)" in result.placement[0].reason
    fed = _model(
        [helper.make_node("QLinearMatMul", ins, ["y"])],
        [_vi("a", np.uint8, [3, 4]), _vi("b", np.int8, [4, 5])],
        [_vi("y", np.uint8, None)],
        params,
    )
    result = _run(tmp_path, fed)
    assert "the right operand 'b' is not a constant" in result.placement[0].reason


def test_accel_run_takes_one_input_per_name(tmp_path: Path) -> None:
    model = _model(
        [helper.make_node("Sub", ["a", "b"], ["y"])],
        [_vi("a", np.int8, [2, 3]), _vi("b", np.int8, [2, 3])],
        [_vi("y", np.int8, [2, 3])],
    )
    onnx.save(model, tmp_path / "sub.onnx")
    np.save(tmp_path / "a.npy", np.full((2, 3), 9, np.int8))
    np.save(tmp_path / "b.npy", np.full((2, 3), 4, np.int8))
    out = tmp_path / "y.npy"
    r = _accel(
        str(tmp_path / "sub.onnx"),
        "--input",
        f"b={tmp_path / 'b.npy'}",
        "--input",
        f"a={tmp_path / 'a.npy'}",
        "--output",
        str(out),
        "--compare",
    )
    assert r.returncode == 0 and "0 differing bytes" in r.stdout, r.stderr
    assert np.load(out).tolist() == [[5, 5, 5], [5, 5, 5]]
    r = _accel(str(tmp_path / "sub.onnx"), "--input", str(tmp_path / "a.npy"), "--output", str(out))
    assert r.returncode == 0, r.stderr  # a bare file is the first input; the other is random
    assert np.array_equal(np.load(out), 9 - lm.random_inputs(lm.input_specs(tmp_path / "sub.onnx"))["b"])
    r = _accel(str(tmp_path / "sub.onnx"), "--input", f"c={tmp_path / 'a.npy'}")
    assert (
        r.returncode == ExitCode.BAD_FILE
        and r.stderr == "accel run: --input c=: the model has no input 'c' (it has a, b)\n"
    )
    r = _accel(
        str(tmp_path / "sub.onnx"), "--input", f"a={tmp_path / 'a.npy'}", "--input", f"a={tmp_path / 'b.npy'}"
    )
    assert r.returncode == ExitCode.USAGE and r.stderr.count("\n") == 1 and "given twice" in r.stderr


def _qlinear_binary(
    op: str, dtype: type, x_shape: list[int], c_shape: list[int], const_first: bool
) -> onnx.ModelProto:
    rng = np.random.default_rng(4)
    info = np.iinfo(dtype)
    zp = dtype(0 if dtype is np.int8 else 128)
    inits = {
        "c": rng.integers(info.min, info.max + 1, c_shape).astype(dtype),
        "xs": np.float32(0.03),
        "xz": zp,
        "cs": np.float32(0.011),
        "cz": dtype(zp + 5),
        "ys": np.float32(0.05 if op == "QLinearAdd" else 0.002),
        "yz": zp,
    }
    a, b = (["c", "cs", "cz"], ["x", "xs", "xz"]) if const_first else (["x", "xs", "xz"], ["c", "cs", "cz"])
    node = helper.make_node(op, [*a, *b, "ys", "yz"], ["y"], domain="com.microsoft")
    return _model([node], [_vi("x", dtype, x_shape)], [_vi("y", dtype, None)], inits)


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize(
    ("x_shape", "c_shape", "const_first", "lowered"),
    [
        ([10, 40], [40], False, "LOOKUP2"),  # a MatMul's bias
        ([10, 40], [1, 40], True, "LOOKUP2"),
        ([1, 3, 5, 6], [6], False, "LOOKUP2"),  # 4-D: the constant moves to the NHWC layout
        ([12, 12], [], False, "LOOKUP"),  # a one-element constant (attention's scale)
        ([12, 12], [1, 1], True, "LOOKUP"),
    ],
)
def test_qlinear_binary_with_a_constant_operand_on_the_npu(
    tmp_path: Path,
    op: str,
    dtype: type,
    x_shape: list[int],
    c_shape: list[int],
    const_first: bool,
    lowered: str,
) -> None:
    model = _qlinear_binary(op, dtype, x_shape, c_shape, const_first)
    assert _placed(_run(tmp_path, model)) == [(op, True)]
    assert [n.op for n in graph_from_onnx(model).graph.nodes] == [lowered]


def test_qlinear_add_of_a_per_channel_constant_says_why(tmp_path: Path) -> None:
    result = _run(tmp_path, _qlinear_binary("QLinearAdd", np.uint8, [1, 3, 5, 6], [1, 3, 1, 1], False))
    assert _placed(result) == [("QLinearAdd", False)]
    assert "broadcast of [1, 3, 5, 6] and [1, 3, 1, 1]" in result.placement[0].reason
