"""The command processor: units through the MMU, faults, errors, WAIT and abort."""

from __future__ import annotations

import errno
import threading
import time

import numpy as np
import pytest
import reference_kernels as ref

from device_model import numerics as nm
from device_model.command_processor import CommandProcessor
from uapi import hw_layout as hw
from uapi import isa

from .helpers import Machine, program, tensor

FLAGS = isa.SPEC.flags


def run(m: Machine, stream: bytes, enabled=None, abort=None, on_irq=None):
    va = m.buffer(len(stream), stream)
    return CommandProcessor(m.memory, enabled).run(m.space.root, va, len(stream), abort, on_irq)


def test_conv2d_per_channel_with_bias_into_a_channel_slice() -> None:
    rng = np.random.default_rng(1)
    m = Machine()
    inp = rng.integers(-128, 128, size=(1, 5, 6, 3), dtype=np.int8)
    filt = rng.integers(-127, 128, size=(4, 3, 3, 3), dtype=np.int8)
    bias = rng.integers(-3000, 3000, size=4, dtype=np.int32)
    mults = rng.integers(2**30, 2**31, size=4)
    shifts = rng.integers(-10, 0, size=4)
    quant = np.stack([mults, shifts], axis=1).astype(np.int32).reshape(1, 1, 4, 2)
    # The output is channels 2..5 of an [1,3,3,8] tensor (a concat target): stride_w is 8 bytes.
    big = np.full((1, 3, 3, 8), 0x55, dtype=np.uint8)
    out_va = m.array(big)
    stream = program(
        tensor(0, "INT8", m.array(inp), inp.shape, zp=-3),
        tensor(1, "INT8", m.array(filt), filt.shape),
        tensor(2, "INT32", m.array(bias), (1, 1, 1, 4)),
        tensor(3, "INT32", m.array(quant), quant.shape),
        tensor(4, "INT8", out_va + 2, (1, 3, 3, 4), zp=5, strides=(72, 24, 8, 1)),
        isa.encode(
            "CONV2D", flags=FLAGS["HAS_BIAS"] | FLAGS["PER_CHANNEL"], input=0, filter=1, bias=2, quant=3,
            output=4, stride_h=2, stride_w=2, dilation_h=1, dilation_w=1, pad_top=1, pad_left=1,
            act_min=-100, act_max=127,
        ),
    )  # fmt: skip
    res = run(m, stream)
    assert (res.status, res.cycles) == (0, 7), res.error
    got = m.read(out_va, big.nbytes).reshape(big.shape)
    want = ref.conv2d(
        inp.tolist(), filt.tolist(), bias.tolist(), -3, 0, 2, 2, 1, 1, 1, 1, 3, 3,
        mults.tolist(), shifts.tolist(), 5, -100, 127,
    )  # fmt: skip
    assert got[..., 2:6].view(np.int8).tolist() == want
    assert (got[..., :2] == 0x55).all() and (got[..., 6:] == 0x55).all()  # the gaps are untouched


def test_add_broadcast_maxpool_lut_copy_fill() -> None:
    rng = np.random.default_rng(2)
    m = Machine()
    a = rng.integers(0, 256, size=(1, 2, 3, 4), dtype=np.uint8)
    b = rng.integers(0, 256, size=4, dtype=np.uint8)
    table = rng.integers(0, 256, size=256, dtype=np.uint8)
    sum_va, pool_va, lut_va, tr_va = (m.buffer(64) for _ in range(4))
    stream = program(
        tensor(0, "UINT8", m.array(a), a.shape, zp=128),
        tensor(1, "UINT8", m.array(b), (1, 2, 3, 4), zp=120, strides=(0, 0, 0, 1)),  # broadcast over h, w
        tensor(2, "UINT8", sum_va, (1, 2, 3, 4), zp=130),
        isa.encode(
            "ADD", input1=0, input2=1, output=2, left_shift=20, input1_multiplier=1 << 30, input1_shift=-1,
            input2_multiplier=1 << 30, input2_shift=-1, output_multiplier=1 << 30, output_shift=-19,
            act_min=0, act_max=255,
        ),
        tensor(3, "UINT8", pool_va, (1, 1, 2, 4), zp=130),
        isa.encode("MAXPOOL", input=2, output=3, filter_h=2, filter_w=2, stride_h=2, stride_w=2,
                   act_min=0, act_max=255),
        tensor(4, "UINT8", m.array(table), (256,)),
        tensor(5, "UINT8", lut_va, (1, 1, 2, 4)),
        isa.encode("LUT", input=3, table=4, output=5),
        tensor(6, "UINT8", tr_va, (1, 1, 2, 4), strides=(8, 8, 1, 2)),  # transposed layout
        isa.encode("COPY", src=5, dst=6),
        tensor(7, "INT32", m.buffer(64), (1, 1, 1, 3)),
        isa.encode("FILL", dst=7, value=-7),
    )  # fmt: skip
    res = run(m, stream)
    assert res.status == 0, res.error
    summed = [
        ref.add_one(x, y, 128, 120, 20, 1 << 30, -1, 1 << 30, -1, 1 << 30, -19, 130, 0, 255)
        for x, y in zip(a.ravel().tolist(), np.broadcast_to(b, a.shape).ravel().tolist(), strict=True)
    ]
    summed = np.array(summed).reshape(a.shape)
    assert m.read(sum_va, 24).reshape(a.shape).tolist() == summed.tolist()
    pooled = summed[:, :, :2, :].max(axis=(1, 2)).reshape(1, 1, 1, 4)  # only the first window is full
    pooled2 = summed[:, :, 2:, :].max(axis=(1, 2)).reshape(1, 1, 1, 4)
    want_pool = np.concatenate([pooled, pooled2], axis=2)
    assert m.read(pool_va, 8).reshape(1, 1, 2, 4).tolist() == want_pool.tolist()
    looked = table[want_pool]
    assert m.read(lut_va, 8).reshape(1, 1, 2, 4).tolist() == looked.tolist()
    assert m.read(tr_va, 8).reshape(4, 2).T.tolist() == looked.reshape(2, 4).tolist()
    assert m.read(0, 0).size == 0


def test_depthwise_and_fc_and_avgpool_and_mul() -> None:
    rng = np.random.default_rng(3)
    m = Machine()
    x = rng.integers(-128, 128, size=(1, 4, 4, 2), dtype=np.int8)
    dw = rng.integers(-127, 128, size=(1, 3, 3, 4), dtype=np.int8)
    dw_out, pool_out, fc_out, mul_out = (m.buffer(256) for _ in range(4))
    fcw = rng.integers(-127, 128, size=(3, 8), dtype=np.int8)
    stream = program(
        tensor(0, "INT8", m.array(x), x.shape, zp=1),
        tensor(1, "INT8", m.array(dw), dw.shape),
        tensor(2, "INT8", dw_out, (1, 2, 2, 4), zp=-2),
        isa.encode("DEPTHWISE_CONV2D", input=0, filter=1, output=2, stride_h=2, stride_w=2, dilation_h=1,
                   dilation_w=1, pad_top=1, pad_left=1, depth_multiplier=2, multiplier=1 << 30, shift=-6,
                   act_min=-128, act_max=127),
        tensor(3, "INT8", pool_out, (1, 1, 1, 4), zp=-2),
        isa.encode("AVGPOOL", input=2, output=3, filter_h=2, filter_w=2, stride_h=1, stride_w=1,
                   act_min=-128, act_max=127),
        tensor(4, "INT8", dw_out, (1, 1, 2, 8), zp=-2),  # the depthwise output seen as 2 rows of 8
        tensor(5, "INT8", m.array(fcw), (1, 1, 3, 8)),
        tensor(6, "INT8", fc_out, (1, 1, 2, 3), zp=3),
        isa.encode("FULLY_CONNECTED", input=4, filter=5, output=6, multiplier=1 << 30, shift=-7,
                   act_min=-128, act_max=127),
        tensor(7, "INT8", mul_out, (1, 1, 2, 3), zp=4),
        isa.encode("MUL", input1=6, input2=6, output=7, output_multiplier=1 << 30, output_shift=-5,
                   act_min=-128, act_max=127),
    )  # fmt: skip
    res = run(m, stream)
    assert res.status == 0, res.error
    d = ref.depthwise(x.tolist(), dw.tolist(), None, 1, 0, 2, 2, 1, 1, 1, 1, 2, 2, 2, [1 << 30] * 4, [-6] * 4,
                      -2, -128, 127)  # fmt: skip
    assert m.read(dw_out, 16).view(np.int8).reshape(1, 2, 2, 4).tolist() == d
    p = ref.pool(d, 2, 2, 1, 1, 0, 0, 1, 1, -128, 127, average=True)
    assert m.read(pool_out, 4).view(np.int8).reshape(1, 1, 1, 4).tolist() == p
    rows = np.array(d).reshape(2, 8).tolist()
    f = ref.fully_connected(rows, fcw.tolist(), None, -2, 0, [1 << 30] * 3, [-7] * 3, 3, -128, 127)
    assert m.read(fc_out, 6).view(np.int8).reshape(2, 3).tolist() == f
    mm = [ref.mul_one(v, v, 3, 3, 1 << 30, -5, 4, -128, 127) for v in np.ravel(f).tolist()]
    assert m.read(mul_out, 6).view(np.int8).tolist() == mm


def test_faults_report_the_va() -> None:
    m = Machine()
    unmapped = 0x3000_0000
    res = run(m, program(tensor(0, "INT8", unmapped + 5, (1, 1, 1, 4)), isa.encode("FILL", dst=0, value=1)))
    assert (res.status, res.fault_va) == (-errno.EFAULT, unmapped + 5)
    ro = m.buffer(64, writable=False)
    src = m.buffer(64)
    res = run(
        m,
        program(tensor(0, "INT8", src, (8,)), tensor(1, "INT8", ro, (8,)), isa.encode("COPY", src=0, dst=1)),
    )
    assert (res.status, res.fault_va, res.cycles) == (-errno.EFAULT, ro, 3)
    res = CommandProcessor(m.memory).run(m.space.root, unmapped, 64)
    assert (res.status, res.fault_va) == (-errno.EFAULT, unmapped)
    big = (1 << hw.VA_BITS) - 4
    res = run(m, program(tensor(0, "INT32", big, (2,)), isa.encode("FILL", dst=0, value=1)))
    assert res.status == -errno.EFAULT and res.fault_va == big  # its first page is unmapped


def conv_program(**overrides: int) -> bytes:
    """A 1x2x2x1 CONV2D with a 1x1 filter, in place at VA 0x100000; ``overrides`` break one field."""
    fields = dict(
        input=0, filter=1, output=0, stride_h=1, stride_w=1, dilation_h=1, dilation_w=1,
        multiplier=1 << 30, act_min=-128, act_max=127,
    )  # fmt: skip
    return program(
        tensor(0, "INT8", 0x10_0000, (1, 2, 2, 1)),
        tensor(1, "INT8", 0x10_0000, (1, 1, 1, 1)),
        isa.encode("CONV2D", **{**fields, **overrides}),
    )


@pytest.mark.parametrize(
    "stream, why",
    [
        (program(isa.encode("FILL", dst=3, value=0)), "slot 3 is not defined"),
        (isa.encode("NOP"), "END"),
        (program(tensor(0, "INT8", 0x10_0000, (4,)), isa.encode("FILL", dst=0, value=300)), "does not fit"),
        (
            program(
                tensor(0, "INT8", 0x10_0000, (4,)),
                tensor(1, "UINT8", 0x10_0000, (4,)),
                isa.encode("COPY", src=0, dst=1),
            ),
            "dst is UINT8",
        ),
        (program(isa.encode("TENSOR", slot=16, dtype=0, va=0, n=1, h=1, w=1, c=1)), "slot 16"),
        (program(isa.encode("TENSOR", slot=0, dtype=9, va=0, n=1, h=1, w=1, c=1)), "dtype"),
        (program(isa.encode("TENSOR", slot=0, dtype=0, va=0, n=1, h=0, w=1, c=1)), ">= 1"),
        (program(isa.encode("TENSOR", slot=0, dtype=0, va=0, n=2**20, h=2**20, w=1, c=1)), "more than"),
        (conv_program(shift=31), "shift"),
        (conv_program(stride_h=0), "stride_h"),
    ],
)
def test_bad_streams_fail_with_eio(stream: bytes, why: str) -> None:
    m = Machine()
    m.buffer(4096)  # VA 0x100000, used by the streams above
    res = run(m, stream)
    assert res.status == -errno.EIO
    assert why in res.error


def test_disabled_opcode_and_bad_size() -> None:
    m = Machine()
    dst = m.buffer(16)
    stream = program(tensor(0, "INT8", dst, (4,)), isa.encode("FILL", dst=0, value=1))
    enabled = {i.opcode for i in isa.SPEC.instructions} - {isa.SPEC.by_name("FILL").opcode}
    res = run(m, stream, enabled=enabled)
    assert res.status == -errno.EIO and "disabled" in res.error and res.cycles == 2
    assert run(m, stream).status == 0
    assert CommandProcessor(m.memory).run(m.space.root, dst, 0).status == -errno.EIO
    corrupt = bytearray(stream)
    corrupt[1] = 1  # reserved header bits
    assert run(m, bytes(corrupt)).status == -errno.EIO


def test_wait_irq_and_abort() -> None:
    m = Machine()
    sem = m.buffer(4)
    stream = program(
        tensor(0, "INT32", sem, (1,)),
        isa.encode("IRQ", value=7),
        isa.encode("WAIT", sem=0, value=3),
        isa.encode("IRQ", value=9),
    )
    seen: list[int] = []

    def release() -> None:
        time.sleep(0.05)
        m.write(sem, np.array([3], dtype=np.int32))

    threading.Thread(target=release).start()
    res = run(m, stream, on_irq=seen.append)
    assert (res.status, res.cycles, seen) == (0, 5, [7, 9])

    m.write(sem, np.array([0], dtype=np.int32))
    abort = threading.Event()
    threading.Timer(0.05, abort.set).start()
    t0 = time.monotonic()
    res = run(m, stream, abort=abort)
    assert res.status == -errno.ECANCELED and time.monotonic() - t0 < 2


def test_gemm_is_exact_at_full_scale() -> None:
    # A MobileNet-sized 1x1 conv: K = 1024, uint8 extremes everywhere.
    inp = np.full((1, 2, 2, 1024), 255, dtype=np.uint8)
    filt = np.zeros((3, 1, 1, 1024), dtype=np.uint8)
    rq = nm.Requant(
        input_zp=0, filter_zp=255, multiplier=2**31 - 1, shift=-30, output_zp=0, act_min=-(2**31),
        act_max=2**31 - 1,
    )  # fmt: skip
    got = nm.conv2d(
        inp, filt, None, rq, stride_h=1, stride_w=1, dilation_h=1, dilation_w=1, pad_top=0, pad_left=0,
        out_h=2, out_w=2,
    )  # fmt: skip
    assert (got == ref.mbqm(-255 * 255 * 1024, 2**31 - 1, -30)).all()
