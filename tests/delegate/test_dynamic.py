"""Graphs with dynamic tensors: the converter's shape subgraphs folded into one NPU partition, shapes
known only at run time left on the CPU, and a failing partition that leaves the interpreter working.

Every case compares with the same model on TFLite's reference kernels alone (0 differing bytes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import modelgen as gen
from delegate_teflon import compiler_bridge, context_reader, plugin


def _run_both(
    runtime: str, interp_mod: Any, lib_path: str, model: bytes, options: dict[str, str] | None = None
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(through the delegate, reference alone) outputs for the same random inputs."""
    inputs = gen.random_inputs(model, seed=5)
    delegate = interp_mod.load_delegate(lib_path, {"device": "shim", "log_level": "info", **(options or {})})
    got = gen.run_reference(model, inputs, runtime, [delegate])
    want = gen.run_reference(model, inputs, runtime)
    return got, want


def _assert_equal(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def _placement() -> dict[int, tuple[str, bool, str]]:
    record = plugin.last_prepare()
    assert record is not None
    return {p.node: (p.op, p.npu, p.reason) for p in record.placements}


def test_converter_flatten_is_one_npu_partition(
    runtime: str, interp_mod: Any, lib_path: str, capfd: pytest.CaptureFixture
) -> None:
    model = gen.flatten_fc_model((1, 5, 5, 8), 10, seed=1)
    got, want = _run_both(runtime, interp_mod, lib_path, model, {"log_level": "verbose"})
    _assert_equal(got, want)
    placed = _placement()
    assert [op for op, _, _ in placed.values()] == [
        "SHAPE",
        "STRIDED_SLICE",
        "PACK",
        "RESHAPE",
        "FULLY_CONNECTED",
    ]
    assert all(npu for _, npu, _ in placed.values()), placed
    err = capfd.readouterr().err
    assert "NPU partition" in err and "nodes [0, 1, 2, 3, 4]" in err
    assert err.count("compiled and uploaded") + err.count("loaded from the compile cache") == 1
    assert "invoke 1 took" in err  # the per-invoke timing line at verbose


def _flatten_then_cpu_softmax(declared: tuple[int, ...]) -> bytes:
    """Flatten (declared shape ``declared``, a placeholder) -> LOG_SOFTMAX (a CPU op) -> output."""
    rng = np.random.default_rng(2)
    m = gen.ModelBuilder()
    x = m.add_tensor("input", (1, 4, 4, 6), "int8", gen.activation_quant(rng, "int8", 0.05))
    flat = gen.converter_flatten(m, x, declared)
    y = m.add_tensor("probs", declared, "int8", gen.Quant.tensor(16 / 256, 127))
    m.add_op("LOG_SOFTMAX", [flat], [y])
    return m.build([x], [y])


def test_partition_output_gets_its_static_shape(runtime: str, interp_mod: Any, lib_path: str) -> None:
    """The model declares the flattened tensor as [1, 1]: the delegate's partition produces it and
    sizes it [1, 96] (context->ResizeTensor) before the CPU's LOG_SOFTMAX is prepared."""
    model = _flatten_then_cpu_softmax((1, 1))
    got, want = _run_both(runtime, interp_mod, lib_path, model)
    assert want[0].shape == (1, 96)
    _assert_equal(got, want)
    placed = _placement()
    assert [npu for _, npu, _ in placed.values()] == [True, True, True, True, False]


def _runtime_shaped_reshape() -> bytes:
    """RESHAPE whose shape is a model input (data), then FULLY_CONNECTED on the result."""
    rng = np.random.default_rng(3)
    m = gen.ModelBuilder()
    iq = gen.activation_quant(rng, "int8", 0.04)
    x = m.add_tensor("input", (1, 2, 2, 8), "int8", iq)
    shape = m.add_tensor("shape", (2,), "int32")
    flat = m.add_tensor("flat", (1, 32), "int8", iq)
    m.add_op("RESHAPE", [x, shape], [flat], version=1)
    wdata, wq = gen.quantized_filter(rng, (4, 32), "int8", False, 0)
    w = m.add_const("filter", wdata, "int8", wq)
    y = m.add_tensor("output", (1, 4), "int8", gen.activation_quant(rng, "int8", 0.5))
    m.add_op("FULLY_CONNECTED", [flat, w], [y], fused_activation_function="NONE")
    return m.build([x, shape], [y])


def test_shapes_known_only_at_run_time_stay_on_the_cpu(runtime: str, interp_mod: Any, lib_path: str) -> None:
    model = _runtime_shaped_reshape()
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, size=(1, 2, 2, 8), dtype=np.int8)
    inputs = [x, np.array([1, 32], np.int32)]
    delegate = interp_mod.load_delegate(lib_path, {"device": "shim", "log_level": "quiet"})
    got = gen.run_reference(model, inputs, runtime, [delegate])
    _assert_equal(got, gen.run_reference(model, inputs, runtime))
    placed = _placement()
    assert not placed[0][1] and placed[0][2] == "tensor 2 (flat) has a shape known only at run time"
    assert not placed[1][1] and placed[1][2] == "tensor 2 (flat) has a shape known only at run time"


def test_a_failing_partition_stays_on_the_cpu(
    runtime: str,
    interp_mod: Any,
    lib_path: str,
    tmp_path: Path,
    capfd: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A compile error in one partition: one info line names its nodes; they run on the CPU; the other
    partition still runs on the NPU and the outputs equal the reference."""
    model = gen.flatten_fc_model((1, 3, 3, 4), 6, seed=7)

    class CompilerBroken(RuntimeError):
        pass

    def failing_compile(graph: Any, *args: Any, **kwargs: Any) -> Any:
        raise CompilerBroken("compiler broken on purpose")

    monkeypatch.setattr(compiler_bridge, "compile_partition", failing_compile)
    got, want = _run_both(
        runtime, interp_mod, lib_path, model, {"cache_dir": str(tmp_path), "strict": "false"}
    )
    _assert_equal(got, want)
    lines = [ln for ln in capfd.readouterr().err.splitlines() if ln.startswith("vnpu delegate:")]
    assert lines[0] == (
        "vnpu delegate: nodes [0, 1, 2, 3, 4] (FULLY_CONNECTED, PACK, RESHAPE, SHAPE, STRIDED_SLICE) stay on "
        "the CPU: CompilerBroken: compiler broken on purpose"
    )
    assert not any(npu for _, npu, _ in _placement().values())
    assert all("compiler broken on purpose" in why for _, _, why in _placement().values())


def test_strict_mode_fails_where_a_partition_would_fall_back(
    runtime: str, interp_mod: Any, lib_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """strict=true (the suite's default): the same compile error fails the interpreter's creation,
    naming the error, instead of leaving the nodes on the CPU."""
    model = gen.flatten_fc_model((1, 3, 3, 4), 6, seed=7)

    def failing_compile(graph: Any, *args: Any, **kwargs: Any) -> Any:
        raise ArithmeticError("compiler broken on purpose")

    monkeypatch.setattr(compiler_bridge, "compile_partition", failing_compile)
    delegate = interp_mod.load_delegate(
        lib_path, {"device": "shim", "cache_dir": str(tmp_path), "strict": "true"}
    )
    with pytest.raises(RuntimeError, match="strict mode: ArithmeticError: compiler broken on purpose"):
        gen.run_reference(model, gen.random_inputs(model, seed=5), runtime, [delegate])


def test_one_of_two_partitions_fails(
    runtime: str, interp_mod: Any, lib_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(8)
    m = gen.ModelBuilder()
    q = gen.activation_quant(rng, "int8", 0.05)
    x = m.add_tensor("input", (1, 6, 6, 4), "int8", q)
    a = m.add_tensor("a", (1, 6, 6, 4), "int8", q)
    m.add_op("RELU", [x], [a])
    b = m.add_tensor("b", (1, 6, 6, 4), "int8", gen.Quant.tensor(1 / 256, -128))
    m.add_op("LOGISTIC", [a], [b])  # denied below: a CPU node between two partitions
    c = m.add_tensor("c", (1, 6, 6, 4), "int8", gen.Quant.tensor(1 / 256, -128))
    m.add_op("RELU", [b], [c])
    model = m.build([x], [c])
    real = compiler_bridge.compile_partition

    def compile_fails_on_node_2(graph: Any, *args: Any, **kwargs: Any) -> Any:
        if any(n.index == 2 for n in graph.nodes):
            raise RuntimeError("no BO for you")
        return real(graph, *args, **kwargs)

    monkeypatch.setattr(compiler_bridge, "compile_partition", compile_fails_on_node_2)
    got, want = _run_both(
        runtime,
        interp_mod,
        lib_path,
        model,
        {"cache_dir": str(tmp_path), "deny_ops": "LOGISTIC", "strict": "0"},
    )
    _assert_equal(got, want)
    placed = _placement()
    assert placed[0][1] and not placed[1][1] and not placed[2][1]
    assert "no BO for you" in placed[2][2]


def test_prepare_failure_leaves_the_whole_graph_on_the_cpu(
    runtime: str,
    interp_mod: Any,
    lib_path: str,
    capfd: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken_reader(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("unreadable graph on purpose")

    monkeypatch.setattr(plugin, "read_context", broken_reader)
    assert plugin.read_context is broken_reader and context_reader.read_context is not broken_reader
    model = gen.flatten_fc_model((1, 2, 2, 4), 3, seed=9)
    got, want = _run_both(runtime, interp_mod, lib_path, model, {"strict": "false"})
    _assert_equal(got, want)
    err = capfd.readouterr().err
    want = "vnpu delegate: Prepare failed (ValueError: unreadable graph on purpose); the whole graph runs on "
    assert want + "the CPU" in err


def test_unprovable_shapes_below_a_placeholder_stay_on_the_cpu(
    runtime: str, interp_mod: Any, lib_path: str
) -> None:
    """SPACE_TO_BATCH_ND's stored output shape is a placeholder ([1, ...], [4, ...] at run time): the
    delegate infers it and sizes the partition's output; TILE has no shape rule, so the convolution
    after it (whose input TFLite resizes only at allocation) stays on the CPU instead of making a
    partition whose input shape would change after delegation. The interpreter builds and is exact."""
    model = gen.space_to_batch_tile_conv_model()
    got, want = _run_both(runtime, interp_mod, lib_path, model)
    assert want[0].shape == (4, 4, 4, 6)
    _assert_equal(got, want)
    placed = _placement()
    assert placed[0][:2] == ("SPACE_TO_BATCH_ND", True)
    assert placed[1][:2] == ("TILE", False)
    assert placed[2] == ("CONV_2D", False, "tensor 5 (tiled) has a shape known only at run time")
