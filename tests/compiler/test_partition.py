"""The one partitioner (libaccel.compiler.partition): each rule, strict mode, runs and the report."""

from __future__ import annotations

import numpy as np
import pytest

import modelgen as gen
from libaccel.compiler import graph_from_tflite, partition, registry
from libaccel.compiler.graph import Graph
from libaccel.compiler.partition import Placement, PlannerError, Rules


def _chain(ops: list[str], logistic_out: gen.Quant | None = None) -> Graph:
    """int8 ops in a line: input -> ops[0] -> ops[1] -> ... -> output (LOGISTIC's output quantized as
    TFLite requires unless ``logistic_out`` says otherwise)."""
    rng = np.random.default_rng(3)
    m = gen.ModelBuilder()
    x = first = m.add_tensor("input", (1, 4, 4, 8), "int8", gen.activation_quant(rng, "int8", 0.05))
    for k, op in enumerate(ops):
        q = gen.activation_quant(rng, "int8", 0.05)
        if op == "LOGISTIC":
            q = logistic_out or gen.Quant.tensor(1 / 256, -128)
        y = m.add_tensor(f"t{k}", (1, 4, 4, 8), "int8", q)
        m.add_op(op, [x], [y])
        x = y
    return graph_from_tflite(m.build([first], [x]))


def test_every_supported_node_goes_to_the_npu_in_one_run() -> None:
    placed = partition.place(_chain(["RELU", "LOGISTIC", "RELU"]))
    assert [(p.node, p.op, p.npu, p.reason) for p in placed] == [
        (0, "RELU", True, ""),
        (1, "LOGISTIC", True, ""),
        (2, "RELU", True, ""),
    ]
    assert partition.partition_runs(placed) == [(0, 1, 2)]


def test_op_lists_split_the_runs() -> None:
    graph = _chain(["RELU", "LOGISTIC", "RELU"])
    placed = partition.numbered(partition.place(graph, Rules(deny_ops=frozenset({"LOGISTIC"}))))
    assert [(p.npu, p.partition, p.reason) for p in placed] == [
        (True, 0, ""),
        (False, None, "denied by the deny_ops option"),
        (True, 1, ""),
    ]
    only = partition.place(graph, Rules(allow_ops=frozenset({"LOGISTIC"})))
    assert [p.reason for p in only] == ["not in the allow_ops option", "", "not in the allow_ops option"]


def test_a_dynamic_tensor_keeps_its_readers_and_writer_on_the_cpu() -> None:
    graph = _chain(["RELU", "RELU", "RELU"])
    t = graph.nodes[1].outputs[0]
    placed = partition.place(graph, Rules(dynamic=frozenset({t})))
    assert [p.npu for p in placed] == [True, False, False]
    assert placed[1].reason == f"tensor {t} ({graph.tensors[t].name}) has a shape known only at run time"


def test_a_frontend_reason_and_a_group_move_together() -> None:
    graph = _chain(["RELU", "RELU", "RELU"])
    placed = partition.place(graph, Rules(cpu={2: "kept by the frontend"}, groups=[(1, 2)]))
    assert [(p.npu, p.reason) for p in placed] == [
        (True, ""),
        (False, "kept by the frontend"),
        (False, "kept by the frontend"),
    ]


def test_the_compilers_refusal_is_the_reason() -> None:
    graph = _chain(["RELU", "RELU"])
    graph.tensors[graph.nodes[1].outputs[0]].dtype = "float32"  # an output the NPU cannot write
    placed = partition.place(graph)
    assert placed[0].npu and not placed[1].npu
    assert "float32" in placed[1].reason
    assert placed[1].reason == partition.check_node(graph, graph.nodes[1]).reason


def test_a_planner_bug_falls_back_unless_strict(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = _chain(["RELU", "RELU"])

    def broken(g: Graph, node):  # noqa: ANN001, ANN202
        raise ZeroDivisionError("planner bug on purpose")

    monkeypatch.setitem(registry.PLANNERS, "RELU", broken)
    placed = partition.place(graph)
    assert not any(p.npu for p in placed)
    assert placed[0].reason == "planner error on node 0 (RELU): ZeroDivisionError: planner bug on purpose"
    with pytest.raises(PlannerError, match="node 0 \\(RELU\\): ZeroDivisionError"):
        partition.place(graph, Rules(strict=True))


def test_a_malformed_node_is_refused_unless_strict(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = _chain(["RELU"])

    def reads_a_missing_input(g: Graph, node):  # noqa: ANN001, ANN202
        return node.inputs[5]

    monkeypatch.setitem(registry.PLANNERS, "RELU", reads_a_missing_input)
    assert partition.place(graph)[0].reason == "malformed RELU: tuple index out of range"
    with pytest.raises(PlannerError, match="IndexError"):
        partition.place(graph, Rules(strict=True))


def test_strict_default_reads_the_environment() -> None:
    assert partition.strict_default({}) is False
    assert partition.strict_default({partition.STRICT_ENV: "1"}) is True
    assert partition.strict_default({partition.STRICT_ENV: "false"}) is False
    with pytest.raises(ValueError, match="VNPU_STRICT_PLACEMENT='yes': expected 1, true, 0 or false"):
        partition.strict_default({partition.STRICT_ENV: "yes"})


def test_demote_and_the_report() -> None:
    placed = partition.place(_chain(["RELU", "RELU", "RELU"]))
    placed = partition.numbered(partition.demote(placed, [1], "its partition failed: no memory"))
    assert partition.partition_runs(placed) == [(0,), (2,)]
    report = partition.format_report(placed, "placement", len(partition.partition_runs(placed)))
    assert report.splitlines() == [
        "placement: 2 of 3 nodes on the NPU, 1 on the CPU, 2 NPU partition(s)",
        "  node    0 RELU  NPU0",
        "  node    1 RELU  CPU   (its partition failed: no memory)",
        "  node    2 RELU  NPU1",
    ]


def test_placement_is_a_plain_record() -> None:
    p = Placement(3, "ADD", False, "why")
    assert (p.partition, p.name) == (None, "")


def test_the_summary_counts_ops_by_type_and_reason() -> None:
    placed = [
        Placement(0, "CONV_2D", True, partition=0),
        Placement(1, "CONV_2D", True, partition=0),
        Placement(2, "SHAPE", False, "SHAPE is not an NPU operator"),
        Placement(3, "ADD", True, partition=1),
        Placement(4, "SHAPE", False, "SHAPE is not an NPU operator"),
        Placement(5, "MEAN", False, "denied by the deny_ops option"),
    ]
    assert partition.format_summary(placed, "placement", 2).splitlines() == [
        "placement: 3 of 6 nodes on the NPU, 3 on the CPU, 2 NPU partition(s)",
        "  on the NPU: CONV_2D x2, ADD x1",
        "  on the CPU: SHAPE x2 (SHAPE is not an NPU operator)",
        "  on the CPU: MEAN x1 (denied by the deny_ops option)",
    ]
