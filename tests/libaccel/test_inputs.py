"""libaccel.runtime.inputs: the one definition of random model inputs, and the runners that use it agree."""

from __future__ import annotations

import numpy as np

import modelgen
from libaccel.runtime.inputs import random_arrays


def test_ranges_and_kinds() -> None:
    i8, u8, b, f = random_arrays(
        [(np.int8, (4096,)), ("uint8", (4096,)), (np.bool_, (64,)), (np.float32, (3, 2))], seed=1
    )
    assert i8.dtype == np.int8 and i8.min() == -128 and i8.max() == 127
    assert u8.dtype == np.uint8 and u8.min() == 0 and u8.max() == 255
    assert b.dtype == np.bool_ and b.any() and not b.all()
    assert f.dtype == np.float32 and f.shape == (3, 2)
    again = random_arrays([(np.int8, (4096,)), ("uint8", (4096,))], seed=1)
    assert np.array_equal(again[0], i8) and np.array_equal(again[1], u8)


def test_the_runners_draw_the_same_inputs() -> None:
    """modelgen's, the delegate runner's and accel run's random inputs for one model and seed agree."""
    from delegate_teflon.run import random_inputs as run_inputs
    from libaccel.runtime.model import random_inputs as model_inputs

    model = modelgen.conv2d_model((1, 8, 8, 4), 8, kernel=3, stride=1, padding="SAME", act="RELU6")
    (x,) = modelgen.random_inputs(model, seed=5)
    (y,) = run_inputs([{"dtype": x.dtype, "shape": x.shape}], 5)
    named = model_inputs([("input", x.dtype, x.shape)], seed=5)
    assert np.array_equal(x, y) and np.array_equal(x, named["input"])


def test_timing_reports_the_spread_of_the_runs() -> None:
    from libaccel.runtime.model import ModelResult

    result = ModelResult({}, [], 1, 1.0, 0.0, 5.0, "tflite", runs_ms=[float(t) for t in range(1, 101)])
    assert result.percentiles() == {"min": 1.0, "median": 50.5, "p90": 90.0, "p99": 99.0}
    assert result.timing().endswith("median of 100 invokes 50.50 ms (min 1.00, p90 90.00, p99 99.00)")
    assert ModelResult({}, [], 0, 0.0, 0.0, 0.0).percentiles() == {}
