"""SOFTMAX, RESIZE_BILINEAR, MAXIMUM/MINIMUM, PRELU, BATCH_MATMUL and ARG_MAX lowered onto the
instructions of ISA 1.1 (and FULLY_CONNECTED for BATCH_MATMUL), run on the test device and compared
with BUILTIN_REF of both TFLite runtimes: 0 differing bytes."""

from __future__ import annotations

import numpy as np
import pytest

import modelgen as m
from device_model import mac_array as ma
from libaccel import Device
from libaccel.compiler import check_support, graph_from_tflite
from libaccel.compiler.reference import annotate_reference
from tests.compiler.helpers import assert_exact

RUNTIMES = ["tflite_runtime", "ai_edge_litert"]
DTYPES = ["int8", "uint8"]


@pytest.fixture(params=RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    return request.param


# --- SOFTMAX ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape,beta,seed",
    [((1, 10), 1.0, 0), ((4, 12), 1.0, 1), ((2, 3, 35), 0.5, 2), ((1, 4, 4, 17), 2.0, 3), ((1, 511), 1.0, 4),
     ((2, 8, 64), 0.125, 5), ((7,), 1.0, 6)],
    ids=str,
)  # fmt: skip
def test_softmax(dev: Device, runtime: str, dtype: str, shape: tuple, beta: float, seed: int) -> None:
    assert_exact(dev, m.softmax_model(shape, seed, dtype, beta), seed=seed, runtime=runtime)


def test_softmax_limits() -> None:
    graph = graph_from_tflite(m.softmax_model((1, 512), 0))
    assert "rows of 512" in check_support(graph, graph.nodes[0]).reason


# --- RESIZE_BILINEAR -------------------------------------------------------------------------------
RESIZE_CASES = [
    ((1, 4, 4, 3), (8, 8), False, False),
    ((1, 4, 4, 3), (8, 8), False, True),
    ((1, 5, 3, 8), (10, 6), True, False),
    ((2, 6, 7, 4), (11, 13), False, True),
    ((1, 8, 8, 2), (4, 3), False, False),
    ((1, 3, 5, 16), (7, 9), True, False),
    ((1, 16, 16, 8), (32, 32), False, True),
]


@pytest.mark.parametrize("case", RESIZE_CASES, ids=str)
def test_resize_bilinear(dev: Device, runtime: str, case: tuple) -> None:
    shape, out_hw, ac, hp = case
    assert_exact(
        dev, m.resize_model("RESIZE_BILINEAR", shape, out_hw, ac, hp, seed=len(shape)), runtime=runtime
    )


def test_resize_bilinear_uint8_stays_on_the_cpu() -> None:
    graph = graph_from_tflite(m.resize_model("RESIZE_BILINEAR", (1, 4, 4, 3), (8, 8), dtype="uint8"))
    assert "float32" in check_support(graph, graph.nodes[0]).reason


# --- MAXIMUM, MINIMUM ------------------------------------------------------------------------------
MAXMIN_CASES = [
    ((1, 4, 4, 8), (1, 4, 4, 8), False, True),
    ((1, 4, 4, 8), (8,), False, True),
    ((2, 5, 3), (1, 3), True, True),
    ((1, 6, 6, 4), (1, 1, 1, 1), True, True),
    ((3, 7), (3, 7), False, False),
]


@pytest.mark.parametrize("op", ["MAXIMUM", "MINIMUM"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", MAXMIN_CASES, ids=str)
def test_maximum_minimum(dev: Device, runtime: str, op: str, dtype: str, case: tuple) -> None:
    s1, s2, const, same = case
    model = m.max_min_model(op, s1, s2, seed=len(s1), dtype=dtype, const2=const, same_quant=same)
    assert_exact(dev, model, runtime=runtime)


# --- PRELU -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape,alpha",
    [((1, 8, 8, 16), (1, 1, 16)), ((1, 5, 6, 4), (5, 6, 4)), ((2, 4, 4, 3), (1, 1, 1)),
     ((1, 3, 7, 8), (1, 7, 8))],
    ids=str,
)  # fmt: skip
def test_prelu(dev: Device, runtime: str, dtype: str, shape: tuple, alpha: tuple) -> None:
    assert_exact(dev, m.prelu_model(shape, alpha, seed=shape[-1], dtype=dtype), runtime=runtime)


# --- BATCH_MATMUL ----------------------------------------------------------------------------------
MATMUL_CASES = [
    ((2, 3, 5), (2, 5, 4), False, False, False),
    ((1, 4, 8, 16), (1, 4, 16, 8), False, False, False),  # attention scores: heads as a batch
    ((1, 4, 8, 16), (1, 4, 8, 16), False, True, False),  # q @ k^T with adj_y
    ((3, 6, 5), (3, 6, 7), True, False, False),
    ((2, 1, 4, 6), (1, 3, 6, 5), False, False, False),  # broadcast batch dims
    ((5, 9), (9, 3), False, False, False),
    ((2, 7, 12), (12, 6), False, False, True),  # constant rhs broadcast over the batch
]


@pytest.mark.parametrize("case", MATMUL_CASES, ids=str)
def test_batch_matmul(dev: Device, runtime: str, case: tuple) -> None:
    lhs, rhs, adj_x, adj_y, const = case
    model = m.batch_matmul_model(lhs, rhs, adj_x, adj_y, seed=len(lhs) + lhs[-1], const_rhs=const)
    assert_exact(dev, model, runtime=runtime)


MAC_VARIANTS = [
    pytest.param(
        name,
        marks=()
        if name == "numpy" or any(ma.ISA_NAMES[i] == name for i in ma.cpu_isas())
        else pytest.mark.skip(reason=f"this CPU cannot run the {name} kernels"),
    )
    for name in ("numpy", *ma.ISA_NAMES.values())
]


@pytest.mark.parametrize("variant", MAC_VARIANTS)
@pytest.mark.parametrize("case", [c for c in MATMUL_CASES if not c[-1]][:4], ids=str)
def test_batch_matmul_new_inputs_on_every_variant(
    dev: Device, case: tuple, variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both operands run-time tensors, new ones at every invoke of one compiled partition (the
    device packs the right-hand operand at each job, no plan kept from the last): 0 differing bytes
    against BUILTIN_REF at every invoke, on each MAC array variant this CPU runs and on numpy."""
    from libaccel.compiler import PartitionRunner, compile_partition

    monkeypatch.setenv(ma.ENV, variant)
    lhs, rhs, adj_x, adj_y, _ = case
    model = m.batch_matmul_model(lhs, rhs, adj_x, adj_y, seed=len(lhs) + lhs[-1])
    graph = annotate_reference(graph_from_tflite(model), "ai-edge-litert")
    compiled = compile_partition(graph, [n.index for n in graph.nodes], dev.params.isa_version)
    with PartitionRunner(dev, compiled) as runner:
        for seed in range(4):
            inputs = m.random_inputs(model, seed=seed)
            want = m.run_reference(model, inputs, "ai_edge_litert")[0]
            got = runner.run(dict(zip(graph.inputs, inputs, strict=True)))[graph.outputs[0]]
            assert np.array_equal(got.reshape(want.shape), want), f"invoke {seed} differs"


# --- ARG_MAX ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("output_type", ["int32", "int64"])
@pytest.mark.parametrize(
    "shape,axis",
    [((1, 10), -1), ((2, 4, 6), 1), ((1, 5, 5, 7), 3), ((1, 6, 4, 3), 2), ((3, 4, 2, 5), 0)],
    ids=str,
)
def test_arg_max(dev: Device, runtime: str, dtype: str, output_type: str, shape: tuple, axis: int) -> None:
    assert_exact(dev, m.arg_max_model(shape, axis, seed=len(shape), dtype=dtype, output_type=output_type),
                 runtime=runtime)  # fmt: skip


def test_arg_max_ties_take_the_first_index(dev: Device, runtime: str) -> None:
    from libaccel.compiler import PartitionRunner, compile_partition

    model = m.arg_max_model((2, 3, 9), -1, seed=1)
    graph = graph_from_tflite(model)
    x = np.random.default_rng(0).integers(-3, 0, size=(2, 3, 9)).astype(np.int8)  # many ties
    compiled = compile_partition(graph, [n.index for n in graph.nodes], dev.params.isa_version)
    with PartitionRunner(dev, compiled) as runner:
        got = runner.run({graph.inputs[0]: x})[graph.outputs[0]]
    assert np.array_equal(got.reshape(2, 3), m.run_reference(model, [x], runtime)[0])


def test_annotated_graph_keeps_matmul_supported() -> None:
    graph = annotate_reference(
        graph_from_tflite(m.batch_matmul_model((2, 3, 5), (2, 5, 4))), "ai-edge-litert"
    )
    assert check_support(graph, graph.nodes[0]).ok
