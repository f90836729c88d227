"""TRANSPOSE_CONV lowered as a zero-point canvas, a strided COPY and a stride-1 CONV2D with the flipped
filter: compiled, run on the test device and compared with BUILTIN_REF of both runtimes (0 bytes)."""

from __future__ import annotations

import pytest

import modelgen as g
from libaccel import Device
from libaccel.compiler import check_support, compile_partition, graph_from_tflite
from libaccel.compiler.graph import Graph
from tests.compiler.helpers import assert_exact

RUNTIMES = ["tflite_runtime", "ai_edge_litert"]


@pytest.fixture(params=RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    return request.param


# (input shape, out channels, kernel, stride, padding)
GRID = [
    ((1, 4, 4, 8), 4, 2, 2, "SAME"),
    ((1, 5, 7, 3), 6, 3, 2, "SAME"),
    ((1, 5, 7, 3), 6, 3, 2, "VALID"),
    ((1, 3, 5, 4), 5, 4, 2, "SAME"),
    ((1, 3, 5, 4), 5, 4, 2, "VALID"),
    ((1, 6, 6, 2), 3, 5, 2, "SAME"),
    ((1, 4, 3, 5), 2, 3, 3, "SAME"),
    ((1, 4, 3, 5), 2, 2, 3, "VALID"),  # kernel smaller than the stride: gaps in the output
    ((1, 3, 3, 6), 4, 5, 3, "VALID"),
    ((1, 7, 5, 3), 4, 3, 1, "SAME"),
    ((1, 7, 5, 3), 4, 4, 1, "VALID"),
    ((2, 3, 4, 16), 8, 3, 2, "SAME"),
    ((1, 1, 1, 32), 16, 4, 2, "VALID"),
    ((1, 8, 8, 1), 1, (3, 5), (2, 1), "SAME"),
    ((1, 16, 16, 32), 16, 3, 2, "SAME"),  # a U-Net decoder's Conv2DTranspose(strides=2, padding="same")
    ((1, 8, 8, 64), 32, 2, 2, "SAME"),
]


@pytest.mark.parametrize("per_channel", [True, False], ids=["per_channel", "per_tensor"])
@pytest.mark.parametrize("case", GRID, ids=str)
def test_transpose_conv_grid(dev: Device, runtime: str, case: tuple, per_channel: bool) -> None:
    shape, cout, kernel, stride, padding = case
    model = g.transpose_conv_model(shape, cout, kernel, stride, padding, per_channel, seed=len(str(case)))
    assert_exact(dev, model, runtime=runtime)


@pytest.mark.parametrize("act", ["RELU", "RELU6", "RELU_N1_TO_1"])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_transpose_conv_fused_activation(dev: Device, runtime: str, act: str, dtype: str) -> None:
    """Both runtimes' reference kernels clamp to the fused activation's range (checked here)."""
    model = g.transpose_conv_model((1, 5, 6, 4), 3, 3, 2, "SAME", dtype == "int8", act, 3, dtype)
    assert_exact(dev, model, runtime=runtime)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("case", [((1, 5, 6, 4), 3, 3, 2, "SAME"), ((1, 4, 4, 3), 5, 2, 2, "VALID")], ids=str)
def test_transpose_conv_uint8(dev: Device, runtime: str, case: tuple, bias: bool) -> None:
    shape, cout, kernel, stride, padding = case
    model = g.transpose_conv_model(
        shape, cout, kernel, stride, padding, False, seed=5, dtype="uint8", bias=bias
    )
    assert_exact(dev, model, runtime=runtime)


def test_transpose_conv_without_bias(dev: Device, runtime: str) -> None:
    model = g.transpose_conv_model((1, 4, 5, 6), 4, 3, 2, "SAME", bias=False, seed=9)
    assert_exact(dev, model, runtime=runtime)


@pytest.mark.parametrize("out_hw", [(8, 10), (7, 9), (8, 9)], ids=str)
def test_transpose_conv_other_output_sizes(dev: Device, runtime: str, out_hw: tuple) -> None:
    """An output_shape other than Keras' default (output_padding): TFLite pads by the output size."""
    model = g.transpose_conv_model((1, 4, 5, 3), 4, 3, 2, "SAME", seed=4, out_hw=out_hw)
    assert_exact(dev, model, runtime=runtime)


def test_transpose_conv_inconsistent_output_size(dev: Device) -> None:
    """An output size whose SAME convolution would not give back the input size: LiteRT's Prepare
    rejects the model, TFLite 2.14 runs it (padding from the output size alone), and so does the NPU."""
    model = g.transpose_conv_model((1, 4, 5, 3), 4, 3, 2, "SAME", seed=4, out_hw=(9, 11))
    assert_exact(dev, model, runtime="tflite_runtime")
    with pytest.raises(RuntimeError, match="computed_input_height"):
        g.run_reference(model, g.random_inputs(model), "ai_edge_litert")


def _graph(**kw: object) -> Graph:
    return graph_from_tflite(g.transpose_conv_model((1, 4, 5, 3), 4, 3, **kw))  # type: ignore[arg-type]


def test_transpose_conv_instructions() -> None:
    """Strided: FILL + COPY + CONV2D, the canvas in the arena; stride 1: one CONV2D on the input."""
    strided = _graph(stride=2)
    compiled = compile_partition(strided, [0], 1 << 16)
    assert compiled.stats["instructions"].keys() >= {"FILL", "COPY", "CONV2D"}
    canvas = 1 * 7 * 9 * 3
    assert compiled.stats["activation_bytes_unshared"] == 4 * 5 * 3 + 8 * 10 * 4 + canvas
    plain = compile_partition(_graph(stride=1), [0], 1 << 16)
    assert "FILL" not in plain.stats["instructions"] and plain.stats["instructions"]["CONV2D"] == 1


def test_transpose_conv_output_shape_must_match() -> None:
    graph = _graph(stride=2)
    node = graph.nodes[0]
    shape = graph.tensors[node.inputs[0]]
    shape.data = shape.data.copy()
    shape.data[1] += 1
    support = check_support(graph, node)
    assert not support and "output_shape" in support.reason
    shape.data = None
    support = check_support(graph, node)
    assert not support and "run time" in support.reason
