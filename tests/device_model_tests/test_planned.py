"""The planned fast paths of device_model.numerics (raw-input float32 GEMM and depthwise, one-floor
float64 requantization with tiled per-channel constants) against the plain-Python reference, on
8-bit tensors: signed and unsigned, ReLU-like and linear clamps (with and without the negative
rounding fix), ties, positive shifts, strides 1-3, dilation, depth multipliers, and on both sides of
the bounds where a plan is refused."""

from __future__ import annotations

import numpy as np
import pytest
import reference_kernels as ref
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from device_model import numerics as nm
from device_model.numerics import planned


def _case(rng: np.random.Generator, signed: bool, c: int, ties: bool):
    lo, hi = (-128, 128) if signed else (0, 256)
    dtype = np.int8 if signed else np.uint8
    if ties:  # multiplier 1/2 and small accumulators: many exact halves at both roundings
        mults = np.full(c, 2**30, dtype=np.int64)
        shifts = rng.integers(-3, 1, size=c)
    else:
        mults = rng.integers(2**30, 2**31, size=c)
        shifts = rng.integers(-14, 1, size=c)
        shifts[0] = int(rng.integers(1, 3))  # a positive shift: the int32 left shift first
    ozp = int(rng.integers(lo, hi))
    if rng.integers(0, 2):
        amin, amax = ozp, hi - 1  # ReLU: the clamp floor at the zero point (no negative fix)
    else:
        amin, amax = lo, hi - 1  # linear: negative values reach the output
    return lo, hi, dtype, mults.astype(np.int64), shifts.astype(np.int64), ozp, amin, amax


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    signed=st.booleans(),
    ties=st.booleans(),
    k=st.integers(1, 3),
    stride=st.integers(1, 3),
    dil=st.integers(1, 2),
    n=st.integers(1, 2),
)
def test_planned_conv2d_matches_reference(seed, signed, ties, k, stride, dil, n) -> None:
    rng = np.random.default_rng(seed)
    cin, cout = int(rng.integers(1, 5)), int(rng.integers(1, 6))
    lo, hi, dtype, mults, shifts, ozp, amin, amax = _case(rng, signed, cout, ties)
    h, w = int(rng.integers(k, 8)), int(rng.integers(k, 8))
    pt, pl = int(rng.integers(0, k)), int(rng.integers(0, k))
    oh = (h + pt - (k - 1) * dil - 1) // stride + 1
    ow = (w + pl - (k - 1) * dil - 1) // stride + 1
    if oh < 1 or ow < 1:
        return
    inp = rng.integers(lo, hi, size=(n, h, w, cin)).astype(dtype)
    scale = 4 if ties else 256
    filt = rng.integers(-scale // 2, scale // 2, size=(cout, k, k, cin)) + (0 if signed else 128)
    filt = filt.astype(dtype)
    izp = int(rng.integers(lo, hi))
    fzp = 0 if signed else int(rng.integers(lo, hi))
    bias = rng.integers(-5000, 5000, size=cout).astype(np.int32) if rng.integers(0, 2) else None
    kwargs = dict(input_zp=izp, filter_zp=fzp, multiplier=mults, shift=shifts, output_zp=ozp)
    rq = nm.Requant(act_min=amin, act_max=amax, out_dtype=dtype, **kwargs)
    plan = nm.plan_gemm(filt, bias, rq, in_dtype=inp.dtype)
    assert plan is not None
    got = nm.run_conv2d_plan(inp, plan, k, k, (stride, stride, dil, dil, pt, pl, oh, ow))
    assert got.dtype == dtype
    want = ref.conv2d(
        inp.tolist(), filt.tolist(), None if bias is None else bias.tolist(), izp, fzp, stride, stride,
        dil, dil, pt, pl, oh, ow, mults.tolist(), shifts.tolist(), ozp, amin, amax,
    )  # fmt: skip
    assert got.astype(np.int64).tolist() == want


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    signed=st.booleans(),
    ties=st.booleans(),
    k=st.integers(1, 5),
    stride=st.integers(1, 3),
    dil=st.integers(1, 2),
    dm=st.integers(1, 2),
    n=st.integers(1, 2),
    einsum=st.booleans(),
)
def test_planned_depthwise_matches_reference(seed, signed, ties, k, stride, dil, dm, n, einsum) -> None:
    rng = np.random.default_rng(seed)
    cin = int(rng.integers(1, 5))
    cout = cin * dm
    lo, hi, dtype, mults, shifts, ozp, amin, amax = _case(rng, signed, cout, ties)
    h, w = int(rng.integers(k, 9)), int(rng.integers(k, 9))
    pt, pl = int(rng.integers(0, k)), int(rng.integers(0, k))
    oh = (h + pt + int(rng.integers(0, k)) - (k - 1) * dil - 1) // stride + 1
    ow = (w + pl + int(rng.integers(0, k)) - (k - 1) * dil - 1) // stride + 1
    if oh < 1 or ow < 1:
        return
    inp = rng.integers(lo, hi, size=(n, h, w, cin)).astype(dtype)
    filt = rng.integers(lo, hi, size=(1, k, k, cout)).astype(dtype)
    izp, fzp = int(rng.integers(lo, hi)), int(rng.integers(lo, hi))
    bias = rng.integers(-5000, 5000, size=cout).astype(np.int32) if rng.integers(0, 2) else None
    kwargs = dict(input_zp=izp, filter_zp=fzp, multiplier=mults, shift=shifts, output_zp=ozp)
    rq = nm.Requant(act_min=amin, act_max=amax, out_dtype=dtype, **kwargs)
    plan = nm.plan_depthwise(filt, bias, rq, in_dtype=inp.dtype)
    assert plan is not None
    saved = planned.DEPTHWISE_EINSUM_CHANNELS
    planned.DEPTHWISE_EINSUM_CHANNELS = 1 if einsum else 1 << 30  # both paths: the einsum and per tap
    try:
        got = nm.run_depthwise_plan(inp, plan, k, k, dm, (stride, stride, dil, dil, pt, pl, oh, ow))
    finally:
        planned.DEPTHWISE_EINSUM_CHANNELS = saved
    want = ref.depthwise(
        inp.tolist(), filt.tolist(), None if bias is None else bias.tolist(), izp, fzp, stride, stride,
        dil, dil, pt, pl, dm, oh, ow, mults.tolist(), shifts.tolist(), ozp, amin, amax,
    )  # fmt: skip
    assert got.astype(np.int64).tolist() == want


@pytest.mark.parametrize("signed", [True, False])
def test_planned_fully_connected_matches_reference(signed: bool) -> None:
    rng = np.random.default_rng(5)
    lo, hi, dtype, mults, shifts, ozp, _, _ = _case(rng, signed, 7, ties=False)
    inp = rng.integers(lo, hi, size=(3, 50)).astype(dtype)
    filt = rng.integers(lo, hi, size=(7, 50)).astype(dtype)
    izp, fzp = int(rng.integers(lo, hi)), 0 if signed else int(rng.integers(lo, hi))
    bias = rng.integers(-(2**20), 2**20, size=7).astype(np.int32)
    rq = nm.Requant(
        input_zp=izp, filter_zp=fzp, multiplier=mults, shift=shifts, output_zp=ozp, act_min=lo,
        act_max=hi - 1, out_dtype=np.dtype(dtype),
    )  # fmt: skip
    got = nm.fully_connected(inp, filt, bias, rq)
    want = ref.fully_connected(
        inp.tolist(), filt.tolist(), bias.tolist(), izp, fzp, mults.tolist(), shifts.tolist(), ozp, lo, hi - 1
    )
    assert got.dtype == dtype
    assert got.astype(np.int64).tolist() == want


def _requant_plan(raw: int, corr: int, m: int, s: int, ozp: int = 0, lo: int = -128):
    rq = nm.Requant(
        input_zp=0, filter_zp=0, multiplier=m, shift=s, output_zp=ozp, act_min=lo, act_max=127,
        out_dtype=np.dtype(np.int8),
    )  # fmt: skip
    return nm.plan_requant(np.array([raw]), np.array([corr]), rq)


def test_plan_requant_bounds() -> None:
    # The float64 numerator must stay below 2**53, the (shifted) accumulator inside int32; a layer
    # whose bound is beyond that is planned but checks its accumulators on every call.
    assert _requant_plan(2**21, 0, 2**31 - 1, -1).checked
    assert not _requant_plan(2**22, 0, 2**31 - 1, -1).checked  # 2**53 reachable
    assert _requant_plan(2**11, 0, 2**31 - 1, 10).checked
    assert not _requant_plan(2**13, 0, 2**31 - 1, 10).checked  # shifted left: 2**53 reachable
    assert not _requant_plan(2**21, 0, 2**20, 10).checked  # acc << 10 could wrap int32
    assert _requant_plan(2**21 - 1, 0, 2**20, 10).checked
    assert _requant_plan(100, 0, -(2**31), -1) is None  # SRDHM saturates only for INT32_MIN
    assert _requant_plan(100, 2**31, 2**30, -1) is None  # the bias alone leaves int32
    assert _requant_plan(100, 0, 2**30, -1).fix is not None  # linear: the negative-h fix
    assert _requant_plan(100, 0, 2**30, -1, ozp=-5, lo=-5).fix is None  # ReLU: not needed
    assert _requant_plan(100, 0, 2**30, 0).fix[0] == 0  # e == 0 needs no fix
    assert not _requant_plan(100, 0, 2**30, -5, ozp=-3).floor  # D = 125 folded in
    assert _requant_plan(100, 0, 2**30, -20, ozp=-3).floor  # 125 << 51 does not fit: explicit floor


@pytest.mark.parametrize(
    ("k", "value", "planned"), [(1032, -128, True), (1033, -128, False), (1000, 3, True)]
)
def test_plan_limits_on_both_sides(k: int, value: int, planned: bool) -> None:
    # float32 sums: |x| * sum |w| must stay below 2**24 (128 * 127 * 1032 < 2**24 < 128 * 127 * 1033),
    # else no plan. The multiplier 2**31 - 1 puts the float64 limit near 2**22: accumulators of
    # near 2**24 take the general path inside the plan, small ones (value 3) the fast one.
    filt = np.full((2, k), -127, dtype=np.int8)
    args = dict(input_zp=0, filter_zp=0, multiplier=np.array([2**31 - 1, 2**30]), shift=np.array([-1, -20]))
    kw = dict(output_zp=-3, act_min=-128, act_max=127, out_dtype=np.dtype(np.int8))
    rq = nm.Requant(**args, **kw)
    plan = nm.plan_gemm(filt, None, rq, in_dtype=np.dtype(np.int8))
    assert (plan is not None) == planned
    if plan is not None:
        assert not plan.requant.checked
    inp = np.full((1, k), value, dtype=np.int8)
    got = nm.fully_connected(inp, filt, None, rq)
    want = ref.fully_connected(
        inp.tolist(), filt.tolist(), None, 0, 0, [2**31 - 1, 2**30], [-1, -20], -3, -128, 127
    )
    assert got.astype(np.int64).tolist() == want


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), signed=st.booleans(), ties=st.booleans(), rows=st.integers(1, 4))
def test_planned_single_rounding_fully_connected_matches_the_general_path(
    seed: int, signed: bool, ties: bool, rows: int
) -> None:
    """LiteRT's one-rounding FULLY_CONNECTED through a plan: the general path's int64 values (ties,
    negative values, positive shifts, ReLU and linear clamps)."""
    rng = np.random.default_rng(seed)
    lo, hi, dtype, mults, shifts, ozp, amin, amax = _case(rng, signed, 9, ties)
    k = int(rng.integers(1, 80))
    inp = rng.integers(lo, hi, size=(rows, k)).astype(dtype)
    filt = rng.integers(lo, hi, size=(9, k)).astype(dtype)
    izp, fzp = int(rng.integers(lo, hi)), 0 if signed else int(rng.integers(lo, hi))
    bias = rng.integers(-(2**12 if ties else 2**20), 2**12 if ties else 2**20, size=9).astype(np.int32)
    kw = dict(
        input_zp=izp, filter_zp=fzp, multiplier=mults, shift=shifts, output_zp=ozp, act_min=amin,
        act_max=amax, out_dtype=np.dtype(dtype), single_rounding=True,
    )  # fmt: skip
    rq = nm.Requant(**kw)
    plan = nm.plan_gemm(filt, bias, rq, in_dtype=inp.dtype)
    assume(plan is not None)  # refused where float64 cannot be exact (large corrections, left shifts)
    assert (
        plan is not None and isinstance(plan.requant, nm.RequantPlan) and plan.requant.general.single_rounding
    )
    want = nm.fully_connected(inp, filt, bias, rq, fast=False)
    assert np.array_equal(nm.run_fc_plan(inp, plan, filt), want)


@pytest.mark.parametrize(("k", "value"), [(1032, -128), (1000, 3)])
def test_planned_single_rounding_beyond_the_float64_limit(k: int, value: int) -> None:
    # As test_plan_limits_on_both_sides: accumulators near 2**24 take the plan's general path, which
    # must round once too.
    filt = np.full((2, k), -127, dtype=np.int8)
    kw = dict(
        input_zp=0, filter_zp=0, multiplier=np.array([2**31 - 1, 2**30]), shift=np.array([-1, -20]),
        output_zp=-3, act_min=-128, act_max=127, out_dtype=np.dtype(np.int8), single_rounding=True,
    )  # fmt: skip
    rq = nm.Requant(**kw)
    plan = nm.plan_gemm(filt, None, rq, in_dtype=np.dtype(np.int8))
    assert plan is not None and not plan.requant.checked
    inp = np.full((1, k), value, dtype=np.int8)
    want = nm.fully_connected(inp, filt, None, rq, fast=False)
    assert np.array_equal(nm.run_fc_plan(inp, plan, filt), want)
