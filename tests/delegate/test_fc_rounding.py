"""FULLY_CONNECTED is exact in both runtimes although their reference kernels round differently.

LiteRT's reference FULLY_CONNECTED requantizes with one rounding, TFLite 2.14's with two
(libaccel/compiler/reference.py). These layers are large enough that the two disagree on some
outputs (checked below), so only a device that follows the runtime it is loaded into is exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import modelgen as gen
from delegate_teflon import plugin
from device_model import numerics as nm
from libaccel.compiler import reference
from libaccel.compiler.graph import graph_from_tflite

LAYERS = [(seed, per_channel) for seed in (0, 1, 2) for per_channel in (False, True)]


def _fc(seed: int, per_channel: bool) -> bytes:
    return gen.fully_connected_model(64, 32, 32, seed=seed, per_channel=per_channel, bias=True)


def test_the_runtimes_disagree_on_these_layers() -> None:
    """The premise: without following the runtime, one of the two would differ."""
    differing = 0
    for seed, per_channel in LAYERS:
        model = _fc(seed, per_channel)
        x = gen.random_inputs(model, seed)
        a = gen.run_reference(model, x, "tflite_runtime")[0]
        b = gen.run_reference(model, x, "ai_edge_litert")[0]
        differing += int(np.count_nonzero(a != b))
    assert differing > 0


@pytest.mark.parametrize(("seed", "per_channel"), LAYERS)
def test_fully_connected_exact_in_each_runtime(
    seed: int, per_channel: bool, runtime: str, interp_mod: Any, lib_path: str, test_device: str
) -> None:
    model = _fc(seed, per_channel)
    x = gen.random_inputs(model, seed)
    want = gen.run_reference(model, x, runtime)
    delegate = interp_mod.load_delegate(lib_path, {"device": test_device, "log_level": "quiet"})
    got = gen.run_reference(model, x, runtime, [delegate])
    record = plugin.last_prepare()
    assert record is not None and all(p.npu for p in record.placements)
    assert np.array_equal(got[0], want[0]), f"{int(np.count_nonzero(got[0] != want[0]))} outputs differ"


def test_annotate_reference_marks_fully_connected_only() -> None:
    graph = graph_from_tflite(gen.fully_connected_model(4, 8, 8, seed=1))
    reference.annotate_reference(graph, "ai-edge-litert")
    assert [n.options.get("rounding") for n in graph.nodes] == ["single"]
    reference.annotate_reference(graph, "tflite-runtime")
    assert [n.options.get("rounding") for n in graph.nodes] == ["double"]


def test_single_rounding_formula() -> None:
    """The device's one-rounding requantization against the formula computed with Python ints."""
    rng = np.random.default_rng(5)
    x = rng.integers(-(2**31), 2**31, size=4000, dtype=np.int64)
    m = rng.integers(2**30, 2**31, size=4000, dtype=np.int64)
    s = rng.integers(-31, 1, size=4000, dtype=np.int64)
    got = nm.multiply_by_quantized_multiplier_single_round(x, m, s)
    for xi, mi, si, gi in zip(x.tolist(), m.tolist(), s.tolist(), got.tolist(), strict=True):
        want = (xi * mi + (1 << (30 - si))) >> (31 - si)
        want = (want + 2**31) % 2**32 - 2**31
        assert gi == want
