"""device_model.numerics against the slow reference in reference.py."""

from __future__ import annotations

import numpy as np
import pytest
import reference_kernels as ref
from hypothesis import given, settings
from hypothesis import strategies as st

from device_model import numerics as nm

int32s = st.integers(-(2**31), 2**31 - 1)
shifts = st.integers(nm.SHIFT_MIN, nm.SHIFT_MAX)


@given(int32s, int32s)
def test_srdhm_matches_reference(a: int, b: int) -> None:
    assert int(nm.saturating_rounding_doubling_high_mul(a, b)) == ref.srdhm(a, b)


def test_srdhm_saturates_and_rounds() -> None:
    assert int(nm.saturating_rounding_doubling_high_mul(-(2**31), -(2**31))) == 2**31 - 1
    # 2**30 * 2**30 * 2 / 2**32 = 2**29 exactly; -1 * 2**30 rounds to -0.5 -> -0 (away from zero with nudge)
    assert int(nm.saturating_rounding_doubling_high_mul(2**30, 2**30)) == 2**29
    assert int(nm.saturating_rounding_doubling_high_mul(-1, 2**30)) == 0
    assert int(nm.saturating_rounding_doubling_high_mul(1, 2**30)) == 1


@given(int32s, st.integers(0, 31))
def test_rounding_divide_by_pot(x: int, e: int) -> None:
    assert int(nm.rounding_divide_by_pot(x, e)) == ref.rdbp(x, e)


def test_rounding_divide_by_pot_half_away_from_zero() -> None:
    got = nm.rounding_divide_by_pot(np.array([5, -5, 6, -6, 7, -7]), 1)
    assert got.tolist() == [3, -3, 3, -3, 4, -4]
    with pytest.raises(ValueError, match="exponent"):
        nm.rounding_divide_by_pot(1, 32)


@settings(max_examples=300)
@given(st.lists(int32s, min_size=1, max_size=8), int32s, shifts)
def test_mbqm_matches_reference(xs: list[int], m: int, s: int) -> None:
    got = nm.multiply_by_quantized_multiplier(np.array(xs), m, s)
    assert got.tolist() == [ref.mbqm(x, m, s) for x in xs]


def test_mbqm_per_channel_and_range_check() -> None:
    x = np.array([[1000, -1000, 77]])
    m = np.array([2**30, 2**31 - 1, 1 << 29])
    s = np.array([1, -5, 30])
    assert nm.multiply_by_quantized_multiplier(x, m, s).tolist() == [
        [ref.mbqm(1000, 2**30, 1), ref.mbqm(-1000, 2**31 - 1, -5), ref.mbqm(77, 1 << 29, 30)]
    ]
    with pytest.raises(ValueError, match="shift"):
        nm.multiply_by_quantized_multiplier(1, 2**30, 31)
    with pytest.raises(ValueError, match="shift"):
        nm.multiply_by_quantized_multiplier(1, 2**30, -32)


def _quant(rng: np.random.Generator, cout: int, extreme: bool) -> tuple[np.ndarray, np.ndarray]:
    if extreme:
        mults = rng.choice([0, 1, 2**30, 2**31 - 1, -(2**31), rng.integers(2**30, 2**31)], size=cout)
        sh = rng.choice([nm.SHIFT_MIN, -20, -1, 0, 1, 10, nm.SHIFT_MAX], size=cout)
    else:
        mults = rng.integers(2**30, 2**31, size=cout)
        sh = rng.integers(-12, 1, size=cout)
    return mults.astype(np.int64), sh.astype(np.int64)


def _geometry(rng, h, w, k, stride, dil):
    pad_t = int(rng.integers(0, k))
    pad_l = int(rng.integers(0, k))
    eff = (k - 1) * dil + 1
    oh = max(1, (h + pad_t + int(rng.integers(0, k)) - eff) // stride + 1)
    ow = max(1, (w + pad_l + int(rng.integers(0, k)) - eff) // stride + 1)
    return pad_t, pad_l, oh, ow


@pytest.mark.parametrize("seed", range(12))
def test_conv2d_matches_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    signed = seed % 2 == 0
    lo, hi = (-128, 128) if signed else (0, 256)
    n, h, w, cin, cout = 1 + seed % 2, int(rng.integers(3, 7)), int(rng.integers(3, 7)), 3, 4
    k = int(rng.integers(1, 4))
    stride, dil = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    pt, pl, oh, ow = _geometry(rng, h, w, k, stride, dil)
    inp = rng.integers(lo, hi, size=(n, h, w, cin))
    filt = rng.integers(lo, hi, size=(cout, k, k, cin))
    bias = rng.integers(-5000, 5000, size=cout) if seed % 3 else None
    izp, fzp, ozp = (
        int(rng.integers(lo, hi)),
        (0 if signed else int(rng.integers(lo, hi))),
        int(rng.integers(lo, hi)),
    )
    mults, sh = _quant(rng, cout, extreme=seed % 4 == 3)
    amin, amax = (lo, hi - 1) if seed % 5 else (lo + 10, hi - 30)
    rq = nm.Requant(
        input_zp=izp, filter_zp=fzp, multiplier=mults, shift=sh, output_zp=ozp, act_min=amin, act_max=amax
    )
    got = nm.conv2d(
        inp, filt, bias, rq, stride_h=stride, stride_w=stride, dilation_h=dil, dilation_w=dil, pad_top=pt,
        pad_left=pl, out_h=oh, out_w=ow,
    )  # fmt: skip
    want = ref.conv2d(
        inp.tolist(), filt.tolist(), None if bias is None else bias.tolist(), izp, fzp, stride, stride,
        dil, dil, pt, pl, oh, ow, mults.tolist(), sh.tolist(), ozp, amin, amax,
    )  # fmt: skip
    assert got.tolist() == want


def test_conv2d_pointwise_fast_path_and_deep_k() -> None:
    # K = 600 uint8 products need K-chunking in float32; the 1x1 path skips im2col.
    rng = np.random.default_rng(7)
    inp = rng.integers(0, 256, size=(1, 2, 3, 600))
    filt = rng.integers(0, 256, size=(2, 1, 1, 600))
    m, s = np.array([2**30 + 12345, 2**31 - 1]), np.array([-18, -17])
    rq = nm.Requant(input_zp=0, filter_zp=255, multiplier=m, shift=s, output_zp=3, act_min=0, act_max=255)
    got = nm.conv2d(
        inp, filt, None, rq, stride_h=1, stride_w=1, dilation_h=1, dilation_w=1, pad_top=0, pad_left=0,
        out_h=2, out_w=3,
    )  # fmt: skip
    want = ref.conv2d(
        inp.tolist(), filt.tolist(), None, 0, 255, 1, 1, 1, 1, 0, 0, 2, 3, m.tolist(), s.tolist(), 3, 0, 255
    )
    assert got.tolist() == want


@pytest.mark.parametrize("seed", range(8))
def test_depthwise_matches_reference(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    signed = seed % 2 == 1
    lo, hi = (-128, 128) if signed else (0, 256)
    n, h, w, cin, dm = 1, int(rng.integers(3, 7)), int(rng.integers(3, 7)), 3, 1 + seed % 3
    k = int(rng.integers(1, 4))
    stride, dil = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    pt, pl, oh, ow = _geometry(rng, h, w, k, stride, dil)
    inp = rng.integers(lo, hi, size=(n, h, w, cin))
    filt = rng.integers(lo, hi, size=(1, k, k, cin * dm))
    bias = rng.integers(-5000, 5000, size=cin * dm) if seed % 3 else None
    izp, fzp, ozp = int(rng.integers(lo, hi)), int(rng.integers(lo, hi)), int(rng.integers(lo, hi))
    mults, sh = _quant(rng, cin * dm, extreme=seed % 4 == 2)
    rq = nm.Requant(
        input_zp=izp, filter_zp=fzp, multiplier=mults, shift=sh, output_zp=ozp, act_min=lo, act_max=hi - 1
    )
    got = nm.depthwise_conv2d(
        inp, filt, bias, rq, stride_h=stride, stride_w=stride, dilation_h=dil, dilation_w=dil, pad_top=pt,
        pad_left=pl, depth_multiplier=dm, out_h=oh, out_w=ow,
    )  # fmt: skip
    want = ref.depthwise(
        inp.tolist(), filt.tolist(), None if bias is None else bias.tolist(), izp, fzp, stride, stride,
        dil, dil, pt, pl, dm, oh, ow, mults.tolist(), sh.tolist(), ozp, lo, hi - 1,
    )  # fmt: skip
    assert got.tolist() == want


@pytest.mark.parametrize("seed", range(6))
def test_fully_connected_matches_reference(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    lo, hi = (-128, 128) if seed % 2 else (0, 256)
    b, k, cout = 1 + seed % 3, int(rng.integers(1, 40)), int(rng.integers(1, 6))
    inp = rng.integers(lo, hi, size=(b, k))
    filt = rng.integers(lo, hi, size=(cout, k))
    bias = rng.integers(-(2**20), 2**20, size=cout)
    mults, sh = _quant(rng, cout, extreme=seed == 5)
    izp, fzp, ozp = int(rng.integers(lo, hi)), int(rng.integers(lo, hi)), int(rng.integers(lo, hi))
    rq = nm.Requant(
        input_zp=izp, filter_zp=fzp, multiplier=mults, shift=sh, output_zp=ozp, act_min=lo, act_max=hi - 1
    )
    got = nm.fully_connected(inp, filt, bias, rq)
    want = ref.fully_connected(
        inp.tolist(), filt.tolist(), bias.tolist(), izp, fzp, mults.tolist(), sh.tolist(), ozp, lo, hi - 1
    )
    assert got.tolist() == want


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.booleans(),
    st.integers(0, 20),
    st.tuples(int32s, st.integers(-31, 0), int32s, st.integers(-31, 0), int32s, st.integers(-31, 0)),
)
def test_add_sub_broadcast_matches_reference(seed: int, subtract: bool, ls: int, q: tuple) -> None:
    rng = np.random.default_rng(seed)
    x1 = rng.integers(-128, 128, size=(1, 2, 3, 4))
    x2 = np.broadcast_to(rng.integers(-128, 128, size=(1, 1, 1, 4)), x1.shape)  # a zero-stride operand
    zp1, zp2, ozp = (int(v) for v in rng.integers(-128, 128, size=3))
    m1, s1, m2, s2, om, os_ = q
    got = nm.add(
        x1, x2, input1_zp=zp1, input2_zp=zp2, left_shift=ls, input1_multiplier=m1, input1_shift=s1,
        input2_multiplier=m2, input2_shift=s2, output_multiplier=om, output_shift=os_, output_zp=ozp,
        act_min=-128, act_max=127, subtract=subtract,
    )  # fmt: skip
    want = [
        ref.add_one(a, b, zp1, zp2, ls, m1, s1, m2, s2, om, os_, ozp, -128, 127, subtract)
        for a, b in zip(x1.ravel().tolist(), x2.ravel().tolist(), strict=True)
    ]
    assert got.ravel().tolist() == want


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), int32s, shifts)
def test_mul_matches_reference(seed: int, om: int, os_: int) -> None:
    rng = np.random.default_rng(seed)
    x1 = rng.integers(0, 256, size=(2, 5))
    x2 = rng.integers(0, 256, size=(2, 5))
    zp1, zp2, ozp = (int(v) for v in rng.integers(0, 256, size=3))
    got = nm.mul(
        x1, x2, input1_zp=zp1, input2_zp=zp2, output_multiplier=om, output_shift=os_, output_zp=ozp,
        act_min=0, act_max=255,
    )  # fmt: skip
    want = [
        ref.mul_one(a, b, zp1, zp2, om, os_, ozp, 0, 255)
        for a, b in zip(x1.ravel().tolist(), x2.ravel().tolist(), strict=True)
    ]
    assert got.ravel().tolist() == want


@pytest.mark.parametrize("average", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_pooling_matches_reference(seed: int, average: bool) -> None:
    rng = np.random.default_rng(300 + seed)
    lo, hi = (-128, 128) if seed % 2 else (0, 256)
    h, w, c = int(rng.integers(2, 8)), int(rng.integers(2, 8)), 3
    fh, fw = int(rng.integers(1, min(h, 4) + 1)), int(rng.integers(1, min(w, 4) + 1))
    s = int(rng.integers(1, 3))
    pt, pl = int(rng.integers(0, fh)), int(rng.integers(0, fw))
    oh, ow = (h + pt - fh) // s + 1, (w + pl - fw) // s + 1
    inp = rng.integers(lo, hi, size=(2, h, w, c))
    amin, amax = lo + 5, hi - 7
    fn = nm.avg_pool if average else nm.max_pool
    got = fn(
        inp, filter_h=fh, filter_w=fw, stride_h=s, stride_w=s, pad_top=pt, pad_left=pl, out_h=oh, out_w=ow,
        act_min=amin, act_max=amax,
    )  # fmt: skip
    want = ref.pool(inp.tolist(), fh, fw, s, s, pt, pl, oh, ow, amin, amax, average)
    assert got.tolist() == want


def test_avgpool_rounds_negative_half_away_from_zero() -> None:
    inp = np.array([-3, -2, 3, 2]).reshape(1, 1, 4, 1)  # windows of two: -2.5 -> -3, 2.5 -> 3
    got = nm.avg_pool(
        inp, filter_h=1, filter_w=2, stride_h=1, stride_w=2, pad_top=0, pad_left=0, out_h=1, out_w=2,
        act_min=-128, act_max=127,
    )  # fmt: skip
    assert got.ravel().tolist() == [-3, 3]


def test_pool_rejects_window_without_input() -> None:
    with pytest.raises(ValueError, match="covers no input"):
        nm.max_pool(
            np.zeros((1, 2, 2, 1), dtype=np.int8), filter_h=1, filter_w=1, stride_h=1, stride_w=1,
            pad_top=1, pad_left=0, out_h=2, out_w=2, act_min=-128, act_max=127,
        )  # fmt: skip


def test_lut_signed_and_unsigned() -> None:
    table = np.arange(256, dtype=np.int32) * 3 % 256 - 128
    x = np.array([-128, -1, 0, 127])
    assert nm.lut(x, table, signed_input=True).tolist() == [table[0], table[127], table[128], table[255]]
    assert nm.lut(np.array([0, 255]), table, signed_input=False).tolist() == [table[0], table[255]]


def test_int_matmul_exact_on_worst_case_operands() -> None:
    a = np.full((3, 5000), 255, dtype=np.int64)
    b = np.full((5000, 2), -255, dtype=np.int64)
    assert (nm.int_matmul(a, b) == -255 * 255 * 5000).all()
    a = np.full((2, 900), 255)
    b = np.full((900, 2), 40)
    assert (nm.int_matmul(a, b) == 255 * 40 * 900).all()


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.booleans(),
    st.integers(
        16, 20
    ),  # TFLite's ADD uses left_shift 20 (16 for int16): realistic scales, not all saturated
    st.tuples(
        *[st.integers(1 << 30, (1 << 31) - 1), st.integers(-4, 0)] * 2,
        st.integers(1 << 30, (1 << 31) - 1),
        st.integers(-22, -14),
    ),
    st.sampled_from([np.int8, np.uint8]),
    st.sampled_from([np.int8, np.uint8]),
    st.sampled_from([np.int8, np.uint8]),
    st.sampled_from([(-128, 127), (0, 255), (-1000, 1000), (-20, 30)]),
)
def test_add_byte_table_matches_direct_computation(
    seed: int, subtract: bool, ls: int, q: tuple, t1, t2, tout, act: tuple[int, int]
) -> None:
    """Byte inputs with a byte output take a 65536-entry table: the same values, saturated as stored."""
    rng = np.random.default_rng(seed)
    x1 = rng.integers(0, 256, size=(1, 5, 7, 3), dtype=np.uint8).view(t1)
    x2 = rng.integers(0, 256, size=(1, 5, 7, 3), dtype=np.uint8).view(t2)[:, :, ::-1]  # strided
    zp1, zp2, ozp = (int(v) for v in rng.integers(-128, 128, size=3))
    m1, s1, m2, s2, om, os_ = q
    kwargs = dict(
        input1_zp=zp1, input2_zp=zp2, left_shift=ls, input1_multiplier=m1, input1_shift=s1,
        input2_multiplier=m2, input2_shift=s2, output_multiplier=om, output_shift=os_, output_zp=ozp,
        act_min=act[0], act_max=act[1], subtract=subtract,
    )  # fmt: skip
    got = nm.add(x1, x2, out_dtype=np.dtype(tout), **kwargs)
    info = np.iinfo(tout)
    want = np.clip(nm.add(x1, x2, **kwargs), info.min, info.max)
    assert got.dtype == np.dtype(tout)
    assert got.tolist() == want.tolist()


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    int32s,
    st.integers(-12, 0),
    st.sampled_from([np.int8, np.uint8]),
    st.sampled_from([np.int8, np.uint8]),
    st.sampled_from([np.int8, np.uint8]),
    st.sampled_from([(-128, 127), (0, 255), (-1000, 1000), (-20, 30)]),
)
def test_mul_byte_table_matches_reference(seed: int, om: int, os_: int, t1, t2, tout, act: tuple) -> None:
    """Byte inputs with a byte output take a 65536-entry table: TFLite's values, saturated as stored."""
    rng = np.random.default_rng(seed)
    x1 = rng.integers(0, 256, size=(1, 4, 5, 3), dtype=np.uint8).view(t1)
    x2 = rng.integers(0, 256, size=(1, 4, 5, 3), dtype=np.uint8).view(t2)[:, :, ::-1]  # strided
    zp1, zp2, ozp = (int(v) for v in rng.integers(-128, 128, size=3))
    got = nm.mul(
        x1, x2, input1_zp=zp1, input2_zp=zp2, output_multiplier=om, output_shift=os_, output_zp=ozp,
        act_min=act[0], act_max=act[1], out_dtype=np.dtype(tout),
    )  # fmt: skip
    info = np.iinfo(tout)
    want = [
        min(max(ref.mul_one(a, b, zp1, zp2, om, os_, ozp, act[0], act[1]), int(info.min)), int(info.max))
        for a, b in zip(x1.ravel().tolist(), x2.ravel().tolist(), strict=True)
    ]
    assert got.dtype == np.dtype(tout)
    assert got.ravel().tolist() == want


@settings(max_examples=30, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1 << 30, (1 << 31) - 1),
    st.integers(0, 31),
    st.integers(-(2**31), 0),
    st.sampled_from([np.int8, np.uint8]),
    st.sampled_from([np.int8, np.uint8]),
)
def test_softmax_byte_tables_match_the_general_path(
    seed: int, mult: int, shift: int, diff_min: int, t_in, t_out
) -> None:
    """8-bit inputs look their exponentials up in a table of all 256 differences: the same outputs as
    computing them (the general path, taken for wider inputs)."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(t_in)
    x = rng.integers(int(info.min), int(info.max) + 1, size=(3, 17)).astype(t_in)
    x[0, :2] = info.max  # a tie at the maximum
    x[1, 0], x[1, 1] = info.min, info.max  # the widest difference
    kwargs = dict(input_multiplier=mult, input_left_shift=shift, diff_min=diff_min, out_dtype=np.dtype(t_out))
    try:
        want = nm.softmax(x.astype(np.int16), **kwargs)
    except ValueError as e:  # a sum of exponentials out of range: the table path refuses it alike
        with pytest.raises(ValueError, match=str(e)):
            nm.softmax(x, **kwargs)
        return
    assert np.array_equal(nm.softmax(x, **kwargs), want)


@pytest.mark.parametrize("average", [False, True])
@pytest.mark.parametrize(
    ("h", "w", "f"), [(5, 7, (5, 7)), (6, 6, (2, 2)), (7, 5, (2, 2)), (4, 6, (1, 3)), (3, 3, (1, 1))]
)
@pytest.mark.parametrize("stride_one", [False, True])
def test_pooling_of_tiling_windows_matches_reference(
    average: bool, h: int, w: int, f: tuple, stride_one: bool
) -> None:
    """Windows that tile the input (stride = filter, no padding: global pooling, 2x2/2, a dropped
    last row or column; any stride along an axis with one window, as converters write global
    pooling) take a reshape of the input: the same values as the reference."""
    rng = np.random.default_rng(h * w)
    for lo, hi, dtype in ((-128, 128, np.int8), (0, 256, np.uint8)):
        inp = rng.integers(lo, hi, size=(2, h, w, 3)).astype(dtype)
        oh, ow = h // f[0], w // f[1]
        sh, sw = (1 if stride_one and oh == 1 else f[0]), (1 if stride_one and ow == 1 else f[1])
        fn = nm.avg_pool if average else nm.max_pool
        got = fn(
            inp, filter_h=f[0], filter_w=f[1], stride_h=sh, stride_w=sw, pad_top=0, pad_left=0, out_h=oh,
            out_w=ow, act_min=lo + 3, act_max=hi - 5,
        )  # fmt: skip
        want = ref.pool(inp.tolist(), f[0], f[1], sh, sw, 0, 0, oh, ow, lo + 3, hi - 5, average)
        assert got.tolist() == want
