"""A stream whose every instruction is bound runs as a BoundStream (runs of C units as one call, no
per-instruction loop) from its second job on, with the same bytes, status and cycle count as a fresh
processor's job; where a step does not complete the job goes on instruction by instruction."""

from __future__ import annotations

import errno
import threading

import numpy as np
import pytest
from c_kernels import c_variants, needs_c

from device_model import mac_array
from device_model.bound_stream import BoundStream
from device_model.command_processor import CommandProcessor
from uapi import isa

from .helpers import Machine, program, tensor
from .test_bindings import CIN, COUT, Network

c_variants()  # a build failure fails this module


def runner(cp: CommandProcessor, m: Machine) -> object:
    """The stream's runner as the address space's binding cache holds it."""
    cache = cp._translations[m.space.root]
    (entry,) = cache.bindings.values()
    return entry[1].runner


def contiguous_network() -> Network:
    return Network(Machine(), np.random.default_rng(21), scattered=False)


@needs_c
def test_second_job_runs_as_one_group_of_c_units() -> None:
    net = contiguous_network()
    warm = CommandProcessor(net.m.memory)
    first = net.check(warm)
    assert first.status == 0
    assert net.check(warm) == first  # the same status and cycles
    stream = runner(warm, net.m)
    assert isinstance(stream, BoundStream)
    program_ops = [i.op for i in isa.decode(net.stream)]
    assert stream.end_index == program_ops.index("END") and first.cycles == stream.end_index + 1
    # CONV2D, DEPTHWISE_CONV2D, FULLY_CONNECTED and ADD are consecutive C units: one step
    assert [len(s.indices) for s in stream.steps] == [4] and stream.steps[0].group is not None
    rng = np.random.default_rng(5)
    for _ in range(3):  # new inputs every job: each job computes them again
        net.m.write(net.inp, rng.integers(-128, 128, size=H_W_CIN, dtype=np.int8))
        assert net.check(warm).status == 0


H_W_CIN = 9 * 10 * CIN


@needs_c
@pytest.mark.parametrize("which", ["filt", "dw_filt", "fc_filt", "quant"])
def test_parameters_rewritten_mid_stream_take_the_general_path(which: str) -> None:
    """A layer whose filter or quantization changed stops the group at that layer; the job goes on
    instruction by instruction (the slots the stream defined before it set again) and is exact;
    the layer binds again and the next job runs as a BoundStream again. A GEMM's int8 filter on the
    VNNI kernels is packed from memory at every run instead: the stream stays bound, still exact."""
    net = contiguous_network()
    warm = CommandProcessor(net.m.memory)
    net.check(warm)
    net.check(warm)
    assert isinstance(runner(warm, net.m), BoundStream)
    rng = np.random.default_rng(8)
    va = getattr(net, which)
    if which == "quant":
        net.m.write(va + 8, np.array([1 << 29, -8], dtype=np.int32))  # channel 1's multiplier and shift
    else:
        size = {"filt": COUT * 9 * CIN, "dw_filt": 9 * COUT, "fc_filt": 8 * COUT}[which]
        net.m.write(va, rng.integers(-127, 128, size=size, dtype=np.int8))
    assert net.check(warm).status == 0  # exact: the same bytes as a processor planning afresh
    if which in ("filt", "fc_filt") and mac_array.selected_isa() == mac_array.ISA_AVX512VNNI:
        assert isinstance(runner(warm, net.m), BoundStream)  # nothing declined
        return
    assert runner(warm, net.m) is None  # the layer bound again: the runner is made anew
    assert net.check(warm).status == 0
    assert isinstance(runner(warm, net.m), BoundStream)


@needs_c
def test_variant_change_rebuilds_the_stream_without_c_units(monkeypatch: pytest.MonkeyPatch) -> None:
    net = contiguous_network()
    warm = CommandProcessor(net.m.memory)
    net.check(warm)
    net.check(warm)
    monkeypatch.setenv(mac_array.ENV, "numpy")
    for _ in range(3):  # the C units decline, numpy's path binds itself; the result is the same
        assert net.check(warm).status == 0
    stream = runner(warm, net.m)
    assert isinstance(stream, BoundStream) and stream.mac_isa is None
    assert all(step.group is None for step in stream.steps)


def test_aborted_job_is_cancelled_before_any_step() -> None:
    net = contiguous_network()
    warm = CommandProcessor(net.m.memory)
    net.check(warm)
    net.check(warm)
    before = [net.m.read(va, size).tobytes() for va, size in net.outputs]
    for va, size in net.outputs:
        net.m.write(va, bytes(size))
    aborted = threading.Event()
    aborted.set()
    res = warm.run(net.m.space.root, net.cmd, len(net.stream), abort=aborted)
    assert res.status == -errno.ECANCELED and res.cycles == 0
    assert all(net.m.read(va, size).tobytes() == bytes(size) for va, size in net.outputs)
    assert before != [bytes(size) for _, size in net.outputs]


def test_irq_steps_run_between_groups() -> None:
    """An IRQ between two C units: the groups on each side of it, the IRQ raised every job, in order."""
    m = Machine()
    rng = np.random.default_rng(4)
    shape = (1, 4, 6, 8)
    size = int(np.prod(shape))
    a, b, table = m.buffer(size), m.buffer(size), m.buffer(256)
    outs = [m.buffer(size) for _ in range(2)]
    stream = program(
        tensor(0, "INT8", a, shape),
        tensor(1, "INT8", b, shape),
        tensor(2, "INT8", table, (256,)),
        tensor(3, "INT8", outs[0], shape),
        tensor(4, "INT8", outs[1], shape),
        isa.encode("MUL", input1=0, input2=1, output=3, output_multiplier=1 << 30, output_shift=-6,
                   act_min=-128, act_max=127),
        isa.encode("IRQ", value=7),
        isa.encode("LUT", input=3, table=2, output=4),
        isa.encode("IRQ", value=8),
    )  # fmt: skip
    cmd = m.buffer(len(stream), stream)
    warm = CommandProcessor(m.memory)
    for _ in range(3):
        m.write(a, rng.integers(-128, 128, size, dtype=np.int8))
        m.write(b, rng.integers(-128, 128, size, dtype=np.int8))
        m.write(table, rng.integers(-128, 128, 256, dtype=np.int8))
        results = []
        for cp in (CommandProcessor(m.memory), warm):
            irqs: list[int] = []
            res = cp.run(m.space.root, cmd, len(stream), on_irq=irqs.append)
            results.append((res, irqs, [m.read(va, size).tobytes() for va in outs]))
        assert results[0] == results[1] and results[0][1] == [7, 8]
    stream_runner = runner(warm, m)
    assert isinstance(stream_runner, BoundStream)
    if mac_array.selected_isa() is not None:
        assert [s.group is not None for s in stream_runner.steps] == [True, False, True, False]
    # An abort raised by the first IRQ: cancelled at the next instruction, as the fresh processor is.
    cancelled = []
    for cp in (CommandProcessor(m.memory), warm):
        abort = threading.Event()
        for va in outs:
            m.write(va, bytes(size))
        res = cp.run(m.space.root, cmd, len(stream), abort=abort, on_irq=lambda _, e=abort: e.set())
        cancelled.append((res, [m.read(va, size).tobytes() for va in outs]))
    assert cancelled[0] == cancelled[1] and cancelled[0][0].status == -errno.ECANCELED
