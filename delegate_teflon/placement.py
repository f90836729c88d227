"""The delegate's placement file (the ``placement_file`` option); the placement itself is
:mod:`libaccel.compiler.partition`'s, as for every runtime."""

from __future__ import annotations

import json
from pathlib import Path

from libaccel.compiler.partition import Placement


def write_placement(path: Path, placements: list[Placement], runtime: str) -> None:
    """The placement as JSON: ``{"runtime": ..., "nodes": [{"node", "op", "npu", "reason"}, ...]}`` in
    execution order; written whole, then renamed into place."""
    nodes = [{"node": p.node, "op": p.op, "npu": p.npu, "reason": p.reason} for p in placements]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"runtime": runtime, "nodes": nodes}, indent=1))
    tmp.replace(path)
