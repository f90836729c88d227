"""The C MAC array (device_model/mac_array) against the numpy reference (device_model/numerics):
identical bytes on many random layer shapes, on edge cases, and on whole networks run through the
shim with each implementation (the generated MobileNets, and every model in tests/corpus/models
when that directory exists). Every C variant this CPU can run is checked."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from c_kernels import c_variants, needs_c
from hypothesis import given, settings
from hypothesis import strategies as st

from device_model import mac_array as ma
from device_model import numerics as nm
from libaccel.compiler import quant as q

from .helpers import split_requant

ROOT = Path(__file__).resolve().parents[2]

ISAS = c_variants()  # a build failure fails this module
pytestmark = needs_c
_RANGE = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255)}
#: Every C variant, one test each; those this CPU cannot run show as skipped, with the reason.
ISA_PARAMS = [
    pytest.param(
        isa,
        id=name,
        marks=() if isa in ISAS else pytest.mark.skip(reason=f"this CPU cannot run the {name} kernels"),
    )
    for isa, name in ma.ISA_NAMES.items()
]
DTYPES = (np.dtype(np.int8), np.dtype(np.uint8))
#: 8-bit in and out, zero points 0, the whole int8 range: the requantization of the small plans below.
RQ_INT8 = nm.Requant(
    input_zp=0, filter_zp=0, multiplier=1 << 30, shift=-3, output_zp=0, act_min=-128, act_max=127,
    out_dtype=np.dtype(np.int8),
)  # fmt: skip


def _saturate(v: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """What the command processor stores: values saturated to the output dtype."""
    info = np.iinfo(dtype)
    return np.clip(v, info.min, info.max).astype(dtype)


def _check(case: dict, isa: int) -> None:
    """Run one layer through numpy (planned and general paths) and the C variant: identical bytes."""
    kind = case.pop("kind")
    x, f, bias = case.pop("x"), case.pop("f"), case.pop("bias")
    geometry = case.pop("geometry", (1, 1, 1, 1, 0, 0, 1, 1))
    dm = case.pop("depth_multiplier", 1)
    sh, sw, dh, dw, pt, pl, oh, ow = geometry
    geo = dict(
        stride_h=sh, stride_w=sw, dilation_h=dh, dilation_w=dw, pad_top=pt, pad_left=pl, out_h=oh, out_w=ow
    )
    rq = nm.Requant(**case)
    refs = []
    for fast in (True, False):
        if kind == "depthwise":
            r = nm.depthwise_conv2d(x, f, bias, rq, depth_multiplier=dm, fast=fast, **geo)
        elif kind == "fc":
            r = nm.fully_connected(x, f, bias, rq, fast=fast)
        else:
            r = nm.conv2d(x, f, bias, rq, fast=fast, **geo)
        refs.append(_saturate(r, case["out_dtype"]))
    assert np.array_equal(refs[0], refs[1])
    if kind == "fc":
        rows, k = x.shape
        plan = ma.plan_layer(
            ma.KIND_CONV,
            f.reshape(f.shape[0], 1, 1, k),
            bias,
            rq,
            in_shape=(rows, 1, 1, k),
            in_dtype=x.dtype,
        )
        got = ma.run(plan, x.reshape(rows, 1, 1, k), isa).reshape(refs[0].shape)
    else:
        plan = ma.plan_layer(
            ma.KIND_DEPTHWISE if kind == "depthwise" else ma.KIND_CONV, f, bias, rq, in_shape=x.shape,
            in_dtype=x.dtype, geometry=geometry, depth_multiplier=dm,
        )  # fmt: skip
        got = ma.run(plan, x, isa)
    assert got.dtype == refs[0].dtype and got.shape == refs[0].shape
    differing = int(np.count_nonzero(got.view(np.uint8) != refs[0].view(np.uint8)))
    assert differing == 0, f"{differing} of {got.size} bytes differ (wide operands: {plan.layer.wide})"


def _values(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _random_case(rng: np.random.Generator, kind: str) -> dict:
    """A random layer: shapes, kernel sizes, strides, dilation, padding, int8/uint8 operands, zero
    points (now and then beyond int16 once subtracted: the wide kernels), per-tensor or per-channel
    requantization (with the saturating multiplier INT32_MIN and extreme shifts), one rounding or two
    (TFLITE_SINGLE_ROUNDING, LiteRT's FULLY_CONNECTED), clamps, bias."""
    in_dt, f_dt, out_dt = (DTYPES[int(rng.integers(2))] for _ in range(3))
    in_info, f_info, out_info = np.iinfo(in_dt), np.iinfo(f_dt), np.iinfo(out_dt)
    input_zp = int(rng.integers(in_info.min, in_info.max + 1))
    filter_zp = 0 if rng.random() < 0.6 else int(rng.integers(f_info.min, f_info.max + 1))
    if rng.random() < 0.08:
        input_zp = int(rng.integers(-(2**15), 2**15 + 1))
    if rng.random() < 0.08:
        filter_zp = int(rng.integers(-(2**15), 2**15 + 1))
    output_zp = int(rng.integers(out_info.min, out_info.max + 1))
    if kind == "fc":
        rows, k, cout = int(rng.integers(1, 8)), int(rng.integers(1, 300)), int(rng.integers(1, 70))
        x, f = _values(rng, in_dt, (rows, k)), _values(rng, f_dt, (cout, k))
        geometry, dm = None, 1
    else:
        n = int(rng.integers(1, 3))
        h, w = int(rng.integers(1, 14)), int(rng.integers(1, 14))
        kh, kw = int(rng.choice([1, 2, 3, 5])), int(rng.choice([1, 2, 3, 5]))
        sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        dh, dw = int(rng.choice([1, 1, 2, 3])), int(rng.choice([1, 1, 2]))
        pt, pl = int(rng.integers(0, kh + 1)), int(rng.integers(0, kw + 1))
        oh = max(1, (h + 2 * pt - dh * (kh - 1) - 1) // sh + 1) + int(rng.integers(0, 2))
        ow = max(1, (w + 2 * pl - dw * (kw - 1) - 1) // sw + 1) + int(rng.integers(0, 2))
        geometry = (sh, sw, dh, dw, pt, pl, oh, ow)
        if kind == "depthwise":
            cin = int(rng.choice([1, 3, 8, 15, 16, 17, 32, 33, 48, 64]))
            dm = int(rng.choice([1, 1, 1, 2, 3]))
            cout = cin * dm
            f = _values(rng, f_dt, (1, kh, kw, cout))
        else:
            cin, cout, dm = int(rng.choice([1, 3, 4, 8, 16, 17, 32, 40])), int(rng.integers(1, 70)), 1
            f = _values(rng, f_dt, (cout, kh, kw, cin))
        x = _values(rng, in_dt, (n, h, w, cin))
    per_channel = rng.random() < 0.6
    size = cout if per_channel else 1
    multiplier = rng.integers(2**30, 2**31, size)
    shift = rng.integers(-14, 3, size)
    extreme = rng.random()
    if extreme < 0.05:
        multiplier[...] = nm.INT32_MIN
    elif extreme < 0.1:
        multiplier = rng.integers(-(2**31), 2**31, size)
    if rng.random() < 0.1:
        shift = rng.integers(nm.SHIFT_MIN, nm.SHIFT_MAX + 1, size)
    bias = None if rng.random() < 0.2 else rng.integers(-(2**20), 2**20, cout).astype(np.int32)
    if bias is not None and rng.random() < 0.1:
        bias = rng.integers(-(2**31), 2**31, cout).astype(np.int32)  # accumulators wrap
    lo, hi = sorted(int(v) for v in rng.integers(out_info.min, out_info.max + 1, 2))
    act_min, act_max = [(int(out_info.min), int(out_info.max)), (output_zp, int(out_info.max)), (lo, hi)][
        int(rng.integers(3))
    ]
    case = dict(
        kind=kind, x=x, f=f, bias=bias, input_zp=input_zp, filter_zp=filter_zp,
        multiplier=multiplier if per_channel else int(multiplier[0]),
        shift=shift if per_channel else int(shift[0]), output_zp=output_zp, act_min=act_min,
        act_max=act_max, out_dtype=out_dt, single_rounding=bool(rng.random() < 0.35),
    )  # fmt: skip
    if geometry is not None:
        case["geometry"] = geometry
        if kind == "depthwise":
            case["depth_multiplier"] = dm
    return case


@pytest.mark.parametrize("isa", ISA_PARAMS)
@pytest.mark.parametrize("kind", ["conv", "depthwise", "fc"])
@pytest.mark.parametrize("seed", range(12))
def test_random_layers(kind: str, seed: int, isa: int) -> None:
    rng = np.random.default_rng([seed, ["conv", "depthwise", "fc"].index(kind)])
    for _ in range(12):
        _check(_random_case(rng, kind), isa)


def _conv_case(
    x: np.ndarray,
    f: np.ndarray,
    geometry: tuple[int, ...],
    *,
    kind: str = "conv",
    dm: int = 1,
    **over: object,
) -> dict:
    rng = np.random.default_rng(5)
    cout = f.shape[0] if kind == "conv" else f.shape[-1]
    case = dict(
        kind=kind, x=x, f=f, bias=rng.integers(-5000, 5000, cout).astype(np.int32), geometry=geometry,
        input_zp=-3, filter_zp=0, multiplier=rng.integers(2**30, 2**31, cout),
        shift=rng.integers(-9, -5, cout), output_zp=4, act_min=-128, act_max=127, out_dtype=np.dtype(np.int8),
    )  # fmt: skip
    if kind == "depthwise":
        case["depth_multiplier"] = dm
    case.update(over)
    return case


@pytest.mark.parametrize("isa", ISA_PARAMS)
def test_mobilenet_shaped_layers(isa: int) -> None:
    """The shapes that matter for speed: deep 1x1 GEMMs, 3x3 depthwise over many channels, the stem."""
    rng = np.random.default_rng(1)
    i8 = np.int8
    _check(
        _conv_case(
            _values(rng, i8, (1, 7, 7, 512)), _values(rng, i8, (1024, 1, 1, 512)), (1, 1, 1, 1, 0, 0, 7, 7)
        ),
        isa,
    )
    _check(
        _conv_case(
            _values(rng, i8, (1, 15, 15, 3)), _values(rng, i8, (32, 3, 3, 3)), (2, 2, 1, 1, 0, 0, 7, 7)
        ),
        isa,
    )
    for stride, pad, out in ((1, 1, 14), (2, 0, 7)):
        geometry = (stride, stride, 1, 1, pad, pad, out, out)
        x, f = _values(rng, i8, (1, 14, 14, 144)), _values(rng, i8, (1, 3, 3, 144))
        _check(_conv_case(x, f, geometry, kind="depthwise"), isa)


@pytest.mark.parametrize("isa", ISA_PARAMS)
def test_accumulators_wrap_like_int32(isa: int) -> None:
    """A deep layer with extreme zero points: the sums leave int32 and wrap in both implementations."""
    rng = np.random.default_rng(2)
    x = np.full((1, 3, 3, 4096), 255, dtype=np.uint8)
    f = np.zeros((4, 1, 1, 4096), dtype=np.uint8)
    case = _conv_case(
        x, f, (1, 1, 1, 1, 0, 0, 3, 3), input_zp=-32768, filter_zp=32768, out_dtype=np.dtype(np.uint8)
    )
    case["multiplier"] = rng.integers(2**30, 2**31, 4)
    _check(case, isa)


@pytest.mark.parametrize("isa", ISA_PARAMS)
def test_windows_entirely_in_the_padding(isa: int) -> None:
    rng = np.random.default_rng(3)
    x = _values(rng, np.int8, (1, 2, 2, 16))
    _check(_conv_case(x, _values(rng, np.int8, (8, 3, 3, 16)), (1, 1, 1, 1, 4, 4, 6, 6)), isa)
    _check(
        _conv_case(x, _values(rng, np.int8, (1, 3, 3, 16)), (1, 1, 1, 1, 4, 4, 6, 6), kind="depthwise"), isa
    )


@pytest.mark.parametrize("isa", ISA_PARAMS)
def test_no_input_channels(isa: int) -> None:
    """K = 0: every output is the requantized bias (the blocking divided by the row size)."""
    rng = np.random.default_rng(9)
    x = np.zeros((1, 4, 4, 0), np.int8)
    _check(_conv_case(x, np.zeros((5, 3, 3, 0), np.int8), (1, 1, 1, 1, 1, 1, 4, 4)), isa)
    _check(
        _conv_case(
            x, np.zeros((5, 1, 1, 0), np.int8), (1, 1, 1, 1, 0, 0, 4, 4), input_zp=int(rng.integers(9))
        ),
        isa,
    )


@pytest.mark.parametrize("isa", ISA_PARAMS)
def test_no_output_channels(isa: int) -> None:
    """Planned and run as an empty output (the ISA's tensors have no empty dimension, so only the
    Python API can ask; numpy's path refuses a filter with no rows)."""
    for kind, x, f in (
        (ma.KIND_CONV, np.zeros((1, 4, 4, 3), np.int8), np.zeros((0, 3, 3, 3), np.int8)),
        (ma.KIND_DEPTHWISE, np.zeros((1, 4, 4, 0), np.int8), np.zeros((1, 3, 3, 0), np.int8)),
    ):
        plan = ma.plan_layer(
            kind, f, None, replace(RQ_INT8, shift=-1), in_shape=x.shape, in_dtype=x.dtype,
            geometry=(1, 1, 1, 1, 1, 1, 4, 4),
        )  # fmt: skip
        assert ma.run(plan, x, isa).shape == (1, 4, 4, 0)


def test_plan_refuses_what_numpy_refuses() -> None:
    rng = np.random.default_rng(4)
    x = _values(rng, np.int8, (1, 4, 4, 2))
    f = _values(rng, np.int8, (3, 1, 1, 2))
    good = dict(
        in_shape=x.shape, in_dtype=x.dtype, input_zp=0, filter_zp=0, multiplier=2**30, shift=0, output_zp=0,
        act_min=-128, act_max=127, out_dtype=np.dtype(np.int8), geometry=(1, 1, 1, 1, 0, 0, 4, 4),
    )  # fmt: skip
    rq, rest = split_requant(good)
    ma.plan_layer(ma.KIND_CONV, f, None, rq, **rest)
    for bad in (
        dict(shift=31),
        dict(act_min=5, act_max=4),
        dict(input_zp=40000),
        dict(geometry=(0, 1, 1, 1, 0, 0, 4, 4)),
        dict(multiplier=np.float32(0.5).view(np.int32), float_scale=True),  # the MAC array: no float scales
    ):
        rq, rest = split_requant({**good, **bad})
        with pytest.raises(ValueError):
            ma.plan_layer(ma.KIND_CONV, f, None, rq, **rest)


def _vnni_planned(plan: ma.MacPlan) -> bool:
    mod = ma.library()
    assert mod is not None
    return plan.layer.packed8 != mod.ffi.NULL


@pytest.mark.parametrize("isa", ISA_PARAMS)
@pytest.mark.parametrize("shifts", [(-1, -2, -3, -5), (-1, 0, 1, -4)], ids=["folded", "mixed"])
def test_single_rounding_ties(isa: int, shifts: tuple[int, ...]) -> None:
    """TFLITE_SINGLE_ROUNDING where it differs from two roundings: a multiplier of 2**30 puts every
    accumulator on a multiple of a half, so each shift meets its ties. Every right shift (the VNNI
    kernel's zero point folded into its constants) and a mix with left shifts (not folded)."""
    rows, cout = 128, 36
    x = np.arange(-64, 64, dtype=np.int8).reshape(rows, 1)
    f = np.ones((cout, 1), np.int8)
    bias = np.arange(cout, dtype=np.int32) - cout // 2
    shift = np.resize(np.array(shifts), cout)
    base = dict(
        kind="fc", x=x, f=f, bias=bias, input_zp=0, filter_zp=0, multiplier=np.full(cout, 1 << 30),
        shift=shift, output_zp=-7, act_min=-128, act_max=127, out_dtype=np.dtype(np.int8),
    )  # fmt: skip
    _check({**base, "single_rounding": True}, isa)
    rq, _ = split_requant({k: v for k, v in base.items() if k not in ("kind", "x", "f", "bias")})
    one = nm.fully_connected(x, f, bias, replace(rq, single_rounding=True), fast=False)
    two = nm.fully_connected(x, f, bias, rq, fast=False)
    assert np.count_nonzero(one != two) > rows  # the case tells the roundings apart


@pytest.mark.parametrize("isa", ISA_PARAMS)
@pytest.mark.parametrize("in_dt", DTYPES, ids=str)
@pytest.mark.parametrize("out_dt", DTYPES, ids=str)
def test_byte_operand_edges(isa: int, in_dt: np.dtype, out_dt: np.dtype) -> None:
    """What the VNNI kernels' u8 x s8 operands must get right: -128 weights against the extreme
    inputs, odd channel counts (a lone last panel, masked stores), K not a multiple of 4 or of the
    tile, windows in the padding (read as the zero point's byte), uint8 filters whose zero point
    keeps w - zp in int8 (and one that does not: the int16 kernels), accumulators that wrap."""
    rng = np.random.default_rng(8)
    info = np.iinfo(in_dt)
    for cin, cout, k, filt_dt, filter_zp, vnni in (
        (3, 17, 3, np.int8, 0, True),
        (17, 33, 3, np.int8, 0, True),
        (33, 47, 1, np.int8, 0, True),
        (5, 16, 2, np.uint8, 128, True),
        (5, 16, 2, np.uint8, 127, False),  # 255 - 127 = 128 is not an int8
    ):
        x = _values(rng, in_dt, (1, 9, 11, cin))
        x[0, :2] = info.min  # rows of extremes; the rows between stay random
        x[0, -2:] = info.max
        f = _values(rng, np.dtype(filt_dt), (cout, k, k, cin))
        f_info = np.iinfo(filt_dt)
        f[: cout // 2] = max(filter_zp - 128, f_info.min)  # w - zp = -128 where the dtype allows
        f[-1] = filter_zp + 127 if vnni else f_info.max
        for input_zp in (info.min, info.max, int(rng.integers(info.min, info.max + 1))):
            case = _conv_case(
                x, f, (1, 1, 1, 1, k // 2, k // 2, 9, 11), input_zp=input_zp, filter_zp=filter_zp,
                output_zp=int(np.iinfo(out_dt).min) + 3, act_min=int(np.iinfo(out_dt).min),
                act_max=int(np.iinfo(out_dt).max), out_dtype=out_dt, shift=rng.integers(-20, -12, cout),
            )  # fmt: skip
            if input_zp == info.max:
                case["bias"] = np.full(cout, 2**31 - 1, np.int32)  # the sums wrap past INT32_MAX
            plan = ma.plan_layer(
                ma.KIND_CONV, f, case["bias"], split_requant(case)[0], in_shape=x.shape, in_dtype=x.dtype,
                geometry=case["geometry"],
            )  # fmt: skip
            assert _vnni_planned(plan) == (vnni and ma.ISA_AVX512VNNI in ISAS)
            _check(case, isa)
    # depthwise: 64-channel blocks, a 32-channel half block and a 16-channel tail, channels past
    # the last 16 (the generic loop), 4, 9 and 25 taps (quads padded with the zero-point row),
    # windows in the padding
    for channels, k in ((16, 3), (32, 3), (80, 3), (81, 5), (64, 2), (112, 3), (97, 2)):
        x = _values(rng, in_dt, (1, 7, 9, channels))
        x[0, :2] = info.min
        x[0, -2:] = info.max
        f = _values(rng, np.dtype(np.int8), (1, k, k, channels))
        f[..., ::2] = -128
        for input_zp in (info.min, info.max):
            case = _conv_case(
                x, f, (1, 1, 1, 1, k // 2, k // 2, 7, 9), kind="depthwise", input_zp=input_zp,
                output_zp=int(np.iinfo(out_dt).max) - 5, act_min=int(np.iinfo(out_dt).min),
                act_max=int(np.iinfo(out_dt).max), out_dtype=out_dt, shift=rng.integers(-16, -9, channels),
            )  # fmt: skip
            plan = ma.plan_layer(
                ma.KIND_DEPTHWISE, f, case["bias"], split_requant(case)[0], in_shape=x.shape,
                in_dtype=x.dtype, geometry=case["geometry"],
            )  # fmt: skip
            assert _vnni_planned(plan) == (ma.ISA_AVX512VNNI in ISAS)
            _check(case, isa)


@pytest.mark.parametrize("isa", ISA_PARAMS)
@pytest.mark.parametrize("in_dt", DTYPES, ids=str)
def test_pointwise_reads_the_input_rows(isa: int, in_dt: np.dtype) -> None:
    """1x1, stride 1, no padding: the VNNI GEMM reads the input rows themselves (uint8 in place,
    int8 flipped per block). Channel counts that are not a multiple of 4 (a row's last quad runs
    into the next row), a last tile of 1 to 7 rows (copied, not read past the input's end), two
    row blocks, an output larger than the input (padding: the im2col path), FULLY_CONNECTED."""
    rng = np.random.default_rng(12)
    info = np.iinfo(in_dt)
    for cin, h, w, cout in ((1, 3, 3, 5), (2, 5, 7, 16), (3, 1, 1, 17), (5, 9, 11, 33), (16, 4, 4, 40),
                            (17, 3, 5, 24), (64, 7, 7, 96), (203, 40, 40, 20)):  # fmt: skip
        x = _values(rng, in_dt, (1, h, w, cin))
        f = _values(rng, np.dtype(np.int8), (cout, 1, 1, cin))
        for input_zp in (info.min, info.max):
            _check(_conv_case(x, f, (1, 1, 1, 1, 0, 0, h, w), input_zp=input_zp), isa)
        _check(_conv_case(x, f, (1, 1, 1, 1, 0, 0, h + 1, w)), isa)
        rows = int(rng.integers(1, 30))
        fc = dict(kind="fc", x=_values(rng, in_dt, (rows, cin)), f=f.reshape(cout, cin))
        _check({**_conv_case(x, f, (1, 1, 1, 1, 0, 0, h, w)), **fc}, isa)


@pytest.mark.parametrize("isa", ISA_PARAMS)
@pytest.mark.parametrize("in_dt", DTYPES, ids=str)
def test_gemm_rows_after_the_whole_tiles(isa: int, in_dt: np.dtype) -> None:
    """The VNNI GEMM's last rows % 8 rows have a tile of their own that takes up to four panels at
    once: 1 to 7 rows and 8 k + 1..7, K not a multiple of 4, channel counts that leave 1, 2 or 3
    panels after the groups of four and a masked last panel, the classifier's single row of 1280,
    a convolution with few output pixels (im2col rows), INT32_MIN multipliers (the scalar
    requantization)."""
    rng = np.random.default_rng(13)
    info = np.iinfo(in_dt)
    for rows, k, cout in ((1, 1280, 1000), (1, 1283, 111), (2, 45, 40), (3, 7, 77), (4, 130, 16), (5, 33, 33),
                          (6, 1, 64), (7, 250, 97), (9, 13, 50), (15, 6, 20), (23, 5, 113)):  # fmt: skip
        x, f = _values(rng, in_dt, (rows, k)), _values(rng, np.dtype(np.int8), (cout, k))
        f[0] = -128
        for input_zp in (info.min, info.max):
            base = _conv_case(x.reshape(rows, 1, 1, k), f.reshape(cout, 1, 1, k), (1, 1, 1, 1, 0, 0, 1, 1))
            _check({**base, "kind": "fc", "x": x, "f": f, "input_zp": input_zp}, isa)
        saturating = np.full(cout, nm.INT32_MIN, np.int64)
        _check({**base, "kind": "fc", "x": x, "f": f, "multiplier": saturating}, isa)
    for h, w, stride, cout in ((2, 3, 1, 70), (3, 3, 2, 33), (5, 4, 2, 48)):
        x, f = _values(rng, in_dt, (1, h, w, 5)), _values(rng, np.dtype(np.int8), (cout, 3, 3, 5))
        geometry = (stride, stride, 1, 1, 1, 1, (h - 1) // stride + 1, (w - 1) // stride + 1)
        _check(_conv_case(x, f, geometry, input_zp=int(info.min) + 1), isa)


@pytest.mark.parametrize("isa", ISA_PARAMS)
@pytest.mark.parametrize("in_dt", DTYPES, ids=str)
def test_depthwise_row_interiors(isa: int, in_dt: np.dtype) -> None:
    """The depthwise kernels take the output columns whose windows lie inside the input as one
    run per row (taps stepped by stride * channels), the columns at the edges one by one: padding
    on both sides and on one, strides 1-3, dilation, two images, windows wider than the input (no
    interior), output columns past the input, channel counts with a 16/32-channel tail and with
    channels past the last 16."""
    rng = np.random.default_rng(14)
    info = np.iinfo(in_dt)
    for h, w, c, k, stride, dil, pad, out_w in (
        (6, 13, 32, 3, 1, 1, 1, 13),
        (7, 14, 48, 3, 2, 1, 1, 7),
        (5, 15, 80, 3, 3, 1, 0, 5),
        (6, 11, 17, 3, 1, 2, 2, 11),
        (5, 12, 64, 5, 2, 2, 3, 8),
        (4, 3, 32, 5, 1, 1, 2, 3),
        (4, 9, 112, 2, 1, 1, 0, 10),
    ):
        x = _values(rng, in_dt, (2, h, w, c))
        f = _values(rng, np.dtype(np.int8), (1, k, k, c))
        out_h = (h + 2 * pad - dil * (k - 1) - 1) // stride + 1
        geometry = (stride, stride, dil, dil, pad, pad, out_h, out_w)
        for input_zp in (int(info.min), int(info.max)):
            _check(_conv_case(x, f, geometry, kind="depthwise", input_zp=input_zp), isa)


@pytest.mark.parametrize("isa", ISA_PARAMS)
@pytest.mark.parametrize("shifts", ["right 1-21", "any"])
@pytest.mark.parametrize("out_dt", DTYPES, ids=str)
def test_requantization_at_rounding_boundaries(isa: int, shifts: str, out_dt: np.dtype) -> None:
    """Per channel, 256 consecutive accumulators around one whose requantized value is exactly a
    half (SRDHM's, RoundingDivideByPOT's or both), for negative and positive results: multipliers
    from 1 to INT32_MAX and negative ones, right shifts 0-31 and left shifts (the VNNI kernels fold
    the output zero point into their rounding constant when every right shift is 1-21, a case of
    its own), and accumulators near +-2**31 (where the centre does not fit, and wrapping past it)."""
    rng = np.random.default_rng([11, len(shifts)])
    cout = 96
    if shifts == "any":
        shift = rng.integers(nm.SHIFT_MIN, nm.SHIFT_MAX + 1, cout)
        shift[:8] = (0, -31, 30, -1, 1, -22, 0, -31)
    else:
        shift = -rng.integers(1, 22, cout)
    special = [2**30, 2**30 + 1, 2**31 - 1, 1, 3, 12345, -(2**30), -(2**31 - 1)]
    mult = rng.integers(2**30, 2**31, cout)
    mult[: len(special)] = special
    mult[len(special) : 2 * len(special)] = special
    mult[-16:] = -rng.integers(1, 2**31, 16)
    bias = np.zeros(cout, np.int32)
    for c in range(cout):
        left, e, m = max(int(shift[c]), 0), max(-int(shift[c]), 0), int(mult[c])
        r = int(rng.integers(-90, 91))
        centre = ((2 * r + 1) << (30 + e)) // m >> left  # (x << left) * m / 2**(31 + e) = r + 1/2
        bias[c] = min(max(centre, -(2**31)), 2**31 - 1)
    x = np.arange(-128, 128, dtype=np.int8).reshape(256, 1)
    info = np.iinfo(out_dt)
    case = dict(
        kind="fc", x=x, f=np.ones((cout, 1), np.int8), bias=bias, input_zp=0, filter_zp=0, multiplier=mult,
        shift=shift, output_zp=int(info.min + info.max + 1) // 2 + 3, act_min=int(info.min),
        act_max=int(info.max), out_dtype=out_dt,
    )  # fmt: skip
    _check(case, isa)


# --- whole networks through the shim, once per implementation ---------------------------------------------
CORPUS = sorted((ROOT / "tests" / "corpus" / "models").glob("*.tflite"))


def _networks() -> list:
    import modelgen as g

    params = [
        pytest.param(lambda: g.mobilenet_v1_model(64, alpha=0.25), id="mobilenet_v1-64"),
        pytest.param(lambda: g.mobilenet_v2_model(64, alpha=0.35), id="mobilenet_v2-64"),
    ]
    params += [pytest.param(lambda p=p: p.read_bytes(), id=f"corpus-{p.stem}") for p in CORPUS]
    return params


def _run_on_shim(model: bytes) -> list[np.ndarray]:
    import modelgen as g
    from libaccel import Device
    from libaccel.compiler import PartitionRunner, check_support, compile_partition, graph_from_tflite

    graph = graph_from_tflite(model)
    unsupported = [n.op for n in graph.nodes if not check_support(graph, n).ok]
    if unsupported:
        pytest.skip(f"nodes the NPU does not run: {sorted(set(unsupported))}")
    with Device.open("shim") as dev:
        compiled = compile_partition(graph, [n.index for n in graph.nodes], dev.params.isa_version)
        inputs = g.random_inputs(model, seed=3)
        with PartitionRunner(dev, compiled) as runner:
            out = runner.run(dict(zip(graph.inputs, inputs, strict=True)))
    return [np.asarray(out[i]).copy() for i in graph.outputs]


@pytest.mark.parametrize("model", _networks())
def test_networks_identical_bytes(model, monkeypatch: pytest.MonkeyPatch) -> None:
    data = model()
    monkeypatch.setenv(ma.ENV, "numpy")
    want = _run_on_shim(data)
    for isa in ISAS:
        monkeypatch.setenv(ma.ENV, ma.ISA_NAMES[isa])
        got = _run_on_shim(data)
        for a, b in zip(got, want, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), (
                f"{ma.ISA_NAMES[isa]} differs from numpy"
            )


def test_plan_matches_only_its_own_parameters() -> None:
    rng = np.random.default_rng(6)
    f = _values(rng, np.int8, (4, 1, 1, 8))
    bias = rng.integers(-100, 100, 4).astype(np.int32)
    mult, shift = rng.integers(2**30, 2**31, 4), rng.integers(-8, 0, 4)
    plan = ma.plan_layer(
        ma.KIND_CONV, f, bias, replace(RQ_INT8, multiplier=mult, shift=shift), in_shape=(1, 2, 2, 8),
        in_dtype=np.dtype(np.int8), geometry=(1, 1, 1, 1, 0, 0, 2, 2),
    )  # fmt: skip
    assert plan.matches(f.copy(), bias.copy(), mult.copy(), shift.copy())
    g = f.copy()
    g[3, 0, 0, 7] ^= 1
    assert not plan.matches(g, bias, mult, shift)
    assert not plan.matches(f.reshape(4, 8), bias, mult, shift)
    assert not plan.matches(f, None, mult, shift)
    assert not plan.matches(f, bias + 1, mult, shift)
    assert not plan.matches(f, bias, mult, shift - 1)


@pytest.mark.parametrize("isa", ISA_PARAMS)
def test_plan_owns_its_parameters(isa: int) -> None:
    """A plan outlives the job whose memory its parameters came from: overwriting that memory (a
    closed file's BO reused by another) must not change what the plan computes."""
    rng = np.random.default_rng(7)
    f = _values(rng, np.int8, (4, 1, 1, 8))
    bias = rng.integers(-100, 100, 4).astype(np.int32)
    mult = rng.integers(2**30, 2**31, 4).astype(np.int32)
    shift = rng.integers(-8, 0, 4).astype(np.int32)
    x = _values(rng, np.int8, (1, 2, 2, 8))
    plan = ma.plan_layer(
        ma.KIND_CONV, f, bias, replace(RQ_INT8, multiplier=mult, shift=shift), in_shape=(1, 2, 2, 8),
        in_dtype=np.dtype(np.int8), geometry=(1, 1, 1, 1, 0, 0, 2, 2),
    )  # fmt: skip
    before = ma.run(plan, x, isa)
    for source in (f, bias, mult, shift):
        source[...] = rng.integers(-100, 100, source.shape)
    assert np.array_equal(ma.run(plan, x, isa), before)


@pytest.mark.parametrize("isa", ISA_PARAMS)
def test_bound_run_computes_into_memory_only_while_its_parameters_match(isa: int) -> None:
    rng = np.random.default_rng(8)
    f = _values(rng, np.int8, (4, 1, 1, 8))
    bias = rng.integers(-100, 100, 4).astype(np.int32)
    x = _values(rng, np.int8, (1, 2, 2, 8))
    plan = ma.plan_layer(
        ma.KIND_CONV,
        f,
        bias,
        RQ_INT8,
        in_shape=(1, 2, 2, 8),
        in_dtype=np.dtype(np.int8),
        geometry=(1, 1, 1, 1, 0, 0, 2, 2),
    )
    memory = bytearray(64)  # "device memory": the output, then the filter and bias as stored
    memory[16:48] = f.tobytes()
    memory[48:64] = bias.tobytes()
    view = memoryview(memory)
    copies = [(view[16:48], f.reshape(-1).view(np.uint8).copy()), (view[48:64], bias.view(np.uint8).copy())]
    bound = ma.BoundRun(plan, memoryview(x.tobytes()), view[0:16], copies, isa)
    assert bound.run()
    assert bytes(memory[0:16]) == ma.run(plan, x, isa).tobytes()
    memory[0:16] = bytes(16)
    memory[50] ^= 1  # the bias changed in memory: nothing computed, the caller rebuilds
    assert not bound.run()
    assert bytes(memory[0:16]) == bytes(16)
    memory[50] ^= 1
    assert bound.run() and bytes(memory[0:16]) != bytes(16)
    with pytest.raises(ValueError, match="output bytes"):
        ma.BoundRun(plan, memoryview(x.tobytes()), view[0:15], copies, isa)
    with pytest.raises(ValueError, match="check 1"):
        ma.BoundRun(plan, memoryview(x.tobytes()), view[0:16], [copies[0], (view[48:63], copies[1][1])], isa)


VNNI_ONLY = pytest.mark.skipif(ma.ISA_AVX512VNNI not in ISAS, reason="the VNNI packing of GEMM filters")
PACKED_FILTERS = [  # (filter dtype, zero point, cout, kernel size, cin): partial panels, K tails
    (np.int8, 0, 16, 1, 64),
    (np.int8, 0, 21, 3, 5),
    (np.uint8, 128, 33, 1, 70),
    (np.uint8, 100, 7, 3, 150),  # only bytes 0..227 pack: compared, never repacked
]


def _packed_layer(dtype: type, filter_zp: int, cout: int, k: int, cin: int, input_zp: int = 7) -> tuple:
    """A CONV2D whose int8 or uint8 filter packs for VNNI, its uint8 input (zero point ``input_zp``:
    with 0 the kernels' bias needs no weight sums), and its plan."""
    rng = np.random.default_rng(cout * cin)
    info = np.iinfo(dtype)
    f = rng.integers(max(info.min, filter_zp - 128), min(info.max, filter_zp + 127) + 1, (cout, k, k, cin))
    f = f.astype(dtype)
    x = rng.integers(0, 256, (1, 4, 4, cin)).astype(np.uint8)
    rq = replace(RQ_INT8, input_zp=input_zp, filter_zp=filter_zp, shift=-12, output_zp=128, act_max=255)
    rq = replace(rq, out_dtype=np.dtype(np.uint8))
    pad = (k - 1) // 2
    geometry = (1, 1, 1, 1, pad, pad, 4, 4)
    plan = ma.plan_layer(ma.KIND_CONV, f, None, rq, in_shape=x.shape, in_dtype=x.dtype, geometry=geometry)
    return f, x, rq, geometry, plan


@VNNI_ONLY
@pytest.mark.parametrize(("dtype", "filter_zp", "cout", "k", "cin"), PACKED_FILTERS)
def test_packed_filter_compare_finds_every_changed_byte(
    dtype: type, filter_zp: int, cout: int, k: int, cin: int
) -> None:
    f, _, _, _, plan = _packed_layer(dtype, filter_zp, cout, k, cin)
    assert plan.packed_filter and plan.filter_zp == filter_zp
    assert plan.any_filter_packs == (filter_zp != 100)
    mod = ma.library()
    memory = bytearray(f.tobytes())
    at = mod.ffi.from_buffer(memory)
    assert mod.lib.mac_filter_equals_packed(plan.layer, at, filter_zp) == 1
    for i in range(len(memory)):  # every byte: every row, the K tail, the last panel's rows
        memory[i] ^= 1 << (i % 8)
        assert mod.lib.mac_filter_equals_packed(plan.layer, at, filter_zp) == 0, i
        memory[i] ^= 1 << (i % 8)
    assert mod.lib.mac_filter_equals_packed(plan.layer, at, filter_zp) == 1


@VNNI_ONLY
@pytest.mark.parametrize("input_zp", [7, 0])
@pytest.mark.parametrize(("dtype", "filter_zp", "cout", "k", "cin"), PACKED_FILTERS)
def test_bound_packed_filter_is_repacked_each_run_or_compared(
    dtype: type, filter_zp: int, cout: int, k: int, cin: int, input_zp: int
) -> None:
    f, x, rq, geometry, plan = _packed_layer(dtype, filter_zp, cout, k, cin, input_zp)
    isa = ma.ISA_AVX512VNNI
    memory = bytearray(f.tobytes())
    out = bytearray(16 * cout)
    bound = ma.BoundRun(plan, memoryview(x.tobytes()), memoryview(out), [(memoryview(memory), None)], isa)
    assert bound.run() and bytes(out) == ma.run(plan, x, isa).tobytes()
    rng = np.random.default_rng(1)
    for _ in range(3):  # other filters in memory: computed with them, or the run declines
        g = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, f.shape).astype(dtype)
        if not plan.any_filter_packs:
            g = np.clip(g, 0, 227).astype(dtype)
        memory[:] = g.tobytes()
        out[:] = bytes(len(out))
        if plan.any_filter_packs:
            other = ma.plan_layer(
                ma.KIND_CONV, g, None, rq, in_shape=x.shape, in_dtype=x.dtype, geometry=geometry
            )
            assert bound.run() and bytes(out) == ma.run(other, x, isa).tobytes()
            assert bytes(out) == ma.run(other, x, ma.ISA_GENERIC).tobytes()
        else:
            assert not bound.run() and bytes(out) == bytes(len(out))
    with pytest.raises(ValueError, match="packed GEMM filter"):
        ma.BoundRun(plan, memoryview(x.tobytes()), memoryview(out), [(memoryview(memory)[1:], None)], isa)


SINGLE_ROWS = [  # (input dtype, filter dtype, filter zp, K, cout): K tails, partial 8- and 16-channel blocks
    (np.int8, np.int8, 0, 64, 16),
    (np.int8, np.int8, 0, 1280, 1000),
    (np.int8, np.int8, 0, 5, 3),
    (np.uint8, np.uint8, 128, 70, 33),
    (np.int8, np.uint8, 128, 130, 25),
]


@VNNI_ONLY
@pytest.mark.parametrize("input_zp", [-128, 7])
@pytest.mark.parametrize(("in_dt", "f_dt", "filter_zp", "k", "cout"), SINGLE_ROWS)
def test_bound_single_row_reads_the_filter_as_it_lies(
    in_dt: type, f_dt: type, filter_zp: int, k: int, cout: int, input_zp: int
) -> None:
    """A one-row FULLY_CONNECTED whose filter is repacked each run takes each channel's dot product
    from the filter's rows in memory: the bytes of numpy's reference, for every filter put there."""
    rng = np.random.default_rng(k * cout)
    zp = input_zp if in_dt is np.int8 else input_zp + 128
    rq = replace(RQ_INT8, input_zp=zp, filter_zp=filter_zp, shift=-9, output_zp=-5)
    x = _values(rng, np.dtype(in_dt), (1, k))
    bias = rng.integers(-(1 << 20), 1 << 20, cout).astype(np.int32)
    f = _values(rng, np.dtype(f_dt), (cout, k))
    plan = ma.plan_layer(
        ma.KIND_CONV, f.reshape(cout, 1, 1, k), bias, rq, in_shape=(1, 1, 1, k), in_dtype=x.dtype
    )
    assert plan.any_filter_packs
    memory = bytearray(f.tobytes())
    out = bytearray(cout)
    bound = ma.BoundRun(
        plan, memoryview(x.tobytes()), memoryview(out), [(memoryview(memory), None)], ma.ISA_AVX512VNNI
    )
    for _ in range(3):  # the planned filter, then others written to memory
        g = np.frombuffer(bytes(memory), dtype=f_dt).reshape(cout, k)
        want = _saturate(nm.fully_connected(x, g, bias, rq), np.dtype(np.int8))
        assert bound.run() and bytes(out) == want.tobytes()
        memory[:] = _values(rng, np.dtype(f_dt), (cout, k)).tobytes()


def test_bound_lookup_matches_numerics_tables() -> None:
    rng = np.random.default_rng(9)
    a = rng.integers(-128, 128, 300, dtype=np.int8)
    b = rng.integers(0, 256, 300, dtype=np.uint8)
    table32 = rng.integers(-(2**31), 2**31, 256, dtype=np.int64).astype(np.int32)
    out32 = np.zeros(300, np.int32)
    ma.BoundLookup(memoryview(a), None, table32, memoryview(out32), 4, 0x80).run()
    assert np.array_equal(out32, nm.lut(a, table32, signed_input=True))
    table2 = rng.integers(-128, 128, 65536, dtype=np.int8)
    out8 = np.zeros(300, np.int8)
    ma.BoundLookup(memoryview(a), memoryview(b), table2, memoryview(out8), 1, 0x80, 0).run()
    assert np.array_equal(out8, nm.lut2(a, b, table2))
    inplace = a.copy()  # the output may be an input's own bytes
    ma.BoundLookup(memoryview(inplace), memoryview(b), table2, memoryview(inplace), 1, 0x80, 0).run()
    assert np.array_equal(inplace, nm.lut2(a, b, table2))
    with pytest.raises(ValueError, match="output bytes"):
        ma.BoundLookup(memoryview(a), None, table32, memoryview(out8), 4)
    with pytest.raises(ValueError, match="the table has 1024 bytes"):
        ma.BoundLookup(memoryview(a), memoryview(b), table32, memoryview(out32), 4)


@pytest.mark.parametrize("signed", [True, False])
def test_byte_lut_of_every_length_matches_numerics(signed: bool) -> None:
    """A byte input through a 256-entry byte table (the vectorised lookup where the CPU has AVX-512
    VBMI): lengths around the 64-byte vector (masked tails), in place and not."""
    rng = np.random.default_rng(16)
    dtype = np.int8 if signed else np.uint8
    table = rng.integers(-128, 128, 256, dtype=np.int8)
    for n in [*range(0, 130), 191, 192, 193, 1000, 4099]:
        a = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, n, dtype=np.int64).astype(dtype)
        want = nm.lut(a, table, signed_input=signed)
        out = np.full(n + 64, 7, np.int8)  # bytes past n stay 7
        ma.BoundLookup(memoryview(a), None, table, memoryview(out[:n]), 1, 0x80 if signed else 0).run()
        assert np.array_equal(out[:n], want) and np.all(out[n:] == 7), n
        inplace = a.copy()
        ma.BoundLookup(memoryview(inplace), None, table, memoryview(inplace), 1, 0x80 if signed else 0).run()
        assert np.array_equal(inplace.view(np.int8), want), n


def test_strided_bound_lookup_matches_numerics_tables() -> None:
    """mac_lookup_strided: a broadcast and a transposed input against numpy's lookups of the same
    views, 1-, 2- and 4-byte outputs; strides reaching past an input's bytes are refused."""
    rng = np.random.default_rng(11)
    shape = (2, 3, 4, 5)
    a = rng.integers(-128, 128, 120, dtype=np.int8)  # [2, 5, 4, 3] in memory, read as [2, 3, 4, 5]
    b = rng.integers(0, 256, 5, dtype=np.uint8)  # one row of 5, broadcast
    a_view = np.lib.stride_tricks.as_strided(a, shape, (60, 1, 3, 12))
    b_view = np.lib.stride_tricks.as_strided(b, shape, (0, 0, 0, 1))
    strided = (shape, (60, 1, 3, 12), (0, 0, 0, 1))
    table2 = rng.integers(-128, 128, 65536, dtype=np.int8)
    out8 = np.zeros(120, np.int8)
    ma.BoundLookup(memoryview(a), memoryview(b), table2, memoryview(out8), 1, 0x80, 0, strided=strided).run()
    assert np.array_equal(out8.reshape(shape), nm.lut2(a_view, b_view, table2))
    for dtype, esize in ((np.int16, 2), (np.int32, 4)):
        table = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, 256, dtype=np.int64).astype(dtype)
        out = np.zeros(120, dtype)
        ma.BoundLookup(memoryview(a), None, table, memoryview(out), esize, 0x80, strided=strided).run()
        assert np.array_equal(out.reshape(shape), nm.lut(a_view, table, signed_input=True))
    with pytest.raises(ValueError, match="strides"):
        ma.BoundLookup(memoryview(a[:119]), memoryview(b), table2, memoryview(out8), 1, strided=strided)
    with pytest.raises(ValueError, match="output bytes"):
        ma.BoundLookup(memoryview(a), memoryview(b), table2, memoryview(out8[:119]), 1, strided=strided)


@pytest.mark.parametrize("esize", [1, 2, 4])
def test_bound_copy_writes_the_elements_and_not_the_gaps(esize: int) -> None:
    rng = np.random.default_rng(esize)
    dtype = {1: np.int8, 2: np.int16, 4: np.int32}[esize]
    shape = (2, 3, 4, 5)
    src = rng.integers(-100, 99, 120).astype(dtype)  # [2, 5, 4, 3] in memory, read as [2, 3, 4, 5]; no 99
    src_strides = tuple(esize * s for s in (60, 1, 3, 12))
    dst = np.full(2 * 3 * 4 * 7, 99, dtype)  # 7 channels, the copy fills channels 1..5
    dst_strides = tuple(esize * s for s in (84, 28, 7, 1))
    want = dst.copy()
    np.lib.stride_tricks.as_strided(want[1:], shape, dst_strides)[...] = np.lib.stride_tricks.as_strided(
        src, shape, src_strides
    )
    ma.BoundCopy(memoryview(src), memoryview(dst[1:]), shape, src_strides, dst_strides, esize).run()
    assert np.array_equal(dst, want) and np.count_nonzero(dst == 99) == dst.size - 120
    with pytest.raises(ValueError, match="source strides"):
        ma.BoundCopy(memoryview(src[:-1]), memoryview(dst[1:]), shape, src_strides, dst_strides, esize)
    with pytest.raises(ValueError, match="destination strides"):
        ma.BoundCopy(memoryview(src), memoryview(dst[1:166]), shape, src_strides, dst_strides, esize)


@pytest.mark.parametrize("b_layout", ["a byte per row", "one row", "its own rows"])
@pytest.mark.parametrize("width", [1, 15, 16, 17, 21, 40])
def test_byte_lut2_by_rows_matches_numerics(b_layout: str, width: int) -> None:
    """Two byte inputs through a 65536-entry table, the first read row by row (contiguous rows at a
    row stride) and the second one byte per row, one row for every row, or its own rows: the
    row-wise lookup (gathers of 16 where the CPU has AVX-512) at widths around the vector."""
    rng = np.random.default_rng(width)
    shape = (2, 3, 4, width)
    a = rng.integers(-128, 128, 2 * 3 * 4 * (width + 3), dtype=np.int8)  # rows of width + 3
    a_strides = (12 * (width + 3), 4 * (width + 3), width + 3, 1)
    b_strides = {"a byte per row": (0, 0, 1, 0), "one row": (0, 0, 0, 1)}.get(
        b_layout, (12 * width, 4 * width, width, 1)
    )
    b = rng.integers(0, 256, 2 * 3 * 4 * width, dtype=np.uint8)
    table = rng.integers(-128, 128, 65536, dtype=np.int8)
    out = np.zeros(int(np.prod(shape)), np.int8)
    strided = (shape, a_strides, b_strides)
    ma.BoundLookup(memoryview(a), memoryview(b), table, memoryview(out), 1, 0x80, 0, strided=strided).run()
    a_view = np.lib.stride_tricks.as_strided(a, shape, a_strides)
    b_view = np.lib.stride_tricks.as_strided(b, shape, b_strides)
    assert np.array_equal(out.reshape(shape), nm.lut2(a_view, b_view, table))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("average", [False, True])
def test_bound_pool_matches_numerics(average: bool, isa: int) -> None:
    """The pooling unit against numerics' max_pool / avg_pool: padding, strides, partial windows,
    both dtypes, clamps inside and outside the dtype (rounding of negative averages included),
    channels within one vector of bytes and past it, every C variant this CPU runs."""
    rng = np.random.default_rng(10)
    fn = nm.avg_pool if average else nm.max_pool
    compared = 0
    for trial in range(60):
        dtype = np.dtype(np.int8) if trial % 2 else np.dtype(np.uint8)
        lo_d, hi_d = _RANGE[dtype]
        channels = int(rng.integers(1, 20)) if trial % 4 else int(rng.choice([64, 65, 130]))
        n, h, w, c = 1 + trial % 2, int(rng.integers(1, 9)), int(rng.integers(1, 9)), channels
        fh, fw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        sh, sw = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        pt, pl = int(rng.integers(0, fh)), int(rng.integers(0, fw))
        oh, ow = (
            max(1, (h + pt - 1) // sh + 1 - (fh > h + pt)),
            max(1, (w + pl - 1) // sw + 1 - (fw > w + pl)),
        )
        act = sorted(rng.integers(lo_d - 20, hi_d + 20, 2)) if trial % 3 else (lo_d, hi_d)
        x = rng.integers(lo_d, hi_d + 1, (n, h, w, c)).astype(dtype)
        geometry = dict(filter_h=fh, filter_w=fw, stride_h=sh, stride_w=sw, pad_top=pt, pad_left=pl)
        try:
            want = fn(x, **geometry, out_h=oh, out_w=ow, act_min=int(act[0]), act_max=int(act[1]))
        except ValueError:  # a window with no input position: the unit refuses it too
            out = np.zeros((n, oh, ow, c), dtype)
            pool = ma.BoundPool(
                memoryview(x.tobytes()), memoryview(out), x.shape, dtype, (fh, fw, sh, sw, pt, pl, oh, ow),
                int(act[0]), int(act[1]), average, isa=isa,
            )  # fmt: skip
            with pytest.raises(ValueError, match="covers no input"):
                pool.run()
            continue
        out = np.zeros((n, oh, ow, c), dtype)
        ma.BoundPool(
            memoryview(x.tobytes()), memoryview(out), x.shape, dtype, (fh, fw, sh, sw, pt, pl, oh, ow),
            int(act[0]), int(act[1]), average, isa=isa,
        ).run()  # fmt: skip
        assert np.array_equal(out, np.clip(want, lo_d, hi_d).astype(dtype)), (trial, geometry)
        compared += 1
    assert compared >= 45
    with pytest.raises(ValueError, match="output bytes"):
        ma.BoundPool(memoryview(bytes(16)), memoryview(bytearray(3)), (1, 4, 4, 1), np.dtype(np.int8),
                     (2, 2, 2, 2, 0, 0, 2, 2), -128, 127, average)  # fmt: skip


def test_bound_units_hold_no_buffer_export_on_memory_views() -> None:
    """A view of system memory a bound unit points into stays releasable (no buffer export held):
    garbage collection clears such views, and an export there was a crash at teardown."""
    memory = memoryview(bytearray(1 << 16))
    f = np.ones((4, 1, 1, 8), np.int8)
    plan = ma.plan_layer(
        ma.KIND_CONV,
        f,
        None,
        RQ_INT8,
        in_shape=(1, 2, 2, 8),
        in_dtype=np.dtype(np.int8),
        geometry=(1, 1, 1, 1, 0, 0, 2, 2),
    )
    views = [memory[0:32], memory[64:80], memory[128:160]]
    units = [
        ma.BoundRun(plan, views[0], views[1], [(views[2], f.reshape(-1).view(np.uint8).copy())], ISAS[-1]),
        ma.BoundLookup(memory[0:16], memory[16:32], np.zeros(65536, np.int8), memory[256:272], 1),
        ma.BoundPool(memory[0:16], memory[512:516], (1, 4, 4, 1), np.dtype(np.int8), (2, 2, 2, 2, 0, 0, 2, 2),
                     -128, 127, True),
        ma.BoundSoftmax(memory[1024:1036], memory[2048:2060], 12, np.dtype(np.int8), np.dtype(np.int8),
                        input_multiplier=1 << 30, input_left_shift=20, diff_min=-3000),
    ]  # fmt: skip
    for view in views:
        view.release()  # BufferError if a unit held an export on it
    assert all(unit.run() for unit in units[1:])
    del units
    memory.release()


def test_a_failed_build_means_numpy_with_one_warning(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    from device_model.mac_array import build

    def no_compiler(*args: object) -> None:
        raise build.cffi.VerificationError("CompileError: command 'gcc' failed: No such file or directory")

    monkeypatch.setattr(ma, "_module", None)
    monkeypatch.setattr(ma, "_failed", None)
    monkeypatch.setattr(ma, "_warned", set())
    monkeypatch.setattr(ma, "_selected", {})
    monkeypatch.setattr(build, "ensure_built", no_compiler)
    monkeypatch.setenv(ma.ENV, "auto")
    with caplog.at_level("WARNING", logger=ma.__name__):
        assert ma.selected_isa() is None
        assert ma.selected_isa() is None
        assert ma.cpu_isas() == []
    warnings = [r for r in caplog.records if "could not be built" in r.getMessage()]
    assert len(warnings) == 1 and "numpy" in warnings[0].getMessage()


def test_numpy_is_chosen_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ma.ENV, "numpy")
    assert ma.selected_isa() is None
    monkeypatch.setenv(ma.ENV, "generic")
    assert ma.selected_isa() == ma.ISA_GENERIC
    for isa, name in ma.ISA_NAMES.items():  # a cap: the named variant, or the best one below it
        monkeypatch.setenv(ma.ENV, name)
        assert ma.selected_isa() == min(isa, max(ISAS))
    monkeypatch.setenv(ma.ENV, "auto")
    assert ma.selected_isa() == max(ISAS)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1 << 30, (1 << 31) - 1),
    st.integers(0, 31),
    st.integers(-(2**31), 0),
    st.sampled_from([np.int8, np.uint8]),
    st.sampled_from([np.int8, np.uint8]),
    st.sampled_from([(1, 1), (3, 17), (2, 12), (1, 1000), (4, 3, 5)]),
)
def test_softmax_in_c_matches_numpy(
    seed: int, mult: int, shift: int, diff_min: int, t_in, t_out, shape
) -> None:
    """mac_softmax against numerics.softmax: identical bytes, or the same refusal (a sum of
    exponentials out of range); ties at the maximum, the widest difference, rows of one value and
    of a thousand (sums near the top of the range). The same from BoundSoftmax on memory, run
    alone and as a unit of mac_run_units (a refusal: alone a ValueError, in a group the run stops
    at the unit)."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(t_in)
    x = rng.integers(int(info.min), int(info.max) + 1, size=shape).astype(t_in)
    flat = x.reshape(-1, shape[-1])
    flat[0, :2] = info.max
    if flat.shape[0] > 1 and flat.shape[1] > 1:
        flat[1, 0], flat[1, 1] = info.min, info.max
    kwargs = dict(input_multiplier=mult, input_left_shift=shift, diff_min=diff_min, out_dtype=np.dtype(t_out))
    try:
        want = nm.softmax(x, **kwargs)
    except ValueError as e:
        with pytest.raises(ValueError, match=str(e)):
            ma.softmax(x, **kwargs)
        assert _softmax_unit_outcome(x, shape[-1], **kwargs) == (None, None)
        return
    got = ma.softmax(x, **kwargs)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)
    assert _softmax_unit_outcome(x, shape[-1], **kwargs) == (want.tobytes(), want.tobytes())


def _softmax_unit_outcome(x: np.ndarray, depth: int, **kwargs: Any) -> tuple[bytes | None, bytes | None]:
    """The bytes a BoundSoftmax over x writes run alone and in a UnitGroup (None: it refused, and
    the group stopped before it, the output untouched)."""
    memory, out = bytearray(x.tobytes()), bytearray(x.nbytes)
    out_dtype = kwargs.pop("out_dtype")
    unit = ma.BoundSoftmax(memoryview(memory), memoryview(out), depth, x.dtype, out_dtype, **kwargs)
    group = ma.UnitGroup([unit])
    results: list[bytes | None] = []
    for run in (lambda: group.run() == 1, unit.run):
        out[:] = bytes(len(out))
        try:
            results.append(bytes(out) if run() else None)
        except ValueError as e:
            assert str(e) == nm.SOFTMAX_RANGE_ERROR
            results.append(None)
        if results[-1] is None:
            assert out == bytes(len(out))
    return results[0], results[1]


@pytest.mark.parametrize("scale", [1 / 8, 0.1, 0.0390625, 0.25, 1.0])
def test_softmax_in_c_at_the_compilers_parameters(scale: float) -> None:
    """The parameters the compiler derives from a model (beta 1, common input scales)."""
    mult, shift = q.preprocess_softmax_scaling(1.0, scale, q.SOFTMAX_DIFF_INTEGER_BITS)
    diff_min = -q.calculate_input_radius(q.SOFTMAX_DIFF_INTEGER_BITS, shift)
    x = np.random.default_rng(3).integers(-128, 128, size=(16, 12)).astype(np.int8)
    kwargs = dict(
        input_multiplier=mult, input_left_shift=shift, diff_min=diff_min, out_dtype=np.dtype(np.int8)
    )
    assert np.array_equal(ma.softmax(x, **kwargs), nm.softmax(x, **kwargs))


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    # channels: the scalar loop, and the 8- and 16-lane loops with and without a scalar tail
    st.tuples(
        st.integers(1, 2),
        st.integers(1, 9),
        st.integers(1, 9),
        st.sampled_from([1, 2, 3, 5, 8, 13, 16, 35, 64]),
    ),
    st.integers(1, 20),
    st.integers(1, 20),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.sampled_from([np.int8, np.uint8]),
    st.sampled_from(ISAS),
)
def test_resize_bilinear_in_c_matches_numpy(
    seed: int,
    shape: tuple[int, int, int, int],
    out_h: int,
    out_w: int,
    align_corners: bool,
    half_pixel_centers: bool,
    single_rounding: bool,
    dtype: type,
    isa: int,
) -> None:
    """mac_resize_bilinear against numerics.resize_bilinear: up and down, both corner rules, half-pixel
    centers (negative weights, wrapping stores), both roundings, both dtypes, the extremes, every
    C variant this CPU runs."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    x = rng.integers(int(info.min), int(info.max) + 1, size=shape).astype(dtype)
    x.reshape(-1)[0] = info.min
    x.reshape(-1)[-1] = info.max
    args = (out_h, out_w, align_corners, half_pixel_centers, single_rounding)
    try:
        want = nm.resize_bilinear(x, *args)
    except ValueError as e:  # a corner past the input (ALIGN_CORNERS with HALF_PIXEL_CENTERS)
        assert align_corners and half_pixel_centers and "past the input" in str(e)
        with pytest.raises(ValueError, match=str(e)):
            ma.resize_bilinear(x, *args, isa=isa)
        return
    got = ma.resize_bilinear(x, *args, isa=isa)
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_resize_bilinear_in_c_refuses_as_numpy() -> None:
    x = np.zeros((1, 2, 2, 1), np.int8)
    for out_h, out_w in ((0, 3), (3, 0)):
        with pytest.raises(ValueError) as want:
            nm.resize_bilinear(x, out_h, out_w, False, False)
        with pytest.raises(ValueError, match=str(want.value)):
            ma.resize_bilinear(x, out_h, out_w, False, False)


# (input dtype, filter dtype, input zp, filter zp, rows, K, cout, transposed): MR and NR tails, odd K,
# zero points far from the dtype's (int16 operands still) and past int16 (int32 operands)
DYNAMIC_CASES = [
    (np.int8, np.int8, -9, -11, 16, 16, 16, True),  # attention's Q.K^T of the corpus transformer
    (np.int8, np.int8, -128, -10, 16, 16, 16, True),  # scores.V: softmax output as the input
    (np.int8, np.int8, 3, 0, 7, 33, 19, False),
    (np.uint8, np.uint8, 128, 131, 13, 5, 40, True),
    (np.int8, np.uint8, -1, 255, 1, 64, 17, False),  # one row
    (np.uint8, np.int8, 7, 300, 9, 31, 3, True),
    (np.int8, np.int8, 5, -32768, 6, 12, 18, True),  # w - zp leaves int16: the int32 kernels
]


@pytest.mark.parametrize("isa", ISA_PARAMS)
@pytest.mark.parametrize("single", [False, True], ids=["two-roundings", "single-rounding"])
@pytest.mark.parametrize(("in_dt", "f_dt", "in_zp", "f_zp", "rows", "k", "cout", "transposed"), DYNAMIC_CASES)
def test_dynamic_filter_matches_numpy(
    isa: int, single: bool, in_dt: type, f_dt: type, in_zp: int, f_zp: int, rows: int, k: int, cout: int,
    transposed: bool,
) -> None:  # fmt: skip
    """A dynamic plan (the filter an activation, packed in C at each run) gives numpy's bytes for
    every new filter, read at its strides (transposed: the [K, Cout] matrix in memory), and the
    constant-filter plan's bytes for the same filter; the plan keeps no filter values."""
    rng = np.random.default_rng(rows * k + cout)
    bias = rng.integers(-5000, 5000, cout).astype(np.int32)
    rq = nm.Requant(
        input_zp=in_zp, filter_zp=f_zp, multiplier=rng.integers(2**30, 2**31, cout),
        shift=rng.integers(-12, 1, cout), output_zp=int(rng.integers(-20, 20)), act_min=-100, act_max=110,
        out_dtype=np.dtype(np.int8), single_rounding=single,
    )  # fmt: skip
    f_like = np.zeros((cout, 1, 1, k), f_dt)
    plan = ma.plan_layer(
        ma.KIND_CONV, f_like, bias, rq, in_shape=(rows, 1, 1, k), in_dtype=np.dtype(in_dt), dynamic=True
    )
    assert plan.dynamic and plan.params[0].shape == (cout, 1, 1, k) and not any(plan.params[0].strides)
    assert bool(plan.layer.wide) == (f_zp == -32768)
    for _ in range(3):  # a new filter and input each run, as attention's from invoke to invoke
        x = _values(rng, np.dtype(in_dt), (rows, k))
        stored = _values(rng, np.dtype(f_dt), (k, cout) if transposed else (cout, k))
        f = stored.T if transposed else stored  # a strided view of the bytes in memory
        want = _saturate(nm.fully_connected(x, np.ascontiguousarray(f), bias, rq, fast=False), rq.out_dtype)
        got = ma.run_dynamic(plan, x.reshape(rows, 1, 1, k), f.reshape(cout, 1, 1, k), isa)
        assert np.array_equal(got.reshape(rows, cout), want)
        static = ma.plan_layer(
            ma.KIND_CONV, np.ascontiguousarray(f).reshape(cout, 1, 1, k), bias, rq, in_shape=(rows, 1, 1, k),
            in_dtype=np.dtype(in_dt),
        )  # fmt: skip
        assert np.array_equal(ma.run(static, x.reshape(rows, 1, 1, k), isa), got)
        # the bound unit, on "device memory" holding the filter as stored
        memory = bytearray(x.tobytes() + stored.tobytes() + bytes(rows * cout))
        view = memoryview(memory)
        fbytes = stored.nbytes
        item = np.dtype(f_dt).itemsize
        strides = (item, 0, 0, cout * item) if transposed else (k * item, 0, 0, item)
        unit = ma.BoundDynamic(
            plan, view[: x.nbytes], view[x.nbytes : x.nbytes + fbytes], (cout, 1, 1, k), strides,
            view[x.nbytes + fbytes :], [], isa,
        )  # fmt: skip
        assert unit.run()
        assert bytes(view[x.nbytes + fbytes :]) == got.tobytes()


def test_dynamic_plan_refuses_what_it_cannot_run() -> None:
    """A dynamic plan is a FULLY_CONNECTED's; its bound unit takes only a filter that fits it."""
    rq = RQ_INT8
    with pytest.raises(ValueError, match="dynamic filter"):
        ma.plan_layer(
            ma.KIND_CONV, np.zeros((4, 3, 3, 8), np.int8), None, rq, in_shape=(1, 5, 5, 8),
            in_dtype=np.dtype(np.int8), geometry=(1, 1, 1, 1, 1, 1, 5, 5), dynamic=True,
        )  # fmt: skip
    plan = ma.plan_layer(
        ma.KIND_CONV, np.zeros((4, 1, 1, 8), np.int8), None, rq, in_shape=(2, 1, 1, 8),
        in_dtype=np.dtype(np.int8), dynamic=True,
    )  # fmt: skip
    memory = memoryview(bytearray(64))
    with pytest.raises(ValueError, match="shape"):
        ma.BoundDynamic(plan, memory[:16], memory[16:48], (4, 1, 1, 9), (9, 0, 0, 1), memory[48:56], [], 0)
    with pytest.raises(ValueError, match="leave 31 bytes"):
        ma.BoundDynamic(plan, memory[:16], memory[16:47], (4, 1, 1, 8), (8, 0, 0, 1), memory[48:56], [], 0)


def test_the_first_build_prints_one_progress_line_and_a_done_line(tmp_path: Path) -> None:
    """A first use in a fresh cache builds the C kernels (seconds of gcc -O3) and says so; the next
    use finds them and prints nothing."""
    code = "from device_model import mac_array; assert mac_array.library() is not None"
    env = {**os.environ, "VNPU_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    lines = first.stderr.splitlines()
    assert lines[0] == "vnpu: building the MAC array for this CPU (once, ~10 s)\u2026", lines
    assert lines[1].startswith("vnpu: built the MAC array for this CPU in ") and "mac-array-" in lines[1]
    again = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and again.stderr == ""
