"""bench.input_feed: every timed invoke gets an input it has not had just before."""

from __future__ import annotations

import numpy as np

from bench.input_feed import POOL, InputFeed


class _Interp:
    """The part of a TFLite interpreter the feed uses."""

    def __init__(self) -> None:
        self.set: dict[int, np.ndarray] = {}

    def get_input_details(self) -> list[dict[str, object]]:
        return [
            {"index": 3, "dtype": np.int8, "shape": np.array([1, 4, 4, 2])},
            {"index": 7, "dtype": np.uint8, "shape": np.array([5])},
        ]

    def set_tensor(self, index: int, value: np.ndarray) -> None:
        self.set[index] = value.copy()


def test_each_feed_is_a_new_input_of_the_right_type_and_shape() -> None:
    interp = _Interp()
    feed = InputFeed(interp.get_input_details(), seed=1)
    seen = []
    for _ in range(POOL):
        feed.feed(interp)
        assert interp.set[3].dtype == np.int8 and interp.set[3].shape == (1, 4, 4, 2)
        assert interp.set[7].dtype == np.uint8 and interp.set[7].shape == (5,)
        seen.append(interp.set[3].tobytes())
    assert len(set(seen)) == POOL  # no input repeats within the pool
    feed.feed(interp)
    assert interp.set[3].tobytes() == seen[0]  # then the pool comes round again
