"""bench.layer_bench: every C variant of the MAC array on MobileNet layers, and their bytes agree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from c_kernels import c_variants, needs_c

from bench import layer_bench
from device_model import mac_array as ma

ISAS = c_variants()  # a build failure fails this module
pytestmark = needs_c


def test_layer_bench_runs_every_variant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "layers.json"
    assert (
        layer_bench.main(["--models", "mobilenet_v2", "--layers", "3", "--reps", "1", "--out", str(out)]) == 0
    )
    report = json.loads(out.read_text())
    assert report["variants"] == [ma.ISA_NAMES[i] for i in ISAS]
    assert [row["kind"] for row in report["layers"]] == ["conv", "depthwise", "conv"]
    assert all(row["identical"] and set(row["ms"]) == set(report["variants"]) for row in report["layers"])
    assert "identical bytes in every variant: yes" in capsys.readouterr().out
    assert layer_bench.main(["--reps", "0"]) == 2
    assert capsys.readouterr().err.strip() == "python -m bench.layer_bench: --reps must be at least 1"
