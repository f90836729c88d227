"""bench.model_bench: its arithmetic, and one real (small) model through every measurement."""

from __future__ import annotations

import json

import pytest

import modelgen
from bench import model_bench as mb


def test_overhead_fraction() -> None:
    assert mb.overhead_fraction(10.0, 9.5) == pytest.approx(0.05)
    assert mb.overhead_fraction(10.0, 10.5) == 0.0  # timer skew never goes negative
    assert mb.overhead_fraction(0.0, 0.0) == 0.0


def test_median_rejects_no_samples() -> None:
    assert mb.median([3.0, 1.0, 2.0]) == 2.0
    with pytest.raises(ValueError):
        mb.median([])


def test_small_model_end_to_end(tmp_path) -> None:
    model = modelgen.conv2d_model((1, 16, 16, 8), 16, kernel=3, stride=1, padding="SAME", act="RELU6")
    r = mb.bench_model("conv", model, runs=2, check=True, rss=False, threads=1)
    assert r.exact is True and r.differing_bytes == 0
    assert r.npu_nodes == r.nodes == 1 and r.partitions == 1
    assert 0 < r.device_ms <= r.invoke_ms  # the job ran inside the timed invoke
    assert r.device_op_counts.get("CONV2D") == 1
    assert set(r.cpu_runtime_ms) == set(mb.CPU_RUNTIMES)
    assert r.cpu_ms == pytest.approx(min(r.cpu_runtime_ms.values()), abs=1e-3)
    table = mb.format_table([r])
    assert "device-model compute" in table and "bit_exact" in table
    assert list(r.targets()) == list(mb.TARGET_KEYS) and r.targets()["bit_exact"] is True
    assert r.targets()["delegate_peak_rss"] is None  # not measured (rss=False)
    json.dumps(r.targets())
    profile = mb.format_profile([r])
    assert "MAC array:" in profile and "CONV2D" in profile


def test_bad_arguments_exit_2(capsys) -> None:
    assert mb.main(["--models", "resnet"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "unknown model" in line


def test_onnx_row() -> None:
    r = mb.bench_onnx("resnet_like_qop", mb.ONNX_FIXTURES / "resnet_like_qop.onnx", runs=1, threads=1)
    assert r.differing_bytes == 0 and r.form == "qoperator"
    assert 0 < r.npu_nodes < r.nodes and r.partitions >= 1
    assert r.compile_ms > 0 and r.invoke_ms > 0 and r.ort_ms > 0
    assert "resnet_like_qop" in mb.format_onnx_table([r])
    with pytest.raises(ValueError, match="no ONNX model"):
        mb._onnx_models(["nope"])
