"""The one partitioner: which nodes of a graph run on the NPU, why the others stay on the CPU, and
how the NPU nodes group into partitions.

Every runtime integration calls :func:`place` on the compiler's IR (:class:`Graph`): the TFLite
delegate on the graph TFLite hands it, the ONNX runner on the graph its frontend reads. A node
goes to the NPU when every rule lets it, checked in this order:

1. the frontend keeps it on the CPU (``Rules.cpu``: an ONNX node with no lowering, and why);
2. the op lists (``deny_ops``, ``allow_ops``: the delegate's options);
3. none of its tensors has a shape known only at run time (``Rules.dynamic``);
4. the compiler lowers it exactly (:func:`check_node`, the same planner the compiler runs);

then three rules over the whole graph, repeated until nothing changes:

5. a DEQUANTIZE -> float ops -> QUANTIZE chain goes to the NPU whole or not at all: the NPU runs it
   as one table and never stores its float values, so none can cross a partition's edge;
6. a folded shape computation goes to the NPU only where NPU nodes alone read its values: it
   computes nothing on the device, so its value cannot leave a partition;
7. the nodes of one group (``Rules.groups``: the IR nodes one ONNX node became) go together.

:func:`partition_runs` then groups the NPU nodes into maximal runs in execution order, one job each
(TFLite makes its own partitions of the nodes it is given, by the same rule). :func:`demote` moves
the nodes of a partition that fails to compile or upload to the CPU, with the reason.

**Strict mode** (``Rules.strict``; the delegate's ``strict`` option and the ONNX runner default to
``$VNPU_STRICT_PLACEMENT``, which the test suite sets): a planner that fails with anything but
:class:`Unsupported` (a bug, or a malformed node) raises :class:`PlannerError` instead of leaving
the node on the CPU, and a partition that fails to compile fails the model, so that tests see it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from libaccel.compiler import float_chain, registry
from libaccel.compiler.graph import Graph, OpNode
from libaccel.compiler.plan_common import Support, Unsupported
from libaccel.compiler.shape_folding import is_folded
from vnpu_common import config

#: Strict mode where a caller does not choose (``1``/``true`` or ``0``/``false``; unset: off).
STRICT_ENV = config.STRICT_PLACEMENT.name

#: A node's support check: the compiler's (:func:`check_node`) or a memoized one of the same answers.
Check = Callable[[Graph, OpNode], Support]


def parse_strict(value: str, what: str) -> bool:
    """A strict-mode switch's value (``what`` names where it came from in the ValueError)."""
    try:
        return config.parse_flag(value)
    except ValueError:
        raise ValueError(f"{what} = {value!r}: expected {config.FLAG_ACCEPTS}") from None


def strict_default(environ: Mapping[str, str] | None = None) -> bool:
    """Strict mode as ``$VNPU_STRICT_PLACEMENT`` asks (unset: off); ConfigError for a bad value."""
    return bool(config.STRICT_PLACEMENT.get(environ))


class PlannerError(RuntimeError):
    """Strict mode: a planner failed on a node with an error that is not a reason to refuse it."""


@dataclass(frozen=True)
class Placement:
    """Where one node runs: the NPU (in ``partition``, once numbered) or the CPU, and why."""

    node: int
    op: str
    npu: bool
    reason: str = ""  # why it stays on the CPU; "" for an NPU node
    partition: int | None = None
    name: str = ""  # the node's name in its model, where the format has one (ONNX)


@dataclass(frozen=True)
class Rules:
    """What the caller adds to the compiler's own check (see the module docstring)."""

    allow_ops: frozenset[str] | None = None  # only these ops may run on the NPU (None: any)
    deny_ops: frozenset[str] = frozenset()
    dynamic: frozenset[int] = frozenset()  # tensors whose shape is known only at run time
    cpu: Mapping[int, str] = field(default_factory=dict)  # node -> why its frontend keeps it on the CPU
    groups: Sequence[Sequence[int]] = ()  # nodes that run where the others of their group run
    strict: bool = False


def check_node(graph: Graph, node: OpNode, strict: bool = False) -> Support:
    """Whether ``node`` runs on the NPU bit-exactly, and if not, why: the compiler's own planner.

    A planner error that is not :class:`Unsupported` leaves the node on the CPU naming the error, or
    in ``strict`` mode raises :class:`PlannerError`."""
    try:
        registry.plan_node(graph, node, strict)
    except Unsupported as e:
        return Support(False, str(e))
    except Exception as e:  # noqa: BLE001 - a planner bug must not take the model down, unless strict
        message = f"planner error on node {node.index} ({node.op}): {type(e).__name__}: {e}"
        if strict:
            raise PlannerError(message) from e
        return Support(False, message)
    return Support(True)


#: The compiler's support check under its public name (``libaccel.compiler.check_support``).
check_support = check_node


def place(graph: Graph, rules: Rules = Rules(), check: Check | None = None) -> list[Placement]:
    """Decide each node of ``graph``, in execution order (see the module docstring for the rules).

    ``check`` answers rule 4 (default: :func:`check_node` in the rules' strictness); it is called only
    for nodes that rules 1-3 let through."""
    if check is None:
        check = lambda g, n: check_node(g, n, rules.strict)  # noqa: E731
    out = [_place_node(graph, node, rules, check) for node in graph.nodes]
    while True:
        before = out
        out = _keep_chains_whole(graph, out)
        out = _keep_shape_values_inside(graph, out)
        out = _keep_groups_together(out, rules.groups)
        if out == before:
            return out


def _place_node(graph: Graph, node: OpNode, rules: Rules, check: Check) -> Placement:
    def cpu(reason: str) -> Placement:
        return Placement(node.index, node.op, False, reason)

    if node.index in rules.cpu:
        return cpu(rules.cpu[node.index])
    if node.op in rules.deny_ops:
        return cpu("denied by the deny_ops option")
    if rules.allow_ops is not None and node.op not in rules.allow_ops:
        return cpu("not in the allow_ops option")
    for t in (*node.inputs, *node.outputs):
        if t in rules.dynamic:
            return cpu(f"tensor {t} ({graph.tensors[t].name}) has a shape known only at run time")
    support = check(graph, node)
    return Placement(node.index, node.op, support.ok, "" if support.ok else support.reason)


def _to_cpu(placements: list[Placement], reasons: Mapping[int, str]) -> list[Placement]:
    return [
        dataclasses.replace(p, npu=False, reason=reasons[p.node]) if p.npu and p.node in reasons else p
        for p in placements
    ]


def _keep_chains_whole(graph: Graph, placements: list[Placement]) -> list[Placement]:
    npu = {p.node for p in placements if p.npu}
    off: dict[int, str] = {}
    for n in graph.nodes:
        if n.index not in npu or not float_chain.is_float_node(graph, n):
            continue
        try:
            chain = [c.index for c in float_chain.chain_nodes(graph, n)]
        except Unsupported:
            continue
        cpu = [i for i in chain if i not in npu]
        if cpu:
            off[n.index] = f"its DEQUANTIZE -> QUANTIZE chain has node(s) {cpu} on the CPU"
    return _to_cpu(placements, off)


def _keep_shape_values_inside(graph: Graph, placements: list[Placement]) -> list[Placement]:
    npu = {p.node for p in placements if p.npu}
    readers: dict[int, list[int]] = {}
    for n in graph.nodes:
        for t in n.inputs:
            readers.setdefault(t, []).append(n.index)
    off: dict[int, str] = {}
    for n in graph.nodes:
        if n.index not in npu or not is_folded(graph, n):
            continue
        outside = [r for t in n.outputs for r in readers.get(t, []) if r not in npu]
        if outside or any(t in graph.outputs for t in n.outputs):
            off[n.index] = "a shape computation whose value a CPU node reads"
    return _to_cpu(placements, off)


def _keep_groups_together(placements: list[Placement], groups: Sequence[Sequence[int]]) -> list[Placement]:
    by_node = {p.node: p for p in placements}
    off: dict[int, str] = {}
    for group in groups:
        cpu = [by_node[i] for i in group if i in by_node and not by_node[i].npu]
        if cpu:
            for i in group:
                off[i] = cpu[0].reason
    return _to_cpu(placements, off)


def demote(placements: list[Placement], nodes: Sequence[int], reason: str) -> list[Placement]:
    """``placements`` with ``nodes`` moved to the CPU for ``reason`` (their partition failed)."""
    return _to_cpu(placements, dict.fromkeys(nodes, reason))


def partition_runs(placements: Sequence[Placement]) -> list[tuple[int, ...]]:
    """The NPU nodes grouped into maximal runs of consecutive nodes in execution order."""
    runs: list[list[int]] = []
    previous = False
    for p in placements:
        if p.npu and previous:
            runs[-1].append(p.node)
        elif p.npu:
            runs.append([p.node])
        previous = p.npu
    return [tuple(r) for r in runs]


def numbered(placements: Sequence[Placement]) -> list[Placement]:
    """``placements`` with each NPU node's ``partition``: the index of its run (:func:`partition_runs`)."""
    which = {n: k for k, run in enumerate(partition_runs(placements)) for n in run}
    return [dataclasses.replace(p, partition=which.get(p.node)) for p in placements]


def _counts_line(placements: Sequence[Placement], title: str, partitions: int | None) -> str:
    npu = sum(p.npu for p in placements)
    return f"{title}: {npu} of {len(placements)} nodes on the NPU, {len(placements) - npu} on the CPU" + (
        f", {partitions} NPU partition(s)" if partitions is not None else ""
    )


def format_summary(placements: Sequence[Placement], title: str, partitions: int | None = None) -> str:
    """The placement in a few lines, whatever the model's size: the counts, the ops on the NPU by
    type, and the ops on the CPU by type and reason (most frequent first)."""
    lines = [_counts_line(placements, title, partitions)]
    on_npu: dict[str, int] = {}
    on_cpu: dict[tuple[str, str], int] = {}
    for p in placements:
        if p.npu:
            on_npu[p.op] = on_npu.get(p.op, 0) + 1
        else:
            on_cpu[p.op, p.reason] = on_cpu.get((p.op, p.reason), 0) + 1
    if on_npu:
        ops = sorted(on_npu.items(), key=lambda kv: (-kv[1], kv[0]))
        lines.append("  on the NPU: " + ", ".join(f"{op} x{n}" for op, n in ops))
    for (op, reason), n in sorted(on_cpu.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"  on the CPU: {op} x{n}" + (f" ({reason})" if reason else ""))
    return "\n".join(lines)


def format_report(placements: Sequence[Placement], title: str, partitions: int | None = None) -> str:
    """The placement report every tool prints: ``title``'s summary line (with the partition count
    where known), then one line per node: ``NPUk`` for partition k where numbered, ``NPU`` otherwise,
    ``CPU`` with the reason."""
    lines = [_counts_line(placements, title, partitions)]
    width = max((len(p.op) for p in placements), default=0)
    for p in placements:
        where = "CPU" if not p.npu else "NPU" if p.partition is None else f"NPU{p.partition}"
        line = f"  node {p.node:4d} {p.op:<{width}}  {where:<5}" + (f" ({p.reason})" if p.reason else "")
        lines.append(line.rstrip())
    return "\n".join(lines)
