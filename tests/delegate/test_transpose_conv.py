"""TRANSPOSE_CONV through libteflon.so on the device: the runtime's own TfLiteTransposeConvParams
(padding, strides, fused activation) read by the delegate, output equal to BUILTIN_REF (0 bytes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import modelgen as gen
from delegate_teflon import plugin

CASES: dict[str, Callable[[], bytes]] = {
    # Keras Conv2DTranspose(strides=2, padding="same"), a U-Net decoder's upsampling.
    "k3_s2_same_relu": lambda: gen.transpose_conv_model((1, 8, 8, 16), 8, 3, 2, "SAME", True, "RELU", 1),
    "k2_s2_same_per_tensor": lambda: gen.transpose_conv_model((1, 5, 7, 4), 6, 2, 2, "SAME", False, seed=2),
    "k4_s3_valid_relu6": lambda: gen.transpose_conv_model((1, 3, 4, 5), 3, 4, 3, "VALID", True, "RELU6", 3),
    "k3_s1_no_bias": lambda: gen.transpose_conv_model((1, 6, 5, 3), 4, 3, 1, "SAME", bias=False, seed=4),
    "uint8_k3_s2": lambda: gen.transpose_conv_model((1, 4, 6, 3), 5, 3, 2, "SAME", False, "NONE", 5, "uint8"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_transpose_conv_through_delegate(name: str, runtime: str, interp_mod: Any, lib_path: str) -> None:
    model = CASES[name]()
    inputs = gen.random_inputs(model, 7)
    want = gen.run_reference(model, inputs, runtime)
    delegate = interp_mod.load_delegate(lib_path, {"device": "shim", "log_level": "quiet"})
    got = gen.run_reference(model, inputs, runtime, [delegate])
    record = plugin.last_prepare()
    assert record is not None
    assert [(p.op, p.npu) for p in record.placements] == [("TRANSPOSE_CONV", True)], record.placements
    assert got[0].shape == want[0].shape and np.unique(want[0]).size > 1
    assert int(np.count_nonzero(got[0] != want[0])) == 0
