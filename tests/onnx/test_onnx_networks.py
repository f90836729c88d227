"""The two quantized networks (MobileNet- and ResNet-shaped, QDQ and QOperator, committed fixtures made
by tools/convert/make_onnx_models.py) through run_model and ``accel run``, exact against onnxruntime.

On the shim here; in the QEMU guest on vnpu.ko (qemu_tests runs this file with VNPU_TEST_DEVICE=kernel).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_onnx_models import MODELS, _check

from libaccel.runtime import model as lm
from libaccel.tools import cli
from vnpu_common import config

DEVICE = config.TEST_DEVICE.get()


@pytest.mark.parametrize("fixture", sorted(p.name for p in MODELS.glob("*.onnx")))
def test_networks_exact(fixture: str) -> None:
    result = _check(MODELS / fixture, device=DEVICE)
    assert sum(p.npu for p in result.placement) >= 9, result.report()


def test_accel_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``accel run`` with every option, in-process (a new interpreter importing onnxruntime costs tens of
    seconds in the TCG guest; the host tests run the CLI as a subprocess)."""
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "y.npy"
    model = str(MODELS / "resnet_like_qdq.onnx")
    argv = ["run", model, "--input", str(tmp_path / "x.npy"), "--output", str(out), "--json", "--compare"]
    assert cli.main([*argv, "--device", DEVICE]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["differing_bytes"] == 0 and doc["partitions"] == 1 and doc["form"] == "qdq"
    assert [p["op"] for p in doc["placement"] if not p["npu"]] == ["QuantizeLinear", "DequantizeLinear"]
    y = np.load(out)
    assert y.dtype == np.float32 and y.shape == (1, 10)  # dequantized: the model's output is float
    assert np.array_equal(y, lm.reference_outputs(model, {"input": x})["matmul30"])
