"""CONV2D through libaccel on the shim, bit-identical to TFLite's int8 reference formulas.

The reference here is written independently of the device model and of
libaccel.demos.demo: scalar Python integers, straight from TFLite's
reference_integer_ops::ConvPerChannel, with the tests' fixed-point oracle
(tests/reference_kernels.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from reference_kernels import mbqm, rdbp, srdhm

from libaccel import Device
from libaccel.demos.demo import ConvProblem, make_problem, quantize_multiplier, run_conv


def reference(p: ConvProblem) -> np.ndarray:
    n, h, w, cin = p.x.shape
    cout, kh, kw, _ = p.w.shape
    oh, ow = p.out_hw
    x = p.x.astype(int).tolist()
    wt = p.w.astype(int).tolist()
    out = np.zeros((n, oh, ow, cout), dtype=np.int8)
    for b in range(n):
        for oy in range(oh):
            for ox in range(ow):
                for oc in range(cout):
                    acc = 0
                    for ky in range(kh):
                        iy = oy * p.stride - p.pad + ky
                        if not 0 <= iy < h:
                            continue
                        for kx in range(kw):
                            ix = ox * p.stride - p.pad + kx
                            if not 0 <= ix < w:
                                continue
                            row, filt = x[b][iy][ix], wt[oc][ky][kx]
                            acc += sum((row[c] - p.in_zp) * filt[c] for c in range(cin))
                    acc += int(p.bias[oc])
                    v = mbqm(acc, int(p.mult[oc]), int(p.shift[oc])) + p.out_zp
                    out[b, oy, ox, oc] = min(max(v, -128), 127)
    return out


@pytest.fixture(scope="module")
def device():
    with Device.open("shim") as dev:
        yield dev


@pytest.mark.parametrize("seed", [0, 1])
def test_conv_matches_tflite_reference_bit_exactly(device: Device, seed: int) -> None:
    p = make_problem(seed, shape=(1, 8, 8, 8), cout=8)
    run = run_conv(device, p)
    ref = reference(p)
    assert run.output.shape == ref.shape
    assert np.array_equal(run.output, ref), f"{np.count_nonzero(run.output != ref)} values differ"


def test_conv_stride2_saturating_and_clamped(device: Device) -> None:
    p = make_problem(7, shape=(1, 9, 9, 4), cout=6)
    p.stride = 2
    # Large multipliers push many outputs into the clamp; one channel with a positive shift.
    p.mult[:] = quantize_multiplier(0.9)[0]
    p.shift[:] = -2
    p.shift[0] = 1
    run = run_conv(device, p)
    ref = reference(p)
    assert (ref == 127).any() and (ref == -128).any()  # the clamp is exercised
    assert np.array_equal(run.output, ref)


def test_reference_helpers_known_values() -> None:
    # gemmlowp's documented cases: rounding half away from zero, and the one saturating input.
    assert srdhm(-(2**31), -(2**31)) == 2**31 - 1
    assert srdhm(1 << 30, 1 << 30) == 1 << 29
    assert rdbp(5, 1) == 3 and rdbp(-5, 1) == -3 and rdbp(4, 1) == 2
    assert quantize_multiplier(0.5) == (1 << 30, 0)
