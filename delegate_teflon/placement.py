"""Which nodes go to the NPU, and why the others stay on the CPU (the placement report)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from delegate_teflon.options import DelegateOptions
from libaccel.compiler.graph import Graph, OpNode


@dataclass(frozen=True)
class Placement:
    node: int
    op: str
    npu: bool
    reason: str  # why it stays on the CPU; "" for an NPU node


def place(
    graph: Graph, options: DelegateOptions, check: Callable[[Graph, OpNode], tuple[bool, str]]
) -> list[Placement]:
    """Decide each node of ``graph`` (in execution order): the op lists first, then the compiler's check."""
    out = []
    for node in graph.nodes:
        if node.op in options.deny_ops:
            out.append(Placement(node.index, node.op, False, "denied by the deny_ops option"))
        elif options.allow_ops is not None and node.op not in options.allow_ops:
            out.append(Placement(node.index, node.op, False, "not in the allow_ops option"))
        else:
            ok, reason = check(graph, node)
            out.append(Placement(node.index, node.op, ok, "" if ok else reason))
    return out


def write_placement(path: Path, placements: list[Placement], runtime: str) -> None:
    """The placement as JSON (the ``placement_file`` option): ``{"runtime": ..., "nodes": [{"node",
    "op", "npu", "reason"}, ...]}`` in execution order; written whole, then renamed into place."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"runtime": runtime, "nodes": [asdict(p) for p in placements]}, indent=1))
    tmp.replace(path)


def format_report(placements: list[Placement], runtime: str, partitions: int | None = None) -> str:
    """The human report: a summary line, then one line per node."""
    npu = [p for p in placements if p.npu]
    lines = [
        f"vnpu delegate: placement ({runtime}): {len(npu)} of {len(placements)} nodes on the NPU, "
        f"{len(placements) - len(npu)} on the CPU"
        + (f", {partitions} NPU partition(s)" if partitions is not None else "")
    ]
    width = max((len(p.op) for p in placements), default=0)
    for p in placements:
        where = "NPU" if p.npu else "CPU"
        lines.append(f"  node {p.node:4d} {p.op:<{width}}  {where}" + (f"  ({p.reason})" if p.reason else ""))
    return "\n".join(lines)
