"""On vnpu.ko, in the QEMU guest: onnxruntime with the vnpu EP on the first kernel device
(``/dev/accel/accel0``). Each session runs in a fresh interpreter that imports onnxruntime alone
(``vnpu_ort_ep.measure``'s script), registers libvnpu_ort_ep.so by path (built on the host before the
guest booted, read from the shared cache) and compares every output with the CPU EP's. Skips where
there is no vnpu kernel device (on the host)::

    PATH=.venv/bin:$PATH python -m qemu_tests --suites tests/ort_ep/test_ort_ep_guest.py
"""

from __future__ import annotations

import re
from pathlib import Path

import onnx
import pytest

from libaccel import discovery
from vnpu_ort_ep import measure

# the verbose option's report of one fused node's run (vnpu_ort_ep.plugin.Difference.line)
VERBOSE_LINE = re.compile(
    r"(\d+) of (\d+) bytes differ from the CPU EP's float computation \(max (\d+) units?\)"
)

MODELS = Path(__file__).resolve().parents[1] / "onnx" / "models"

pytestmark = pytest.mark.skipif(
    not discovery.list_devices(), reason="no vnpu kernel device: this test runs in the QEMU guest"
)


@pytest.fixture(scope="module")
def node() -> str:
    return discovery.list_devices()[0].node


def test_qdq_model_on_vnpu_ko_with_the_exact_option_is_bit_exact(node: str) -> None:
    m = measure.measure("resnet_like_qdq", MODELS / "resnet_like_qdq.onnx", {"device": node, "exact": "true"})
    assert m.differing_bytes == 0, m
    # every QDQ node unit between the input QuantizeLinear and the output DequantizeLinear on vnpu
    assert (m.vnpu, m.total) == (51, 53)


def test_float_sum_groups_on_vnpu_ko_within_one_unit(node: str, tmp_path: Path) -> None:
    """By default the NPU takes the float MatMul groups: every output within 1 unit, and the
    verbose report says so per run. 7-bit weights (``reduce_range``): the guest's CPU (TCG: AVX2,
    no VNNI) runs onnxruntime's u8s8 MLAS kernel, whose int16 pair sums saturate with full-range
    int8 weights, so there the CPU EP itself is off (docs/onnx.md, "Numerics")."""
    from tools.convert.make_onnx_models import ffn, quantize

    path = tmp_path / "ffn_int8_qdq.onnx"
    onnx.save(quantize(ffn(), "qdq", "int8", reduce_range=True), path)
    runs = 2
    result = measure.run_ep(path, {"device": node, "verbose": "true"}, runs)
    assert result["assigned"] == {"VnpuExecutionProvider": 20, "CPUExecutionProvider": 2}
    (unit,) = measure.output_units(path)
    assert max(result["max_abs"]) <= unit * 1.001, result["max_abs"]
    reports = VERBOSE_LINE.findall(result["log"])
    assert len(reports) == runs and all(int(units) <= 1 for *_, units in reports), result["log"][-3000:]


def test_default_device_is_the_kernel_device() -> None:
    result = measure.run_ep(MODELS / "resnet_like_qop.onnx", {})
    assert result["metadata"]["device"] == "kernel"
    assert result["differing_bytes"] == 0
    assert result["assigned"] == {"VnpuExecutionProvider": 12, "CPUExecutionProvider": 2}
