"""Layer plans hold little memory: large filters are not kept as float32, the change check keeps a
digest instead of a copy, requantization works on blocks of rows; all of it exact, and a filter
rewritten between jobs takes effect."""

from __future__ import annotations

import numpy as np
import pytest
import reference_kernels as ref

from device_model import numerics as nm
from device_model.binding import param_digest
from device_model.command_processor import CommandProcessor
from device_model.numerics import planned
from uapi import isa

from .helpers import Machine, program, tensor

FLAGS = isa.SPEC.flags


def _fc_args(rng: np.random.Generator, cout: int) -> dict:
    return dict(
        input_zp=-3,
        filter_zp=0,
        multiplier=rng.integers(2**30, 2**31, size=cout),
        shift=rng.integers(-12, -6, size=cout),
        output_zp=4,
        act_min=-128,
        act_max=127,
    )


@pytest.mark.parametrize("k", [nm.KEEP_F32_WEIGHTS // 64, nm.KEEP_F32_WEIGHTS // 64 + 1])
def test_gemm_plan_keeps_float32_weights_only_when_small(k: int) -> None:
    """64 x k filters on both sides of KEEP_F32_WEIGHTS: the same exact output either way."""
    rng = np.random.default_rng(k)
    cout = 64
    args = _fc_args(rng, cout)
    filt = rng.integers(-127, 128, size=(cout, k), dtype=np.int8)
    inp = rng.integers(-128, 128, size=(3, k), dtype=np.int8)
    plan = nm.plan_gemm(
        filt, None, nm.Requant(out_dtype=np.dtype(np.int8), **args), in_dtype=np.dtype(np.int8)
    )
    assert plan is not None
    assert (plan.weights is not None) == (cout * k <= nm.KEEP_F32_WEIGHTS)
    if plan.weights is None:
        with pytest.raises(ValueError, match="pass the layer's filter"):
            nm.run_fc_plan(inp, plan)
    got = nm.run_fc_plan(inp, plan, filt)
    want = ref.fully_connected(
        inp.tolist(), filt.tolist(), None, -3, 0, args["multiplier"].tolist(), args["shift"].tolist(),
        4, -128, 127,
    )  # fmt: skip
    assert got.astype(np.int64).tolist() == want


def test_conv_plan_without_float32_weights_matches_reference() -> None:
    rng = np.random.default_rng(7)
    cout, k, cin = 40, 3, 600  # 40 * 3 * 3 * 600 > KEEP_F32_WEIGHTS
    assert cout * k * k * cin > nm.KEEP_F32_WEIGHTS
    inp = rng.integers(0, 256, size=(1, 4, 5, cin), dtype=np.uint8)
    # Weights near the zero point keep |x| * sum |w - zp| below 2**24: the planned path.
    filt = (131 + rng.integers(-3, 4, size=(cout, k, k, cin))).astype(np.uint8)
    bias = rng.integers(-5000, 5000, size=cout).astype(np.int32)
    kw = dict(input_zp=120, filter_zp=131, multiplier=1 << 30, shift=-14, output_zp=9, act_min=0, act_max=255)
    rq = nm.Requant(out_dtype=np.dtype(np.uint8), **kw)
    plan = nm.plan_gemm(filt, bias, rq, in_dtype=np.dtype(np.uint8))
    assert plan is not None and plan.weights is None
    geometry = dict(
        stride_h=1, stride_w=2, dilation_h=1, dilation_w=1, pad_top=1, pad_left=1, out_h=4, out_w=3
    )
    got = nm.conv2d(inp, filt, bias, rq, **geometry)
    want = ref.conv2d(
        inp.tolist(), filt.tolist(), bias.tolist(), 120, 131, 1, 2, 1, 1, 1, 1, 4, 3, [1 << 30] * cout,
        [-14] * cout, 9, 0, 255,
    )  # fmt: skip
    assert got.astype(np.int64).tolist() == want


def test_requant_blocks_of_rows_give_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    c, repeat, rows = 5, 7, 23
    correction, multiplier, shift = (
        rng.integers(-1000, 1000, size=c), rng.integers(2**30, 2**31, size=c), rng.integers(-12, 2, size=c)
    )  # fmt: skip
    rq = nm.Requant(
        input_zp=0, filter_zp=0, multiplier=multiplier, shift=shift, output_zp=-5, act_min=-128, act_max=127,
        out_dtype=np.dtype(np.int8),
    )  # fmt: skip
    plan = nm.plan_requant(np.full(c, 1 << 20), correction, rq)
    assert plan is not None
    acc = rng.integers(-(1 << 20), 1 << 20, size=(rows, repeat * c)).astype(np.float32)
    whole = plan.apply(acc, repeat)
    for block in (1, 8 * repeat * c * 2, 8 * repeat * c * 5 + 3):  # 1 row, 2 rows, 5 rows a block
        monkeypatch.setattr(planned, "REQUANT_BLOCK_BYTES", block)
        np.testing.assert_array_equal(plan.apply(acc, repeat), whole)
    want = nm.requantize_channels(
        (acc.reshape(-1, c).astype(np.int64) + plan.correction).T, None, plan.general
    ).T.reshape(acc.shape)
    np.testing.assert_array_equal(whole, want)


def test_param_digest_sees_bytes_shape_dtype_and_absence() -> None:
    a = np.arange(12, dtype=np.int8)
    base = param_digest(a, None, 5)
    assert param_digest(a.copy(), None, 5) == base
    b = a.copy()
    b[-1] ^= 1
    assert param_digest(b, None, 5) != base
    assert param_digest(a.reshape(3, 4), None, 5) != base
    assert param_digest(a.view(np.uint8), None, 5) != base
    assert param_digest(a, a[:0], 5) != base
    assert param_digest(a, None, 6) != base
    assert param_digest(a[::2], None, 5) == param_digest(np.ascontiguousarray(a[::2]), None, 5)


@pytest.mark.parametrize("cin", [8, 1030])  # float32 weights kept / converted per job
def test_filter_and_bias_rewritten_between_jobs_take_effect(cin: int) -> None:
    """The same stream twice on one CommandProcessor (its plans cached), the filter and bias
    rewritten in place in between: the second job computes with the new bytes."""
    rng = np.random.default_rng(cin)
    m = Machine()
    cout = 64
    inp = rng.integers(-128, 128, size=(1, 2, 3, cin), dtype=np.int8)
    filt = rng.integers(-127, 128, size=(cout, 1, 1, cin), dtype=np.int8)
    bias = rng.integers(-3000, 3000, size=cout, dtype=np.int32)
    out_va = m.buffer(2 * 3 * cout)
    filt_va, bias_va = m.array(filt), m.array(bias)
    mult, shift = 1 << 30, -10
    stream = program(
        tensor(0, "INT8", m.array(inp), inp.shape, zp=-1),
        tensor(1, "INT8", filt_va, filt.shape),
        tensor(2, "INT32", bias_va, (1, 1, 1, cout)),
        tensor(3, "INT8", out_va, (1, 2, 3, cout), zp=2),
        isa.encode(
            "CONV2D", flags=FLAGS["HAS_BIAS"], input=0, filter=1, bias=2, output=3, stride_h=1, stride_w=1,
            dilation_h=1, dilation_w=1, multiplier=mult, shift=shift, act_min=-128, act_max=127,
        ),
    )  # fmt: skip
    cmd = m.buffer(len(stream), stream)
    cp = CommandProcessor(m.memory)

    def expect(f: np.ndarray, b: np.ndarray) -> list:
        return ref.conv2d(
            inp.tolist(), f.tolist(), b.tolist(), -1, 0, 1, 1, 1, 1, 0, 0, 2, 3, [mult] * cout,
            [shift] * cout, 2, -128, 127,
        )  # fmt: skip

    for step in range(3):
        res = cp.run(m.space.root, cmd, len(stream))
        assert res.status == 0, res.error
        got = m.read(out_va, 2 * 3 * cout).view(np.int8).reshape(1, 2, 3, cout)
        assert got.tolist() == expect(filt, bias), step
        if step == 0:
            filt = filt.copy()
            filt[5, 0, 0, cin - 1] = -filt[5, 0, 0, cin - 1] or 1  # one weight changes
            m.write(filt_va, filt)
        elif step == 1:
            bias = bias.copy()
            bias[7] += 1 << 12
            m.write(bias_va, bias)


@pytest.mark.parametrize("k", [40, 1100])  # planned / refused (float32 sums not exact): the general path
def test_single_rounding_fc_rewritten_between_jobs_takes_effect(k: int) -> None:
    """LiteRT's one-rounding FULLY_CONNECTED: a filter rewritten between jobs is seen (on the MAC
    array where the host builds it; on numpy's path, planned or refused, where it does not)."""
    rng = np.random.default_rng(k)
    m = Machine()
    cout, rows = 6, 2
    inp = rng.integers(-128, 128, size=(rows, k), dtype=np.int8)
    # Weights of full magnitude: over 1032 of them, 128 * 127 * K passes 2**24 and no plan is made.
    filt = rng.choice(np.array([-127, 126, 127], dtype=np.int8), size=(cout, k))
    out_va = m.buffer(rows * cout)
    filt_va = m.array(filt)
    args = _fc_args(rng, cout)
    per_channel = np.stack([args["multiplier"], args["shift"]], axis=1).astype(np.int32)
    stream = program(
        tensor(0, "INT8", m.array(inp), (1, 1, rows, k), zp=args["input_zp"]),
        tensor(1, "INT8", filt_va, (1, 1, cout, k)),
        tensor(2, "INT32", m.array(per_channel), (1, 1, cout, 2)),
        tensor(3, "INT8", out_va, (1, 1, rows, cout), zp=args["output_zp"]),
        isa.encode(
            "FULLY_CONNECTED", flags=FLAGS["PER_CHANNEL"] | FLAGS["SINGLE_ROUNDING"], input=0, filter=1,
            quant=2, output=3, act_min=-128, act_max=127,
        ),
    )  # fmt: skip
    cmd = m.buffer(len(stream), stream)
    cp = CommandProcessor(m.memory)
    rq = nm.Requant(single_rounding=True, out_dtype=np.dtype(np.int8), **args)
    planned_ok = nm.plan_gemm(filt, None, rq, in_dtype=np.dtype(np.int8)) is not None
    assert planned_ok == (k == 40)
    for step in range(3):
        res = cp.run(m.space.root, cmd, len(stream))
        assert res.status == 0, res.error
        got = m.read(out_va, rows * cout).view(np.int8).reshape(rows, cout)
        want = nm.fully_connected(inp, filt, None, rq, fast=False)
        assert np.array_equal(got, want), step
        filt = filt.copy()
        filt[step % cout] = -filt[step % cout] // 2  # a whole output channel changes
        m.write(filt_va, filt)
