"""The delegate reads the runtimes' structs right: the graph it decodes from a live TfLiteContext
(tensors, quantization incl. per-channel TfLiteFloatArray, constant data, builtin option structs)
equals the graph read from the .tflite file itself, on both runtimes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import modelgen as gen
from delegate_teflon import plugin
from libaccel.compiler.graph import graph_from_tflite
from libaccel.compiler.reference import annotate_reference

MODELS: dict[str, Callable[[], bytes]] = {
    "conv_int8_per_channel": lambda: gen.conv2d_model((1, 9, 9, 3), 5, 3, 2, "SAME", True, "RELU6", 1),
    "conv_uint8_per_tensor": lambda: gen.conv2d_model(
        (1, 6, 6, 2), 4, 1, 1, "VALID", False, "RELU", 2, "uint8"
    ),
    "depthwise_multiplier2": lambda: gen.depthwise_conv2d_model(
        (1, 7, 7, 3), 2, 3, 1, "VALID", True, "NONE", 3
    ),
    "fully_connected": lambda: gen.fully_connected_model(2, 12, 5, "RELU", 4),
    "sub_broadcast": lambda: gen.elementwise_model("SUB", (1, 4, 4, 6), (1, 1, 1, 6), "RELU6", 5),
    "maxpool_same": lambda: gen.pool_model("MAX_POOL_2D", (1, 7, 7, 4), 3, 2, "SAME", "NONE", 6),
    "concat": lambda: gen.concat_model([(1, 2, 2, 3), (1, 2, 2, 5)], 3, 7),
    "reshape": lambda: gen.reshape_model((1, 4, 4, 2), (1, 32), 8),
    "pad": lambda: gen.pad_model((1, 3, 3, 2), [[0, 0], [1, 2], [2, 1], [0, 0]], 9),
}


def _prepare(runtime: str, interp_mod: Any, lib_path: str, model: bytes) -> plugin.PrepareRecord:
    delegate = interp_mod.load_delegate(lib_path, {"device": "shim", "log_level": "quiet"})
    gen.reference_interpreter(model, runtime, [delegate])  # the delegate prepares while it is built
    record = plugin.last_prepare()
    assert record is not None
    return record


@pytest.mark.parametrize("name", sorted(MODELS))
def test_context_graph_equals_file_graph(name: str, runtime: str, interp_mod: Any, lib_path: str) -> None:
    model = MODELS[name]()
    record = _prepare(runtime, interp_mod, lib_path, model)
    assert record.layout.distribution == runtime.replace("_", "-")
    # The delegate annotates the graph with the runtime's reference arithmetic (reference.py).
    want = annotate_reference(graph_from_tflite(model), record.layout.distribution)
    got = record.graph
    assert [n.op for n in got.nodes] == [n.op for n in want.nodes]
    for g, w in zip(got.nodes, want.nodes, strict=True):
        assert g.inputs == w.inputs and g.outputs == w.outputs
        for key, value in g.options.items():
            if key == "new_shape":
                continue  # TfLiteReshapeParams keeps it only for old models; the shape operand counts
            assert value == w.options[key], (g.op, key)
    assert got.inputs == want.inputs and got.outputs == want.outputs
    for index, t in got.tensors.items():
        w = want.tensors[index]
        assert (t.name, t.dtype, t.shape, t.quant) == (w.name, w.dtype, w.shape, w.quant), index
        assert (t.data is None) == (w.data is None), index
        if t.data is not None:
            assert t.data.dtype == w.data.dtype and np.array_equal(t.data, w.data), index


def test_per_channel_scales_are_read(runtime: str, interp_mod: Any, lib_path: str) -> None:
    """A per-channel filter's scales arrive one per output channel (the TfLiteFloatArray trap)."""
    record = _prepare(runtime, interp_mod, lib_path, MODELS["conv_int8_per_channel"]())
    conv = record.graph.nodes[0]
    q = record.graph.tensors[conv.inputs[1]].quant
    assert q is not None and len(q.scales) == 5 and len(set(q.scales)) > 1 and q.axis == 0
