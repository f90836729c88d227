"""The fast exact paths of device_model.numerics (float64 requantization, float32 K-chunked GEMM)
against the slow reference, on both sides of every bound where the code switches path."""

from __future__ import annotations

import numpy as np
import pytest
import reference_kernels as ref
from hypothesis import given, settings
from hypothesis import strategies as st

from device_model import numerics as nm
from device_model.numerics import primitives


def _rq(multiplier, shift, output_zp: int, act_min: int, act_max: int, out_dtype=None) -> nm.Requant:
    """The requantization alone (the zero points of the accumulators' operands are already in them)."""
    return nm.Requant(
        input_zp=0, filter_zp=0, multiplier=multiplier, shift=shift, output_zp=output_zp, act_min=act_min,
        act_max=act_max, out_dtype=out_dtype,
    )  # fmt: skip


def _expected(acc: np.ndarray, bias, mults, shifts, zp: int, lo: int, hi: int) -> np.ndarray:
    c, m = acc.shape
    out = np.empty((c, m), dtype=np.int64)
    for i in range(c):
        b = 0 if bias is None else int(bias[i])
        for j in range(m):
            v = ref.wrap32(int(acc[i, j]) + b)
            out[i, j] = ref.clamp(ref.mbqm(v, int(mults[i]), int(shifts[i])) + zp, lo, hi)
    return out


@settings(max_examples=60)
@given(
    seed=st.integers(0, 2**32 - 1),
    acc_bits=st.sampled_from([4, 12, 20, 21, 22, 24, 30, 31, 33]),
    shift_lo=st.integers(nm.SHIFT_MIN, 0),
    positive_shift=st.booleans(),
    zp=st.integers(-300, 300),
    with_bias=st.booleans(),
)
def test_requantize_channels_matches_reference(
    seed, acc_bits, shift_lo, positive_shift, zp, with_bias
) -> None:
    # acc_bits around 21 straddles the float64 bound |acc| * m < 2**52 (m up to 2**31); 31+ wraps.
    rng = np.random.default_rng(seed)
    c, m = 5, 23
    acc = rng.integers(-(2**acc_bits), 2**acc_bits, size=(c, m), dtype=np.int64)
    acc[0, :4] = [0, 1, -1, 2**acc_bits - 1]
    mults = rng.integers(2**30, 2**31, size=c)
    mults[0] = 2**31 - 1
    shifts = rng.integers(shift_lo, 1, size=c)
    if positive_shift:
        shifts[-1] = rng.integers(1, nm.SHIFT_MAX + 1)
    bias = rng.integers(-(2**20), 2**20, size=c) if with_bias else None
    want = _expected(acc, bias, mults, shifts, zp, -128, 127)
    for as_float in (False, True):
        a = acc.astype(np.float64) if as_float else acc
        got = nm.requantize_channels(a, bias, _rq(mults, shifts, zp, -128, 127, np.dtype(np.int8)))
        assert got.dtype == np.int8
        assert np.array_equal(got, want)


def test_requantize_channels_ties_round_half_away_from_zero() -> None:
    # multiplier 2**30 is 0.5: h = round-half-up(acc / 2), then shift -1 divides by 2 again.
    acc = np.array([[1, -1, 2, -2, 3, -3, 6, -6]], dtype=np.float32)
    got = nm.requantize_channels(acc, None, _rq(2**30, -1, 0, -100, 100))
    want = [ref.mbqm(int(v), 2**30, -1) for v in acc[0]]
    assert got.dtype == np.int32 and got[0].tolist() == want


def test_requantize_channels_saturates_to_dtype_and_clamp() -> None:
    acc = np.array([[-(10**6), 10**6, 0]], dtype=np.float32)
    got = nm.requantize_channels(acc, None, _rq(2**31 - 1, 0, 0, -1000, 1000, np.dtype(np.uint8)))
    assert got.dtype == np.uint8 and got[0].tolist() == [0, 255, 0]
    with pytest.raises(ValueError, match="shift"):
        nm.requantize_channels(acc, None, _rq(2**30, 31, 0, -128, 127))


@pytest.mark.parametrize(
    "a_val, b_val, k", [(255, 127, 100), (255, 127, 1000), (255, 255, 2000), (40000, 30000, 3)]
)
def test_gemm_channels_exact_through_chunks_and_float64(a_val: int, b_val: int, k: int) -> None:
    # One float32 GEMM, K-chunks, and the float64 fallback (products beyond 2**24).
    rng = np.random.default_rng(k)
    w = rng.integers(-b_val, b_val + 1, size=(3, k)).astype(np.float32)
    cols = rng.integers(-a_val, a_val + 1, size=(7, k)).astype(np.float32)
    w[0] = b_val
    cols[0] = -a_val
    got = primitives._gemm_channels(w, cols)
    want = w.astype(np.int64) @ cols.astype(np.int64).T
    assert np.array_equal(got.astype(np.int64), want)
