"""The benchmark's statistics."""

from __future__ import annotations

import pytest

from bench.jobs import percentile


def test_percentile_interpolates() -> None:
    data = [float(x) for x in range(1, 101)]  # 1..100
    assert percentile(data, 50) == pytest.approx(50.5)
    assert percentile(data, 99) == pytest.approx(99.01)
    assert percentile(data, 0) == 1 and percentile(data, 100) == 100
    assert percentile([3.0], 99) == 3.0


def test_percentile_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)
