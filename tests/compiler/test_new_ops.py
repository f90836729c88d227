"""LOGISTIC, TANH, HARD_SWISH, QUANTIZE, MEAN, RESIZE_NEAREST_NEIGHBOR, per-channel FULLY_CONNECTED and
flushed multipliers: compiled, run on the shim and compared with BUILTIN_REF (0 differing bytes); plus the
compile-time tables against both TFLite runtimes on all 256 inputs."""

from __future__ import annotations

import numpy as np
import pytest

import modelgen as g
from libaccel import Device
from libaccel.compiler import check_support, graph_from_tflite, tables
from tests.compiler.helpers import assert_exact, run_both

RUNTIMES = ["tflite_runtime", "ai_edge_litert"]


def _one_op(op: str, din: str, dout: str, seed: int) -> tuple[bytes, g.Quant, g.Quant]:
    """``op`` on a [1, 256] tensor, so one invoke evaluates every input value."""
    rng = np.random.default_rng(seed)
    m = g.ModelBuilder()
    iq = g.activation_quant(rng, din, g.random_scale(rng, 0.005, 0.3))
    if op == "LOGISTIC":
        oq = g.Quant.tensor(1 / 256, -128 if dout == "int8" else 0)
    elif op == "TANH":
        oq = g.Quant.tensor(1 / 128, 0 if dout == "int8" else 128)
    else:
        oq = g.activation_quant(rng, dout, g.random_scale(rng, 0.005, 0.3))
    x = m.add_tensor("input", (1, 256), din, iq)
    y = m.add_tensor("output", (1, 256), dout, oq)
    m.add_op(op, [x], [y])
    return m.build([x], [y]), iq, oq


def _table(op: str, iq: g.Quant, oq: g.Quant, din: str, dout: str) -> np.ndarray:
    args = (iq.scales[0], iq.zero_points[0], oq.scales[0], oq.zero_points[0])
    if op == "LOGISTIC":
        return tables.logistic_table(*args, din)
    if op == "TANH":
        return tables.tanh_table(*args, din)
    if op == "HARD_SWISH":
        return tables.hard_swish_table(*args, din)
    return tables.requantize_table(*args, din, dout)


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize(
    "op,din,dout",
    [
        ("LOGISTIC", "int8", "int8"),
        ("LOGISTIC", "uint8", "uint8"),
        ("TANH", "int8", "int8"),
        ("TANH", "uint8", "uint8"),
        ("HARD_SWISH", "int8", "int8"),
        ("HARD_SWISH", "uint8", "uint8"),
        ("QUANTIZE", "int8", "int8"),
        ("QUANTIZE", "int8", "uint8"),
        ("QUANTIZE", "uint8", "int8"),
    ],
)
def test_tables_equal_reference_on_all_inputs(runtime: str, op: str, din: str, dout: str) -> None:
    lo = -128 if din == "int8" else 0
    every = np.arange(lo, lo + 256).astype(din).reshape(1, 256)
    for seed in range(12):  # different scales and zero points
        model, iq, oq = _one_op(op, din, dout, seed)
        ref = g.run_reference(model, [every], runtime)[0].reshape(256).astype(np.int32)
        np.testing.assert_array_equal(_table(op, iq, oq, din, dout), ref, err_msg=f"{op} seed {seed}")


@pytest.mark.parametrize("op", ["LOGISTIC", "TANH", "HARD_SWISH"])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_lut_activations(dev: Device, op: str, dtype: str) -> None:
    assert_exact(dev, g.activation_model(op, (1, 9, 7, 8), 23, dtype))


@pytest.mark.parametrize("din,dout", [("int8", "int8"), ("int8", "uint8"), ("uint8", "int8")])
def test_quantize_requantizes(dev: Device, din: str, dout: str) -> None:
    assert_exact(dev, g.quantize_model((1, 6, 6, 8), din, dout, 5))


def test_float_quantize_and_dequantize_stay_on_cpu() -> None:
    graph = graph_from_tflite(g.quantize_model((1, 4, 4, 3), "float32", "int8", 1))
    support = check_support(graph, graph.nodes[0])
    assert not support.ok and "float" in support.reason


@pytest.mark.parametrize(
    "in_shape,out_hw,ac,hp",
    [
        ((1, 4, 5, 3), (8, 10), False, False),
        ((1, 3, 3, 8), (9, 9), False, True),
        ((2, 5, 4, 2), (5, 12), False, False),
        ((1, 8, 8, 4), (4, 4), False, False),
        ((1, 4, 4, 3), (7, 7), True, False),
    ],
)
def test_resize_nearest(dev: Device, in_shape, out_hw, ac: bool, hp: bool) -> None:
    assert_exact(dev, g.resize_model("RESIZE_NEAREST_NEIGHBOR", in_shape, out_hw, ac, hp, 47))


def test_resize_nearest_irregular_stays_on_cpu() -> None:
    graph = graph_from_tflite(g.resize_model("RESIZE_NEAREST_NEIGHBOR", (1, 37, 41, 3), (50, 60), seed=1))
    support = check_support(graph, graph.nodes[0])
    assert not support.ok and "strided copies" in support.reason


@pytest.mark.parametrize(
    "in_shape,same_quant,dtype",
    [
        ((1, 4, 4, 16), False, "int8"),
        ((1, 8, 8, 8), False, "int8"),
        ((1, 7, 7, 32), True, "int8"),
        ((1, 7, 7, 64), False, "int8"),
        ((2, 2, 2, 5), False, "int8"),
        ((1, 5, 3, 64), False, "int8"),
        ((1, 14, 14, 8), False, "int8"),
        ((1, 6, 6, 16), False, "uint8"),
    ],
)
def test_mean_hw(dev: Device, in_shape: tuple, same_quant: bool, dtype: str) -> None:
    model = g.mean_model(in_shape, (1, 2), True, 53, dtype, same_quant=same_quant)
    graph = graph_from_tflite(model)
    support = check_support(graph, graph.nodes[0])
    assert support.ok, support.reason
    assert_exact(dev, model)


@pytest.mark.parametrize("runtime", ["tflite_runtime", "ai_edge_litert"])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("in_shape", [(1, 4, 4, 8), (1, 7, 7, 16), (2, 3, 5, 8), (1, 2, 3, 4)], ids=str)
def test_mean_without_keep_dims_of_equal_quantization(
    dev: Device, runtime: str, dtype: str, in_shape: tuple
) -> None:
    """Both runtimes requantize the integer sum here too (no truncating division of the raw sum)."""
    assert_exact(dev, g.mean_model(in_shape, (1, 2), False, 3, dtype, same_quant=True), runtime=runtime)


@pytest.mark.parametrize("batch,k,n", [(1, 64, 10), (3, 100, 17)])
def test_fully_connected_per_channel(dev: Device, batch: int, k: int, n: int) -> None:
    assert_exact(dev, g.fully_connected_model(batch, k, n, "NONE", 61, per_channel=True))


def test_flushed_channel_multiplier(dev: Device) -> None:
    """A channel whose multiplier TFLite flushes to zero (shift < -31) outputs its zero point, exactly."""
    rng = np.random.default_rng(3)
    m = g.ModelBuilder()
    iq = g.Quant.tensor(0.02, 3)
    x = m.add_tensor("input", (1, 5, 5, 4), "int8", iq)
    wdata = rng.integers(-127, 128, size=(3, 3, 3, 4)).astype(np.int8)
    wq = g.Quant((0.01, 1e-12, 0.02), (0, 0, 0), 0)
    wt = m.add_const("filter", wdata, "int8", wq)
    bq = g.Quant(tuple(float(np.float32(0.02 * s)) for s in wq.scales), (0, 0, 0), 0)
    b = m.add_const("bias", np.array([100, 5, -30], dtype=np.int32), "int32", bq)
    y = m.add_tensor("output", (1, 5, 5, 3), "int8", g.Quant.tensor(0.3, -5))
    m.add_op(
        "CONV_2D", [x, wt, b], [y], padding="SAME", stride_h=1, stride_w=1, fused_activation_function="NONE"
    )
    model = m.build([x], [y])
    got, ref = run_both(dev, model)
    np.testing.assert_array_equal(got[0], ref[0])
    assert (ref[0][..., 1] == -5).all() and np.unique(ref[0]).size > 2
