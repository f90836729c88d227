"""Random model inputs, the one definition every runner and test uses (as Mesa's Teflon tests do):
uniform over an integer input's whole range, 0 or 1 for a boolean one, standard normal for a float
one; one generator seeded once, drawn input by input in order, so a seed names the same inputs
everywhere."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np


def random_array(rng: np.random.Generator, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    """One input of ``dtype`` and ``shape`` drawn from ``rng``."""
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, int(info.max) + 1, size=shape).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(dt)
    return rng.standard_normal(shape).astype(dt)


def random_arrays(specs: Iterable[tuple[Any, tuple[int, ...]]], seed: int = 0) -> list[np.ndarray]:
    """One array per (dtype, shape) of ``specs``, in order, from one generator seeded with ``seed``."""
    rng = np.random.default_rng(seed)
    return [random_array(rng, dtype, tuple(int(d) for d in shape)) for dtype, shape in specs]
