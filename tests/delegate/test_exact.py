"""Through the delegate (on the shim) == TFLite's reference kernels alone: 0 differing bytes.

Both interpreters use ``OpResolverType.BUILTIN_REF``, so any node the delegate leaves on the CPU
runs the reference kernel too. Every case also checks that the NPU really ran the nodes (a delegate
that fell back to the CPU would trivially be equal).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import modelgen as gen
from delegate_teflon import plugin

CASES: dict[str, Callable[[], bytes]] = {
    "conv_k3_s1_same_pc": lambda: gen.conv2d_model((1, 10, 10, 8), 16, 3, 1, "SAME", True, "RELU6", 1),
    "conv_k5_s2_valid_pc": lambda: gen.conv2d_model((1, 13, 13, 3), 8, 5, 2, "VALID", True, "NONE", 2),
    "conv_k1_uint8": lambda: gen.conv2d_model((1, 7, 7, 16), 12, 1, 1, "SAME", False, "RELU", 3, "uint8"),
    "dw_k3_s2_same": lambda: gen.depthwise_conv2d_model((1, 12, 12, 8), 1, 3, 2, "SAME", True, "RELU6", 4),
    "dw_k5_mult2_valid": lambda: gen.depthwise_conv2d_model((1, 9, 9, 4), 2, 5, 1, "VALID", True, "NONE", 5),
    "fully_connected": lambda: gen.fully_connected_model(1, 96, 10, "NONE", 6),
    "add": lambda: gen.elementwise_model("ADD", (1, 6, 6, 8), None, "RELU", 7),
    "sub": lambda: gen.elementwise_model("SUB", (1, 5, 5, 4), None, "NONE", 8),
    "mul": lambda: gen.elementwise_model("MUL", (1, 4, 4, 8), None, "NONE", 9),
    "avgpool": lambda: gen.pool_model("AVERAGE_POOL_2D", (1, 8, 8, 16), 2, 2, "VALID", "NONE", 10),
    "maxpool_same": lambda: gen.pool_model("MAX_POOL_2D", (1, 9, 9, 8), 3, 2, "SAME", "NONE", 11),
    "leaky_relu": lambda: _leaky_relu(0.3),
    "gelu_erf": lambda: gen.gelu_model((1, 8, 32), 15, approximate=False),
    "gelu_tanh_uint8": lambda: gen.gelu_model((1, 8, 32), 16, "uint8", approximate=True),
    "abs": lambda: gen.abs_model((1, 6, 6, 8), 17),
    "depth_to_space": lambda: gen.layout_model("DEPTH_TO_SPACE", (1, 3, 4, 8), [(1, 6, 8, 2)], block_size=2),
    "space_to_depth": lambda: gen.layout_model("SPACE_TO_DEPTH", (1, 6, 8, 2), [(1, 3, 4, 8)], block_size=2),
    "mean_global_pool": lambda: gen.mean_model((1, 7, 7, 16), (1, 2), False, 12),
    "sum_uint8": lambda: gen.mean_model((1, 4, 4, 8), (1, 2), True, 13, "uint8", op="SUM"),
    "split": lambda: gen.layout_model(
        "SPLIT", (1, 4, 4, 6), [(1, 4, 4, 2)] * 3, [("axis", [3])], 1, num_splits=3
    ),
}


def _leaky_relu(alpha: float) -> bytes:
    rng = np.random.default_rng(14)
    m = gen.ModelBuilder()
    x = m.add_tensor("input", (1, 6, 6, 8), "int8", gen.activation_quant(rng, "int8", 0.05))
    y = m.add_tensor("output", (1, 6, 6, 8), "int8", gen.activation_quant(rng, "int8", 0.03))
    m.add_op("LEAKY_RELU", [x], [y], alpha=alpha)
    return m.build([x], [y])


def _differing_bytes(got: list[np.ndarray], want: list[np.ndarray]) -> int:
    assert [g.shape for g in got] == [w.shape for w in want]
    return sum(
        int(np.count_nonzero(g.view(np.uint8) != w.view(np.uint8))) for g, w in zip(got, want, strict=True)
    )


def _check(
    runtime: str, interp_mod: Any, lib_path: str, model: bytes, options: dict[str, str], cpu_ops: set[str]
) -> None:
    inputs = gen.random_inputs(model, 123)
    want = gen.run_reference(model, inputs, runtime)
    delegate = interp_mod.load_delegate(lib_path, {"device": "shim", "log_level": "quiet", **options})
    got = gen.run_reference(model, inputs, runtime, [delegate])
    record = plugin.last_prepare()
    assert record is not None
    wrong = [(p.node, p.op, p.reason) for p in record.placements if p.npu == (p.op in cpu_ops)]
    assert not wrong, f"unexpected placement: {wrong}"
    assert _differing_bytes(got, want) == 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_op_exact(name: str, runtime: str, interp_mod: Any, lib_path: str) -> None:
    _check(runtime, interp_mod, lib_path, CASES[name](), {}, set())


def _conv_pool_conv() -> bytes:
    """CONV_2D -> MAX_POOL_2D -> CONV_2D: with the pool denied, two NPU partitions around a CPU node."""
    rng = np.random.default_rng(5)
    m = gen.ModelBuilder()
    iq = gen.activation_quant(rng, "int8", 0.02)
    x = m.add_tensor("input", (1, 8, 8, 4), "int8", iq)
    prev, prev_q, shape = x, iq, (1, 8, 8, 4)
    for i, op in enumerate(("CONV_2D", "MAX_POOL_2D", "CONV_2D")):
        if op == "MAX_POOL_2D":
            shape = (1, shape[1] // 2, shape[2] // 2, shape[3])
            y = m.add_tensor(f"pool{i}", shape, "int8", prev_q)
            m.add_op(
                op, [prev], [y], padding="VALID", stride_h=2, stride_w=2, filter_height=2, filter_width=2
            )
        else:
            cin, cout = shape[3], 8
            w, wq = gen.quantized_filter(rng, (cout, 3, 3, cin), "int8", True, 0)
            wt = m.add_const(f"w{i}", w, "int8", wq)
            b, bq = gen.quantized_bias(rng, prev_q.scales[0], wq, cout, 2000)
            bt = m.add_const(f"b{i}", b, "int32", bq)
            oq = gen.activation_quant(
                rng, "int8", gen.accumulator_output_scale(prev_q.scales[0], wq, 9 * cin)
            )
            shape = (1, shape[1], shape[2], cout)
            y = m.add_tensor(f"conv{i}", shape, "int8", oq)
            m.add_op(
                op,
                [prev, wt, bt],
                [y],
                padding="SAME",
                stride_h=1,
                stride_w=1,
                fused_activation_function="RELU",
            )
            prev_q = oq
        prev = y
    return m.build([x], [prev])


def test_two_partitions_around_a_cpu_node(runtime: str, interp_mod: Any, lib_path: str) -> None:
    _check(runtime, interp_mod, lib_path, _conv_pool_conv(), {"deny_ops": "MAX_POOL_2D"}, {"MAX_POOL_2D"})


def test_whole_chain_on_npu(runtime: str, interp_mod: Any, lib_path: str) -> None:
    _check(runtime, interp_mod, lib_path, _conv_pool_conv(), {}, set())


def _dilated_conv() -> bytes:
    """Keras' Conv2D(dilation_rate=2, padding="same") as the converter writes it: SPACE_TO_BATCH_ND ->
    CONV_2D (VALID) -> BATCH_TO_SPACE_ND."""
    return gen.conv2d_model((1, 11, 9, 4), 8, 3, 1, "SAME", True, "RELU", 12, dilation=2, space_to_batch=True)


def test_dilated_conv_pattern_on_npu(runtime: str, interp_mod: Any, lib_path: str) -> None:
    """The three nodes are claimed together (one partition, fused into one dilated CONV2D)."""
    _check(runtime, interp_mod, lib_path, _dilated_conv(), {}, set())


def test_dilated_conv_pattern_split_by_placement(runtime: str, interp_mod: Any, lib_path: str) -> None:
    """With the convolution kept on the CPU, SPACE_TO_BATCH_ND and BATCH_TO_SPACE_ND run alone on the
    NPU (two partitions): still exact."""
    _check(runtime, interp_mod, lib_path, _dilated_conv(), {"deny_ops": "CONV_2D"}, {"CONV_2D"})


def test_log_softmax_stays_on_cpu(runtime: str, interp_mod: Any, lib_path: str) -> None:
    _check(runtime, interp_mod, lib_path, gen.log_softmax_model((1, 10), 3), {}, {"LOG_SOFTMAX"})


def test_softmax_runs_on_the_npu(runtime: str, interp_mod: Any, lib_path: str) -> None:
    _check(runtime, interp_mod, lib_path, gen.softmax_model((2, 10), 3), {}, set())


def test_invoke_from_threads(runtime: str, interp_mod: Any, lib_path: str) -> None:
    """invoke() releases the GIL; the delegate's callbacks take it back, from any thread, concurrently."""
    import threading

    model = CASES["conv_k3_s1_same_pc"]()
    inputs = gen.random_inputs(model, 7)
    want = gen.run_reference(model, inputs, runtime)
    results: list[Any] = []

    def worker() -> None:
        try:
            delegate = interp_mod.load_delegate(lib_path, {"device": "shim", "log_level": "quiet"})
            for _ in range(3):
                results.append(_differing_bytes(gen.run_reference(model, inputs, runtime, [delegate]), want))
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            results.append(e)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == [0] * 6


def _small_mobilenet(dtype: str = "int8") -> bytes:
    """A MobileNetV1-shaped int8 network in miniature: conv s2, 2 depthwise-separable blocks,
    average pool, reshape, fully connected, softmax (all on the NPU)."""
    rng = np.random.default_rng(17)
    m = gen.ModelBuilder()
    q = gen.activation_quant(rng, dtype, 0.02)
    x = m.add_tensor("input", (1, 16, 16, 3), dtype, q)
    cur, shape = x, (1, 16, 16, 3)

    def conv(kind: str, cout: int, k: int, stride: int) -> None:
        nonlocal cur, shape, q
        cin = shape[3]
        if kind == "CONV_2D":
            w, wq = gen.quantized_filter(rng, (cout, k, k, cin), dtype, dtype == "int8", 0)
            depth = k * k * cin
        else:
            cout = cin
            w, wq = gen.quantized_filter(rng, (1, k, k, cin), dtype, dtype == "int8", 3)
            depth = k * k
        wt = m.add_const(f"w{len(m.ops)}", w, dtype, wq)
        b, bq = gen.quantized_bias(rng, q.scales[0], wq, cout, 500)
        bt = m.add_const(f"b{len(m.ops)}", b, "int32", bq)
        oq = gen.activation_quant(rng, dtype, gen.accumulator_output_scale(q.scales[0], wq, depth))
        h = (shape[1] + stride - 1) // stride
        shape = (1, h, h, cout)
        y = m.add_tensor(f"t{len(m.ops)}", shape, dtype, oq)
        extra = {"depth_multiplier": 1} if kind == "DEPTHWISE_CONV_2D" else {}
        m.add_op(
            kind,
            [cur, wt, bt],
            [y],
            padding="SAME",
            stride_h=stride,
            stride_w=stride,
            fused_activation_function="RELU6",
            **extra,
        )
        cur, q = y, oq

    conv("CONV_2D", 8, 3, 2)
    conv("DEPTHWISE_CONV_2D", 0, 3, 1)
    conv("CONV_2D", 16, 1, 1)
    conv("DEPTHWISE_CONV_2D", 0, 3, 2)
    conv("CONV_2D", 32, 1, 1)
    pooled = m.add_tensor("pool", (1, 1, 1, 32), dtype, q)
    m.add_op(
        "AVERAGE_POOL_2D",
        [cur],
        [pooled],
        padding="VALID",
        stride_h=1,
        stride_w=1,
        filter_height=shape[1],
        filter_width=shape[2],
    )
    flat = m.add_tensor("flat", (1, 32), dtype, q)
    s = m.add_const("shape", np.array([1, 32], dtype=np.int32), "int32")
    m.add_op("RESHAPE", [pooled, s], [flat], new_shape=[1, 32])
    w, wq = gen.quantized_filter(rng, (10, 32), dtype, False, 0)
    wt = m.add_const("fc_w", w, dtype, wq)
    b, bq = gen.quantized_bias(rng, q.scales[0], wq, 10, 500)
    bt = m.add_const("fc_b", b, "int32", bq)
    lq = gen.activation_quant(rng, dtype, gen.accumulator_output_scale(q.scales[0], wq, 32))
    logits = m.add_tensor("logits", (1, 10), dtype, lq)
    m.add_op("FULLY_CONNECTED", [flat, wt, bt], [logits], fused_activation_function="NONE")
    if dtype != "int8":
        return m.build([x], [logits])
    probs = m.add_tensor("probs", (1, 10), "int8", gen.Quant.tensor(1 / 256, -128))
    m.add_op("SOFTMAX", [logits], [probs], beta=1.0)
    return m.build([x], [probs, logits])


def test_small_mobilenet_int8(runtime: str, interp_mod: Any, lib_path: str) -> None:
    _check(runtime, interp_mod, lib_path, _small_mobilenet("int8"), {}, set())


def test_small_mobilenet_uint8(runtime: str, interp_mod: Any, lib_path: str) -> None:
    _check(runtime, interp_mod, lib_path, _small_mobilenet("uint8"), {}, set())


def test_float_chain_in_one_partition(runtime: str, interp_mod: Any, lib_path: str) -> None:
    """MUL -> DEQUANTIZE -> NEG -> QUANTIZE -> MUL: every node on the NPU, in one partition."""
    _check(runtime, interp_mod, lib_path, gen.float_chain_model((1, 16, 8), seed=3, around=True), {}, set())
    record = plugin.last_prepare()
    assert record is not None and all(p.npu for p in record.placements)


def test_float_chain_stays_whole(runtime: str, interp_mod: Any, lib_path: str) -> None:
    """With its NEG denied, the chain's DEQUANTIZE and QUANTIZE stay on the CPU too (no float value
    may cross a partition's edge); the MULs around it run on the NPU."""
    model = gen.float_chain_model((1, 16, 8), seed=3, around=True)
    _check(runtime, interp_mod, lib_path, model, {"deny_ops": "NEG"}, {"DEQUANTIZE", "NEG", "QUANTIZE"})
    record = plugin.last_prepare()
    assert record is not None
    reasons = {p.op: p.reason for p in record.placements}
    assert "chain" in reasons["DEQUANTIZE"] and "chain" in reasons["QUANTIZE"]
