"""The FLOAT_SCALE requantization (onnxruntime's) of CONV2D, DEPTHWISE_CONV2D and FULLY_CONNECTED through
the command processor, against a plain-Python reference (struct-packed float32 products, round half to
even), and the streams the device fails."""

from __future__ import annotations

import errno
import struct

import numpy as np
import pytest

from device_model.command_processor import CommandProcessor
from uapi import isa

from .helpers import Machine, program, split_requant, tensor

FLAGS = isa.SPEC.flags


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bits(x: float) -> int:
    return struct.unpack("<i", struct.pack("<f", x))[0]


def requant(acc: int, scale: float, zp: int, lo: int, hi: int) -> int:
    """float32(acc) * scale in float32, round half to even (Python's round), + zp, clamp."""
    return max(lo, min(hi, round(f32(f32(float(acc)) * scale)) + zp))


def run(m: Machine, stream: bytes):
    va = m.buffer(len(stream), stream)
    return CommandProcessor(m.memory).run(m.space.root, va, len(stream))


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("in_dtype", ["INT8", "UINT8"])
def test_conv2d_float_scale(in_dtype: str, per_channel: bool) -> None:
    rng = np.random.default_rng(5 + per_channel)
    np_in = np.int8 if in_dtype == "INT8" else np.uint8
    info = np.iinfo(np_in)
    x = rng.integers(info.min, int(info.max) + 1, size=(1, 5, 5, 3)).astype(np_in)
    w = rng.integers(-127, 128, size=(4, 3, 3, 3)).astype(np.int8)  # int8 filter under uint8 input too
    bias = rng.integers(-3000, 3000, size=4).astype(np.int32)
    scales = [f32(s) for s in (rng.uniform(0.001, 0.01, 4) if per_channel else [0.00390625] * 4)]
    x_zp, y_zp = (3, -2) if in_dtype == "INT8" else (130, 120)
    m = Machine()
    out_va = m.buffer(5 * 5 * 4)
    quant = np.array([[bits(s), 0] for s in scales], dtype=np.int32)
    lo, hi = int(info.min), int(info.max)
    fields = dict(flags=FLAGS["HAS_BIAS"] | FLAGS["FLOAT_SCALE"], input=0, filter=1, bias=2, output=3,
                  stride_h=1, stride_w=1, dilation_h=1, dilation_w=1, pad_top=1, pad_left=1,
                  multiplier=bits(scales[0]), shift=0, act_min=lo, act_max=hi)  # fmt: skip
    parts = [
        tensor(0, in_dtype, m.array(x), x.shape, zp=x_zp),
        tensor(1, "INT8", m.array(w), w.shape),
        tensor(2, "INT32", m.array(bias), (1, 1, 1, 4)),
        tensor(3, in_dtype, out_va, (1, 5, 5, 4), zp=y_zp),
    ]
    if per_channel:
        parts.append(tensor(4, "INT32", m.array(quant), (1, 1, 4, 2)))
        fields.update(flags=fields["flags"] | FLAGS["PER_CHANNEL"], quant=4, multiplier=0)
    res = run(m, program(*parts, isa.encode("CONV2D", **fields)))
    assert res.status == 0, res.error
    got = m.read(out_va, 100).view(np_in).reshape(5, 5, 4)
    xp = np.pad(x[0].astype(np.int64) - x_zp, ((1, 1), (1, 1), (0, 0)))
    for oy in range(5):
        for ox in range(5):
            for oc in range(4):
                acc = int((xp[oy : oy + 3, ox : ox + 3] * w[oc]).sum()) + int(bias[oc])
                assert got[oy, ox, oc] == requant(acc, scales[oc], y_zp, int(info.min), int(info.max))


def test_fully_connected_float_scale_ties_to_even() -> None:
    # acc = +-(2k+1) with scale 0.5: exact halves, which round to the even neighbour
    x = np.array([[1, 3, 5, 7, -1, -3]], dtype=np.int8).reshape(1, 1, 6, 1)
    w = np.ones((1, 1, 1, 1), dtype=np.int8)
    m = Machine()
    out_va = m.buffer(8)
    res = run(m, program(
        tensor(0, "INT8", m.array(x), (1, 1, 6, 1)),
        tensor(1, "INT8", m.array(w), (1, 1, 1, 1)),
        tensor(2, "INT8", out_va, (1, 1, 6, 1)),
        isa.encode("FULLY_CONNECTED", flags=FLAGS["FLOAT_SCALE"], input=0, filter=1, output=2,
                   multiplier=bits(0.5), shift=0, act_min=-128, act_max=127),
    ))  # fmt: skip
    assert res.status == 0, res.error
    assert m.read(out_va, 6).view(np.int8).tolist() == [0, 2, 2, 4, 0, -2]


@pytest.mark.parametrize(
    "flags,multiplier,shift,message",
    [(FLAGS["FLOAT_SCALE"], bits(0.5), 1, "non-zero shift"),
     (FLAGS["FLOAT_SCALE"], bits(float("inf")), 0, "not a finite float"),
     (FLAGS["FLOAT_SCALE"] | FLAGS["SINGLE_ROUNDING"], bits(0.5), 0, "both set")],
)  # fmt: skip
def test_bad_float_scale_fails_the_job(flags: int, multiplier: int, shift: int, message: str) -> None:
    x = np.zeros((1, 1, 1, 4), dtype=np.int8)
    m = Machine()
    res = run(m, program(
        tensor(0, "INT8", m.array(x), x.shape),
        tensor(1, "INT8", m.array(np.ones((1, 1, 2, 4), np.int8)), (1, 1, 2, 4)),
        tensor(2, "INT8", m.buffer(8), (1, 1, 1, 2)),
        isa.encode("FULLY_CONNECTED", flags=flags, input=0, filter=1, output=2, multiplier=multiplier,
                   shift=shift, act_min=-128, act_max=127),
    ))  # fmt: skip
    assert res.status == -errno.EIO and message in res.error


@pytest.mark.parametrize("depthwise", [False, True])
def test_planned_float_scale_equals_general(depthwise: bool) -> None:
    """The planned path (raw accumulators + a per-channel correction) gives the general path's bytes."""
    from device_model import numerics as nm

    rng = np.random.default_rng(11 + depthwise)
    x = rng.integers(0, 256, size=(1, 9, 9, 6)).astype(np.uint8)
    w = rng.integers(-127, 128, size=(1, 3, 3, 6) if depthwise else (5, 3, 3, 6)).astype(np.int8)
    cout = w.shape[3] if depthwise else w.shape[0]
    bias = rng.integers(-5000, 5000, size=cout).astype(np.int32)
    scales = rng.uniform(0.0005, 0.01, cout).astype(np.float32)
    args = dict(input_zp=131, filter_zp=0, stride_h=2, stride_w=1, dilation_h=1, dilation_w=1, pad_top=1,
                pad_left=1, out_h=5, out_w=9, multiplier=scales, shift=0, output_zp=118, act_min=0,
                act_max=255, out_dtype=np.dtype(np.uint8), float_scale=True)  # fmt: skip
    rq, geometry = split_requant(args)
    conv = nm.depthwise_conv2d if depthwise else nm.conv2d
    extra = {"depth_multiplier": 1} if depthwise else {}
    fast = conv(x, w, bias, rq, fast=True, **extra, **geometry)
    general = conv(x, w, bias, rq, fast=False, **extra, **geometry)
    assert fast.dtype == general.dtype == np.uint8
    assert np.array_equal(fast, general)
    build = nm.plan_depthwise if depthwise else nm.plan_gemm
    plan = build(w, bias, rq, in_dtype=x.dtype)
    assert plan is not None and isinstance(plan.requant, nm.FloatRequantPlan)  # the planned path ran
