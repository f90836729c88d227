"""The two quantized networks (MobileNet- and ResNet-shaped, QDQ and QOperator, committed fixtures made
by tools/convert/make_onnx_models.py) through run_model and ``accel run``, exact against onnxruntime.

On the shim here; in the QEMU guest on vnpu.ko (qemu_tests runs this file with VNPU_TEST_DEVICE=kernel).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from test_onnx_models import MODELS, _accel, _check

DEVICE = os.environ.get("VNPU_TEST_DEVICE", "shim")


@pytest.mark.parametrize("fixture", sorted(p.name for p in MODELS.glob("*.onnx")))
def test_networks_exact(fixture: str) -> None:
    result = _check(MODELS / fixture, device=DEVICE)
    assert sum(p.npu for p in result.placement) >= 9, result.report()


def test_accel_run_compare_and_output(tmp_path: Path) -> None:
    out = tmp_path / "y.npy"
    r = _accel(str(MODELS / "resnet_like_qdq.onnx"), "--compare", "--output", str(out), "--device", DEVICE)
    assert r.returncode == 0, r.stderr
    assert "compare with onnxruntime: equal, 0 differing bytes" in r.stdout
    assert "QuantizeLinear has no NPU lowering" in r.stdout  # float -> uint8 at the edge: the CPU's
    assert [line.split()[3] for line in r.stdout.splitlines() if "QLinearAdd" in line] == ["NPU0", "NPU0"]
    y = np.load(out)
    assert y.dtype == np.float32 and y.shape == (1, 10)  # dequantized: the model's output is float


def test_accel_run_input_and_json(tmp_path: Path) -> None:
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    model = str(MODELS / "mobilenet_like_qop.onnx")
    r = _accel(model, "--input", str(tmp_path / "x.npy"), "--json", "--compare", "--device", DEVICE)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["differing_bytes"] == 0 and doc["partitions"] >= 1
    assert any(p["npu"] for p in doc["placement"])
