"""shape_folding: the values it folds equal what TFLite itself computes for the same int32 subgraph,
and a folded RESHAPE compiles as an alias inside one partition."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import modelgen as gen
from libaccel.compiler import compile_partition, graph_from_tflite
from libaccel.compiler.partition import check_support
from libaccel.compiler.shape_folding import NotFoldable, fold_shapes, infer_shapes, reshape_output_shape

IN_SHAPE = (2, 5, 6, 7)


def _shape_model(build: Callable[[gen.ModelBuilder, int], list[int]]) -> bytes:
    """An int8 input, its SHAPE, and int32 computations on it (``build``) as the model's outputs."""
    m = gen.ModelBuilder()
    x = m.add_tensor("input", IN_SHAPE, "int8", gen.Quant.tensor(0.1, 0))
    shape = m.add_tensor("shape", (4,), "int32")
    m.add_op("SHAPE", [x], [shape], version=1, out_type=2)
    return m.build([x], build(m, shape))


def _i32(m: gen.ModelBuilder, name: str, value: Any) -> int:
    return m.add_const(name, np.array(value, np.int32), "int32")


def _slice(begin: list[int], end: list[int], strides: list[int], **masks: int) -> Callable:
    def build(m: gen.ModelBuilder, shape: int) -> list[int]:
        ins = [shape, _i32(m, "b", begin), _i32(m, "e", end), _i32(m, "s", strides)]
        out = m.add_tensor("out", (1,), "int32")  # a placeholder: TFLite sizes it
        m.add_op("STRIDED_SLICE", ins, [out], version=1, **masks)
        return [out]

    return build


def _gather(m: gen.ModelBuilder, shape: int) -> list[int]:
    out = m.add_tensor("out", (3,), "int32")
    m.add_op("GATHER", [shape, _i32(m, "idx", [3, 0, 1])], [out], version=1, axis=0)
    return [out]


def _reduce_prod(m: gen.ModelBuilder, shape: int) -> list[int]:
    part = m.add_tensor("hw", (2,), "int32")
    m.add_op(
        "STRIDED_SLICE", [shape, _i32(m, "b", [1]), _i32(m, "e", [3]), _i32(m, "s", [1])], [part], version=1
    )
    out = m.add_tensor("out", (), "int32")
    m.add_op("REDUCE_PROD", [part, _i32(m, "axes", [0])], [out], version=1, keep_dims=False)
    return [out]


def _pack_concat_arith(m: gen.ModelBuilder, shape: int) -> list[int]:
    batch = m.add_tensor("batch", (), "int32")
    m.add_op(
        "STRIDED_SLICE",
        [shape, _i32(m, "b", [0]), _i32(m, "e", [1]), _i32(m, "s", [1])],
        [batch],
        version=1,
        shrink_axis_mask=1,
    )
    doubled = m.add_tensor("doubled", (), "int32")
    m.add_op("MUL", [batch, _i32(m, "two", 2)], [doubled], version=1, fused_activation_function="NONE")
    halved = m.add_tensor("halved", (), "int32")
    m.add_op("FLOOR_DIV", [doubled, _i32(m, "three", 3)], [halved], version=1)
    packed = m.add_tensor("packed", (3,), "int32")
    m.add_op("PACK", [batch, doubled, halved], [packed], version=1, values_count=3, axis=0)
    out = m.add_tensor("out", (7,), "int32")
    m.add_op("CONCATENATION", [packed, shape], [out], version=1, axis=0, fused_activation_function="NONE")
    return [out]


CASES = {
    "slice_one": _slice([1], [2], [1]),
    "slice_shrink_negative": _slice([-1], [0], [1], shrink_axis_mask=1),
    "slice_masks": _slice([1], [3], [1], begin_mask=1),
    "slice_end_mask_stride2": _slice([1], [2], [2], end_mask=1),
    "slice_reverse": _slice([-1], [0], [-1], end_mask=1),
    "slice_clamped": _slice([-9], [9], [1]),
    "gather": _gather,
    "reduce_prod": _reduce_prod,
    "pack_concat_arith": _pack_concat_arith,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_folded_values_equal_tflite(name: str) -> None:
    model = _shape_model(CASES[name])
    tflite_values = gen.run_reference(model, [np.zeros(IN_SHAPE, np.int8)], "ai_edge_litert")
    graph = graph_from_tflite(model)
    result = fold_shapes(graph)
    assert result.folded == {n.index for n in graph.nodes}
    for index, want in zip(graph.outputs, tflite_values, strict=True):
        got = result.graph.tensors[index].data
        assert got is not None
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_reshape_output_shape() -> None:
    assert reshape_output_shape((2, 3, 4), [2, -1]) == (2, 12)
    assert reshape_output_shape((2, 3, 4), [-1]) == (24,)
    with pytest.raises(NotFoldable, match="RESHAPE"):
        reshape_output_shape((2, 3, 4), [5, -1])


def test_unfoldable_shape_is_dynamic_and_downstream_too() -> None:
    m = gen.ModelBuilder()
    q = gen.Quant.tensor(0.1, 0)
    x = m.add_tensor("input", (1, 4, 4, 2), "int8", q)
    shape = m.add_tensor("wanted", (2,), "int32")  # a model input: data
    flat = m.add_tensor("flat", (1, 32), "int8", q)
    m.add_op("RESHAPE", [x, shape], [flat], version=1)
    y = m.add_tensor("y", (1, 32), "int8", q)
    m.add_op("RELU", [flat], [y])
    result = fold_shapes(graph_from_tflite(m.build([x, shape], [y])))
    assert result.dynamic == {flat, y}
    assert not check_support(result.graph, result.graph.nodes[0])


def test_flatten_compiles_to_one_alias(dev: Any) -> None:
    graph = graph_from_tflite(gen.flatten_fc_model((1, 3, 3, 4), 5))
    assert not check_support(graph, graph.nodes[3])  # RESHAPE before folding: its shape is data
    folded = fold_shapes(graph).graph
    assert all(check_support(folded, n) for n in folded.nodes)
    compiled = compile_partition(folded, [n.index for n in folded.nodes], dev.params.isa_version)
    assert [b.index for b in compiled.inputs] == [0]
    ops = {k: v for k, v in compiled.stats["instructions"].items() if k not in ("TENSOR", "END")}
    assert ops == {"FULLY_CONNECTED": 1}  # the shape nodes and the RESHAPE emit nothing


# --- shape inference: the pass's shapes are the ones TFLite's kernels give at prepare ---------------
def _tflite_shapes(model: bytes) -> dict[int, tuple[int, ...]]:
    """Every tensor's shape in TFLite (LiteRT) after allocate_tensors and one invoke."""
    import ai_edge_litert.interpreter as litert

    interp = litert.Interpreter(model_content=model)
    interp.allocate_tensors()
    for d in interp.get_input_details():
        interp.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
    interp.invoke()
    return {d["index"]: tuple(int(v) for v in d["shape"]) for d in interp.get_tensor_details()}


def _assert_shapes_are_tflite(model: bytes) -> Any:
    graph = graph_from_tflite(model)
    result = fold_shapes(graph)
    want = _tflite_shapes(model)
    wrong = {
        t: (info.shape, want[t])
        for t, info in result.graph.tensors.items()
        if t not in result.dynamic and info.shape != want[t]
    }
    assert not wrong, f"(inferred, TFLite) shapes differ: {wrong}"
    return result


def _corpus_models() -> list[str]:
    from bench import corpus

    return sorted(corpus.manifest())


@pytest.mark.parametrize("name", _corpus_models())
def test_corpus_shapes_equal_tflite(name: str) -> None:
    """Over the converter's real models, every shape the pass gives (placeholders replaced) is the
    one TFLite computes, and nothing is left dynamic that TFLite knows before running."""
    from bench import corpus

    result = _assert_shapes_are_tflite(corpus.model_bytes(name))
    assert not result.dynamic


def test_dilated_concat_placeholders_are_replaced() -> None:
    """The converter stores SPACE_TO_BATCH_ND's output batch as the input's (1): it is N * prod(block),
    and the convolution after it has that batch too."""
    from bench import corpus

    model = corpus.model_bytes("dilated_concat")
    graph = graph_from_tflite(model)
    result = _assert_shapes_are_tflite(model)
    s2b = [n for n in graph.nodes if n.op == "SPACE_TO_BATCH_ND"]
    assert [graph.tensors[n.outputs[0]].shape for n in s2b] == [(1, 26, 26, 8), (1, 18, 18, 8)]
    assert [result.graph.tensors[n.outputs[0]].shape for n in s2b] == [(4, 26, 26, 8), (9, 18, 18, 8)]
    assert all(check_support(result.graph, n) for n in result.graph.nodes)


def _batch_model(rank: int, block: list[int], pads: list[list[int]], crops: list[list[int]]) -> bytes:
    """SPACE_TO_BATCH_ND -> RELU -> BATCH_TO_SPACE_ND with every output stored as a placeholder of
    batch 1 and the space sizes the model's input has."""
    q = gen.Quant.tensor(0.1, 3)
    shape = (2, 6, 5, 3) if rank == 4 else (2, 7, 3)
    m = gen.ModelBuilder()
    x = m.add_tensor("input", shape, "int8", q)
    b = _i32(m, "block", block)
    xs = m.add_tensor("s2b", (1, *shape[1:]), "int8", q)
    m.add_op("SPACE_TO_BATCH_ND", [x, b, _i32(m, "pads", pads)], [xs], version=1)
    r = m.add_tensor("relu", (1, *shape[1:]), "int8", q)
    m.add_op("RELU", [xs], [r])
    y = m.add_tensor("b2s", (1, *shape[1:]), "int8", q)
    m.add_op("BATCH_TO_SPACE_ND", [r, b, _i32(m, "crops", crops)], [y], version=1)
    return m.build([x], [y])


@pytest.mark.parametrize(
    ("rank", "block", "pads", "crops"),
    [
        (4, [2, 3], [[0, 0], [2, 2]], [[0, 0], [2, 2]]),
        (4, [3, 1], [[1, 2], [0, 0]], [[0, 3], [0, 0]]),
        (4, [1, 1], [[0, 0], [0, 0]], [[0, 0], [0, 0]]),
        (3, [2], [[1, 2]], [[2, 1]]),
    ],
)
def test_batch_shapes_equal_tflite(rank: int, block: list[int], pads: list, crops: list) -> None:
    result = _assert_shapes_are_tflite(_batch_model(rank, block, pads, crops))
    assert not result.dynamic


def test_batch_shapes_by_formula() -> None:
    model = _batch_model(4, [2, 3], [[0, 0], [2, 2]], [[1, 1], [0, 0]])
    tensors = fold_shapes(graph_from_tflite(model)).graph.tensors
    assert tensors[2].shape == (12, 3, 3, 3)  # [2 * 2 * 3, 6 / 2, (5 + 4) / 3, 3]
    assert tensors[4].shape == (12, 3, 3, 3)  # RELU: its input's
    assert tensors[5].shape == (2, 4, 9, 3)  # [12 / 6, 3 * 2 - 2, 3 * 3, 3]


def test_infer_shapes_rejects_what_tflite_rejects() -> None:
    model = _batch_model(4, [4, 1], [[0, 0], [0, 0]], [[0, 0], [0, 0]])  # 6 rows in blocks of 4
    result = fold_shapes(graph_from_tflite(model))
    assert result.dynamic == {2, 4, 5}  # not placed: TFLite's own prepare reports the error
    graph = graph_from_tflite(model)
    values = {i: t.data for i, t in graph.tensors.items() if t.data is not None}
    with pytest.raises(NotFoldable, match="not a multiple of the block"):
        infer_shapes(dict(graph.tensors), graph.nodes[0], values)


def test_op_without_a_rule_below_a_corrected_shape_is_dynamic() -> None:
    """TILE has no rule: below SPACE_TO_BATCH_ND's corrected output its stored shape proves nothing, so
    it and the convolution after it are dynamic (their nodes stay on the CPU)."""
    model = gen.space_to_batch_tile_conv_model()
    graph = graph_from_tflite(model)
    result = fold_shapes(graph)
    tile, conv = graph.nodes[1], graph.nodes[2]
    assert result.dynamic == {tile.outputs[0], conv.outputs[0]}
    want = _tflite_shapes(model)
    assert result.graph.tensors[graph.nodes[0].outputs[0]].shape == want[graph.nodes[0].outputs[0]]
    assert want[tile.outputs[0]] != graph.tensors[tile.outputs[0]].shape  # the stored one was wrong
