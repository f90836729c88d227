"""The TensorFlow converter's idioms lowered without new instructions (SPLIT, SPLIT_V, SLICE, SQUEEZE,
EXPAND_DIMS, DEPTH_TO_SPACE, SPACE_TO_DEPTH, SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND, PADV2, ...):
compiled, run on the test device, and compared with BUILTIN_REF of both TFLite runtimes (0
differing bytes)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import modelgen as g
from libaccel import Device
from libaccel.compiler import (
    PartitionRunner,
    check_support,
    compile_partition,
    graph_from_tflite,
    quant,
    tables,
)
from tests.compiler.helpers import assert_exact

RUNTIMES = ["tflite_runtime", "ai_edge_litert"]
DTYPES = ["int8", "uint8"]


@pytest.fixture(params=RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    return request.param


# (in_shape, axis, num_splits)
SPLIT_CASES = [((1, 6, 4, 8), 3, 2), ((1, 6, 4, 8), 1, 3), ((2, 5, 6), -1, 3), ((12,), 0, 4)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", SPLIT_CASES, ids=str)
def test_split(dev: Device, runtime: str, dtype: str, case: tuple) -> None:
    shape, axis, n = case
    out = list(shape)
    out[axis] //= n
    model = g.layout_model("SPLIT", shape, [out] * n, [("axis", [axis])], 1, 3, dtype, num_splits=n)
    assert_exact(dev, model, runtime=runtime)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "case", [((1, 4, 4, 10), 3, [2, 5, 3]), ((1, 7, 3, 4), 1, [3, -1]), ((3, 8), 0, [1, 2])], ids=str
)
def test_split_v(dev: Device, runtime: str, dtype: str, case: tuple) -> None:
    shape, axis, sizes = case
    real = list(sizes)
    if -1 in real:
        real[real.index(-1)] = shape[axis] - (sum(real) + 1)
    outs = []
    for s in real:
        o = list(shape)
        o[axis] = s
        outs.append(o)
    consts = [("size_splits", sizes), ("axis", [axis])]
    model = g.layout_model("SPLIT_V", shape, outs, consts, 0, 4, dtype, num_splits=len(sizes))
    assert_exact(dev, model, runtime=runtime)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "case",
    [((1, 8, 8, 6), [0, 1, 2, 1], [1, 5, -1, 4]), ((2, 9, 7), [1, 3, 0], [1, 4, 7]), ((20,), [3], [-1])],
    ids=str,
)
def test_slice(dev: Device, runtime: str, dtype: str, case: tuple) -> None:
    shape, begin, size = case
    out = [d - b if s == -1 else s for d, b, s in zip(shape, begin, size, strict=True)]
    model = g.layout_model("SLICE", shape, [out], [("begin", begin), ("size", size)], 0, 5, dtype)
    assert_exact(dev, model, runtime=runtime)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", [((1, 1, 1, 16), (1, 16), [1, 2]), ((1, 5, 1, 3), (5, 3), [0, 2])], ids=str)
def test_squeeze(dev: Device, runtime: str, dtype: str, case: tuple) -> None:
    shape, out, dims = case
    assert_exact(
        dev, g.layout_model("SQUEEZE", shape, [out], [], 0, 6, dtype, squeeze_dims=dims), runtime=runtime
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", [((4, 6), (4, 1, 6), 1), ((2, 3, 5), (2, 3, 5, 1), -1)], ids=str)
def test_expand_dims(dev: Device, runtime: str, dtype: str, case: tuple) -> None:
    shape, out, axis = case
    assert_exact(
        dev, g.layout_model("EXPAND_DIMS", shape, [out], [("axis", [axis])], 0, 7, dtype), runtime=runtime
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", [((1, 3, 4, 8), 2), ((2, 2, 3, 27), 3), ((1, 5, 5, 4), 1)], ids=str)
def test_depth_to_space(dev: Device, runtime: str, dtype: str, case: tuple) -> None:
    (n, h, w, c), b = case
    out = (n, h * b, w * b, c // (b * b))
    model = g.layout_model("DEPTH_TO_SPACE", (n, h, w, c), [out], [], 0, 8, dtype, block_size=b)
    assert_exact(dev, model, runtime=runtime)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", [((1, 6, 8, 2), 2), ((2, 9, 6, 3), 3), ((1, 4, 4, 5), 4)], ids=str)
def test_space_to_depth(dev: Device, runtime: str, dtype: str, case: tuple) -> None:
    (n, h, w, c), b = case
    out = (n, h // b, w // b, c * b * b)
    model = g.layout_model("SPACE_TO_DEPTH", (n, h, w, c), [out], [], 0, 9, dtype, block_size=b)
    assert_exact(dev, model, runtime=runtime)


# (in_shape, block, paddings)
S2B_CASES = [
    ((1, 8, 8, 3), [2, 2], [[2, 2], [2, 2]]),
    ((1, 7, 5, 4), [2, 2], [[2, 3], [1, 2]]),
    ((2, 6, 6, 2), [3, 2], [[0, 0], [0, 0]]),
    ((1, 9, 4), [3], [[3, 3]]),
    ((1, 5, 6, 2), [4, 4], [[4, 7], [4, 6]]),
]


def _batch_shape(shape: tuple, block: list, pads: list) -> list[int]:
    spatial = [(d + lo + hi) // b for d, b, (lo, hi) in zip(shape[1:-1], block, pads, strict=True)]
    return [shape[0] * math.prod(block), *spatial, shape[-1]]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", S2B_CASES, ids=str)
def test_space_to_batch_nd(dev: Device, runtime: str, dtype: str, case: tuple) -> None:
    shape, block, pads = case
    consts = [("block_shape", block), ("paddings", pads)]
    model = g.layout_model(
        "SPACE_TO_BATCH_ND", shape, [_batch_shape(shape, block, pads)], consts, 0, 10, dtype
    )
    assert_exact(dev, model, runtime=runtime)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", S2B_CASES, ids=str)
def test_batch_to_space_nd(dev: Device, runtime: str, dtype: str, case: tuple) -> None:
    """The inverse shapes of the SPACE_TO_BATCH_ND cases, with the paddings as crops."""
    shape, block, crops = case
    consts = [("block_shape", block), ("crops", crops)]
    model = g.layout_model(
        "BATCH_TO_SPACE_ND", _batch_shape(shape, block, crops), [shape], consts, 0, 11, dtype
    )
    assert_exact(dev, model, runtime=runtime)


def _padv2_model(shape: tuple, pads: list, value: int | None, dtype: str) -> bytes:
    """One PADV2, with a constant_values scalar quantized like the output when ``value`` is given."""
    rng = np.random.default_rng(12)
    m = g.ModelBuilder()
    q = g.activation_quant(rng, dtype, g.random_scale(rng))
    x = m.add_tensor("input", shape, dtype, q)
    ins = [x, m.add_const("paddings", np.array(pads, dtype=np.int32), "int32")]
    if value is not None:
        ins.append(m.add_tensor("constant_values", (), dtype, q, np.array(value)))
    out = [d + lo + hi for d, (lo, hi) in zip(shape, pads, strict=True)]
    y = m.add_tensor("output", out, dtype, q)
    m.add_op("PADV2", ins, [y])
    return m.build([x], [y])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("value", [None, 7])
def test_padv2(dev: Device, runtime: str, dtype: str, value: int | None) -> None:
    model = _padv2_model((1, 5, 6, 3), [[0, 0], [1, 2], [2, 0], [0, 1]], value, dtype)
    assert_exact(dev, model, runtime=runtime)


def _leaky_relu_model(alpha: float, dtype: str, seed: int, shape: tuple = (1, 256)) -> bytes:
    rng = np.random.default_rng(seed)
    m = g.ModelBuilder()
    x = m.add_tensor("input", shape, dtype, g.activation_quant(rng, dtype, g.random_scale(rng, 0.005, 0.3)))
    y = m.add_tensor("output", shape, dtype, g.activation_quant(rng, dtype, g.random_scale(rng, 0.005, 0.3)))
    m.add_op("LEAKY_RELU", [x], [y], alpha=alpha)
    return m.build([x], [y])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alpha", [0.2, 0.01, 0.3, 1.7, -0.5])
def test_leaky_relu_table_on_all_inputs(runtime: str, dtype: str, alpha: float) -> None:
    """The compile-time table equals each runtime's BUILTIN_REF on all 256 inputs."""
    lo = -128 if dtype == "int8" else 0
    every = np.arange(lo, lo + 256).astype(dtype).reshape(1, 256)
    for seed in range(8):
        model = _leaky_relu_model(alpha, dtype, seed)
        graph = graph_from_tflite(model)
        node = graph.nodes[0]
        x, y = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        assert x.quant and y.quant
        args = (x.quant.scale, x.quant.zero_point, y.quant.scale, y.quant.zero_point)
        table = tables.leaky_relu_table(*args, node.options["alpha"], dtype)
        ref = g.run_reference(model, [every], runtime)[0].reshape(256).astype(np.int32)
        np.testing.assert_array_equal(table, ref, err_msg=f"alpha {alpha} seed {seed}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_leaky_relu(dev: Device, runtime: str, dtype: str) -> None:
    assert_exact(dev, _leaky_relu_model(0.2, dtype, 3, (1, 9, 7, 8)), runtime=runtime)


# (in_shape, keep_dims, dtype)
REDUCE_CASES = [
    ((1, 7, 7, 32), False, "int8"),
    ((2, 5, 3, 16), False, "int8"),
    ((1, 1, 1, 8), False, "int8"),
    ((1, 6, 6, 16), False, "uint8"),
    ((1, 4, 4, 8), True, "int8"),
    ((1, 9, 9, 4), True, "uint8"),
]


@pytest.mark.parametrize("case", REDUCE_CASES, ids=str)
def test_mean(dev: Device, runtime: str, case: tuple) -> None:
    """MEAN over H, W (GlobalAveragePooling2D), with and without keep_dims."""
    shape, keep_dims, dtype = case
    assert_exact(dev, g.mean_model(shape, (1, 2), keep_dims, 21, dtype), runtime=runtime)


@pytest.mark.parametrize(
    "case", [((1, 6, 6, 16), False), ((2, 3, 5, 8), True), ((1, 1, 1, 4), False)], ids=str
)
def test_sum_uint8(dev: Device, runtime: str, case: tuple) -> None:
    shape, keep_dims = case
    assert_exact(dev, g.mean_model(shape, (2, 1), keep_dims, 22, "uint8", op="SUM"), runtime=runtime)


def test_int8_sum_reference_reads_uint8(runtime: str) -> None:
    """Why int8 SUM stays on the CPU: the reference kernel's output for an input x equals the
    requantized sum of x read as uint8, clamped to [0, 255], cast to int8."""
    model = g.mean_model((1, 1, 2, 256), (1, 2), True, 5, "int8", op="SUM")
    graph = graph_from_tflite(model)
    assert "uint8" in check_support(graph, graph.nodes[0]).reason
    xq, yq = graph.tensors[0].quant, graph.tensors[2].quant
    assert xq and yq
    x = np.tile(np.arange(-128, 128, dtype=np.int8), 2).reshape(1, 1, 2, 256)
    m, shift = quant.quantize_multiplier(xq.scale / yq.scale)
    sums = (x.view(np.uint8).astype(np.int64) - xq.zero_point).sum(axis=(1, 2)).ravel()
    as_uint8 = [
        min(max(quant.multiply_by_quantized_multiplier(int(s), m, shift) + yq.zero_point, 0), 255)
        for s in sums
    ]
    ref = g.run_reference(model, [x], runtime)[0].ravel()
    np.testing.assert_array_equal(ref, np.array(as_uint8).astype(np.uint8).view(np.int8))


@pytest.mark.parametrize("keep_dims", [True, False])
@pytest.mark.parametrize("case", [((1, 3, 4, 8), 0), ((1, 2, 2, 16), 3), ((2, 2, 5, 4), 7)], ids=str)
def test_sum_uint8_of_equal_quantization(dev: Device, runtime: str, case: tuple, keep_dims: bool) -> None:
    """Both runtimes requantize the integer sum (multiplier 1) here too: no wrapping 8-bit sum."""
    shape, seed = case
    assert_exact(
        dev, g.mean_model(shape, (1, 2), keep_dims, seed, "uint8", same_quant=True, op="SUM"), runtime=runtime
    )


def _concat_requantized_model(dtype: str, axis: int, through_quantize: bool) -> bytes:
    """CONCATENATION of three inputs, two quantized unlike the output: directly (uint8, which TFLite
    rescales) or each through an 8-bit QUANTIZE first (what the converter writes for int8)."""
    rng = np.random.default_rng(13)
    m = g.ModelBuilder()
    oq = g.activation_quant(rng, dtype, 0.03)
    shapes = [(1, 4, 5, 3), (1, 4, 5, 6), (1, 4, 5, 2)]
    if axis != 3:
        shapes = [(1, 2 + k, 5, 4) for k in range(3)]
    quants = [g.activation_quant(rng, dtype, s) for s in (0.02, 0.03, 0.07)]
    quants[1] = oq
    xs = [
        m.add_tensor(f"input{k}", s, dtype, qk) for k, (s, qk) in enumerate(zip(shapes, quants, strict=True))
    ]
    parts = []
    for k, (x, qk) in enumerate(zip(xs, quants, strict=True)):
        if through_quantize and qk != oq:
            r = m.add_tensor(f"requantized{k}", shapes[k], dtype, oq)
            m.add_op("QUANTIZE", [x], [r])
            x = r
        parts.append(x)
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    y = m.add_tensor("output", out, dtype, oq)
    m.add_op("CONCATENATION", parts, [y], axis=axis, fused_activation_function="NONE")
    return m.build(xs, [y])


@pytest.mark.parametrize(
    "dtype,axis,through_quantize",
    [("uint8", 3, False), ("uint8", 1, False), ("int8", 3, True), ("int8", 1, True), ("uint8", 3, True)],
)
def test_concat_of_requantized_inputs(
    dev: Device, runtime: str, dtype: str, axis: int, through_quantize: bool
) -> None:
    assert_exact(dev, _concat_requantized_model(dtype, axis, through_quantize), runtime=runtime)


def test_concat_rescale_table_on_all_inputs(runtime: str) -> None:
    rng = np.random.default_rng(14)
    every = np.arange(256).astype(np.uint8).reshape(1, 256)
    for _ in range(8):
        iq = g.activation_quant(rng, "uint8", g.random_scale(rng, 0.005, 0.3))
        oq = g.activation_quant(rng, "uint8", g.random_scale(rng, 0.005, 0.3))
        m = g.ModelBuilder()
        a = m.add_tensor("a", (1, 256), "uint8", iq)
        y = m.add_tensor("y", (1, 256), "uint8", oq)
        m.add_op("CONCATENATION", [a], [y], axis=1, fused_activation_function="NONE")
        ref = g.run_reference(m.build([a], [y]), [every], runtime)[0].ravel().astype(np.int32)
        table = tables.concat_rescale_table(iq.scales[0], iq.zero_points[0], oq.scales[0], oq.zero_points[0])
        np.testing.assert_array_equal(table, ref)


# (in_shape, out_ch (0: depthwise), kernel, dilation, padding, dtype)
DILATED_CASES = [
    ((1, 12, 12, 4), 8, 3, 2, "SAME", "int8"),
    ((1, 11, 9, 3), 6, 3, 2, "SAME", "int8"),
    ((1, 16, 16, 8), 0, 3, 4, "SAME", "int8"),
    ((1, 13, 10, 4), 5, 3, 3, "VALID", "int8"),
    ((2, 9, 9, 3), 0, 5, 2, "SAME", "uint8"),
    ((1, 10, 10, 4), 4, 3, (2, 3), "SAME", "uint8"),
]


def _dilated_model(case: tuple) -> bytes:
    shape, out_ch, kernel, dilation, padding, dtype = case
    if out_ch == 0:
        return g.depthwise_conv2d_model(
            shape, 1, kernel, 1, padding, dtype == "int8", "RELU6", 31, dtype, dilation, space_to_batch=True
        )
    return g.conv2d_model(
        shape, out_ch, kernel, 1, padding, dtype == "int8", "NONE", 32, dtype, dilation, space_to_batch=True
    )


@pytest.mark.parametrize("case", DILATED_CASES, ids=str)
def test_dilated_conv_fused(dev: Device, runtime: str, case: tuple) -> None:
    """SPACE_TO_BATCH_ND -> convolution -> BATCH_TO_SPACE_ND compiles to one dilated convolution."""
    model = _dilated_model(case)
    graph = graph_from_tflite(model)
    assert [n.op for n in graph.nodes][::2] == ["SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND"]
    compiled = compile_partition(graph, [n.index for n in graph.nodes], dev.params.isa_version)
    ops = {k: v for k, v in compiled.stats["instructions"].items() if k not in ("TENSOR", "END")}
    assert ops == {"DEPTHWISE_CONV2D" if case[1] == 0 else "CONV2D": 1}
    assert_exact(dev, model, runtime=runtime)


@pytest.mark.parametrize("case", DILATED_CASES[:3], ids=str)
def test_dilated_conv_unfused_when_an_intermediate_is_needed(dev: Device, case: tuple) -> None:
    """A partition that must also output the batch-folded tensor keeps the three nodes apart (COPYs and
    a convolution on the batch), and is exact too."""
    model = _dilated_model(case)
    graph = graph_from_tflite(model)
    s2b_out = graph.nodes[0].outputs[0]
    compiled = compile_partition(
        graph, [n.index for n in graph.nodes], dev.params.isa_version, outputs=[s2b_out, graph.outputs[0]]
    )
    assert compiled.stats["instructions"]["COPY"] >= 2
    x = g.random_inputs(model, 5)
    with PartitionRunner(dev, compiled) as runner:
        got = runner.run({graph.inputs[0]: x[0]})[graph.outputs[0]]
    np.testing.assert_array_equal(got.reshape(-1), g.run_reference(model, x)[0].reshape(-1))


def test_dilated_conv_partial_partitions_are_exact(dev: Device) -> None:
    """Each node of the pattern alone, as partitions split by a placement would leave them."""
    model = _dilated_model(DILATED_CASES[1])
    graph = graph_from_tflite(model)
    values = dict(zip(graph.inputs, g.random_inputs(model, 6), strict=True))
    for node in graph.nodes:
        compiled = compile_partition(graph, [node.index], dev.params.isa_version)
        with PartitionRunner(dev, compiled) as runner:
            values.update(runner.run({t: values[t] for t in (b.index for b in compiled.inputs)}))
    got = values[graph.outputs[0]]
    np.testing.assert_array_equal(
        got.reshape(-1), g.run_reference(model, g.random_inputs(model, 6))[0].reshape(-1)
    )


# (activation, which MUL operand it is, dtype): x * U(x) as the converter writes swish and its kin
SELF_MUL_CASES = [
    ("LOGISTIC", 1, "int8"),
    ("LOGISTIC", 0, "int8"),
    ("LOGISTIC", 1, "uint8"),
    ("TANH", 1, "int8"),
    ("RELU6", 0, "uint8"),
]


def _self_mul_model(case: tuple, seed: int = 4, shape: tuple = (1, 7, 9, 8)) -> bytes:
    op, side, dtype = case
    rng = np.random.default_rng(seed)
    m = g.ModelBuilder()
    x = m.add_tensor("input", shape, dtype, g.activation_quant(rng, dtype, g.random_scale(rng, 0.02, 0.1)))
    if op == "LOGISTIC":  # TFLite requires LOGISTIC's output quantization (1/256, the dtype's minimum)
        u_quant = g.Quant.tensor(1 / 256, -128 if dtype == "int8" else 0)
    elif op == "TANH":
        u_quant = g.Quant.tensor(1 / 128, 0 if dtype == "int8" else 128)
    else:
        u_quant = g.activation_quant(rng, dtype, g.random_scale(rng, 0.02, 0.05))
    u = m.add_tensor("activated", shape, dtype, u_quant)
    y = m.add_tensor("output", shape, dtype, g.activation_quant(rng, dtype, g.random_scale(rng, 0.01, 0.1)))
    m.add_op(op, [x], [u])
    m.add_op("MUL", [x, u] if side == 1 else [u, x], [y])
    return m.build([x], [y])


@pytest.mark.parametrize("case", SELF_MUL_CASES, ids=str)
def test_mul_by_an_activation_of_itself_is_one_lut(dev: Device, runtime: str, case: tuple) -> None:
    """x * U(x) (swish for LOGISTIC) compiles to one LUT of x, exact on every input byte."""
    model = _self_mul_model(case)
    graph = graph_from_tflite(model)
    compiled = compile_partition(graph, [n.index for n in graph.nodes], dev.params.isa_version)
    ops = {k: v for k, v in compiled.stats["instructions"].items() if k not in ("TENSOR", "END")}
    assert ops == {"LUT": 1}
    assert_exact(dev, model, runtime=runtime)
    dtype = case[2]
    lo = -128 if dtype == "int8" else 0
    every = np.arange(lo, lo + 256).astype(dtype)
    every_model = _self_mul_model(case, shape=(1, 256))
    eg = graph_from_tflite(every_model)
    compiled = compile_partition(eg, [n.index for n in eg.nodes], dev.params.isa_version)
    with PartitionRunner(dev, compiled) as runner:
        got = runner.run({eg.inputs[0]: every.reshape(1, 256)})[eg.outputs[0]]
    want = g.run_reference(every_model, [every.reshape(1, 256)], runtime)[0]
    np.testing.assert_array_equal(got.reshape(-1), want.reshape(-1))


def test_mul_by_an_activation_needed_elsewhere_stays_two_instructions(dev: Device) -> None:
    """When the activation's output is also a partition output, it is computed and the MUL stays."""
    model = _self_mul_model(SELF_MUL_CASES[0])
    graph = graph_from_tflite(model)
    u = graph.nodes[0].outputs[0]
    compiled = compile_partition(
        graph, [n.index for n in graph.nodes], dev.params.isa_version, outputs=[u, graph.outputs[0]]
    )
    ops = {k: v for k, v in compiled.stats["instructions"].items() if k not in ("TENSOR", "END")}
    assert ops == {"LUT": 1, "MUL": 1}
    x = g.random_inputs(model, 5)
    with PartitionRunner(dev, compiled) as runner:
        got = runner.run({graph.inputs[0]: x[0]})[graph.outputs[0]]
    np.testing.assert_array_equal(got.reshape(-1), g.run_reference(model, x)[0].reshape(-1))
