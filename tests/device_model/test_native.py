"""device_model.native: the C kernels (VNNI int8 GEMM, depthwise) through numerics, against the
slow reference, with 8-bit outputs (the only case numerics hands to them)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from device_model import native
from device_model import numerics as nm

from . import reference as ref

# The kernels must build wherever the tests run (gcc is part of the environment); VNPU_NATIVE=0 is
# the one way to run without them.
pytestmark = pytest.mark.skipif(os.environ.get("VNPU_NATIVE") == "0", reason="VNPU_NATIVE=0")


def test_kernels_are_built_and_loaded() -> None:
    assert native.available(), "the native kernels failed to build or load (see the log warning)"


def _quant(rng: np.random.Generator, c: int, extreme: bool) -> tuple[np.ndarray, np.ndarray]:
    mults = rng.integers(2**30, 2**31, size=c)
    shifts = rng.integers(-12, 1, size=c)
    if extreme:  # positive shifts, the widest shifts; sometimes the INT32_MIN multiplier (saturation)
        if rng.random() < 0.5:
            mults[0] = -(2**31)
            shifts[0] = 0
        shifts[-1] = 3
        if c > 2:
            shifts[1] = nm.SHIFT_MIN
            mults[1] = -(2**30) - 5
    return mults, shifts


def _clamp8(dtype: np.dtype, lo: int, hi: int) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return max(lo, int(info.min)), min(hi, int(info.max))


@settings(max_examples=25)
@given(
    seed=st.integers(0, 2**32 - 1),
    signed=st.booleans(),
    k=st.sampled_from([1, 3]),
    stride=st.sampled_from([1, 2]),
    dilation=st.sampled_from([1, 2]),
    pad=st.integers(0, 2),
    cin=st.integers(1, 9),
    cout=st.integers(1, 40),
    extreme=st.booleans(),
)
def test_conv2d_native_matches_reference(seed, signed, k, stride, dilation, pad, cin, cout, extreme) -> None:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(np.int8 if signed else np.uint8)
    info = np.iinfo(dtype)
    h = w = 7
    x = rng.integers(info.min, int(info.max) + 1, size=(1, h, w, cin)).astype(dtype)
    f = rng.integers(info.min, int(info.max) + 1, size=(cout, k, k, cin)).astype(dtype)
    izp = int(rng.integers(info.min, int(info.max) + 1))
    fzp = 0 if signed else int(rng.integers(0, 256))
    bias = rng.integers(-(2**31), 2**31, size=cout) if extreme else rng.integers(-5000, 5000, size=cout)
    mults, shifts = _quant(rng, cout, extreme)
    oh = (h + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    ozp = int(rng.integers(info.min, int(info.max) + 1))
    args = (izp, fzp, stride, stride, dilation, dilation, pad, pad, oh, oh, mults, shifts, ozp, -300, 300)
    want = np.array(ref.conv2d(x.tolist(), f.tolist(), bias.tolist(), *args))
    got = nm.conv2d(
        x, f, bias, input_zp=izp, filter_zp=fzp, stride_h=stride, stride_w=stride, dilation_h=dilation,
        dilation_w=dilation, pad_top=pad, pad_left=pad, out_h=oh, out_w=oh, multiplier=mults,
        shift=shifts, output_zp=ozp, act_min=-300, act_max=300, out_dtype=dtype,
    )  # fmt: skip
    lo, hi = _clamp8(dtype, -300, 300)
    assert got.dtype == dtype
    assert np.array_equal(got.astype(np.int64), np.clip(want, lo, hi))


@settings(max_examples=25)
@given(
    seed=st.integers(0, 2**32 - 1),
    signed=st.booleans(),
    k=st.sampled_from([1, 3, 5]),
    stride=st.sampled_from([1, 2, 3, 9]),  # 9 > the 8-pixel width: column phases without columns
    dilation=st.sampled_from([1, 2]),
    pad=st.integers(0, 2),
    c=st.integers(1, 40),
    extreme=st.booleans(),
)
def test_depthwise_native_matches_reference(seed, signed, k, stride, dilation, pad, c, extreme) -> None:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(np.int8 if signed else np.uint8)
    info = np.iinfo(dtype)
    h = w = 8
    x = rng.integers(info.min, int(info.max) + 1, size=(2, h, w, c)).astype(dtype)
    f = rng.integers(info.min, int(info.max) + 1, size=(1, k, k, c)).astype(dtype)
    izp = int(rng.integers(-255, 256))
    fzp = int(rng.integers(-255, 256))
    bias = rng.integers(-(2**31), 2**31, size=c) if extreme else rng.integers(-5000, 5000, size=c)
    mults, shifts = _quant(rng, c, extreme)
    oh = max(1, (h + 2 * pad - dilation * (k - 1) - 1) // stride + 1)
    ozp = int(rng.integers(-20, 20))
    args = (izp, fzp, stride, stride, dilation, dilation, pad, pad, 1, oh, oh, mults, shifts, ozp, -128, 255)
    want = np.array(ref.depthwise(x.tolist(), f.tolist(), bias.tolist(), *args))
    got = nm.depthwise_conv2d(
        x, f, bias, input_zp=izp, filter_zp=fzp, stride_h=stride, stride_w=stride, dilation_h=dilation,
        dilation_w=dilation, pad_top=pad, pad_left=pad, depth_multiplier=1, out_h=oh, out_w=oh,
        multiplier=mults, shift=shifts, output_zp=ozp, act_min=-128, act_max=255, out_dtype=dtype,
    )  # fmt: skip
    lo, hi = _clamp8(dtype, -128, 255)
    assert got.dtype == dtype
    assert np.array_equal(got.astype(np.int64), np.clip(want, lo, hi))


@pytest.mark.parametrize("portable", [False, True])
@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (5, 7, 17), (9, 64, 70), (4, 1030, 130)])
def test_gemm_requant_both_kernels(portable: bool, m: int, k: int, n: int) -> None:
    # Also the long-K case whose int32 sums wrap: the correction term is applied modulo 2**32.
    rng = np.random.default_rng(m * 1000 + k)
    a = rng.integers(0, 256, size=(m, k)).astype(np.uint8)
    w = rng.integers(-128, 128, size=(n, k)).astype(np.int8)
    a_offset = 200
    bias = rng.integers(-(2**31), 2**31, size=n)
    mults, shifts = _quant(rng, n, extreme=n > 2)
    packed, colsum, kp, npad = native.pack_filter(w)
    a_p = np.zeros((m, kp), dtype=np.uint8)
    a_p[:, :k] = a
    if portable or native.has_vnni():
        got = native.gemm_requant(
            a_p, packed, colsum, kp, npad, n, a_offset, bias, mults, shifts, 3, -128, 127, np.dtype(np.int8),
            portable=portable,
        )  # fmt: skip
        want = ref.fully_connected(
            (a.astype(np.int64)).tolist(), w.astype(np.int64).tolist(), bias.tolist(), a_offset, 0,
            mults.tolist(), shifts.tolist(), 3, -128, 127,
        )  # fmt: skip
        assert np.array_equal(got.astype(np.int64), np.array(want))


def test_fully_connected_native_uint8_with_filter_zero_point() -> None:
    rng = np.random.default_rng(7)
    x = rng.integers(0, 256, size=(3, 50)).astype(np.uint8)
    f = rng.integers(100, 200, size=(9, 50)).astype(np.uint8)  # minus zp 150: fits int8
    bias = rng.integers(-1000, 1000, size=9)
    got = nm.fully_connected(
        x, f, bias, input_zp=128, filter_zp=150, multiplier=2**30 + 7, shift=-6, output_zp=10,
        act_min=0, act_max=255, out_dtype=np.dtype(np.uint8),
    )  # fmt: skip
    want = ref.fully_connected(
        x.tolist(), f.tolist(), bias.tolist(), 128, 150, [2**30 + 7] * 9, [-6] * 9, 10, 0, 255
    )
    assert got.dtype == np.uint8 and np.array_equal(got.astype(np.int64), np.array(want))


@pytest.mark.parametrize("n, k", [(1, 1), (16, 4), (17, 7), (33, 1030), (64, 3)])
def test_pack_filter_layout_and_sums(n: int, k: int) -> None:
    w = np.random.default_rng(n * k).integers(-128, 128, size=(n, k)).astype(np.int8)
    packed, colsum, kp, npad = native.pack_filter(w)
    padded = np.zeros((npad, kp), dtype=np.int8)
    padded[:n, :k] = w
    assert (kp % 4, npad % 16) == (0, 0) and kp - k < 4 and npad - n < 16
    assert np.array_equal(packed, padded.reshape(npad, kp // 4, 4).transpose(1, 0, 2))
    assert np.array_equal(colsum, w.sum(axis=1, dtype=np.int64))


int32s = st.integers(-(2**31), 2**31 - 1)


@settings(max_examples=40)
@given(
    seed=st.integers(0, 2**32 - 1),
    signed=st.booleans(),
    subtract=st.booleans(),
    ls=st.integers(0, 30),
    q=st.tuples(int32s, st.integers(-31, 30), int32s, st.integers(-31, 30), int32s, st.integers(-31, 30)),
)
def test_add_native_matches_reference(seed, signed, subtract, ls, q) -> None:
    # Any multipliers and shifts, the widest left shift: every int32 wrap-around of the C code.
    rng = np.random.default_rng(seed)
    dtype = np.dtype(np.int8 if signed else np.uint8)
    info = np.iinfo(dtype)
    x1 = rng.integers(info.min, int(info.max) + 1, size=(1, 3, 5, 4)).astype(dtype)
    x2 = rng.integers(info.min, int(info.max) + 1, size=(1, 3, 5, 4)).astype(dtype)
    zp1, zp2, ozp = (int(v) for v in rng.integers(-300, 300, size=3))
    m1, s1, m2, s2, om, os_ = q
    got = nm.add(
        x1, x2, input1_zp=zp1, input2_zp=zp2, left_shift=ls, input1_multiplier=m1, input1_shift=s1,
        input2_multiplier=m2, input2_shift=s2, output_multiplier=om, output_shift=os_, output_zp=ozp,
        act_min=-200, act_max=200, subtract=subtract, out_dtype=dtype,
    )  # fmt: skip
    lo, hi = _clamp8(dtype, -200, 200)
    want = [
        ref.add_one(a, b, zp1, zp2, ls, m1, s1, m2, s2, om, os_, ozp, lo, hi, subtract)
        for a, b in zip(x1.ravel().tolist(), x2.ravel().tolist(), strict=True)
    ]
    assert got.dtype == dtype and got.ravel().tolist() == want


@pytest.mark.parametrize("out_dtype", [np.int8, np.uint8])
def test_requantization_at_the_int32_limits(out_dtype) -> None:
    # acc = bias (a == a_offset == 0): accumulators at +-2**31, multipliers near +-2**31, every shift,
    # zero points at +-2**15: the 16-lane path must not overflow where the int64 path does not.
    rng = np.random.default_rng(5)
    n = 70
    bias = np.concatenate(
        [[2**31 - 1, -(2**31), 2**31 - 2, -(2**31) + 1], rng.integers(-(2**31), 2**31, n - 4)]
    )
    mults = np.concatenate(
        [[2**31 - 1, 2**31 - 1, -(2**31) + 1, 2**30], rng.integers(-(2**31) + 1, 2**31, n - 4)]
    )
    shifts = np.arange(n) % 62 - 31  # -31 .. 30
    w = np.zeros((n, 4), dtype=np.int8)
    packed, colsum, kp, npad = native.pack_filter(w)
    a = np.zeros((3, kp), dtype=np.uint8)
    info = np.iinfo(out_dtype)
    for zp in (-(2**15), 2**15, 0, 7):
        got = native.gemm_requant(
            a, packed, colsum, kp, npad, n, 0, bias, mults, shifts, zp, int(info.min), int(info.max),
            np.dtype(out_dtype),
        )  # fmt: skip
        want = [
            ref.clamp(ref.mbqm(int(b), int(m), int(s)) + zp, int(info.min), int(info.max))
            for b, m, s in zip(bias, mults, shifts, strict=True)
        ]
        assert got.dtype == out_dtype
        assert all(row == want for row in got.astype(np.int64).tolist())


def test_a_cold_build_never_blocks_a_job(tmp_path) -> None:
    # With an empty cache, ready() starts gcc in the background and returns at once (jobs keep to
    # the numpy paths meanwhile, under any driver job timeout); the build then loads.
    import subprocess
    import sys

    code = (
        "import time; from device_model import native as n\n"
        "t = time.perf_counter(); first = n.ready(); dt = time.perf_counter() - t\n"
        "assert first is None and dt < 1.0, (first, dt)\n"
        "assert not n.has_vnni(wait=False) or n.ready() is not None\n"
        "assert n.module() is not None and n.ready() is not None\n"
        "print('ok')\n"
    )
    env = {**os.environ, "VNPU_CACHE_DIR": str(tmp_path)}
    env.pop("VNPU_NATIVE", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_parameter_lengths_are_checked_before_the_c_code_reads_them() -> None:
    w = np.ones((5, 8), dtype=np.int8)
    packed, colsum, kp, npad = native.pack_filter(w)
    a = np.zeros((2, kp), dtype=np.uint8)
    args = (a, packed, colsum, kp, npad, 5, 0)
    with pytest.raises(ValueError, match="bias has 4 values for 5 channels"):
        native.gemm_requant(*args, np.zeros(4), 2**30, 0, 0, -128, 127, np.dtype(np.int8))
    with pytest.raises(ValueError, match="multiplier has 6 values"):
        native.gemm_requant(*args, None, np.full(6, 2**30), 0, 0, -128, 127, np.dtype(np.int8))
    with pytest.raises(ValueError, match="depth"):
        native.gemm_requant(np.zeros((2, kp + 4), np.uint8), *args[1:], None, 2**30, 0, 0, -128, 127, np.int8)
