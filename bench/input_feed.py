"""A new input before every timed invoke, as an application's invokes get them (a camera frame, the
next sentence): the rule of every model benchmark here.

One fixed input hides every cost that depends on the data: a cache keyed on what a job writes, a
plan rebuilt when an activation operand changes, the copy of an input the runtime did not rewrite.
The feed cycles through ``POOL`` distinct random input sets (:mod:`libaccel.runtime.inputs`), written with
``set_tensor`` outside the timed interval, to the NPU and to its CPU peer alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from libaccel.runtime.inputs import random_arrays

POOL = 16  # distinct input sets: more than any cache of the stack holds for one model


class InputFeed:
    """Distinct random inputs for one interpreter's input details, handed out in turn."""

    def __init__(self, details: list[dict[str, Any]], seed: int, count: int = POOL) -> None:
        specs = [(d["dtype"], tuple(int(s) for s in d["shape"])) for d in details]
        self.sets: list[list[np.ndarray]] = [random_arrays(specs, seed + k) for k in range(count)]
        self._next = 0

    def feed(self, interp: Any) -> None:
        """Set the next input set on ``interp`` (whose inputs have these details)."""
        values = self.sets[self._next % len(self.sets)]
        self._next += 1
        for detail, value in zip(interp.get_input_details(), values, strict=True):
            interp.set_tensor(detail["index"], value)
