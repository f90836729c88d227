"""The model generator writes valid, really quantized TFLite models that both runtimes run."""

from __future__ import annotations

import numpy as np
import pytest

import modelgen as g
from libaccel.compiler.graph import QuantParams, graph_from_tflite
from modelgen.cli import SAMPLES


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_sample_runs_on_reference_kernels(name: str) -> None:
    model = SAMPLES[name]()
    inputs = g.random_inputs(model, seed=1)
    out = g.run_reference(model, inputs)
    graph = graph_from_tflite(model)
    (o,) = graph.outputs
    assert out[0].shape == graph.tensors[o].shape
    # Real quantization: outputs spread over many codes instead of one saturated value.
    assert np.unique(out[0]).size > 5


def test_litert_agrees_with_tflite_runtime() -> None:
    model = g.conv2d_model((1, 9, 9, 5), 7, 3, 2, "SAME", True, "NONE", seed=3)
    inputs = g.random_inputs(model, seed=2)
    a = g.run_reference(model, inputs, runtime="tflite_runtime")
    b = g.run_reference(model, inputs, runtime="ai_edge_litert")
    assert np.array_equal(a[0], b[0])


def test_per_channel_quantization_round_trips() -> None:
    model = g.conv2d_model((1, 6, 6, 3), 4, 3, 1, "VALID", True, "RELU", seed=5)
    graph = graph_from_tflite(model)
    (node,) = graph.nodes
    assert node.op == "CONV_2D"
    assert node.options["padding"] == "VALID"
    assert node.options["fused_activation_function"] == "RELU"
    x, w, b = (graph.tensors[i] for i in node.inputs)
    assert w.data is not None and w.data.shape == (4, 3, 3, 3) and w.data.dtype == np.int8
    assert isinstance(w.quant, QuantParams) and len(w.quant.scales) == 4 and w.quant.axis == 0
    assert b.dtype == "int32" and b.quant is not None
    # TFLite requires bias scale == input scale * filter scale per channel.
    assert x.quant is not None
    for bs, ws in zip(b.quant.scales, w.quant.scales, strict=True):
        assert bs == pytest.approx(x.quant.scale * ws, rel=1e-6)
    assert x.data is None and graph.inputs == (node.inputs[0],)


def test_builder_rejects_bad_input() -> None:
    m = g.ModelBuilder()
    with pytest.raises(ValueError, match="unknown dtype"):
        m.add_tensor("x", (1,), "int7")
    with pytest.raises(ValueError, match="declared"):
        m.add_tensor("x", (2,), "int8", data=np.zeros(3, np.int8))
    with pytest.raises(ValueError, match="unknown TFLite builtin"):
        m.add_op("NOT_AN_OP", [0], [0])
    with pytest.raises(ValueError, match="not a TFLite model"):
        graph_from_tflite(b"\0" * 32)
