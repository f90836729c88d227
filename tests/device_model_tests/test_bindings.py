"""Bound instructions (an instruction's operands, checks and plan kept between jobs of one stream)
compute and fail exactly as the general path: every job below is compared with the same job on a
fresh CommandProcessor, which has no bindings, no plans and no translations cached."""

from __future__ import annotations

import errno

import numpy as np
import pytest

from device_model import binding, mac_array
from device_model import numerics as nm
from device_model.command_processor import CommandProcessor, JobResult
from uapi import hw_layout as hw
from uapi import isa

from .helpers import Machine, program, tensor

FLAGS = isa.SPEC.flags
CIN, COUT, H, W = 48, 48, 9, 10  # the input and the depthwise output span two pages


def scattered_buffer(m: Machine, size: int) -> int:
    """A buffer whose pages are not physically contiguous (a loaded tensor is gathered run by run)."""
    npages = -(-size // hw.PAGE_SIZE)
    va = m.next_va
    m.next_va += (npages + 1) * hw.PAGE_SIZE
    for i in range(npages):
        page = m.allocator.alloc_pages(2)[1]  # the first of the two is left out of the mapping
        m.space.map(va + i * hw.PAGE_SIZE, [page])
    return va


class Network:
    """CONV2D (per-channel, bias) -> DEPTHWISE_CONV2D -> FULLY_CONNECTED -> ADD, in one stream."""

    def __init__(
        self, m: Machine, rng: np.random.Generator, fc_flags: int = 0, scattered: bool = True
    ) -> None:
        self.m = m
        self.scattered = scattered
        # Scattered: the input and the depthwise output are gathered and scattered page by page;
        # contiguous: every operand is one physical run (layers bind as mac_array.BoundRun).
        place = (lambda size: scattered_buffer(m, size)) if scattered else m.buffer
        self.inp = place(H * W * CIN)
        m.write(self.inp, rng.integers(-128, 128, size=H * W * CIN, dtype=np.int8))
        self.filt = m.array(rng.integers(-127, 128, size=(COUT, 3, 3, CIN), dtype=np.int8))
        self.bias = m.array(rng.integers(-3000, 3000, size=COUT, dtype=np.int32))
        quant = np.stack([rng.integers(1 << 29, 1 << 30, COUT), rng.integers(-9, -6, COUT)], axis=1)
        self.quant = m.array(quant.astype(np.int32))
        self.dw_filt = m.array(rng.integers(-127, 128, size=(1, 3, 3, COUT), dtype=np.int8))
        self.fc_filt = m.array(rng.integers(-127, 128, size=(8, COUT), dtype=np.int8))
        self.conv_out = m.buffer(H * W * COUT)
        self.dw_out = place(H * W * COUT)
        self.fc_out = m.buffer(H * W * 8)
        self.sum = m.buffer(H * W * 8)
        geometry = dict(stride_h=1, stride_w=1, dilation_h=1, dilation_w=1, pad_top=1, pad_left=1)
        self.stream = program(
            tensor(0, "INT8", self.inp, (1, H, W, CIN), zp=3),
            tensor(1, "INT8", self.filt, (COUT, 3, 3, CIN)),
            tensor(2, "INT32", self.bias, (1, 1, 1, COUT)),
            tensor(3, "INT32", self.quant, (1, 1, COUT, 2)),
            tensor(4, "INT8", self.conv_out, (1, H, W, COUT), zp=-2),
            isa.encode(
                "CONV2D", flags=FLAGS["HAS_BIAS"] | FLAGS["PER_CHANNEL"], input=0, filter=1, bias=2,
                quant=3, output=4, act_min=-128, act_max=127, **geometry,
            ),
            tensor(5, "INT8", self.dw_filt, (1, 3, 3, COUT)),
            tensor(6, "INT8", self.dw_out, (1, H, W, COUT), zp=1),
            isa.encode(
                "DEPTHWISE_CONV2D", input=4, filter=5, output=6, depth_multiplier=1, multiplier=1 << 30,
                shift=-8, act_min=-100, act_max=127, **geometry,
            ),
            tensor(7, "INT8", self.fc_filt, (8, 1, 1, COUT)),
            tensor(8, "INT8", self.fc_out, (1, H, W, 8), zp=-5),
            isa.encode(
                "FULLY_CONNECTED", flags=fc_flags, input=6, filter=7, output=8, multiplier=1 << 30, shift=-9,
                act_min=-128, act_max=127,
            ),
            tensor(9, "INT8", self.sum, (1, H, W, 8)),
            isa.encode(
                "ADD", input1=8, input2=8, output=9, left_shift=20, input1_multiplier=1 << 30,
                input2_multiplier=1 << 30, output_multiplier=1 << 30, input1_shift=0, input2_shift=0,
                output_shift=-19, act_min=-128, act_max=127,
            ),
        )  # fmt: skip
        self.cmd = m.buffer(len(self.stream), self.stream)
        self.outputs = [(self.conv_out, H * W * COUT), (self.dw_out, H * W * COUT), (self.sum, H * W * 8)]

    def run(self, cp: CommandProcessor) -> tuple[JobResult, list[bytes]]:
        for va, size in self.outputs:  # a job that fails must not look right from a previous one
            self.m.write(va, bytes(size))
        res = self.m.space.root, self.cmd, len(self.stream)
        result = cp.run(*res)
        return result, [self.m.read(va, size).tobytes() for va, size in self.outputs]

    def check(self, warm: CommandProcessor) -> JobResult:
        """Run the stream fresh and warm: the same result and the same bytes."""
        want = self.run(CommandProcessor(self.m.memory))
        got = self.run(warm)
        assert got[0] == want[0]
        assert got[1] == want[1]
        return got[0]


def bound_offsets(cp: CommandProcessor, m: Machine) -> set[int]:
    """The stream offsets of the instructions bound in the address space's translation cache."""
    cache = cp._translations[m.space.root]
    return {offset for _, bound in cache.bindings.values() for offset in bound}


def unit_offsets(cp: CommandProcessor, m: Machine, unit_type: type) -> set[int]:
    """The offsets of the instructions bound as a C unit of ``unit_type`` on memory."""
    cache = cp._translations[m.space.root]
    return {
        offset
        for _, bound in cache.bindings.values()
        for offset, fn in bound.items()
        if isinstance(getattr(fn, "unit", None), unit_type)
    }


def direct_offsets(cp: CommandProcessor, m: Machine, kind: str = "run_direct") -> set[int]:
    """The offsets of the instructions bound as one C call into memory: layers as a
    mac_array.BoundRun (``run_direct``), table units as a mac_array.BoundLookup (``run_lookup``)."""
    cache = cp._translations[m.space.root]
    return {
        offset for _, bound in cache.bindings.values() for offset, fn in bound.items() if fn.__name__ == kind
    }


@pytest.fixture(
    params=[
        ("two-roundings", "scattered"),
        ("single-rounding", "scattered"),
        ("two-roundings", "contiguous"),
        ("single-rounding", "contiguous"),
    ],
    ids="-".join,
)
def net(request: pytest.FixtureRequest) -> Network:
    """The network with its FULLY_CONNECTED rounding twice or once (LiteRT's), its operands gathered
    page by page or each in one physical run."""
    rounding, placement = request.param
    flags = FLAGS["SINGLE_ROUNDING"] if rounding == "single-rounding" else 0
    return Network(Machine(), np.random.default_rng(7), flags, scattered=placement == "scattered")


def test_bound_layers_read_rewritten_inputs_filters_and_quantization(net: Network) -> None:
    warm = CommandProcessor(net.m.memory)
    assert net.check(warm).status == 0
    program = isa.decode(net.stream)
    if mac_array.selected_isa() is not None:  # every layer has a plan and binds itself
        layers = {i.offset for i in program if i.op != "END"}
        assert layers == bound_offsets(warm, net.m)
        # Where every operand is one physical run, the MAC array's layers bind as one C call.
        on_mac = {"CONV2D", "DEPTHWISE_CONV2D", "FULLY_CONNECTED"}  # one rounding or two
        expected = set() if net.scattered else {i.offset for i in program if i.op in on_mac}
        assert direct_offsets(warm, net.m) == expected
    rng = np.random.default_rng(8)
    rewrites = [
        (net.inp, rng.integers(-128, 128, size=H * W * CIN, dtype=np.int8)),
        (net.filt, rng.integers(-127, 128, size=COUT * 9 * CIN, dtype=np.int8)),
        (net.quant + 8, np.array([1 << 29, -8], dtype=np.int32)),  # channel 1's multiplier and shift
        (net.bias, np.arange(COUT, dtype=np.int32) * 1000),
        (net.dw_filt, rng.integers(-127, 128, size=9 * COUT, dtype=np.int8)),
        (net.fc_filt, rng.integers(-127, 128, size=8 * COUT, dtype=np.int8)),
    ]
    for va, data in rewrites:
        net.m.write(va, data)
        assert net.check(warm).status == 0


def test_bad_quantization_written_after_binding_fails_the_job_the_same_way(net: Network) -> None:
    warm = CommandProcessor(net.m.memory)
    assert net.check(warm).status == 0
    net.m.write(net.quant + 4, np.array([99], dtype=np.int32))  # channel 0's shift out of range
    res = net.check(warm)
    assert res.status == -errno.EIO and "CONV2D" in res.error


def test_remap_and_permissions_after_binding_take_effect_at_the_same_instruction(net: Network) -> None:
    m = net.m
    warm = CommandProcessor(m.memory)
    assert net.check(warm).status == 0
    # The input's second page moves to another physical page holding other bytes.
    second = net.inp + hw.PAGE_SIZE
    m.space.unmap(second, 1)
    m.space.map(second, m.allocator.alloc_pages(1))
    m.write(second, np.full(H * W * CIN - hw.PAGE_SIZE, -7, dtype=np.int8))
    assert net.check(warm).status == 0
    # The depthwise output's second page becomes read-only: that layer faults there.
    page = m.space.unmap(net.dw_out + hw.PAGE_SIZE, 1)
    m.space.map(net.dw_out + hw.PAGE_SIZE, page, writable=False)
    res = net.check(warm)
    assert (res.status, res.fault_va) == (-errno.EFAULT, net.dw_out + hw.PAGE_SIZE)
    m.space.unmap(net.dw_out + hw.PAGE_SIZE, 1)
    m.space.map(net.dw_out + hw.PAGE_SIZE, page)
    assert net.check(warm).status == 0
    # The filter is unmapped: a read fault at its VA.
    m.space.unmap(net.fc_filt, 1)
    res = net.check(warm)
    assert (res.status, res.fault_va) == (-errno.EFAULT, net.fc_filt)


def test_mac_array_variant_changed_between_jobs(net: Network, monkeypatch: pytest.MonkeyPatch) -> None:
    warm = CommandProcessor(net.m.memory)
    assert net.check(warm).status == 0
    monkeypatch.setenv(mac_array.ENV, "numpy")
    assert net.check(warm).status == 0
    monkeypatch.setenv(mac_array.ENV, "avx2")
    assert net.check(warm).status == 0


def test_bound_units_read_rewritten_inputs_and_tables() -> None:
    """MUL, MAXPOOL, AVGPOOL, LUT, LUT2, SOFTMAX, RESIZE_BILINEAR, ARG_MAX, an in-place COPY, FILL
    and IRQ: bound after the first job, each reads its inputs (and tables) again every job; the
    table, pooling and softmax units as one C call into memory each."""
    m = Machine()
    rng = np.random.default_rng(3)
    shape = (1, 4, 6, 8)
    size = int(np.prod(shape))
    a, b = m.buffer(size), m.buffer(size)
    table, table2 = m.buffer(256), m.buffer(65536)
    outs = [m.buffer(size) for _ in range(6)] + [m.buffer(4 * 4 * 6), m.buffer(size * 4), m.buffer(64)]
    pool = dict(filter_h=2, filter_w=2, stride_h=2, stride_w=2, act_min=-128, act_max=127)
    stream = program(
        tensor(0, "INT8", a, shape),
        tensor(1, "INT8", b, shape),
        tensor(2, "INT8", table, (256,)),
        tensor(3, "INT8", table2, (65536,)),
        *[tensor(4 + i, "INT8", va, shape) for i, va in enumerate(outs[:4])],
        tensor(8, "INT8", outs[4], (1, 2, 3, 8)),
        tensor(9, "INT8", outs[5], (1, 2, 3, 8)),
        tensor(10, "INT32", outs[6], (1, 4, 6, 1)),
        tensor(11, "INT8", outs[7], (1, 8, 12, 8)),
        tensor(12, "INT8", outs[3], shape, zp=-128),
        tensor(13, "INT32", outs[8], (1, 1, 1, 3)),
        isa.encode("MUL", input1=0, input2=1, output=4, output_multiplier=1 << 30, output_shift=-6,
                   act_min=-128, act_max=127),
        isa.encode("LUT", input=4, table=2, output=5),
        isa.encode("LUT2", input1=0, input2=5, table=3, output=6),
        isa.encode("MAXPOOL", input=6, output=8, **pool),
        isa.encode("AVGPOOL", input=0, output=9, **pool),
        isa.encode("SOFTMAX", input=1, output=12, input_multiplier=1 << 30, input_left_shift=20,
                   diff_min=-3000),
        isa.encode("RESIZE_BILINEAR", input=5, output=11),
        isa.encode("ARG_MAX", input=6, output=10),
        isa.encode("COPY", src=4, dst=4),
        isa.encode("FILL", dst=13, value=-9),
        isa.encode("ADD", input1=5, input2=0, output=5, left_shift=20, input1_multiplier=1 << 30,
                   input2_multiplier=1 << 30, output_multiplier=1 << 30, input1_shift=0, input2_shift=0,
                   output_shift=-19, act_min=-128, act_max=127),  # in place
        isa.encode("IRQ", value=5),
    )  # fmt: skip
    cmd = m.buffer(len(stream), stream)
    sizes = [size] * 4 + [48, 48, 4 * 4 * 6, size * 4, 12]

    def run(cp: CommandProcessor) -> tuple[JobResult, list[bytes], list[int]]:
        for va, n in zip(outs, sizes, strict=True):
            m.write(va, bytes(n))
        irqs: list[int] = []
        res = cp.run(m.space.root, cmd, len(stream), on_irq=irqs.append)
        return res, [m.read(va, n).tobytes() for va, n in zip(outs, sizes, strict=True)], irqs

    warm = CommandProcessor(m.memory)
    for _ in range(3):
        m.write(a, rng.integers(-128, 128, size, dtype=np.int8))
        m.write(b, rng.integers(-128, 128, size, dtype=np.int8))
        m.write(table, rng.integers(-128, 128, 256, dtype=np.int8))
        m.write(table2, rng.integers(-128, 128, 65536, dtype=np.int8))
        want = run(CommandProcessor(m.memory))
        assert want[0].status == 0, want[0].error
        assert run(warm) == want
    ops = {i.offset: i.op for i in isa.decode(stream)}
    assert {ops[offset] for offset in bound_offsets(warm, m)} == set(ops.values()) - {"END"}
    if mac_array.selected_isa() is not None:  # table and pooling units bind as one C call into memory
        lookups = {ops[offset] for offset in direct_offsets(warm, m, "run_lookup")}
        assert lookups == {"MUL", "LUT", "LUT2", "ADD"}
        assert {ops[offset] for offset in unit_offsets(warm, m, mac_array.BoundPool)} == {
            "MAXPOOL",
            "AVGPOOL",
        }
        assert {ops[offset] for offset in unit_offsets(warm, m, mac_array.BoundSoftmax)} == {"SOFTMAX"}


def test_table_units_with_broadcast_and_transposed_inputs_bind_as_one_c_call() -> None:
    """MUL by a per-row scale (stride 0 along the channels), ADD of a transposed input, LUT of a
    broadcast row and LUT2 of both: each binds as one strided C lookup and equals a fresh processor
    from the same memory in every job; an in-place ADD whose strided input lies in the output's
    bytes keeps the loading binding (the lookup would read bytes it already wrote)."""
    m = Machine()
    rng = np.random.default_rng(12)
    rows, cols = 6, 8
    shape = (1, 1, rows, cols)
    x, t = m.buffer(rows * cols), m.buffer(rows * cols)  # t holds a [cols, rows] matrix
    scale, row = m.buffer(rows), m.buffer(cols)
    table, table2 = m.buffer(256), m.buffer(65536)
    outs = [m.buffer(rows * cols) for _ in range(5)]
    add = dict(left_shift=20, input1_multiplier=1 << 30, input2_multiplier=1 << 30, output_multiplier=1 << 30,
               input1_shift=0, input2_shift=0, output_shift=-19, act_min=-128, act_max=127)  # fmt: skip
    stream = program(
        tensor(0, "INT8", x, shape),
        tensor(1, "INT8", scale, shape, strides=(0, 0, 1, 0)),  # one value per row
        tensor(2, "INT8", t, shape, strides=(0, 0, 1, rows)),  # the transpose of t
        tensor(3, "INT8", row, shape, strides=(0, 0, 0, 1)),  # one row for every row
        tensor(4, "INT8", table, (256,)),
        tensor(5, "INT8", table2, (65536,)),
        *[tensor(6 + i, "INT8", va, shape) for i, va in enumerate(outs)],
        tensor(11, "INT8", outs[4], shape, strides=(0, 0, 1, rows)),  # outs[4] read transposed
        isa.encode("MUL", input1=0, input2=1, output=6, output_multiplier=1 << 30, output_shift=-6,
                   act_min=-128, act_max=127),
        isa.encode("ADD", input1=6, input2=2, output=7, **add),
        isa.encode("LUT", input=3, table=4, output=8),
        isa.encode("LUT2", input1=2, input2=1, table=5, output=9),
        isa.encode("ADD", input1=10, input2=11, output=10, **add),  # in place, its transpose as input2
    )  # fmt: skip
    cmd = m.buffer(len(stream), stream)

    def run(cp: CommandProcessor) -> list[bytes]:
        res = cp.run(m.space.root, cmd, len(stream))
        assert res.status == 0, res.error
        return [m.read(va, rows * cols).tobytes() for va in outs]

    warm = CommandProcessor(m.memory)
    for _ in range(3):
        sizes = (
            (x, rows * cols),
            (t, rows * cols),
            (scale, rows),
            (row, cols),
            (table, 256),
            (table2, 65536),
        )
        inputs = [(va, rng.integers(-128, 128, n, dtype=np.int8)) for va, n in sizes]
        square = rng.integers(-128, 128, rows * cols, dtype=np.int8)
        for va, data in inputs:
            m.write(va, data)
        m.write(outs[4], square)
        want = run(CommandProcessor(m.memory))
        for va, data in inputs:
            m.write(va, data)
        m.write(outs[4], square)
        assert run(warm) == want
    if mac_array.selected_isa() is not None:
        ops = {i.offset: i.op for i in isa.decode(stream)}
        in_place = max(offset for offset, op in ops.items() if op == "ADD")
        lookups = direct_offsets(warm, m, "run_lookup")
        assert {ops[offset] for offset in lookups} == {"MUL", "ADD", "LUT", "LUT2"}
        assert in_place not in lookups and in_place in bound_offsets(warm, m)


def test_copies_into_slices_of_a_concatenation_bind_as_one_c_copy() -> None:
    """A concatenation's COPYs into channel slices of its output (a strided destination) bind as
    C copies that write the slice's elements and not the gaps between them: the other slice's bytes
    and the padding past the last channel keep what they hold. An INT32 slice (4-byte elements), and
    a copy whose source lies inside its destination's extent, which keeps the general path, and a
    copy between dense tensors, which is a C copy too."""
    m = Machine()
    rng = np.random.default_rng(13)
    h, w, c1, c2, pad = 5, 6, 3, 4, 2
    total = c1 + c2 + pad  # channels of the concatenation's buffer, the last `pad` never written
    a, b = m.buffer(h * w * c1), m.buffer(h * w * c2)
    cat = m.buffer(h * w * total)
    ia, icat = m.buffer(h * w * 2 * 4), m.buffer(h * w * 3 * 4)
    dense = m.buffer(h * w * c1)
    row, pix = w * total, total
    stream = program(
        tensor(0, "INT8", a, (1, h, w, c1)),
        tensor(1, "INT8", b, (1, h, w, c2)),
        tensor(2, "INT8", cat, (1, h, w, c1), strides=(h * row, row, pix, 1)),
        tensor(3, "INT8", cat + c1, (1, h, w, c2), strides=(h * row, row, pix, 1)),
        tensor(4, "INT32", ia, (1, h, w, 2)),
        tensor(5, "INT32", icat + 4, (1, h, w, 2), strides=(h * w * 12, w * 12, 12, 4)),
        tensor(6, "INT8", cat + 1, (1, h, w, 2), strides=(h * row, row, pix, 1)),  # inside cat
        tensor(7, "INT8", cat + c1 + c2, (1, h, w, 2), strides=(h * row, row, pix, 1)),
        isa.encode("COPY", src=0, dst=2),
        isa.encode("COPY", src=1, dst=3),
        isa.encode("COPY", src=4, dst=5),
        isa.encode("COPY", src=6, dst=7),  # its source is in its destination's extent
        tensor(8, "INT8", dense, (1, h, w, c1)),
        isa.encode("COPY", src=0, dst=8),
    )  # fmt: skip
    cmd = m.buffer(len(stream), stream)

    def run(cp: CommandProcessor) -> list[bytes]:
        m.write(cat, np.full(h * w * total, 77, np.int8))  # the gaps: never written by a copy
        m.write(icat, np.full(h * w * 3, -5, np.int32))
        res = cp.run(m.space.root, cmd, len(stream))
        assert res.status == 0, res.error
        return [
            m.read(va, n).tobytes()
            for va, n in ((cat, h * w * total), (icat, h * w * 12), (dense, h * w * c1))
        ]

    warm = CommandProcessor(m.memory)
    for _ in range(3):
        av = rng.integers(-128, 128, (h, w, c1), dtype=np.int8)
        bv = rng.integers(-128, 128, (h, w, c2), dtype=np.int8)
        iv = rng.integers(-(2**31), 2**31, (h, w, 2), dtype=np.int64).astype(np.int32)
        m.write(a, av)
        m.write(b, bv)
        m.write(ia, iv)
        want = run(CommandProcessor(m.memory))
        assert run(warm) == want
        got = np.frombuffer(want[0], np.int8).reshape(h, w, total)
        assert np.array_equal(got[..., :c1], av) and np.array_equal(got[..., c1 : c1 + c2], bv)
        assert np.array_equal(got[..., c1 + c2 :], av[..., 1:3])  # the last copy: from inside cat
        ints = np.frombuffer(want[1], np.int32).reshape(h, w, 3)
        assert np.array_equal(ints[..., 1:], iv) and np.all(ints[..., 0] == -5)
        assert want[2] == av.tobytes()
    if mac_array.selected_isa() is not None:
        ops = [i.offset for i in isa.decode(stream) if i.op == "COPY"]
        assert direct_offsets(warm, m, "run_copy") == set(ops[:3]) | {ops[4]}
        assert ops[3] not in bound_offsets(warm, m)  # the general path, every job


def test_fully_connected_with_a_transposed_filter_binds_as_one_c_call() -> None:
    """Attention's Q K^T: a FULLY_CONNECTED whose filter is the transposed view of a matrix in memory
    binds as a BoundRun that compares the filter's extent; a filter rewritten between jobs is seen
    (the plan is rebuilt), every job equal to a fresh processor's."""
    m = Machine()
    rng = np.random.default_rng(14)
    rows, k, cout = 6, 16, 12
    x = m.buffer(rows * k)
    keys = m.buffer(k * cout)  # [k, cout] in memory: the filter [cout, k] is its transpose
    out = m.buffer(rows * cout)
    stream = program(
        tensor(0, "INT8", x, (1, 1, rows, k), zp=-3),
        tensor(1, "INT8", keys, (1, 1, cout, k), strides=(0, 0, 1, cout)),
        tensor(2, "INT8", out, (1, 1, rows, cout), zp=5),
        isa.encode("FULLY_CONNECTED", flags=FLAGS["SINGLE_ROUNDING"], input=0, filter=1, output=2,
                   multiplier=1 << 30, shift=-9, act_min=-128, act_max=127),
    )  # fmt: skip
    cmd = m.buffer(len(stream), stream)
    warm = CommandProcessor(m.memory)
    m.write(x, rng.integers(-128, 128, rows * k, dtype=np.int8))
    for job in range(4):
        if job != 1:  # job 1 runs bound on the same filter; the others see a new one
            m.write(keys, rng.integers(-127, 128, k * cout, dtype=np.int8))
        m.write(out, bytes(rows * cout))
        want = CommandProcessor(m.memory).run(m.space.root, cmd, len(stream))
        expected = m.read(out, rows * cout).tobytes()
        m.write(out, bytes(rows * cout))
        assert warm.run(m.space.root, cmd, len(stream)) == want and want.status == 0
        assert m.read(out, rows * cout).tobytes() == expected
    if mac_array.selected_isa() is not None:
        (fc,) = [i.offset for i in isa.decode(stream) if i.op == "FULLY_CONNECTED"]
        assert direct_offsets(warm, m) == {fc}


def test_layer_writing_over_its_own_input_is_not_computed_in_place() -> None:
    """A layer whose output overlaps its input keeps the loading binding (the C kernels would read
    bytes they already overwrote); every job equals a fresh processor's from the same memory."""
    m = Machine()
    rng = np.random.default_rng(9)
    size = H * W * COUT
    buf = m.buffer(size, rng.integers(-128, 128, size=size, dtype=np.int8))
    filt = m.array(rng.integers(-127, 128, size=(1, 3, 3, COUT), dtype=np.int8))
    stream = program(
        tensor(0, "INT8", buf, (1, H, W, COUT), zp=2),
        tensor(1, "INT8", filt, (1, 3, 3, COUT)),
        isa.encode(
            "DEPTHWISE_CONV2D", input=0, filter=1, output=0, depth_multiplier=1, multiplier=1 << 30, shift=-7,
            act_min=-128, act_max=127, stride_h=1, stride_w=1, dilation_h=1, dilation_w=1, pad_top=1,
            pad_left=1,
        ),
    )  # fmt: skip
    cmd = m.buffer(len(stream), stream)
    warm = CommandProcessor(m.memory)
    for _ in range(3):
        before = m.read(buf, size).tobytes()
        assert CommandProcessor(m.memory).run(m.space.root, cmd, len(stream)).status == 0
        want = m.read(buf, size).tobytes()
        assert want != before
        m.write(buf, before)
        assert warm.run(m.space.root, cmd, len(stream)).status == 0
        assert m.read(buf, size).tobytes() == want
    if mac_array.selected_isa() is not None:
        assert bound_offsets(warm, m) and not direct_offsets(warm, m)


VARIANTS = [
    pytest.param(
        name,
        marks=()
        if name == "numpy" or any(mac_array.ISA_NAMES[i] == name for i in mac_array.cpu_isas())
        else pytest.mark.skip(reason=f"this CPU cannot run the {name} kernels"),
    )
    for name in ("numpy", *mac_array.ISA_NAMES.values())
]


def fc_plan(cp: CommandProcessor, m: Machine, offset: int) -> tuple[bytes, object]:
    """The plan slot (digest, plan) of the layer at ``offset`` in the stream's plans."""
    (entry,) = cp._programs.values()
    return entry[2][offset]


@pytest.mark.parametrize("variant", VARIANTS)
def test_attention_filter_the_stream_writes_is_packed_at_each_run(
    variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attention's Q.K^T: one FULLY_CONNECTED writes the keys, the next reads them transposed as its
    filter. From the first job that layer's plan is dynamic (no copy of the keys, no digest of them:
    the C kernels pack them at each run), the keys' projection keeps its constant-weight plan, and
    every job with a new input equals a fresh processor's."""
    monkeypatch.setenv(mac_array.ENV, variant)
    m = Machine()
    rng = np.random.default_rng(21)
    rows, k, heads = 16, 32, 16
    x, q = m.buffer(rows * k), m.buffer(rows * heads)
    wk = m.array(rng.integers(-127, 128, size=(heads, k), dtype=np.int8))
    keys, scores = m.buffer(rows * heads), m.buffer(rows * rows)
    stream = program(
        tensor(0, "INT8", x, (1, 1, rows, k), zp=2),
        tensor(1, "INT8", wk, (1, 1, heads, k)),
        tensor(2, "INT8", keys, (1, 1, rows, heads), zp=-11),
        isa.encode("FULLY_CONNECTED", input=0, filter=1, output=2, multiplier=1 << 30, shift=-8,
                   act_min=-128, act_max=127),
        tensor(3, "INT8", q, (1, 1, rows, heads), zp=-9),
        tensor(4, "INT8", keys, (1, 1, rows, heads), strides=(0, 0, heads, 1), zp=-11),
        tensor(5, "INT8", scores, (1, 1, rows, rows), zp=-1),
        isa.encode("FULLY_CONNECTED", input=3, filter=4, output=5, multiplier=1 << 30, shift=-7,
                   act_min=-128, act_max=127),
    )  # fmt: skip
    cmd = m.buffer(len(stream), stream)
    project, attend = [i.offset for i in isa.decode(stream) if i.op == "FULLY_CONNECTED"]
    warm = CommandProcessor(m.memory)
    digests = []
    real_digest = binding.param_digest
    monkeypatch.setattr(binding, "param_digest", lambda *p: digests.append(p[0].nbytes) or real_digest(*p))
    for _ in range(4):
        m.write(x, rng.integers(-128, 128, rows * k, dtype=np.int8))
        m.write(q, rng.integers(-128, 128, rows * heads, dtype=np.int8))
        m.write(scores, bytes(rows * rows))
        want = CommandProcessor(m.memory).run(m.space.root, cmd, len(stream))
        expected = m.read(scores, rows * rows).tobytes()
        m.write(scores, bytes(rows * rows))
        digests.clear()
        assert warm.run(m.space.root, cmd, len(stream)) == want and want.status == 0
        assert m.read(scores, rows * rows).tobytes() == expected
        slot = fc_plan(warm, m, attend)
        if variant == "numpy":
            assert slot == (binding.DYNAMIC, None)
            assert digests == [heads * k]  # the projection's constant weights alone
        else:
            assert isinstance(slot[1], mac_array.MacPlan) and slot[1].dynamic
            assert not fc_plan(warm, m, project)[1].dynamic
            assert digests == []
    if variant != "numpy":
        assert unit_offsets(warm, m, mac_array.BoundDynamic) == {attend}
        assert unit_offsets(warm, m, mac_array.BoundRun) == {project}


@pytest.mark.parametrize("variant", VARIANTS)
def test_filter_that_changes_between_jobs_becomes_dynamic(
    variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter no instruction of the stream writes (an input, an earlier job's output) has a
    constant-weight plan until it changes between jobs; from then on the layer's plan is dynamic and
    runs bound on every new filter without a rebuild. A filter that does not change keeps its plan."""
    monkeypatch.setenv(mac_array.ENV, variant)
    m = Machine()
    rng = np.random.default_rng(22)
    rows, k, cout = 5, 24, 20
    x, filt, const, out, out2 = (
        m.buffer(size) for size in (rows * k, cout * k, cout * k, rows * cout, rows * cout)
    )
    m.write(const, rng.integers(-128, 128, cout * k, dtype=np.int8))
    stream = program(
        tensor(0, "INT8", x, (1, 1, rows, k), zp=4),
        tensor(1, "INT8", filt, (1, 1, cout, k), strides=(0, 0, 1, cout), zp=-3),  # [k, cout] transposed
        tensor(2, "INT8", out, (1, 1, rows, cout), zp=1),
        isa.encode("FULLY_CONNECTED", input=0, filter=1, output=2, multiplier=1 << 30, shift=-9,
                   act_min=-128, act_max=127),
        tensor(3, "INT8", const, (1, 1, cout, k), zp=0),
        tensor(4, "INT8", out2, (1, 1, rows, cout), zp=1),
        isa.encode("FULLY_CONNECTED", input=0, filter=3, output=4, multiplier=1 << 30, shift=-9,
                   act_min=-128, act_max=127),
    )  # fmt: skip
    cmd = m.buffer(len(stream), stream)
    changing, constant = [i.offset for i in isa.decode(stream) if i.op == "FULLY_CONNECTED"]
    warm = CommandProcessor(m.memory)
    kept = None
    for job in range(5):
        m.write(x, rng.integers(-128, 128, rows * k, dtype=np.int8))
        m.write(filt, rng.integers(-128, 128, cout * k, dtype=np.int8))
        want = CommandProcessor(m.memory).run(m.space.root, cmd, len(stream))
        expected = m.read(out, rows * cout).tobytes() + m.read(out2, rows * cout).tobytes()
        assert warm.run(m.space.root, cmd, len(stream)) == want and want.status == 0
        assert m.read(out, rows * cout).tobytes() + m.read(out2, rows * cout).tobytes() == expected
        slot = fc_plan(warm, m, changing)
        if variant == "numpy":
            assert (slot[0] == binding.DYNAMIC) == (job > 0)
            assert isinstance(fc_plan(warm, m, constant)[1], nm.GemmPlan)
            continue
        assert slot[1].dynamic == (job > 0)
        assert not fc_plan(warm, m, constant)[1].dynamic
        if job == 1:
            kept = slot[1]
        elif job > 1:
            assert slot[1] is kept  # no rebuild for a new filter
