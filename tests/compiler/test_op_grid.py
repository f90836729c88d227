"""The op grid (in the spirit of Mesa's test_teflon.cpp): every case compiled, run on the test
device (the shim; vnpu.ko in the QEMU guest), and compared with TFLite's reference kernels
(BUILTIN_REF) with 0 differing bytes.

The grid is a representative sample sized for a 2-core CI machine: sizes 1-112,
kernels 1/3/5, channels 1-256, strides 1/2, SAME/VALID, per-tensor and
per-channel int8, uint8, every fused activation.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import modelgen as g
from libaccel import Device
from libaccel.compiler import activations, check_support, float_chain, graph_from_tflite, registry, tables
from libaccel.compiler import quant as q
from libaccel.compiler.binary_tables import squared_difference_table
from tests.compiler.helpers import assert_exact
from uapi.fixed_point import multiply_by_quantized_multiplier_single_round


def _window_case_id(case: tuple, channels: str) -> str:
    """A CONV_CASES/DW_CASES row's test id; ``channels`` prefixes the second field (o: out_ch,
    m: depth_multiplier)."""
    in_shape, second, kernel, stride, padding, per_channel, act, dtype = case
    shape = "x".join(map(str, in_shape))
    quant = "pc" if per_channel else "pt"
    return f"{dtype}-{shape}-{channels}{second}-k{kernel}s{stride}-{padding}-{quant}-{act}"


# (in_shape, out_ch, kernel, stride, padding, per_channel, act, dtype)
CONV_CASES = [
    ((1, 1, 1, 8), 4, 1, 1, "SAME", True, "NONE", "int8"),
    ((1, 5, 5, 1), 1, 3, 1, "SAME", True, "NONE", "int8"),
    ((1, 8, 8, 3), 16, 3, 2, "SAME", True, "RELU6", "int8"),
    ((1, 8, 8, 16), 8, 1, 1, "VALID", False, "RELU", "int8"),
    ((1, 9, 7, 4), 6, 5, 1, "SAME", True, "RELU_N1_TO_1", "int8"),
    ((1, 11, 11, 5), 7, 5, 2, "VALID", True, "NONE", "int8"),
    ((1, 17, 17, 8), 32, 3, 1, "VALID", True, "RELU6", "int8"),
    ((1, 16, 16, 32), 64, 1, 1, "SAME", True, "NONE", "int8"),
    ((1, 4, 4, 256), 16, 3, 1, "SAME", True, "RELU", "int8"),
    ((1, 4, 4, 16), 256, 1, 1, "SAME", False, "NONE", "int8"),
    ((2, 6, 6, 3), 5, 3, 2, "SAME", True, "NONE", "int8"),
    ((1, 112, 112, 3), 8, 3, 2, "SAME", True, "RELU6", "int8"),
    ((1, 8, 8, 3), 8, 3, 1, "SAME", False, "NONE", "uint8"),
    ((1, 10, 10, 4), 6, 5, 2, "VALID", False, "RELU6", "uint8"),
]


@pytest.mark.parametrize(
    "case",
    CONV_CASES,
    ids=lambda c: _window_case_id(c, "o"),
)
def test_conv2d(dev: Device, case: tuple) -> None:
    in_shape, out_ch, kernel, stride, padding, per_channel, act, dtype = case
    assert_exact(dev, g.conv2d_model(in_shape, out_ch, kernel, stride, padding, per_channel, act, 7, dtype))


def test_conv2d_dilated(dev: Device) -> None:
    assert_exact(dev, g.conv2d_model((1, 12, 12, 4), 8, 3, 1, "SAME", True, "NONE", 3, dilation=2))


def test_depthwise_dilated_without_bias(dev: Device) -> None:
    model = g.depthwise_conv2d_model((1, 12, 12, 4), 1, 3, 1, "SAME", True, "NONE", 3, dilation=2, bias=False)
    assert_exact(dev, model)


def test_fully_connected_without_bias(dev: Device) -> None:
    assert_exact(dev, g.fully_connected_model(2, 30, 7, "NONE", 5, bias=False))


# (in_shape, depth_multiplier, kernel, stride, padding, per_channel, act, dtype)
DW_CASES = [
    ((1, 5, 5, 1), 1, 3, 1, "SAME", True, "NONE", "int8"),
    ((1, 8, 8, 16), 1, 3, 2, "SAME", True, "RELU6", "int8"),
    ((1, 9, 9, 8), 2, 3, 1, "VALID", True, "RELU", "int8"),
    ((1, 14, 14, 32), 1, 5, 2, "SAME", False, "NONE", "int8"),
    ((1, 7, 7, 256), 1, 3, 1, "SAME", True, "RELU6", "int8"),
    ((1, 56, 56, 8), 1, 3, 2, "SAME", True, "RELU6", "int8"),
    ((1, 6, 6, 4), 1, 1, 1, "VALID", True, "NONE", "int8"),
    ((1, 8, 8, 6), 1, 3, 1, "SAME", False, "RELU", "uint8"),
    ((1, 9, 9, 3), 2, 5, 2, "VALID", False, "NONE", "uint8"),
]


@pytest.mark.parametrize(
    "case",
    DW_CASES,
    ids=lambda c: _window_case_id(c, "m"),
)
def test_depthwise_conv2d(dev: Device, case: tuple) -> None:
    in_shape, dm, kernel, stride, padding, per_channel, act, dtype = case
    assert_exact(
        dev, g.depthwise_conv2d_model(in_shape, dm, kernel, stride, padding, per_channel, act, 11, dtype)
    )


# (batch, in_features, out_features, act, dtype)
FC_CASES = [
    (1, 1, 1, "NONE", "int8"),
    (1, 64, 10, "NONE", "int8"),
    (3, 100, 17, "RELU", "int8"),
    (1, 1024, 256, "RELU6", "int8"),
    (2, 48, 12, "NONE", "uint8"),
]


@pytest.mark.parametrize("case", FC_CASES, ids=lambda c: f"{c[4]}-b{c[0]}-k{c[1]}-o{c[2]}-{c[3]}")
def test_fully_connected(dev: Device, case: tuple) -> None:
    batch, k, n, act, dtype = case
    assert_exact(dev, g.fully_connected_model(batch, k, n, act, 13, dtype))


def test_fully_connected_flattens_4d_input(dev: Device) -> None:
    assert_exact(dev, g.fully_connected_model(1, 4 * 4 * 8, 10, "NONE", 17, in_shape=(1, 4, 4, 8)))


# (op, shape1, shape2, act, dtype)
ELEMENTWISE_CASES = [
    ("ADD", (1, 8, 8, 16), None, "NONE", "int8"),
    ("ADD", (1, 5, 5, 8), (1, 1, 1, 8), "RELU", "int8"),
    ("ADD", (2, 3, 4, 5), (1, 3, 1, 5), "RELU6", "int8"),
    ("ADD", (1, 7, 7, 3), None, "NONE", "uint8"),
    ("SUB", (1, 6, 6, 8), None, "NONE", "int8"),
    ("SUB", (1, 6, 6, 8), (8,), "RELU_N1_TO_1", "int8"),
    ("SUB", (4, 9), None, "RELU", "uint8"),
    ("MUL", (1, 8, 8, 16), None, "NONE", "int8"),
    ("MUL", (1, 4, 4, 8), (1, 4, 4, 1), "RELU6", "int8"),
    ("MUL", (1, 5, 5, 4), None, "NONE", "uint8"),
]


@pytest.mark.parametrize(
    "case",
    ELEMENTWISE_CASES,
    ids=lambda c: f"{c[0]}-{c[4]}-{'x'.join(map(str, c[1]))}-{'x'.join(map(str, c[2] or c[1]))}-{c[3]}",
)
def test_elementwise(dev: Device, case: tuple) -> None:
    op, s1, s2, act, dtype = case
    for seed in (1, 2):  # different scale ratios
        assert_exact(dev, g.elementwise_model(op, s1, s2, act, seed, dtype))


# (op, in_shape, filter, stride, padding, act, dtype)
POOL_CASES = [
    ("AVERAGE_POOL_2D", (1, 8, 8, 16), 2, 2, "VALID", "NONE", "int8"),
    ("AVERAGE_POOL_2D", (1, 7, 7, 4), 3, 2, "SAME", "RELU6", "int8"),
    ("AVERAGE_POOL_2D", (1, 7, 7, 64), 7, 1, "VALID", "NONE", "int8"),
    ("AVERAGE_POOL_2D", (1, 9, 9, 3), 3, 1, "SAME", "NONE", "uint8"),
    ("MAX_POOL_2D", (1, 8, 8, 16), 2, 2, "VALID", "NONE", "int8"),
    ("MAX_POOL_2D", (1, 9, 9, 5), 3, 2, "SAME", "RELU", "int8"),
    ("MAX_POOL_2D", (1, 6, 6, 3), 3, 1, "SAME", "NONE", "uint8"),
]


@pytest.mark.parametrize(
    "case", POOL_CASES, ids=lambda c: f"{c[0]}-{c[6]}-{'x'.join(map(str, c[1]))}-f{c[2]}s{c[3]}-{c[4]}-{c[5]}"
)
def test_pool(dev: Device, case: tuple) -> None:
    op, shape, f, s, padding, act, dtype = case
    assert_exact(dev, g.pool_model(op, shape, f, s, padding, act, 19, dtype))


@pytest.mark.parametrize("op", ["RELU", "RELU6", "RELU_N1_TO_1"])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_relu_activations(dev: Device, op: str, dtype: str) -> None:
    assert_exact(dev, g.activation_model(op, (1, 6, 6, 8), 23, dtype))


def test_reshape(dev: Device) -> None:
    assert_exact(dev, g.reshape_model((1, 4, 4, 8), (1, 128), 29))


@pytest.mark.parametrize("axis", [3, 2, 1, -1])
def test_concatenation(dev: Device, axis: int) -> None:
    shapes = [[1, 4, 5, 3], [1, 4, 5, 3], [1, 4, 5, 3]]
    for i, s in enumerate(shapes):
        s[axis] += i
    assert_exact(dev, g.concat_model(shapes, axis, 31))


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_pad(dev: Device, dtype: str) -> None:
    assert_exact(dev, g.pad_model((1, 5, 4, 3), [(0, 0), (1, 2), (2, 0), (0, 1)], 37, dtype))


@pytest.mark.parametrize(
    "shape,perm",
    [((1, 4, 5, 3), (0, 3, 1, 2)), ((1, 4, 5, 3), (0, 2, 1, 3)), ((6, 7), (1, 0)), ((2, 3, 4), (2, 0, 1))],
)
def test_transpose(dev: Device, shape: tuple, perm: tuple) -> None:
    assert_exact(dev, g.transpose_model(shape, perm, 41))


@pytest.mark.parametrize(
    "shape,begin,end,strides,bmask,emask",
    [
        ((1, 8, 8, 6), (0, 1, 2, 0), (1, 7, 8, 6), (1, 1, 2, 1), 0, 0),
        ((1, 8, 8, 6), (0, -5, 0, 1), (1, -1, 8, 5), (1, 2, 3, 2), 0b1001, 0b0100),
        ((10, 12), (2, 3), (9, 100), (3, 1), 0, 0),
    ],
)
def test_strided_slice(dev: Device, shape, begin, end, strides, bmask, emask) -> None:
    assert_exact(dev, g.strided_slice_model(shape, begin, end, strides, bmask, emask, 43))


RUNTIMES = ("tflite_runtime", "ai_edge_litert")


# --- the requantization multiplier's derivation, on both runtimes ------------------------------
# A multiplier from the scales' float product and one from their double product differ by up to
# ~100 in 2**31, which moves a few outputs in 10**5 of a random layer: too few for a grid case to
# catch. These cases put every output on an accumulator where the two derivations (under the
# runtime's rounding) requantize differently, with scales that are not powers of two.
# (op, dtype, per_channel)
MULTIPLIER_CASES = [
    ("CONV_2D", "uint8", False),
    ("DEPTHWISE_CONV_2D", "uint8", False),
    ("TRANSPOSE_CONV", "uint8", False),
    ("FULLY_CONNECTED", "uint8", False),
    ("FULLY_CONNECTED", "int8", False),
    ("FULLY_CONNECTED", "int8", True),
    ("CONV_2D", "int8", False),
    ("DEPTHWISE_CONV_2D", "int8", True),
    ("BATCH_MATMUL", "int8", False),
]


def _derivations_disagree(rng: np.random.Generator) -> tuple[tuple[float, float, float], np.ndarray]:
    """(input, filter, output) scales whose float- and double-product multipliers differ, and
    accumulators (in BATCH_MATMUL's probe range) that requantize differently under them, with either
    rounding, within +-100 of the output zero point."""
    f32 = np.float32
    best: tuple[int, tuple[float, float, float], list[tuple[int, int]]] = (-1, (0.0, 0.0, 0.0), [])
    for _ in range(64):  # the scales whose two multipliers lie furthest apart disagree most often
        s_in, s_w = float(f32(rng.uniform(0.005, 0.05))), float(f32(rng.uniform(0.002, 0.02)))
        s_out = float(f32(s_in * s_w * 255**3 / rng.uniform(90, 100)))  # the probe range onto ~95 steps
        # Computed here, not by the compiler's function: the test must see that function change.
        float_product = float(f32(s_in) * f32(s_w)) / s_out
        double_product = s_in * s_w / s_out
        by_product = [q.quantize_multiplier(float_product), q.quantize_multiplier(double_product)]
        (mf, sf), (md, sd) = by_product
        gap = abs(mf - md) if sf == sd else 0
        if gap > best[0]:
            best = (gap, (s_in, s_w, s_out), by_product)
    _, scales, ((mf, sf), (md, sd)) = best
    acc = np.unique(rng.integers(0, 255**3, size=4_000_000, dtype=np.int64))
    keep = np.zeros(acc.shape, dtype=bool)
    for rounding in (q.multiply_by_quantized_multiplier, multiply_by_quantized_multiplier_single_round):
        vf, vd = rounding(acc, mf, sf), rounding(acc, md, sd)
        keep |= (vf != vd) & (np.abs(vd) < 100)
    return scales, acc[keep][:96]


@functools.cache
def _probes(seed: int) -> list[tuple[tuple[float, float, float], np.ndarray]]:
    """Two (scales, accumulators) of :func:`_derivations_disagree`, shared by the runtimes' cases."""
    rng = np.random.default_rng(seed)
    return [_derivations_disagree(rng) for _ in range(2)]


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("case", MULTIPLIER_CASES, ids=lambda c: f"{c[0]}-{c[1]}-{'pc' if c[2] else 'pt'}")
def test_multiplier_derivation(dev: Device, runtime: str, case: tuple) -> None:
    op, dtype, per_channel = case
    for scales, accumulators in _probes(sum(map(ord, op + dtype))):
        assert accumulators.size >= 8
        model, inputs = g.accumulator_probe_model(op, dtype, scales, accumulators, per_channel)
        assert_exact(dev, model, runtime=runtime, inputs=inputs)


def test_uint8_multiplier_is_the_float_product() -> None:
    """GetQuantizedConvolutionMultipler rounds the scales' product to float before dividing."""
    s_in, s_w, s_out = 0.0235294122248888, 0.0171156171709299, 0.2350099980831146
    exact = float(np.float32(s_in)) * float(np.float32(s_w))
    assert float(np.float32(s_in) * np.float32(s_w)) != exact  # a product float cannot hold
    assert q.convolution_scale(s_in, s_w, s_out, True) == float(np.float32(exact)) / float(np.float32(s_out))
    assert q.convolution_scale(s_in, s_w, s_out, False) == exact / float(np.float32(s_out))


# --- the layer-norm ops, on both runtimes -------------------------------------------------------


# (in_shape, axes, keep_dims, dtype, same_quant)
MEAN_AXIS_CASES = [
    ((1, 16, 32), (-1,), True, "int8", False),
    ((1, 16, 32), (2,), False, "int8", True),
    ((1, 16, 32), (1,), False, "int8", False),
    ((2, 3, 5, 7), (3,), True, "int8", False),
    ((2, 3, 5, 7), (1, 2, 3), True, "int8", False),
    ((2, 6, 5), (0,), True, "int8", False),
    ((4, 9), (-1,), False, "uint8", False),
    ((1, 8, 40), (-1,), True, "uint8", True),
]


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize(
    "case",
    MEAN_AXIS_CASES,
    ids=lambda c: (
        f"{c[3]}-{'x'.join(map(str, c[0]))}-axes{''.join(map(str, c[1]))}"
        + ("-keep" if c[2] else "-drop")
        + ("-same" if c[4] else "")
    ),
)
def test_mean_over_adjacent_axes(dev: Device, runtime: str, case: tuple) -> None:
    """MEAN over a layer norm's last axis, and over any run of adjacent axes: one DEPTHWISE_CONV2D."""
    shape, axes, keep_dims, dtype, same = case
    for seed in (1, 2):
        model = g.mean_model(shape, axes, keep_dims, seed, dtype, same_quant=same)
        assert_exact(dev, model, seed, runtime)


def test_mean_over_axes_apart_stays_on_cpu() -> None:
    graph = graph_from_tflite(g.mean_model((2, 3, 4, 5), (1, 3), True, 1))
    support = check_support(graph, graph.nodes[0])
    assert not support.ok and "adjacent" in support.reason


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("shape", [(1, 16, 1), (1, 7, 9, 5), (3, 256)], ids=str)
def test_rsqrt(dev: Device, runtime: str, shape: tuple) -> None:
    """int8 RSQRT: one LUT with RsqrtEvalQuantized's table (gemmlowp's Newton-Raphson inverse root)."""
    for seed in (1, 2, 3):
        assert_exact(dev, g.rsqrt_model(shape, seed), seed, runtime)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_rsqrt_table_on_every_input(runtime: str) -> None:
    """The table equals the reference kernel on all 256 input values, for many scale pairs."""
    every = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
    for seed in range(16):
        model = g.rsqrt_model((1, 256), seed)
        graph = graph_from_tflite(model)
        x, y = graph.tensors[graph.inputs[0]], graph.tensors[graph.outputs[0]]
        assert x.quant and y.quant
        table = tables.rsqrt_table(x.quant.scale, x.quant.zero_point, y.quant.scale, y.quant.zero_point)
        ref = g.run_reference(model, [every], runtime)[0].reshape(256)
        np.testing.assert_array_equal(table, ref, err_msg=f"seed {seed}")
        assert np.unique(ref).size > 16


@pytest.mark.parametrize("op", ["RSQRT", "ABS", "EXP", "LOG"])
def test_uint8_stays_on_cpu(op: str) -> None:
    """TFLite quantizes RSQRT, ABS, EXP and LOG for int8 only (neither runtime has a uint8 kernel)."""
    m = g.ModelBuilder()
    x = m.add_tensor("input", (1, 8), "uint8", g.Quant.tensor(0.1, 0))
    y = m.add_tensor("output", (1, 8), "uint8", g.Quant.tensor(0.1, 0))
    m.add_op(op, [x], [y])
    graph = graph_from_tflite(m.build([x], [y]))
    support = check_support(graph, graph.nodes[0])
    assert not support.ok and "int8 only" in support.reason


# (shape1, shape2): a layer norm's [tokens, features] against its per-token mean, and others.
SQUARED_DIFFERENCE_CASES = [
    ((1, 16, 32), (1, 16, 1)),
    ((1, 16, 32), (1, 16, 32)),
    ((2, 5, 6, 8), (8,)),
    ((4, 1, 3), (1, 6, 3)),
]


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize(
    "shapes", SQUARED_DIFFERENCE_CASES, ids=lambda c: "-".join("x".join(map(str, s)) for s in c)
)
def test_squared_difference(dev: Device, runtime: str, shapes: tuple) -> None:
    """int8 SQUARED_DIFFERENCE: one LUT2 with the table of every pair of input bytes."""
    for seed in (1, 2):
        assert_exact(dev, g.squared_difference_model(*shapes, seed), seed, runtime)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_squared_difference_table_on_every_pair(runtime: str) -> None:
    values = np.arange(-128, 128, dtype=np.int8)
    for seed in range(6):
        model = g.squared_difference_model((256, 1), (1, 256), seed)
        graph = graph_from_tflite(model)
        a, b, y = (graph.tensors[i] for i in (*graph.inputs, *graph.outputs))
        ref = g.run_reference(model, [values.reshape(256, 1), values.reshape(1, 256)], runtime)[0]
        np.testing.assert_array_equal(squared_difference_table(a, b, y), ref, err_msg=f"seed {seed}")


def test_neg(dev: Device) -> None:
    """int8 NEG negates the stored byte (LiteRT; tflite_runtime 2.14 has no int8 NEG at all)."""
    assert_exact(dev, g.neg_model((1, 9, 7, 8), 3), 3, "ai_edge_litert")


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("same_quant", [False, True], ids=["rescaled", "same-quant"])
@pytest.mark.parametrize("shape", [(1, 9, 7, 8), (3, 256), (1, 1)], ids=str)
def test_abs(dev: Device, runtime: str, same_quant: bool, shape: tuple) -> None:
    """int8 ABS: one LUT with AbsEvalQuantized's table (requantized where the scales differ)."""
    for seed in (1, 2):
        assert_exact(dev, g.abs_model(shape, seed, same_quant), seed, runtime)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_abs_table_on_every_input(runtime: str) -> None:
    every = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
    for seed in range(12):
        model = g.abs_model((1, 256), seed, same_quant=seed % 3 == 0)
        graph = graph_from_tflite(model)
        x, y = graph.tensors[graph.inputs[0]], graph.tensors[graph.outputs[0]]
        assert x.quant and y.quant
        table = tables.abs_table(x.quant.scale, x.quant.zero_point, y.quant.scale, y.quant.zero_point, "int8")
        ref = g.run_reference(model, [every], runtime)[0].reshape(256)
        np.testing.assert_array_equal(table, ref, err_msg=f"seed {seed}")
        assert np.unique(ref).size > 32


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize(
    "scales", [(0.04465152695775032, 0.037415508180856705), (0.029111649841070175, 0.019022181630134583)]
)
def test_abs_multiplier_is_the_float_quotient(dev: Device, runtime: str, scales: tuple) -> None:
    """Scale pairs whose float quotient s_in / s_out gives a multiplier that requantizes one |x - zp|
    (106 and 148 here) one unit away from the double quotient's: every input byte through the NPU."""
    s_in, s_out = scales
    float_quotient = float(np.float32(s_in) / np.float32(s_out))
    assert q.quantize_multiplier(float_quotient) != q.quantize_multiplier(s_in / s_out)
    m = g.ModelBuilder()
    x = m.add_tensor("input", (1, 256), "int8", g.Quant.tensor(s_in, 0))
    y = m.add_tensor("output", (1, 256), "int8", g.Quant.tensor(s_out, -128))
    m.add_op("ABS", [x], [y])
    every = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
    assert_exact(dev, m.build([x], [y]), runtime=runtime, inputs=[every])


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("approximate", [False, True], ids=["erf", "tanh"])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_gelu(dev: Device, runtime: str, approximate: bool, dtype: str) -> None:
    """GELU (a BERT feed-forward's activation): one LUT with GeluPrepare's table."""
    for seed, shape in ((1, (1, 16, 64)), (2, (2, 7, 9, 5))):
        assert_exact(dev, g.gelu_model(shape, seed, dtype, approximate), seed, runtime)


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_gelu_table_on_every_input(runtime: str, dtype: str) -> None:
    lo = -128 if dtype == "int8" else 0
    every = np.arange(lo, lo + 256).astype(dtype).reshape(1, 256)
    for seed in range(16):
        approximate = seed % 2 == 1
        model = g.gelu_model((1, 256), seed, dtype, approximate)
        graph = graph_from_tflite(model)
        x, y = graph.tensors[graph.inputs[0]], graph.tensors[graph.outputs[0]]
        assert x.quant and y.quant
        args = (x.quant.scale, x.quant.zero_point, y.quant.scale, y.quant.zero_point)
        table = tables.gelu_table(*args, dtype, approximate)
        ref = g.run_reference(model, [every], runtime)[0].reshape(256)
        np.testing.assert_array_equal(table, ref, err_msg=f"seed {seed}")
        assert np.unique(ref).size > 64


# (op, dtype): one-input ops as one LUT each, checked in every runtime that has the kernel.
LUT_CASES = [("EXP", "int8"), ("RELU_0_TO_1", "int8"), ("RELU_0_TO_1", "uint8"), ("LOG", "int8")]
# Ops a runtime has no quantized kernel for (it refuses such a model before any delegate sees it).
NO_KERNEL = {("LOG", "tflite_runtime")}


def _skip_without_kernel(op: str, runtime: str) -> None:
    if (op, runtime) in NO_KERNEL:
        pytest.skip(f"{runtime} has no int8 {op} kernel")


def test_tflite_runtime_has_no_int8_log() -> None:
    with pytest.raises(ValueError, match="LOG"):
        g.run_reference(g.activation_model("LOG", (1, 8), 1), [np.zeros((1, 8), np.int8)], "tflite_runtime")


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("case", LUT_CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def test_lut_op(dev: Device, runtime: str, case: tuple) -> None:
    op, dtype = case
    _skip_without_kernel(op, runtime)
    for seed in (1, 2):
        assert_exact(dev, g.activation_model(op, (1, 9, 7, 8), seed, dtype), seed, runtime)


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("case", LUT_CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def test_lut_op_table_on_every_input(runtime: str, case: tuple) -> None:
    op, dtype = case
    _skip_without_kernel(op, runtime)
    lo = -128 if dtype == "int8" else 0
    every = np.arange(lo, lo + 256).astype(dtype).reshape(1, 256)
    for seed in range(16):
        model = g.activation_model(op, (1, 256), seed, dtype)
        graph = graph_from_tflite(model)
        assert check_support(graph, graph.nodes[0]).ok
        x, y = graph.tensors[graph.inputs[0]], graph.tensors[graph.outputs[0]]
        ref = g.run_reference(model, [every], runtime)[0].reshape(256)
        np.testing.assert_array_equal(
            activations.lut_table(graph.nodes[0], x, y), ref, err_msg=f"seed {seed}"
        )
        assert np.unique(ref).size > 8


# (float ops between DEQUANTIZE and QUANTIZE, input dtype, output dtype)
FLOAT_CHAIN_CASES = [
    (("NEG",), "int8", "int8"),
    ((), "int8", "int8"),
    (("NEG", "RELU"), "int8", "int8"),
    (("ABS",), "int8", "int8"),
    (("NEG", "ABS"), "uint8", "int8"),
    (("RELU6",), "uint8", "int8"),
    (("RELU_N1_TO_1", "NEG"), "int8", "uint8"),
]


def _chain_id(case: tuple) -> str:
    return "-".join((*case[0], case[1], case[2])) if case[0] else f"none-{case[1]}-{case[2]}"


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("case", FLOAT_CHAIN_CASES, ids=_chain_id)
def test_float_chain(dev: Device, runtime: str, case: tuple) -> None:
    """DEQUANTIZE -> float ops -> QUANTIZE (a layer norm's -mean): one LUT, no float stored."""
    ops, din, dout = case
    for seed in (1, 2):
        model = g.float_chain_model((1, 16, 8), ops, seed, din, dout)
        graph = graph_from_tflite(model)
        emitted = [n for n in graph.nodes if not registry.plan_node(graph, n).fused]
        assert [n.op for n in emitted] == ["QUANTIZE"]
        assert_exact(dev, model, seed, runtime)


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("case", FLOAT_CHAIN_CASES, ids=_chain_id)
def test_float_chain_table_on_every_input(runtime: str, case: tuple) -> None:
    ops, din, dout = case
    lo = -128 if din == "int8" else 0
    every = np.arange(lo, lo + 256).astype(din).reshape(1, 256)
    for seed in range(8):
        model = g.float_chain_model((1, 256), ops, seed, din, dout)
        graph = graph_from_tflite(model)
        table = float_chain.chain_table(graph, float_chain.chain_nodes(graph, graph.nodes[-1]))
        ref = g.run_reference(model, [every], runtime)[0].reshape(256)
        np.testing.assert_array_equal(table, ref, err_msg=f"seed {seed}")


def test_float_chain_only_whole() -> None:
    """A float value seen outside the chain (a graph output, a second reader) keeps it on the CPU,
    as does a float edge of the model."""
    m = g.ModelBuilder()
    q = g.Quant.tensor(0.05, 3)
    x = m.add_tensor("input", (1, 8), "int8", q)
    f = m.add_tensor("dequantized", (1, 8), "float32")
    n = m.add_tensor("negated", (1, 8), "float32")
    y = m.add_tensor("output", (1, 8), "int8", q)
    m.add_op("DEQUANTIZE", [x], [f])
    m.add_op("NEG", [f], [n])
    m.add_op("QUANTIZE", [n], [y])
    graph = graph_from_tflite(m.build([x], [y, n]))
    for node in graph.nodes:
        support = check_support(graph, node)
        assert not support.ok and "graph output" in support.reason, (node.op, support.reason)
    graph = graph_from_tflite(g.quantize_model((1, 4, 4, 3), "float32", "int8", 1))
    support = check_support(graph, graph.nodes[0])
    assert not support.ok and "no DEQUANTIZE" in support.reason
