"""Whole int8 networks through libteflon.so == TFLite's reference kernels: 0 differing bytes.

The device is the shim on the host and vnpu.ko in the QEMU guest (VNPU_TEST_DEVICE).

Both interpreters use BUILTIN_REF, so nodes left on the CPU (float QUANTIZE/DEQUANTIZE at the edges)
run the reference kernels too. Each case also checks the placement: every 8-bit node ran on the NPU.
The full-size 224x224 networks are marked ``slow`` (deselect with ``-m "not slow"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import modelgen as gen
from delegate_teflon import plugin

NETWORKS: dict[str, Callable[[], bytes]] = {
    "mobilenet_v1_96_025": lambda: gen.mobilenet_v1_model(96, 0.25, 10, seed=1),
    "mobilenet_v2_64_035": lambda: gen.mobilenet_v2_model(64, 0.35, 10, seed=2),
    "ssd_like_64": lambda: gen.ssd_like_model(64, seed=3),
    "mobilenet_v3_like_64_float_io": lambda: gen.mobilenet_v3_like_model(64, seed=4),
    "fpn_detector_64": lambda: gen.fpn_detector_model(64, seed=5),
}
CPU_OPS = {"mobilenet_v3_like_64_float_io": {"QUANTIZE", "DEQUANTIZE"}}  # the float <-> int8 edges


def _check_network(
    runtime: str, interp_mod: Any, lib_path: str, device: str, model: bytes, cpu_ops: set[str]
) -> None:
    inputs = gen.random_inputs(model, 11)
    want = gen.run_reference(model, inputs, runtime)
    delegate = interp_mod.load_delegate(lib_path, {"device": device, "log_level": "quiet"})
    got = gen.run_reference(model, inputs, runtime, [delegate])
    record = plugin.last_prepare()
    assert record is not None
    on_cpu = [(p.node, p.op, p.reason) for p in record.placements if not p.npu]
    assert {op for _, op, _ in on_cpu} <= cpu_ops, f"unexpectedly on the CPU: {on_cpu}"
    assert any(p.npu for p in record.placements)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        differing = int(np.count_nonzero(g.view(np.uint8) != w.view(np.uint8)))
        assert differing == 0, f"{differing} bytes differ from BUILTIN_REF"
        assert np.unique(w).size > 1


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_network_through_delegate(
    name: str, runtime: str, interp_mod: Any, lib_path: str, test_device: str
) -> None:
    _check_network(runtime, interp_mod, lib_path, test_device, NETWORKS[name](), CPU_OPS.get(name, set()))


@pytest.mark.slow
def test_mobilenet_v1_224_through_delegate(lib_path: str, test_device: str) -> None:
    """MobileNetV1 224x224 (alpha 1.0, 1000 classes), the benchmarks' model, one runtime (several seconds)."""
    import tflite_runtime.interpreter as interp_mod

    _check_network(
        "tflite_runtime",
        interp_mod,
        lib_path,
        test_device,
        gen.mobilenet_v1_model(224, 1.0, 1000, seed=7),
        set(),
    )


@pytest.mark.slow
def test_mobilenet_v2_224_through_delegate(lib_path: str, test_device: str) -> None:
    import ai_edge_litert.interpreter as interp_mod

    _check_network(
        "ai_edge_litert",
        interp_mod,
        lib_path,
        test_device,
        gen.mobilenet_v2_model(224, 1.0, 1000, seed=8),
        set(),
    )
