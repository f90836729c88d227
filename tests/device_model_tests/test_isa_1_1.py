"""The instructions of ISA 1.1 (LUT2, SOFTMAX, RESIZE_BILINEAR, ARG_MAX) through the command processor,
against plain-Python references written from TFLite's reference kernels and gemmlowp's fixedpoint.h
(sharing no code with device_model.numerics), and SOFTMAX against both TFLite runtimes."""

from __future__ import annotations

import errno
import math

import numpy as np
import pytest
import reference_kernels as ref
from c_kernels import c_variants, numpy_requested

from device_model import numerics as nm
from device_model.command_processor import CommandProcessor
from uapi import isa

from .helpers import Machine, program, tensor

FLAGS = isa.SPEC.flags
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def run(m: Machine, stream: bytes):
    va = m.buffer(len(stream), stream)
    return CommandProcessor(m.memory).run(m.space.root, va, len(stream))


# --- plain-Python references --------------------------------------------------------------------
def _sat_shl(x: int, e: int) -> int:
    threshold = (1 << (31 - e)) - 1
    return INT32_MAX if x > threshold else INT32_MIN if x < -threshold else x << e


def _exp_on_negative_values(a: int) -> int:  # FixedPoint<int32, 5> -> FixedPoint<int32, 0>
    quarter = 1 << 24
    a_mod = (a & (quarter - 1)) - quarter
    x = ref.wrap32(_sat_shl(a_mod, 5) + (1 << 28))
    x2 = ref.srdhm(x, x)
    x3 = ref.srdhm(x2, x)
    x4 = ref.srdhm(x2, x2)
    x4_4 = ref.rdbp(x4, 2)
    poly = ref.rdbp(ref.wrap32(ref.srdhm(ref.wrap32(x4_4 + x3), 715827883) + x2), 1)
    result = ref.wrap32(1895147668 + ref.srdhm(1895147668, ref.wrap32(x + poly)))
    remainder = ref.wrap32(a_mod - a)
    for k, mult in enumerate((1672461947, 1302514674, 790015084, 290630308, 39332535, 720401, 242)):
        if remainder & (1 << (26 + k - 2)):
            result = ref.srdhm(result, mult)
    return INT32_MAX if a == 0 else result


def _reciprocal(x: int) -> tuple[int, int]:  # GetReciprocal(x, 12)
    headroom = 32 - x.bit_length()
    shifted = ref.wrap32((x << headroom) - (1 << 31))
    total = shifted + INT32_MAX
    half = (total + (1 if total >= 0 else -1)) // 2 if total >= 0 else -((-total + 1) // 2)
    y = ref.wrap32(1515870810 + ref.srdhm(half, -1010580540))
    for _ in range(3):
        y = ref.wrap32(y + _sat_shl(ref.srdhm(y, ref.wrap32((1 << 29) - ref.srdhm(half, y))), 2))
    return _sat_shl(y, 1), 12 - headroom


def softmax_row(row: list[int], mult: int, shift: int, diff_min: int, lo: int, hi: int) -> list[int]:
    top = max(row)
    exps = [
        _exp_on_negative_values(ref.srdhm(ref.wrap32((v - top) << shift), mult))
        if v - top >= diff_min
        else None
        for v in row
    ]
    total = sum(ref.rdbp(e, 12) for e in exps if e is not None)
    scale, over = _reciprocal(total)
    exponent = over + 31 - 8
    return [
        lo if e is None else ref.clamp(ref.rdbp(ref.srdhm(scale, e), exponent) + lo, lo, hi) for e in exps
    ]


def softmax_params(beta: float, scale: float) -> tuple[int, int, int]:
    """PreprocessSoftmaxScaling and CalculateInputRadius (5 integer bits), as TFLite computes them."""
    m, e = math.frexp(min(beta * scale * (1 << 26), (1 << 31) - 1.0))
    q = round(m * (1 << 31))
    if q == 1 << 31:
        q, e = q // 2, e + 1
    return q, e, -math.floor(31 * (1 << 26) / (1 << e))


# --- SOFTMAX ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["INT8", "UINT8"])
@pytest.mark.parametrize("shape,scale", [((1, 1, 3, 10), 0.05), ((2, 2, 2, 7), 0.2), ((1, 1, 1, 300), 0.004)])
def test_softmax_matches_the_fixed_point_reference(dtype: str, shape: tuple, scale: float) -> None:
    rng = np.random.default_rng(len(shape) + shape[-1])
    np_t = np.int8 if dtype == "INT8" else np.uint8
    info = np.iinfo(np_t)
    x = rng.integers(info.min, int(info.max) + 1, size=shape).astype(np_t)
    x[0, 0, 0, :2] = info.max  # a tie at the maximum
    mult, shift, diff_min = softmax_params(1.0, scale)
    m = Machine()
    out_va = m.buffer(x.size)
    lo = int(info.min)
    stream = program(
        tensor(0, dtype, m.array(x), shape, zp=17),
        tensor(1, dtype, out_va, shape, zp=lo),
        isa.encode(
            "SOFTMAX", input=0, output=1, input_multiplier=mult, input_left_shift=shift, diff_min=diff_min
        ),
    )
    res = run(m, stream)
    assert res.status == 0, res.error
    got = m.read(out_va, x.size).view(np_t).reshape(-1, shape[-1])
    rows = x.reshape(-1, shape[-1]).tolist()
    want = [softmax_row(r, mult, shift, diff_min, lo, int(info.max)) for r in rows]
    assert got.tolist() == want


@pytest.mark.parametrize("runtime", ["tflite_runtime", "ai_edge_litert"])
def test_softmax_equals_tflite_reference(runtime: str) -> None:
    import modelgen as g

    model = g.softmax_model((3, 40), seed=5)
    x = g.random_inputs(model, seed=2)[0]
    from libaccel.compiler import graph_from_tflite

    graph = graph_from_tflite(model)
    mult, shift, diff_min = softmax_params(1.0, graph.tensors[graph.inputs[0]].quant.scale)
    got = nm.softmax(
        x, input_multiplier=mult, input_left_shift=shift, diff_min=diff_min, out_dtype=np.dtype(np.int8)
    )
    assert np.array_equal(got, g.run_reference(model, [x], runtime)[0])


def test_softmax_rejects_a_wrong_output_zero_point() -> None:
    m = Machine()
    x = np.zeros((1, 1, 1, 4), dtype=np.int8)
    stream = program(
        tensor(0, "INT8", m.array(x), x.shape),
        tensor(1, "INT8", m.buffer(4), x.shape, zp=0),
        isa.encode(
            "SOFTMAX", input=0, output=1, input_multiplier=1 << 30, input_left_shift=20, diff_min=-100
        ),
    )
    res = run(m, stream)
    assert res.status == -errno.EIO and "zero point" in res.error


# --- RESIZE_BILINEAR ------------------------------------------------------------------------------
def resize_reference(x: np.ndarray, oh: int, ow: int, ac: bool, hp: bool, single: bool) -> list:
    """reference_ops::ResizeBilinearInteger, loop by loop."""

    def axis(out: int, size: int) -> list[tuple[int, int, int]]:
        scale = ((1 << 10) * size + out // 2) // out
        if ac and out > 1:
            scale = ((1 << 10) * (size - 1) + (out - 1) // 2) // (out - 1)
        res = []
        for i in range(out):
            v = i * scale + (scale // 2 - (1 << 9) if hp else 0)
            lo = max(int(v / 1024), 0)
            hi = min(int((v + 1023) / 1024), size - 1)
            res.append((lo, hi, v))
        return res

    n, h, w, c = x.shape
    out = np.zeros((n, oh, ow, c), dtype=x.dtype)
    for b in range(n):
        for y, (y0, y1, iy) in enumerate(axis(oh, h)):
            for xx, (x0, x1, ix) in enumerate(axis(ow, w)):
                for ch in range(c):
                    v = (
                        int(x[b, y0, x0, ch]) * (1024 - (iy - 1024 * y0)) * (1024 - (ix - 1024 * x0))
                        + int(x[b, y1, x0, ch]) * (iy - 1024 * y0) * (1024 - (ix - 1024 * x0))
                        + int(x[b, y0, x1, ch]) * (1024 - (iy - 1024 * y0)) * (ix - 1024 * x0)
                        + int(x[b, y1, x1, ch]) * (iy - 1024 * y0) * (ix - 1024 * x0)
                    )
                    if single:
                        q = (v + (1 << 19)) >> 20
                    else:
                        q = (abs(v) + (1 << 19)) // (1 << 20) * (1 if v > 0 else -1)
                    out[b, y, xx, ch] = np.array(q).astype(x.dtype)
    return out.tolist()


@pytest.mark.parametrize("dtype", ["INT8", "UINT8"])
@pytest.mark.parametrize(
    "in_hw,out_hw,ac,hp,single",
    [((3, 4), (6, 8), False, False, False), ((5, 3), (9, 7), True, False, False),
     ((4, 4), (7, 3), False, True, False), ((2, 5), (5, 11), False, True, True),
     ((6, 6), (3, 2), True, False, True)],
)  # fmt: skip
def test_resize_bilinear(dtype: str, in_hw: tuple, out_hw: tuple, ac: bool, hp: bool, single: bool) -> None:
    rng = np.random.default_rng(in_hw[0] * 7 + out_hw[1])
    np_t = np.int8 if dtype == "INT8" else np.uint8
    info = np.iinfo(np_t)
    x = rng.integers(info.min, int(info.max) + 1, size=(2, *in_hw, 3)).astype(np_t)
    oshape = (2, *out_hw, 3)
    m = Machine()
    out_va = m.buffer(int(np.prod(oshape)))
    flags = (FLAGS["ALIGN_CORNERS"] if ac else 0) | (FLAGS["HALF_PIXEL_CENTERS"] if hp else 0)
    flags |= FLAGS["SINGLE_ROUNDING"] if single else 0
    stream = program(
        tensor(0, dtype, m.array(x), x.shape),
        tensor(1, dtype, out_va, oshape),
        isa.encode("RESIZE_BILINEAR", flags=flags, input=0, output=1),
    )
    res = run(m, stream)
    assert res.status == 0, res.error
    got = m.read(out_va, int(np.prod(oshape))).view(np_t).reshape(oshape)
    assert got.tolist() == resize_reference(x, *out_hw, ac, hp, single)


@pytest.mark.parametrize("variant", ["numpy", "c"])
def test_resize_bilinear_reading_past_its_input_fails_the_job(
    variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ALIGN_CORNERS with HALF_PIXEL_CENTERS shrinking 4 rows to 2 puts a lower corner at row 4 of
    4 (TFLite refuses the pair): the job fails with -EIO naming it, on numpy and on the C unit, and
    nothing past the input is read."""
    from device_model import mac_array

    if variant == "c" and numpy_requested():
        pytest.skip(f"{mac_array.ENV}=numpy selects the numpy path")
    if variant == "c":
        c_variants()  # a build failure fails the test
    monkeypatch.setenv(mac_array.ENV, "numpy" if variant == "numpy" else "auto")
    m = Machine()
    x = np.arange(16, dtype=np.int8).reshape(1, 4, 4, 1)
    flags = FLAGS["ALIGN_CORNERS"] | FLAGS["HALF_PIXEL_CENTERS"]
    stream = program(
        tensor(0, "INT8", m.array(x), x.shape),
        tensor(1, "INT8", m.buffer(4), (1, 2, 2, 1)),
        isa.encode("RESIZE_BILINEAR", flags=flags, input=0, output=1),
    )
    res = run(m, stream)
    assert res.status == -errno.EIO and "past the input" in res.error, res.error


# --- LUT2 and ARG_MAX ------------------------------------------------------------------------------
def test_lut2_broadcasts_and_indexes_by_both_bytes() -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, size=(1, 2, 3, 4)).astype(np.int8)
    b = rng.integers(0, 256, size=(4,)).astype(np.uint8)  # per channel, broadcast over h and w
    table = rng.integers(-128, 128, size=65536).astype(np.int8)
    m = Machine()
    out_va = m.buffer(a.size)
    stream = program(
        tensor(0, "INT8", m.array(a), a.shape),
        tensor(1, "UINT8", m.array(b), a.shape, strides=(0, 0, 0, 1)),
        tensor(2, "INT8", m.array(table), (1, 1, 256, 256)),
        tensor(3, "INT8", out_va, a.shape),
        isa.encode("LUT2", input1=0, input2=1, table=2, output=3),
    )
    res = run(m, stream)
    assert res.status == 0, res.error
    got = m.read(out_va, a.size).view(np.int8).reshape(a.shape)
    want = [[[[int(table[(int(a[0, i, j, k]) + 128) * 256 + int(b[k])]) for k in range(4)] for j in range(3)]
             for i in range(2)]]  # fmt: skip
    assert got.tolist() == want


def test_lut2_rejects_a_short_table() -> None:
    m = Machine()
    x = np.zeros((1, 1, 1, 4), dtype=np.int8)
    stream = program(
        tensor(0, "INT8", m.array(x), x.shape),
        tensor(1, "INT8", m.buffer(256), (1, 1, 1, 256)),
        tensor(2, "INT8", m.buffer(4), x.shape),
        isa.encode("LUT2", input1=0, input2=0, table=1, output=2),
    )
    res = run(m, stream)
    assert res.status == -errno.EIO and "65536" in res.error


@pytest.mark.parametrize("dtype", ["INT8", "UINT8"])
def test_arg_max_first_index_wins(dtype: str) -> None:
    np_t = np.int8 if dtype == "INT8" else np.uint8
    rng = np.random.default_rng(4)
    x = rng.integers(0, 6, size=(2, 3, 2, 9)).astype(np_t)  # many ties
    m = Machine()
    out_va = m.buffer(4 * 12)
    stream = program(
        tensor(0, dtype, m.array(x), x.shape),
        tensor(1, "INT32", out_va, (2, 3, 2, 1)),
        isa.encode("ARG_MAX", input=0, output=1),
    )
    res = run(m, stream)
    assert res.status == 0, res.error
    got = m.read(out_va, 4 * 12).view(np.int32).reshape(2, 3, 2)
    want = [[[row.index(max(row)) for row in col] for col in plane] for plane in x.tolist()]
    assert got.tolist() == want
