"""Executes one job: a command stream in a device address space.

The command processor fetches the stream through the job's MMU, decodes it
with :mod:`uapi.isa` (the one ISA codec), keeps the job's tensor-slot table
and runs each unit's numerics (:mod:`device_model.numerics`) on operands it
gathers through the MMU. It never raises: every outcome is a
:class:`JobResult` whose status is what the completion queue reports:

* 0 when the stream reached END;
* -EFAULT with ``fault_va`` when an access faulted in the MMU;
* -EIO for a malformed stream, an undefined slot, an operand of the wrong
  dtype or shape, bad parameters, or an opcode the firmware disabled;
* -ECANCELED when the abort event was set (a device reset).

An instruction that ran without a fault or an error binds itself (its operands, checks and
constant parameters) for the stream's next jobs in the same, unchanged page tables: see
:meth:`_Job.step` and docs/device_model.md, "Instruction binding".
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import NamedTuple

import numpy as np

from uapi import hw_layout as hw
from uapi import isa

from . import mac_array
from . import numerics as nm
from .binding import Bindings, LayerParams, StreamBindings, stream_bindings
from .bound_stream import BoundStream
from .memory import SystemMemory
from .mmu import MmuFault
from .tensor_access import MAX_TENSOR_ELEMENTS, NP_DTYPES, JobError, Tensor, TensorAccess, Translations

log = logging.getLogger(__name__)

MAX_CMD_SIZE = (
    hw.MAX_CMD_SIZE
)  # a larger stream is refused (-EIO) before it is fetched; firmware may lower it
PROGRAM_CACHE_ENTRIES = 64  # decoded streams kept (a model's partitions each have one)
TRANSLATION_CACHE_SPACES = 16  # address spaces whose tensor translations are kept between jobs
WAIT_POLL_S = 0.0005  # first WAIT poll interval; doubles up to WAIT_POLL_MAX_S
WAIT_POLL_MAX_S = 0.005

_BYTE_TYPES = ("INT8", "UINT8")
# A byte input's table index bits: int8 values index from value + 128 (the byte with its top bit flipped).
_INDEX_FLIP = {"INT8": 0x80, "UINT8": 0x00}


class JobResult(NamedTuple):
    """How a job ended, as the completion queue reports it (a tuple: one is made per job)."""

    status: int  # 0 or a negative errno
    fault_va: int = 0  # faulting VA when status is -EFAULT
    cycles: int = 0  # modelled cycles: instructions executed
    error: str = ""  # a human-readable reason for a non-zero status (debug only)


@dataclass
class JobProfile:
    """Where one job's device time went (collected only inside :func:`profile_jobs`)."""

    seconds: float  # wall time of CommandProcessor.run: fetch, decode, MMU traffic and numerics
    status: int
    cycles: int
    # per opcode, summed over the job (only while a profile_jobs(per_op=True) block is open)
    op_seconds: dict[str, float] = field(default_factory=dict)
    op_counts: dict[str, int] = field(default_factory=dict)


_profile_sinks: list[list[JobProfile]] = []
_per_op_sinks: list[list[JobProfile]] = []  # the sinks of _profile_sinks that time each opcode
_profile_lock = threading.Lock()


@contextmanager
def profile_jobs(per_op: bool = False) -> Iterator[list[JobProfile]]:
    """Collect a :class:`JobProfile` for every job any CommandProcessor runs inside the block.

    The benchmark uses it to split an invoke into device-model compute and
    the rest of the stack. Outside such a block a job pays for nothing but a
    list check. ``per_op`` also times each instruction by opcode (``op_seconds``,
    ``op_counts``): the jobs then take the instruction loop, not a bound stream's
    one call per run of C units, so their time is not what an unprofiled job takes.
    """
    sink: list[JobProfile] = []
    with _profile_lock:
        _profile_sinks.append(sink)
        if per_op:
            _per_op_sinks.append(sink)
    try:
        yield sink
    finally:
        with _profile_lock:
            _profile_sinks.remove(sink)
            if per_op:
                _per_op_sinks.remove(sink)


_NEVER_ABORTED = threading.Event()  # the abort event of jobs run without one; never set
_NOT_BOUND = "not every instruction is bound"  # StreamBindings.runner until a binding changes


class JobCancelled(Exception):
    """The abort event was set while the job ran."""


def _done(job: _Job) -> bool:
    """A bound instruction with nothing to do (NOP, FENCE)."""
    return True


def _same_values(values: np.ndarray) -> np.ndarray:
    """COPY's unit: the store writes the loaded values as they are."""
    return values


class _Job:
    """One running job: the units (``op_*``, one per opcode) decoding the running instruction's
    operands and parameters, on the job's tensor access (:class:`.tensor_access.TensorAccess`)
    and binding cache (:class:`.binding.Bindings`)."""

    def __init__(
        self,
        memory: SystemMemory,
        pt_root: int,
        enabled_opcodes: Collection[int] | None,
        abort: threading.Event,
        on_irq: Callable[[int], None] | None,
        translations: Translations | None = None,
        max_tensor_elements: int = MAX_TENSOR_ELEMENTS,
    ) -> None:
        # The job's three parts: its tensors in memory through the MMU (access), the binding cache
        # (bindings), and the units (this class's op_* methods, on the instruction being decoded).
        # The first two are made when the job first needs them: a stream run bound end to end
        # (BoundStream) needs neither.
        self.memory = memory
        self.pt_root = pt_root
        self.translations = translations if translations is not None else Translations(memory, pt_root)
        self.plans: dict = {}  # the stream's layer plans (Bindings.plans)
        self.bound: dict = {}  # the stream's bound instructions (Bindings.bound)
        self.max_tensor_elements = max_tensor_elements
        self.enabled = enabled_opcodes
        self.tensors: dict[int, Tensor | str] = {}  # TENSOR decoded per stream offset (shared per stream)
        self.program: list[isa.Instruction] = []  # the decoded stream
        self.abort = abort
        self.on_irq = on_irq
        self.slots: list[Tensor | None] = [None] * isa.SPEC.slots
        self.ins: isa.Instruction | None = None
        self.cursor = 0  # the running instruction's index while a BoundStream runs the job
        self.cycles = 0  # instructions executed, for the result of a job that fails

    @cached_property
    def access(self) -> TensorAccess:
        return TensorAccess(self.memory, self.pt_root, self.translations)

    @cached_property
    def bindings(self) -> Bindings:
        bindings = Bindings(self.access)
        bindings.plans, bindings.bound = self.plans, self.bound
        return bindings

    # --- operands -------------------------------------------------------------
    def tensor(self, field: str) -> Tensor:
        assert self.ins is not None
        slot = self.ins[field]
        t = self.slots[slot]
        if t is None:
            raise JobError(f"{field}: slot {slot} is not defined")
        return t

    def fail(self, message: str) -> JobError:
        assert self.ins is not None
        return JobError(f"{self.ins.op} at byte {self.ins.offset}: {message}")

    def expect(self, field: str, dtypes: Collection[str], shape: tuple[int, ...] | None = None) -> Tensor:
        t = self.tensor(field)
        if t.dtype not in dtypes:
            raise self.fail(f"{field} is {t.dtype}, expected {' or '.join(dtypes)}")
        if shape is not None and t.shape != shape:
            raise self.fail(f"{field} has shape {list(t.shape)}, expected {list(shape)}")
        return t

    def quant(self, cout: int) -> tuple[np.ndarray | int, np.ndarray | int]:
        """Requantization (multiplier, shift): per channel from the quant operand, or per tensor."""
        assert self.ins is not None
        if self.ins["flags"] & isa.SPEC.flags["PER_CHANNEL"]:
            q = self.load(self.expect("quant", ("INT32",), (1, 1, cout, 2)))
            return q[0, 0, :, 0].astype(np.int64), q[0, 0, :, 1].astype(np.int64)
        return self.ins["multiplier"], self.ins["shift"]

    def float_scales(self, cout: int) -> np.ndarray | None:
        """With FLOAT_SCALE, the float32 scales (per channel or one), else None; fails the job on a
        non-zero shift, a non-finite scale, or SINGLE_ROUNDING as well (two requantizations)."""
        assert self.ins is not None
        flags = self.ins["flags"]
        if not flags & isa.SPEC.flags["FLOAT_SCALE"]:
            return None
        if flags & isa.SPEC.flags.get("SINGLE_ROUNDING", 0):
            raise self.fail("FLOAT_SCALE and SINGLE_ROUNDING are both set")
        multiplier, shift = self.quant(cout)
        if np.any(np.asarray(shift) != 0):
            raise self.fail("FLOAT_SCALE with a non-zero shift")
        scale = np.asarray(multiplier, dtype=np.int64).astype(np.uint32).view(np.float32)
        if not np.isfinite(scale).all():
            raise self.fail("FLOAT_SCALE scale is not a finite float")
        return np.broadcast_to(scale, (cout,))

    def requant(
        self,
        inp: Tensor,
        filt: Tensor,
        out: Tensor,
        quant: tuple[np.ndarray | int, np.ndarray | int],
        single: bool,
    ) -> nm.Requant:
        """The layer's zero points and requantization: the operands' zero points, ``quant``'s
        multiplier and shift (:meth:`quant`; FLOAT_SCALE: :meth:`float_scales`' scales), the
        instruction's clamp, the output's dtype; ``single``: one rounding (SINGLE_ROUNDING)."""
        assert self.ins is not None
        multiplier, shift = quant
        cout = out.shape[3]
        scales = self.float_scales(cout)
        if scales is not None:  # onnxruntime's requantization
            multiplier, shift = scales, 0
        return nm.Requant(
            input_zp=inp.zero_point,
            filter_zp=filt.zero_point,
            multiplier=multiplier,
            shift=shift,
            output_zp=out.zero_point,
            act_min=self.ins["act_min"],
            act_max=self.ins["act_max"],
            out_dtype=out.np_dtype,
            single_rounding=single,
            float_scale=scales is not None,
        )

    def bias(self, cout: int) -> np.ndarray | None:
        assert self.ins is not None
        if self.ins["flags"] & isa.SPEC.flags["HAS_BIAS"]:
            return self.load(self.expect("bias", ("INT32",), (1, 1, 1, cout))).reshape(cout)
        return None

    def layer_params(self) -> LayerParams:
        """Where a bound layer reads :meth:`quant`'s and :meth:`bias`' parameters at each job."""
        assert self.ins is not None
        flags = self.ins["flags"]
        return LayerParams(
            (self.ins["multiplier"], self.ins["shift"]),
            self.tensor("quant") if flags & isa.SPEC.flags["PER_CHANNEL"] else None,
            self.tensor("bias") if flags & isa.SPEC.flags["HAS_BIAS"] else None,
        )

    def written_before(self, t: Tensor) -> bool:
        """Whether an instruction before the running one in the stream writes a byte of ``t``'s
        extent (device VAs, from the stream's TENSOR descriptors and its instructions' ``out``
        operands): ``t`` is then an activation, not a constant. Asked only while a plan is made."""
        assert self.ins is not None
        start, end = t.extent
        slots: dict[int, Tensor] = {}
        for ins in self.program:
            if ins.offset == self.ins.offset:
                break
            if ins.op == "TENSOR":
                got = self.tensors.get(ins.offset)
                if isinstance(got, Tensor):
                    slots[ins["slot"]] = got
                else:
                    slots.pop(ins["slot"], None)
                continue
            for f in ins.spec.operands:
                written = slots.get(ins[f.name]) if f.type == "out" else None
                if written is not None and written.extent[0] < end and start < written.extent[1]:
                    return True
        return False

    def load(self, t: Tensor) -> np.ndarray:
        return self.access.load(t)

    def store(self, t: Tensor, values: np.ndarray) -> None:
        self.access.store(t, values)

    @cached_property
    def mac_isa(self) -> int | None:
        """The MAC array variant this job's layers run on (None: numpy), chosen once per job
        (``VNPU_MAC_ARRAY`` may change between jobs)."""
        return mac_array.selected_isa()

    # --- units ------------------------------------------------------------------
    def op_NOP(self) -> None:  # noqa: N802 - named after the opcode
        self.bindings.binding = _done

    op_FENCE = op_NOP  # noqa: N815 - execution is in order, every write is visible at once

    def op_IRQ(self) -> None:  # noqa: N802
        assert self.ins is not None
        value = self.ins["value"]
        if self.on_irq is not None:
            self.on_irq(value)

        def irq(job: _Job) -> bool:
            if job.on_irq is not None:
                job.on_irq(value)
            return True

        self.bindings.binding = irq

    def op_WAIT(self) -> None:  # noqa: N802
        assert self.ins is not None
        sem = self.expect("sem", ("INT32",))
        if sem.shape != (1, 1, 1, 1):
            raise self.fail(f"sem has shape {list(sem.shape)}, expected one element")
        want = self.ins["value"]
        delay = WAIT_POLL_S
        while int(self.access.mmu.gather(sem.va, 4).view("<i4")[0]) != want:
            if self.abort.wait(delay):
                raise JobCancelled()
            delay = min(delay * 2, WAIT_POLL_MAX_S)

    def op_TENSOR(self) -> None:  # noqa: N802
        assert self.ins is not None
        slot = self.ins["slot"]
        if slot >= isa.SPEC.slots:
            raise self.fail(f"slot {slot} is not below {isa.SPEC.slots}")
        t = self.tensors.get(self.ins.offset)
        if t is None:
            try:
                t = Tensor.from_instruction(self.ins, self.max_tensor_elements)
            except JobError as e:
                t = str(e)
            self.tensors[self.ins.offset] = t
        if isinstance(t, str):
            raise JobError(t)
        self.slots[slot] = t

        def define(job: _Job, slot: int = slot, t: Tensor = t) -> bool:
            job.slots[slot] = t
            return True

        self.bindings.binding = define

    def _conv_common(self, depthwise: bool) -> None:
        assert self.ins is not None
        ins = self.ins
        inp = self.expect("input", _BYTE_TYPES)
        filt = self.expect("filter", _BYTE_TYPES)
        out = self.expect("output", _BYTE_TYPES)
        n, _, _, cin = inp.shape
        if depthwise:
            one, kh, kw, cout = filt.shape
            if one != 1:
                raise self.fail(f"filter has shape {list(filt.shape)}, expected [1, KH, KW, Cout]")
            if ins["depth_multiplier"] < 1 or cout != cin * ins["depth_multiplier"]:
                raise self.fail(
                    f"filter has {cout} channels, input {cin} x depth_multiplier {ins['depth_multiplier']}"
                )
        else:
            cout, kh, kw, fcin = filt.shape
            if fcin != cin:
                raise self.fail(f"filter has {fcin} input channels, the input has {cin}")
        if out.shape[0] != n or out.shape[3] != cout:
            raise self.fail(f"output has shape {list(out.shape)}, expected [{n}, OH, OW, {cout}]")
        quant = self.quant(cout)
        bias = self.bias(cout)
        weights = self.load(filt)
        rq = self.requant(inp, filt, out, quant, single=False)
        geometry = dict(
            stride_h=ins["stride_h"],
            stride_w=ins["stride_w"],
            dilation_h=ins["dilation_h"],
            dilation_w=ins["dilation_w"],
            pad_top=ins["pad_top"],
            pad_left=ins["pad_left"],
            out_h=out.shape[1],
            out_w=out.shape[2],
        )
        isa = self.mac_isa
        if isa is not None and not rq.float_scale:  # the C MAC array (numerics stays the reference)
            kind = mac_array.KIND_DEPTHWISE if depthwise else mac_array.KIND_CONV
            dm = ins["depth_multiplier"] if depthwise else 1
            mac = self.bindings.mac_plan(
                ins.offset,
                lambda: mac_array.plan_layer(
                    kind, weights, bias, rq, in_shape=inp.shape, in_dtype=inp.np_dtype,
                    geometry=tuple(geometry.values()), depth_multiplier=dm,
                ),
                weights, bias, rq.multiplier, rq.shift,
            )  # fmt: skip
            self.store(out, mac_array.run(mac, self.load(inp), isa))
            self.bindings.bind_mac(ins.offset, self.layer_params(), inp, filt, out, filt.shape, isa, mac)
            return
        build = nm.plan_depthwise if depthwise else nm.plan_gemm
        plan = self.bindings.plan(
            ins.offset,
            lambda: build(weights, bias, rq, in_dtype=inp.np_dtype),
            weights,
            bias,
            rq.multiplier,
            rq.shift,
        )
        if plan is not None:
            if depthwise:
                assert isinstance(plan, nm.DepthwisePlan)
                result = nm.run_depthwise_plan(
                    self.load(inp), plan, kh, kw, ins["depth_multiplier"], tuple(geometry.values())
                )
            else:
                assert isinstance(plan, nm.GemmPlan)
                result = nm.run_conv2d_plan(self.load(inp), plan, kh, kw, tuple(geometry.values()), weights)
        elif depthwise:
            dm = ins["depth_multiplier"]
            result = nm.depthwise_conv2d(
                self.load(inp), weights, bias, rq, depth_multiplier=dm, fast=False, **geometry
            )
        else:
            result = nm.conv2d(self.load(inp), weights, bias, rq, fast=False, **geometry)
        self.store(out, result)

    def op_CONV2D(self) -> None:  # noqa: N802
        self._conv_common(depthwise=False)

    def op_DEPTHWISE_CONV2D(self) -> None:  # noqa: N802
        self._conv_common(depthwise=True)

    def op_FULLY_CONNECTED(self) -> None:  # noqa: N802
        assert self.ins is not None
        ins = self.ins
        inp = self.expect("input", _BYTE_TYPES)
        filt = self.expect("filter", _BYTE_TYPES)
        out = self.expect("output", _BYTE_TYPES)
        rows = inp.shape[0] * inp.shape[1] * inp.shape[2]
        k = inp.shape[3]
        cout = filt.shape[0] * filt.shape[1] * filt.shape[2]
        if filt.shape[3] != k:
            raise self.fail(f"filter has depth {filt.shape[3]}, the input {k}")
        if out.shape[0] * out.shape[1] * out.shape[2] != rows or out.shape[3] != cout:
            raise self.fail(f"output has shape {list(out.shape)}, expected {rows} rows of {cout}")
        quant = self.quant(cout)
        weights = self.load(filt).reshape(cout, k)
        bias = self.bias(cout)
        # LiteRT's reference FULLY_CONNECTED rounds once (TFLITE_SINGLE_ROUNDING); the MAC array does both.
        single = bool(ins["flags"] & isa.SPEC.flags["SINGLE_ROUNDING"])
        rq = self.requant(inp, filt, out, quant, single)
        if rq.float_scale:  # onnxruntime's requantization
            x = self.load(inp).reshape(rows, k)
            self.store(out, nm.fully_connected(x, weights, bias, rq, fast=False))
            return
        mac_isa = self.mac_isa
        # Attention's Q.K^T and scores.V: a filter the stream writes is an activation (see also
        # Bindings.mac_plan and Bindings.plan: one that changes between jobs)
        activation = partial(self.written_before, filt)
        if mac_isa is not None:  # the C MAC array: a 1x1 convolution of rows x 1 x 1 x K
            filt4 = weights.reshape(cout, 1, 1, k)
            mac = self.bindings.mac_plan(
                ins.offset,
                lambda dynamic=False: mac_array.plan_layer(
                    mac_array.KIND_CONV, filt4, bias, rq, in_shape=(rows, 1, 1, k), in_dtype=inp.np_dtype,
                    dynamic=dynamic,
                ),
                filt4, bias, rq.multiplier, rq.shift, activation,
            )  # fmt: skip
            x = self.load(inp).reshape(rows, 1, 1, k)
            if mac.dynamic:
                self.store(out, mac_array.run_dynamic(mac, x, filt4, mac_isa))
            else:
                self.store(out, mac_array.run(mac, x, mac_isa))
            params = self.layer_params()
            self.bindings.bind_mac(
                ins.offset, params, inp, filt, out, (cout, 1, 1, k), mac_isa, mac, (rows, 1, 1, k)
            )
            return
        build = partial(nm.plan_gemm, weights, bias, rq, in_dtype=inp.np_dtype)
        plan = self.bindings.plan(
            ins.offset, build, weights, bias, rq.multiplier, rq.shift, activation=activation
        )
        x = self.load(inp).reshape(rows, k)
        if plan is not None:
            assert isinstance(plan, nm.GemmPlan)
            result = nm.run_fc_plan(x, plan, weights)
        else:
            result = nm.fully_connected(x, weights, bias, rq, fast=False)
        self.store(out, result)
        self.bindings.bind_gemm(ins.offset, self.layer_params(), inp, filt, out, (rows, k), rq)

    def _elementwise(self) -> tuple[Tensor, Tensor, Tensor]:
        out = self.expect("output", _BYTE_TYPES)
        in1 = self.expect("input1", _BYTE_TYPES, out.shape)
        in2 = self.expect("input2", _BYTE_TYPES, out.shape)
        return in1, in2, out

    def _add_sub(self, subtract: bool) -> None:
        assert self.ins is not None
        ins = self.ins
        in1, in2, out = self._elementwise()
        fn = partial(
            nm.add,
            input1_zp=in1.zero_point,
            input2_zp=in2.zero_point,
            left_shift=ins["left_shift"],
            input1_multiplier=ins["input1_multiplier"],
            input1_shift=ins["input1_shift"],
            input2_multiplier=ins["input2_multiplier"],
            input2_shift=ins["input2_shift"],
            output_multiplier=ins["output_multiplier"],
            output_shift=ins["output_shift"],
            output_zp=out.zero_point,
            act_min=ins["act_min"],
            act_max=ins["act_max"],
            subtract=subtract,
            out_dtype=out.np_dtype,
        )
        self.bindings.compute(out, fn, in1, in2)
        params = dict(fn.keywords)
        table = nm.add_table(in1.np_dtype, in2.np_dtype, params.pop("out_dtype"), **params)
        if table is not None:
            self.bindings.bind_lookup(out, (in1, in2), table, (0, 0), self.mac_isa)

    def op_ADD(self) -> None:  # noqa: N802
        self._add_sub(subtract=False)

    def op_SUB(self) -> None:  # noqa: N802
        self._add_sub(subtract=True)

    def op_MUL(self) -> None:  # noqa: N802
        assert self.ins is not None
        ins = self.ins
        in1, in2, out = self._elementwise()
        fn = partial(
            nm.mul,
            input1_zp=in1.zero_point,
            input2_zp=in2.zero_point,
            output_multiplier=ins["output_multiplier"],
            output_shift=ins["output_shift"],
            output_zp=out.zero_point,
            act_min=ins["act_min"],
            act_max=ins["act_max"],
            out_dtype=out.np_dtype,
        )
        self.bindings.compute(out, fn, in1, in2)
        params = dict(fn.keywords)
        table = nm.mul_table(in1.np_dtype, in2.np_dtype, params.pop("out_dtype"), **params)
        if table is not None:
            self.bindings.bind_lookup(out, (in1, in2), table, (0, 0), self.mac_isa)

    def _pool(self, fn: Callable[..., np.ndarray]) -> None:
        assert self.ins is not None
        ins = self.ins
        inp = self.expect("input", _BYTE_TYPES)
        out = self.expect("output", (inp.dtype,))
        if out.shape[0] != inp.shape[0] or out.shape[3] != inp.shape[3]:
            raise self.fail(f"output has shape {list(out.shape)}, input {list(inp.shape)}")
        if out.zero_point != inp.zero_point:
            raise self.fail(f"input zero point {inp.zero_point} differs from the output's {out.zero_point}")
        pool = partial(
            fn,
            filter_h=ins["filter_h"],
            filter_w=ins["filter_w"],
            stride_h=ins["stride_h"],
            stride_w=ins["stride_w"],
            pad_top=ins["pad_top"],
            pad_left=ins["pad_left"],
            out_h=out.shape[1],
            out_w=out.shape[2],
            act_min=ins["act_min"],
            act_max=ins["act_max"],
        )
        self.bindings.compute(out, pool, inp)
        geometry = (
            ins["filter_h"], ins["filter_w"], ins["stride_h"], ins["stride_w"], ins["pad_top"],
            ins["pad_left"], out.shape[1], out.shape[2],
        )  # fmt: skip
        act = (ins["act_min"], ins["act_max"])
        self.bindings.bind_pool(inp, out, geometry, act, fn is nm.avg_pool, self.mac_isa)

    def op_MAXPOOL(self) -> None:  # noqa: N802
        self._pool(nm.max_pool)

    def op_AVGPOOL(self) -> None:  # noqa: N802
        self._pool(nm.avg_pool)

    def op_LUT(self) -> None:  # noqa: N802
        inp = self.expect("input", _BYTE_TYPES)
        out = self.expect("output", tuple(NP_DTYPES), inp.shape)
        table = self.expect("table", (out.dtype,))
        if np.prod(table.shape) != 256:
            raise self.fail(f"table has shape {list(table.shape)}, expected 256 elements")
        self.bindings.compute(out, partial(nm.lut, signed_input=inp.dtype == "INT8"), inp, table)
        self.bindings.bind_lookup(out, (inp,), table, (_INDEX_FLIP[inp.dtype],), self.mac_isa)

    def op_LUT2(self) -> None:  # noqa: N802
        out = self.expect("output", tuple(NP_DTYPES))
        in1 = self.expect("input1", _BYTE_TYPES, out.shape)
        in2 = self.expect("input2", _BYTE_TYPES, out.shape)
        table = self.expect("table", (out.dtype,))
        if np.prod(table.shape) != 65536:
            raise self.fail(f"table has shape {list(table.shape)}, expected 65536 elements")
        self.bindings.compute(out, nm.lut2, in1, in2, table)
        flips = (_INDEX_FLIP[in1.dtype], _INDEX_FLIP[in2.dtype])
        self.bindings.bind_lookup(out, (in1, in2), table, flips, self.mac_isa)

    def op_SOFTMAX(self) -> None:  # noqa: N802
        assert self.ins is not None
        ins = self.ins
        inp = self.expect("input", _BYTE_TYPES)
        out = self.expect("output", _BYTE_TYPES, inp.shape)
        lowest = int(np.iinfo(out.np_dtype).min)
        if out.zero_point != lowest:
            raise self.fail(f"output zero point {out.zero_point}, expected {lowest} (scale 1/256)")
        params = {k: ins[k] for k in ("input_multiplier", "input_left_shift", "diff_min")}
        fn = nm.softmax if self.mac_isa is None else mac_array.softmax
        softmax = partial(fn, out_dtype=out.np_dtype, **params)
        self.bindings.compute(out, softmax, inp)
        self.bindings.bind_softmax(inp, out, params, self.mac_isa)

    def op_RESIZE_BILINEAR(self) -> None:  # noqa: N802
        assert self.ins is not None
        flags = self.ins["flags"]
        inp = self.expect("input", _BYTE_TYPES)
        out = self.expect("output", (inp.dtype,))
        if out.shape[0] != inp.shape[0] or out.shape[3] != inp.shape[3]:
            raise self.fail(f"output has shape {list(out.shape)}, input {list(inp.shape)}")
        resize = partial(
            nm.resize_bilinear
            if self.mac_isa is None
            else partial(mac_array.resize_bilinear, isa=self.mac_isa),
            out_h=out.shape[1],
            out_w=out.shape[2],
            align_corners=bool(flags & isa.SPEC.flags["ALIGN_CORNERS"]),
            half_pixel_centers=bool(flags & isa.SPEC.flags["HALF_PIXEL_CENTERS"]),
            single_rounding=bool(flags & isa.SPEC.flags["SINGLE_ROUNDING"]),
        )
        self.bindings.compute(out, resize, inp)

    def op_ARG_MAX(self) -> None:  # noqa: N802
        inp = self.expect("input", _BYTE_TYPES)
        out = self.expect("output", ("INT32",), (*inp.shape[:3], 1))
        self.bindings.compute(out, nm.arg_max, inp)

    def op_COPY(self) -> None:  # noqa: N802
        src = self.tensor("src")
        dst = self.expect("dst", (src.dtype,), src.shape)
        self.bindings.compute(dst, _same_values, src)
        self.bindings.bind_copy(src, dst, self.mac_isa)

    def op_FILL(self) -> None:  # noqa: N802
        assert self.ins is not None
        dst = self.tensor("dst")
        value = self.ins["value"]
        info = np.iinfo(dst.np_dtype)
        if not info.min <= value <= info.max:
            raise self.fail(f"value {value} does not fit {dst.dtype}")
        self.bindings.compute(dst, partial(np.full, dst.shape, value, dtype=dst.np_dtype))  # value fits

    # --- driver ------------------------------------------------------------------
    def execute(self, ins: isa.Instruction) -> None:
        opcode = ins.spec.opcode
        if self.enabled is not None and opcode not in self.enabled:
            raise JobError(f"{ins.op} at byte {ins.offset}: opcode {opcode:#04x} is disabled by the firmware")
        self.ins = ins
        bindings = self.bindings
        bindings.binding = None
        try:
            getattr(self, f"op_{ins.op}")()
        except ValueError as e:  # numerics refuse bad parameters with ValueError
            raise self.fail(str(e)) from None
        if bindings.binding is not None:  # it succeeded: the next job of this stream runs it bound
            bindings.bound[ins.offset] = bindings.binding

    def step(self, ins: isa.Instruction) -> None:
        """Run one instruction: bound if it was bound in an earlier job, else :meth:`execute`.

        An instruction binds itself only after it ran without a fault or an error, with every
        operand's translation kept; the binding lives in the address space's translation cache, so
        any change to the page tables it was made under drops it with the translations. Whatever
        a bound instruction checked at binding time (opcode enabled, slots, dtypes, shapes,
        addresses) depends only on the stream's bytes and those tables.
        """
        bound = self.bindings.bound.get(ins.offset)
        if bound is not None:
            try:
                if bound(self):
                    return
            except ValueError:  # the general path reports it, from the same instruction
                pass
        self.execute(ins)


class CommandProcessor:
    """Runs jobs against one system memory.

    ``enabled_opcodes`` is the set the booted firmware enables (None: all); ``max_cmd_size``
    and ``max_tensor_elements`` are its limits section (at most the device's ceilings).
    """

    def __init__(
        self,
        memory: SystemMemory,
        enabled_opcodes: Collection[int] | None = None,
        max_cmd_size: int = MAX_CMD_SIZE,
        max_tensor_elements: int = MAX_TENSOR_ELEMENTS,
    ) -> None:
        self.memory = memory
        self.enabled_opcodes = None if enabled_opcodes is None else frozenset(enabled_opcodes)
        self.max_cmd_size = min(max_cmd_size, MAX_CMD_SIZE)
        self.max_tensor_elements = min(max_tensor_elements, MAX_TENSOR_ELEMENTS)
        # Decoded streams by content: a model's job is the same stream every invoke.
        self._programs: OrderedDict[
            bytes, tuple[list[isa.Instruction] | str, dict[int, Tensor | str], dict]
        ] = OrderedDict()
        self._programs_lock = threading.Lock()
        self._translations: OrderedDict[int, Translations] = OrderedDict()  # by pt_root

    def _translations_for(self, pt_root: int) -> Translations:
        """The address space's translation cache if its page tables are unchanged, else a new one."""
        with self._programs_lock:
            cache = self._translations.get(pt_root)
            if cache is not None:
                self._translations.move_to_end(pt_root)
        if cache is not None and cache.still_valid():
            return cache
        cache = Translations(self.memory, pt_root)
        with self._programs_lock:
            self._translations[pt_root] = cache
            while len(self._translations) > TRANSLATION_CACHE_SPACES:
                self._translations.popitem(last=False)
        return cache

    def _decode(self, stream: bytes) -> tuple[list[isa.Instruction], dict[int, Tensor | str], dict]:
        """The decoded stream (cached by its bytes), its shared TENSOR cache and layer plans."""
        with self._programs_lock:
            entry = self._programs.get(stream)
            if entry is not None:
                self._programs.move_to_end(stream)
        if entry is None:
            try:
                program: list[isa.Instruction] | str = isa.decode(stream)
            except isa.IsaError as e:
                program = f"malformed command stream: {e}"
            entry = (program, {}, {})
            with self._programs_lock:
                self._programs[stream] = entry
                while len(self._programs) > PROGRAM_CACHE_ENTRIES:
                    self._programs.popitem(last=False)
        if isinstance(entry[0], str):
            raise JobError(entry[0])
        return entry[0], entry[1], entry[2]

    def run(
        self,
        pt_root: int,
        cmd_va: int,
        cmd_size: int,
        abort: threading.Event | None = None,
        on_irq: Callable[[int], None] | None = None,
    ) -> JobResult:
        """Execute the stream at ``cmd_va`` in the address space at ``pt_root``. Never raises."""
        if not _profile_sinks:
            return self._run(pt_root, cmd_va, cmd_size, abort, on_irq, None)
        start = time.perf_counter()
        profile = JobProfile(0.0, 0, 0)
        result = self._run(pt_root, cmd_va, cmd_size, abort, on_irq, profile if _per_op_sinks else None)
        _record(profile, start, result)
        return result

    def prepare(self, pt_root: int, stream: bytes) -> PreparedJob | None:
        """``stream``, as a job in the address space at ``pt_root`` already ran it, ready to run
        again without its fetch, decode and binding look-ups (:class:`PreparedJob`); None unless
        an earlier job left every instruction of it bound in these unchanged page tables."""
        with self._programs_lock:
            entry = self._programs.get(stream)
            translations = self._translations.get(pt_root)
        if entry is None or isinstance(entry[0], str) or translations is None:
            return None
        program, tensors, plans = entry
        got = translations.bindings.get(id(program))
        if got is None or got[0] is not program:
            return None
        runner = self._bound_stream(program, got[1], mac_array.selected_isa())
        if runner is None:
            return None
        prepared = PreparedJob(self, pt_root, translations, program, tensors, plans, got[1], runner)
        return prepared if prepared.current() else None

    @staticmethod
    def _bound_stream(
        program: list[isa.Instruction], bound: StreamBindings, mac_isa: int | None
    ) -> BoundStream | None:
        """The stream's :class:`BoundStream` once every instruction is bound (kept with the
        bindings until one changes), else None; rebuilt when the job's MAC array variant
        ``mac_isa`` is not the one the stream's C units were built for."""
        runner = bound.runner
        stale = isinstance(runner, BoundStream) and runner.groups and runner.mac_isa != mac_isa
        if runner is None or stale:
            runner = bound.runner = BoundStream.build(program, bound, mac_isa) or _NOT_BOUND
        return runner if isinstance(runner, BoundStream) else None

    def _new_job(
        self,
        pt_root: int,
        abort: threading.Event,
        on_irq: Callable[[int], None] | None,
        translations: Translations,
    ) -> _Job:
        return _Job(
            self.memory, pt_root, self.enabled_opcodes, abort, on_irq, translations, self.max_tensor_elements
        )

    def _run(
        self,
        pt_root: int,
        cmd_va: int,
        cmd_size: int,
        abort: threading.Event | None,
        on_irq: Callable[[int], None] | None,
        profile: JobProfile | None,
    ) -> JobResult:
        abort = abort if abort is not None else _NEVER_ABORTED
        job = None
        try:
            if pt_root % 4096 or not 0 <= pt_root < self.memory.size:
                raise JobError(f"page-table root {pt_root:#x} is not a page of system memory")
            if not 0 < cmd_size <= self.max_cmd_size:
                raise JobError(f"command stream size {cmd_size} is not in (0, {self.max_cmd_size}]")
            job = self._new_job(pt_root, abort, on_irq, self._translations_for(pt_root))
            # The stream's runs come from the address space's translation cache (an unchanged
            # stream of an unchanged space is not walked again) and are read as plain bytes.
            translations = job.translations
            runs = translations.runs.get((cmd_va, cmd_size, False))
            if runs is None:
                runs = job.access.runs(cmd_va, cmd_size, False)
            view = self.memory.view
            stream = bytes(view(*runs[0])) if len(runs) == 1 else b"".join(view(*r) for r in runs)
            program, job.tensors, job.plans = self._decode(stream)
            job.program = program
            bound = job.bound = stream_bindings(translations, program, PROGRAM_CACHE_ENTRIES)
            runner = None if profile is not None else self._bound_stream(program, bound, job.mac_isa)
            return self._execute(job, runner, abort, profile)
        except Exception as e:  # noqa: BLE001 - every outcome is a JobResult (_failed)
            return _failed(e, job)

    def _execute(
        self, job: _Job, runner: BoundStream | None, abort: threading.Event, profile: JobProfile | None
    ) -> JobResult:
        """Run the decoded, looked-up job: its bound stream if it has one, instruction by
        instruction from where that stopped (or from the start). Raises what _failed turns into
        the job's result."""
        program, bound = job.program, job.bound
        resume = 0
        if runner is not None:
            try:
                stop = runner.run(job, abort)
            except BaseException:
                job.cycles = job.cursor + 1
                raise
            if stop is None:
                return JobResult(0, 0, runner.end_index + 1)
            for ins in program[:stop]:  # the slots the stream had defined by then
                if ins.op == "TENSOR":
                    bound[ins.offset](job)
            resume = job.cycles = stop
        for ins in program[resume:] if resume else program:
            if abort.is_set():
                raise JobCancelled()
            job.cycles += 1
            if ins.op == "END":
                return JobResult(0, 0, job.cycles)
            if profile is None:
                job.step(ins)
                continue
            t0 = time.perf_counter()
            try:
                job.step(ins)
            finally:
                op = ins.op
                profile.op_seconds[op] = profile.op_seconds.get(op, 0.0) + time.perf_counter() - t0
                profile.op_counts[op] = profile.op_counts.get(op, 0) + 1
        raise JobError("command stream ended without END")  # decode() guarantees END; be safe


@dataclass(eq=False)
class PreparedJob:
    """A stream that ran in an address space with every instruction bound, kept to run again as
    it is: its decoded program, bindings and bound stream, without the command fetch, the decode
    cache's and the binding cache's look-ups of a job from the ring.

    The driver that asks for it (the shim's replayed jobs) hands over the same stream bytes each
    time; what the device worked out itself is checked at every run (:meth:`current`): the space's
    page tables byte for byte, as for any job, the same translation cache and bindings, and the
    MAC array variant the bound stream was built for. When any of it moved on, the job is not
    run this way, and the driver submits it through the ring."""

    processor: CommandProcessor
    pt_root: int
    translations: Translations
    program: list[isa.Instruction]
    tensors: dict[int, Tensor | str]
    plans: dict
    bound: StreamBindings
    runner: BoundStream

    def current(self) -> bool:
        """Whether the job would run as prepared: nothing it was worked out from has changed."""
        translations = self.translations
        got = translations.bindings.get(id(self.program))
        return (
            self.processor._translations.get(self.pt_root) is translations
            and got is not None
            and got[1] is self.bound
            and self.bound.runner is self.runner
            and not _per_op_sinks  # a per-opcode profile times the instruction loop
            and (not self.runner.groups or self.runner.mac_isa == mac_array.selected_isa())
            and translations.still_valid()
        )

    def run(
        self, abort: threading.Event | None = None, on_irq: Callable[[int], None] | None = None
    ) -> JobResult:
        """Run the job as a job from the ring would run: its result, never an exception. Only
        right after :meth:`current` said True, with the core's lock held since."""
        start = time.perf_counter() if _profile_sinks else 0.0
        abort = abort if abort is not None else _NEVER_ABORTED
        job = self.processor._new_job(self.pt_root, abort, on_irq, self.translations)
        job.program, job.tensors, job.plans, job.bound = self.program, self.tensors, self.plans, self.bound
        try:
            result = self.processor._execute(job, self.runner, abort, None)
        except Exception as e:  # noqa: BLE001 - every outcome is a JobResult
            result = _failed(e, job)
        if _profile_sinks:
            _record(JobProfile(0.0, 0, 0), start, result)
        return result


def _record(profile: JobProfile, start: float, result: JobResult) -> None:
    """Complete ``profile`` of a job that started at ``start`` and give it to every sink."""
    profile.seconds = time.perf_counter() - start
    profile.status = result.status
    profile.cycles = result.cycles
    with _profile_lock:
        for sink in _profile_sinks:
            sink.append(profile)


def _failed(e: Exception, job: _Job | None) -> JobResult:
    """The result of a job that raised ``e`` (call from its except clause)."""
    cycles = job.cycles if job is not None else 0
    if isinstance(e, MmuFault):
        return JobResult(-errno.EFAULT, e.va, cycles, str(e))
    if isinstance(e, JobError):
        return JobResult(-errno.EIO, 0, cycles, str(e))
    if isinstance(e, JobCancelled):
        return JobResult(-errno.ECANCELED, 0, cycles, "aborted by a device reset")
    # A model bug must fail the job, not kill the device.
    log.exception("command processor: unexpected error")
    return JobResult(-errno.EIO, 0, cycles, f"internal error: {e!r}")
