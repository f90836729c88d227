"""Support checks, partitions with CPU nodes around them, the memory plan and the compile cache."""

from __future__ import annotations

import numpy as np
import pytest

import modelgen as g
from libaccel import Device
from libaccel.compiler import (
    CompileCache,
    CompiledPartition,
    CompileError,
    PartitionRunner,
    check_support,
    compile_cached,
    compile_partition,
    graph_from_tflite,
)
from libaccel.compiler.cache import model_key, partition_key
from libaccel.compiler.compiled import WeightsFile
from libaccel.compiler.graph import QuantParams
from libaccel.compiler.memory_plan import plan_arena

ISA = 1 << 16


def _only_node(model: bytes):
    graph = graph_from_tflite(model)
    return graph, graph.nodes[0]


def test_supported_nodes_say_ok() -> None:
    graph, node = _only_node(g.conv2d_model((1, 8, 8, 3), 4, 3, 1, "SAME", True, "RELU6", 1))
    s = check_support(graph, node)
    assert s.ok and bool(s) and s.reason == ""


def test_unsupported_op_has_a_reason() -> None:
    graph, node = _only_node(g.log_softmax_model((1, 10)))
    s = check_support(graph, node)
    assert not s.ok and "LOG_SOFTMAX is not an NPU operator" in s.reason


def test_float_tensors_stay_on_cpu() -> None:
    graph, node = _only_node(g.conv2d_model((1, 8, 8, 3), 4, 3, 1, "SAME", True, "NONE", 1))
    graph.tensors[node.inputs[0]].dtype = "float32"
    assert "float32" in check_support(graph, node).reason


def test_asymmetric_int8_filter_stays_on_cpu() -> None:
    graph, node = _only_node(g.conv2d_model((1, 8, 8, 3), 4, 3, 1, "SAME", False, "NONE", 1))
    w = graph.tensors[node.inputs[1]]
    assert w.quant is not None
    w.quant = QuantParams(w.quant.scales, (3,), 0)
    assert "zero point" in check_support(graph, node).reason


def test_unrepresentable_multiplier_stays_on_cpu() -> None:
    graph, node = _only_node(g.conv2d_model((1, 8, 8, 3), 4, 3, 1, "SAME", False, "NONE", 1))
    y = graph.tensors[node.outputs[0]]
    assert y.quant is not None
    y.quant = QuantParams((1e-16,), y.quant.zero_points, 0)  # multiplier ~1e12: shift > 30
    assert "shift" in check_support(graph, node).reason


def test_wrong_output_shape_stays_on_cpu() -> None:
    graph, node = _only_node(g.conv2d_model((1, 8, 8, 3), 4, 3, 2, "SAME", True, "NONE", 1))
    graph.tensors[node.outputs[0]].shape = (1, 8, 8, 4)
    assert "padding gives 4x4" in check_support(graph, node).reason


def test_pool_with_different_quantization_stays_on_cpu() -> None:
    graph, node = _only_node(g.pool_model("MAX_POOL_2D", (1, 4, 4, 2)))
    graph.tensors[node.outputs[0]].quant = QuantParams((0.5,), (0,), 0)
    assert "quantization differ" in check_support(graph, node).reason


def test_compile_errors_name_the_problem() -> None:
    graph = graph_from_tflite(g.log_softmax_model((1, 10)))
    with pytest.raises(CompileError, match=r"node 0 \(LOG_SOFTMAX\)"):
        compile_partition(graph, [0], ISA)
    graph = graph_from_tflite(g.pool_model("MAX_POOL_2D", (1, 4, 4, 2)))
    with pytest.raises(CompileError, match="not in the graph"):
        compile_partition(graph, [5], ISA)
    with pytest.raises(CompileError, match="ISA 2.0"):
        compile_partition(graph, [0], 2 << 16)
    with pytest.raises(CompileError, match="empty"):
        compile_partition(graph, [], ISA)


def _chain_model() -> bytes:
    """conv -> conv -> log-softmax: the NPU takes the two convs, the CPU the log-softmax."""
    nb = g.NetworkBuilder(seed=4)
    x = nb.input((1, 12, 12, 4))
    y = nb.conv(nb.conv(x, 8, 3, 1), 10, 3, 2, act="NONE")
    y = nb.reshape(y, (1, 6 * 6 * 10))
    out = nb.m.add_tensor("probs", (1, 360), "int8", g.Quant.tensor(16 / 256, 127))
    nb.m.add_op("LOG_SOFTMAX", [y], [out])
    return nb.build([x], [out])


def test_partition_with_cpu_consumer(dev: Device) -> None:
    import tflite_runtime.interpreter as tfl

    model = _chain_model()
    graph = graph_from_tflite(model)
    supported = [n.index for n in graph.nodes if check_support(graph, n)]
    assert [graph.node(i).op for i in supported] == ["CONV_2D", "CONV_2D", "RESHAPE"]
    compiled = compile_partition(graph, supported, dev.params.isa_version)
    softmax = graph.nodes[-1]
    assert [b.index for b in compiled.outputs] == [softmax.inputs[0]]
    assert [b.index for b in compiled.inputs] == list(graph.inputs)

    (x,) = g.random_inputs(model, seed=9)
    interp = tfl.Interpreter(
        model_content=model,
        experimental_op_resolver_type=tfl.OpResolverType.BUILTIN_REF,
        experimental_preserve_all_tensors=True,
    )
    interp.allocate_tensors()
    interp.set_tensor(graph.inputs[0], x)
    interp.invoke()
    expected = interp.get_tensor(softmax.inputs[0])
    with PartitionRunner(dev, compiled) as runner:
        got = runner.run({graph.inputs[0]: x})[softmax.inputs[0]]
        assert np.array_equal(got.reshape(expected.shape), expected)
        # Inputs can also be written in place and the job rerun.
        runner.input_view(graph.inputs[0])[...] = x
        runner.submit_and_wait()
        assert np.array_equal(runner.output_view(softmax.inputs[0]).reshape(expected.shape), expected)
        with pytest.raises(ValueError, match="missing partition inputs"):
            runner.run({})
        with pytest.raises(ValueError, match="expected int8"):
            runner.run({graph.inputs[0]: x.astype(np.int32)})


def test_arena_shares_bytes_between_dead_tensors() -> None:
    model = g.mobilenet_v1_model(64, 0.25, 10, seed=5)
    graph = graph_from_tflite(model)
    compiled = compile_partition(graph, [n.index for n in graph.nodes], ISA)
    assert compiled.stats["arena_bytes"] < compiled.stats["activation_bytes_unshared"] / 2
    # Weights hold each constant once: filters and biases, nothing per use.
    const_bytes = sum(t.nbytes for t in graph.tensors.values() if t.data is not None and t.dtype != "int32")
    assert const_bytes <= len(compiled.weights) <= const_bytes * 1.2 + 64 * 200


def test_plan_arena_never_overlaps_live_buffers() -> None:
    rng = np.random.default_rng(0)
    sizes, lives = {}, {}
    for k in range(40):
        first = int(rng.integers(0, 20))
        sizes[k] = int(rng.integers(1, 5000))
        lives[k] = (first, first + int(rng.integers(0, 6)))
    offsets, total = plan_arena(sizes, lives)
    for a in sizes:
        assert offsets[a] % 64 == 0 and offsets[a] + sizes[a] <= total
        for b in sizes:
            if a < b and lives[a][0] <= lives[b][1] and lives[b][0] <= lives[a][1]:
                assert offsets[a] + sizes[a] <= offsets[b] or offsets[b] + sizes[b] <= offsets[a]


def test_compile_cache_round_trip(tmp_path, dev: Device) -> None:
    model = g.conv2d_model((1, 8, 8, 3), 4, 3, 1, "SAME", True, "RELU6", 1)
    graph = graph_from_tflite(model)
    cache = CompileCache(tmp_path)
    first, hit1 = compile_cached(graph, [0], ISA, cache)
    second, hit2 = compile_cached(graph_from_tflite(model), [0], ISA, cache)
    assert (hit1, hit2) == (False, True)
    assert second.to_bytes() == first.to_bytes()
    # A different ISA version or different weights is a different key.
    _, hit3 = compile_cached(graph, [0], ISA | 1, cache)
    assert not hit3
    other = graph_from_tflite(g.conv2d_model((1, 8, 8, 3), 4, 3, 1, "SAME", True, "RELU6", 2))
    _, hit4 = compile_cached(other, [0], ISA, cache)
    assert not hit4
    # A torn cache file is ignored and rewritten.
    for f in tmp_path.iterdir():
        f.write_bytes(f.read_bytes()[:50])
    again, hit5 = compile_cached(graph, [0], ISA, cache)
    assert not hit5 and again.to_bytes() == first.to_bytes()
    with pytest.raises(ValueError, match="magic"):
        CompiledPartition.from_bytes(b"garbage!" * 4)


def test_model_key_covers_every_constant_byte_and_scale() -> None:
    """One flipped weight byte, one changed per-channel scale or zero point: another key."""
    model = g.conv2d_model((1, 8, 8, 3), 4, 3, 1, "SAME", True, "RELU6", 1)
    base = model_key(graph_from_tflite(model), ISA)
    assert model_key(graph_from_tflite(model), ISA) == base
    assert model_key(graph_from_tflite(model), ISA | 1) != base
    graph = graph_from_tflite(model)
    w = graph.tensors[graph.nodes[0].inputs[1]]
    data = w.data.copy()
    data.reshape(-1)[-1] ^= 1
    w.data = data
    assert model_key(graph, ISA) != base
    for change in ("scale", "zero_point"):
        graph = graph_from_tflite(model)
        w = graph.tensors[graph.nodes[0].inputs[1]]
        scales, zps = list(w.quant.scales), list(w.quant.zero_points)
        if change == "scale":
            scales[-1] = np.nextafter(scales[-1], 1.0)
        else:
            zps[-1] += 1
        w.quant = QuantParams(tuple(scales), tuple(zps), w.quant.axis)
        assert model_key(graph, ISA) != base, change
    # A partition key derives from the model key, the nodes and the outputs.
    assert partition_key(base, [0], (3,)) != partition_key(base, [0], None)
    assert partition_key(base, [0], None) != partition_key(model_key(graph, ISA), [0], None)


def test_compile_cached_with_a_given_key_and_support_results(tmp_path) -> None:
    model = g.conv2d_model((1, 8, 8, 3), 4, 3, 1, "SAME", True, "RELU6", 1)
    graph = graph_from_tflite(model)
    cache = CompileCache(tmp_path)
    key = partition_key(model_key(graph, ISA), [0])
    first, hit1 = compile_cached(graph, [0], ISA, cache, key=key)
    second, hit2 = compile_cached(graph, [0], ISA, cache, key=key)
    assert (hit1, hit2) == (False, True) and cache.path(key).exists()
    assert bytes(second.weights) == bytes(first.weights) and second.to_bytes() == first.to_bytes()
    # Support results round-trip; a missing, torn or foreign file reads as empty.
    assert cache.get_support(key) == {}
    cache.put_support(key, {0: (True, ""), 2: (False, "SOFTMAX is not an NPU operator")})
    assert cache.get_support(key) == {0: (True, ""), 2: (False, "SOFTMAX is not an NPU operator")}
    cache.support_path(key).write_bytes(b'{"compiler_version": "0.0", "nodes": {"0": [true, ""]}}')
    assert cache.get_support(key) == {}
    cache.support_path(key).write_bytes(b"{torn")
    assert cache.get_support(key) == {}


def test_weights_left_in_the_cache_file_upload_exactly(tmp_path, dev: Device) -> None:
    """compile_cached(weights_in_file=True): the weights stay in the file and are read straight
    into the runner's BO, on the miss (after the cache write) and on the hit; a torn file misses."""
    model = g.conv2d_model((1, 8, 8, 3), 4, 3, 1, "SAME", True, "RELU6", 1)
    graph = graph_from_tflite(model)
    cache = CompileCache(tmp_path)
    direct = compile_partition(graph, [0], dev.params.isa_version)
    x = np.arange(8 * 8 * 3, dtype=np.int8).reshape(1, 8, 8, 3)
    with PartitionRunner(dev, direct) as runner:
        want = runner.run({graph.inputs[0]: x})
    for expect_hit in (False, True):
        compiled, hit = compile_cached(graph, [0], dev.params.isa_version, cache, weights_in_file=True)
        assert hit == expect_hit
        assert isinstance(compiled.weights, WeightsFile) and len(compiled.weights) == len(direct.weights)
        assert compiled.to_bytes() == direct.to_bytes()
        with PartitionRunner(dev, compiled) as runner:
            assert bytes(runner.weights.map()[: len(direct.weights)]) == bytes(direct.weights)
            got = runner.run({graph.inputs[0]: x})
        assert all(np.array_equal(got[t], want[t]) for t in want)
    (path,) = tmp_path.glob("*.vnpucp")
    path.write_bytes(path.read_bytes()[:-1])
    assert cache.get(path.stem, weights_in_file=True) is None
    with pytest.raises(ValueError, match="truncated"):
        CompiledPartition.from_file(path)
