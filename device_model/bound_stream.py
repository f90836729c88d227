"""A stream whose every instruction is bound, run without the per-instruction loop.

From a stream's second job on, every instruction of a model's stream is usually bound
(:mod:`.binding`): a TENSOR only sets its slot, a layer or table unit is one C call on memory, the
rest are closures over their operands. :class:`BoundStream` runs such a stream as a short list of
steps: runs of consecutive C units (layers, lookups, pools) as one ``mac_run_units`` call each,
the other bound instructions as their closures, and the TENSORs not at all (a bound instruction
reads no slot). Where a step does not complete (a layer's parameters changed, a unit refused, the
job was aborted), the command processor sets the slots the stream had defined by then and goes on
instruction by instruction from there, as it would have.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from uapi import isa

from . import mac_array
from .binding import Bound, StreamBindings


@dataclass(frozen=True)
class _Step:
    """One bound instruction (``bound``), or a run of C units (``group``), at program ``indices``."""

    indices: tuple[int, ...]
    bound: Bound | None = None
    group: mac_array.UnitGroup | None = None


class BoundStream:
    """The steps of a stream whose every instruction up to its END is bound, for one MAC array
    variant (``mac_isa``; None: numpy, no C units)."""

    def __init__(self, steps: list[_Step], end_index: int, mac_isa: int | None) -> None:
        self.steps = steps
        self.end_index = end_index  # the END's index: a job that ran it all has end_index + 1 cycles
        self.mac_isa = mac_isa
        self.groups = any(step.group is not None for step in steps)  # C units: built for mac_isa

    @classmethod
    def build(
        cls, program: list[isa.Instruction], bound: StreamBindings, mac_isa: int | None
    ) -> BoundStream | None:
        """The stream's steps, or None when an instruction before its END is not bound."""
        steps: list[_Step] = []
        units: list[tuple[int, mac_array.BoundUnit]] = []

        def flush() -> None:
            if units:
                group = mac_array.UnitGroup([u for _, u in units])
                steps.append(_Step(tuple(i for i, _ in units), group=group))
                units.clear()

        for index, ins in enumerate(program):
            if ins.op == "END":
                flush()
                return cls(steps, index, mac_isa)
            fn = bound.get(ins.offset)
            if fn is None:
                return None
            if ins.op == "TENSOR":
                continue
            unit = getattr(fn, "unit", None)
            if (
                unit is not None
                and mac_isa is not None
                and getattr(fn, "unit_isa", None) in (None, mac_isa)
                and unit.groupable
            ):
                units.append((index, unit))
                continue
            flush()
            steps.append(_Step((index,), bound=fn))
        return None  # decode() ends every stream with END

    def run(self, job: Any, abort: threading.Event) -> int | None:
        """Run the steps on ``job``; None when every one completed, else the program index of the
        first instruction that did not (the job goes on from there, instruction by instruction).
        ``job.cursor`` is the running instruction's index for a fault's cycle count."""
        position = 0  # the instruction after the last step completed: where an abort is seen
        for step in self.steps:
            if abort.is_set():
                return position
            if step.group is not None:
                done = step.group.run()
                if done < len(step.indices):
                    return step.indices[done]
            else:
                job.cursor = step.indices[0]
                assert step.bound is not None
                try:
                    if not step.bound(job):
                        return step.indices[0]
                except ValueError:  # the general path reports it, from the same instruction
                    return step.indices[0]
            position = step.indices[-1] + 1
        return None
