"""Whole int8 networks (MobileNetV1/V2-shaped, an SSD-style detector) as one NPU partition, exact."""

from __future__ import annotations

import pytest

import modelgen as g
from libaccel import Device
from tests.compiler.helpers import assert_exact

NETWORKS = {
    "mobilenet_v1_96_025": lambda: g.mobilenet_v1_model(96, 0.25, 10, seed=1),
    "mobilenet_v2_64_035": lambda: g.mobilenet_v2_model(64, 0.35, 10, seed=2),
    "ssd_like_64": lambda: g.ssd_like_model(64, seed=3),
    "mobilenet_v3_like_64": lambda: g.mobilenet_v3_like_model(64, seed=4, float_io=False),
    "fpn_detector_64": lambda: g.fpn_detector_model(64, seed=5),
}


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_network_exact(dev: Device, name: str) -> None:
    assert_exact(dev, NETWORKS[name]())
