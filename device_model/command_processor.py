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
import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property, partial

import numpy as np

from uapi import hw_layout as hw
from uapi import isa

from . import mac_array
from . import numerics as nm
from .memory import PhysicalAddressError, SystemMemory
from .mmu import VA_LIMIT, Mmu, MmuFault

log = logging.getLogger(__name__)

MAX_CMD_SIZE = (
    hw.MAX_CMD_SIZE
)  # a larger stream is refused (-EIO) before it is fetched; firmware may lower it
PROGRAM_CACHE_ENTRIES = 64  # decoded streams kept (a model's partitions each have one)
TRANSLATION_CACHE_SPACES = 16  # address spaces whose tensor translations are kept between jobs
MAX_TENSOR_ELEMENTS = hw.MAX_TENSOR_ELEMENTS  # broadcast tensors could claim exabytes; firmware may lower it
WAIT_POLL_S = 0.0005  # first WAIT poll interval; doubles up to WAIT_POLL_MAX_S
WAIT_POLL_MAX_S = 0.005

_NP_DTYPES = {"INT8": np.dtype("i1"), "UINT8": np.dtype("u1"), "INT32": np.dtype("<i4")}
_BYTE_TYPES = ("INT8", "UINT8")
# A byte input's table index bits: int8 values index from value + 128 (the byte with its top bit flipped).
_INDEX_FLIP = {"INT8": 0x80, "UINT8": 0x00}


@dataclass(frozen=True)
class JobResult:
    """How a job ended, as the completion queue reports it."""

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
    op_seconds: dict[str, float] = field(default_factory=dict)  # per opcode, summed over the job
    op_counts: dict[str, int] = field(default_factory=dict)


_profile_sinks: list[list[JobProfile]] = []
_profile_lock = threading.Lock()


@contextmanager
def profile_jobs() -> Iterator[list[JobProfile]]:
    """Collect a :class:`JobProfile` for every job any CommandProcessor runs inside the block.

    The benchmark uses it to split an invoke into device-model compute and
    the rest of the stack. Outside such a block a job pays for nothing but a
    list check.
    """
    sink: list[JobProfile] = []
    with _profile_lock:
        _profile_sinks.append(sink)
    try:
        yield sink
    finally:
        with _profile_lock:
            _profile_sinks.remove(sink)


_REFUSED = b"refused"  # the digest slot of a layer whose plan was refused (never a SHA-1 digest)
_NEVER_ABORTED = threading.Event()  # the abort event of jobs run without one; never set


# An instruction bound to its job-independent state: it runs on a job and returns False when it
# cannot (a layer's parameters changed), and the instruction then takes the general path.
Bound = Callable[["_Job"], bool]
Loader = Callable[[], np.ndarray]
Storer = Callable[[np.ndarray], None]
# A bound layer's plan run: (job, filter, bias, multiplier, shift, input loader) -> its output, or
# None when the plan in the slot was not made from these parameters.
LayerRun = Callable[["_Job", np.ndarray, "np.ndarray | None", object, object, Loader], "np.ndarray | None"]


class JobError(Exception):
    """A job fails with -EIO; the message names the instruction and the problem."""


class JobCancelled(Exception):
    """The abort event was set while the job ran."""


@dataclass(frozen=True)
class Tensor:
    """A decoded TENSOR descriptor."""

    dtype: str
    va: int
    shape: tuple[int, int, int, int]
    strides: tuple[int, int, int, int]
    zero_point: int

    @property
    def np_dtype(self) -> np.dtype:
        return _NP_DTYPES[self.dtype]

    @cached_property  # a frozen dataclass: computed once per descriptor
    def extent(self) -> tuple[int, int]:
        last = sum((d - 1) * s for d, s in zip(self.shape, self.strides, strict=True))
        return self.va, self.va + last + self.np_dtype.itemsize

    @cached_property
    def dense(self) -> bool:
        """True if the elements tile [va, va + nbytes) in C order."""
        expected = []
        step = self.np_dtype.itemsize
        for d in reversed(self.shape):
            expected.append(step)
            step *= d
        return all(
            s == e or d == 1 for s, e, d in zip(self.strides, reversed(expected), self.shape, strict=True)
        )

    @classmethod
    def from_instruction(cls, ins: isa.Instruction, max_elements: int = MAX_TENSOR_ELEMENTS) -> Tensor:
        dtype = isa.SPEC.dtype_by_code(ins["dtype"])
        if dtype is None or dtype.name not in _NP_DTYPES:
            raise JobError(f"TENSOR at byte {ins.offset}: unknown dtype {ins['dtype']}")
        try:
            isa.tensor_extent(ins.fields)
        except isa.IsaError as e:
            raise JobError(f"TENSOR at byte {ins.offset}: {e}") from None
        elements = ins["n"] * ins["h"] * ins["w"] * ins["c"]
        if elements > max_elements:
            raise JobError(f"TENSOR at byte {ins.offset}: {elements} elements, more than {max_elements}")
        return cls(
            dtype=dtype.name,
            va=ins["va"],
            shape=(ins["n"], ins["h"], ins["w"], ins["c"]),
            strides=(ins["stride_n"], ins["stride_h"], ins["stride_w"], ins["stride_c"]),
            zero_point=ins["zero_point"],
        )


class _Translations:
    """Physical runs of one address space's tensors, kept across jobs while its page tables stay the same.

    A cached run depends on the L1 table at ``pt_root`` and the L2 tables its range goes
    through; each is remembered byte for byte. A job reuses the cache only if every remembered
    table is unchanged (a few 4 KiB compares), so a remap, unmap or permission change by the
    kernel drops it. Only successful translations are cached: faults are re-evaluated.
    """

    def __init__(self, memory: SystemMemory, pt_root: int) -> None:
        self.memory = memory
        self.pt_root = pt_root
        self.tables: dict[int, bytes] = {}  # table physical address -> its bytes when cached
        self.runs: dict[tuple[int, int, bool], list[tuple[int, int]]] = {}
        # Bound instructions per decoded stream (see _Job.step), dropped with these translations.
        self.bindings: dict[int, tuple[object, dict[int, Bound]]] = {}

    def bound(self, program: object) -> dict[int, Bound]:
        """The bound instructions of ``program`` (a decoded stream), by stream offset."""
        entry = self.bindings.get(id(program))
        if entry is None or entry[0] is not program:
            if len(self.bindings) >= PROGRAM_CACHE_ENTRIES:  # streams evicted from the program cache
                self.bindings.clear()
            entry = (program, {})
            self.bindings[id(program)] = entry
        return entry[1]

    def _table(self, pa: int) -> bytes | None:
        try:
            return bytes(self.memory.view(pa, hw.PT_ENTRIES * 8))
        except PhysicalAddressError:
            return None

    def still_valid(self) -> bool:
        return all(self._table(pa) == content for pa, content in self.tables.items())

    def remember(self, va: int, size: int) -> bool:
        """Record the tables [va, va + size) goes through; False if one cannot be read."""
        l1 = self.tables.get(self.pt_root) or self._table(self.pt_root)
        if l1 is None:
            return False
        self.tables[self.pt_root] = l1
        entries = np.frombuffer(l1, dtype="<u8")
        for index in range(va >> hw.L1_SHIFT, ((va + size - 1) >> hw.L1_SHIFT) + 1):
            pa = int(entries[index]) & hw.PTE_ADDR_MASK
            if pa not in self.tables:
                table = self._table(pa)
                if table is None:
                    return False
                self.tables[pa] = table
        return True


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two physical runs (pa, bytes) share a byte."""
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def _done(job: _Job) -> bool:
    """A bound instruction with nothing to do (NOP, FENCE)."""
    return True


def _same_values(values: np.ndarray) -> np.ndarray:
    """COPY's unit: the store writes the loaded values as they are."""
    return values


def _saturated(t: Tensor, values: np.ndarray) -> np.ndarray:
    """``values`` (any integer array of t's shape) in t's dtype and shape, C-contiguous, saturated."""
    if values.dtype == t.np_dtype:  # the numerics already saturated to the output's dtype
        return np.ascontiguousarray(values).reshape(t.shape)
    info = np.iinfo(t.np_dtype)
    return np.clip(values, info.min, info.max).astype(t.np_dtype).reshape(t.shape)


def param_digest(*params: np.ndarray | int | None) -> bytes:
    """SHA-1 of the parameters' dtypes, shapes and bytes (None and ints included), in order.

    A layer plan is reused only while this is unchanged. SHA-1 with the CPU's SHA instructions
    runs at ~2 GB/s (MobileNetV1's 4.3 MB of weights: ~2.4 ms an invoke); a collision would need a
    deliberately crafted filter from the job's owner, who can only corrupt its own results.
    """
    h = hashlib.sha1(usedforsecurity=False)
    for p in params:
        if p is None:
            h.update(b"N")
            continue
        a = np.asarray(p)
        h.update(repr((a.dtype.str, a.shape)).encode())
        a = np.ascontiguousarray(a)  # a view of memory in one run already is: no copy
        h.update(a.reshape(-1).view(np.uint8))
    return h.digest()


class _Job:
    """The state of one running job."""

    def __init__(
        self,
        memory: SystemMemory,
        pt_root: int,
        enabled_opcodes: Collection[int] | None,
        abort: threading.Event,
        on_irq: Callable[[int], None] | None,
        translations: _Translations | None = None,
        max_tensor_elements: int = MAX_TENSOR_ELEMENTS,
    ) -> None:
        self.mmu = Mmu(memory, pt_root)
        self.max_tensor_elements = max_tensor_elements
        self.memory = memory
        self.enabled = enabled_opcodes
        # A tensor's physical runs are looked up once (the kernel does not edit a file's page
        # tables while its job runs), and kept for the next job while the tables stay the same.
        self.translations = translations if translations is not None else _Translations(memory, pt_root)
        self.tensors: dict[int, Tensor | str] = {}  # TENSOR decoded per stream offset (shared per stream)
        self.plans: dict[
            int, tuple[bytes, object]
        ] = {}  # layer plans by parameter digest (shared per stream)
        self.abort = abort
        self.on_irq = on_irq
        self.slots: list[Tensor | None] = [None] * isa.SPEC.slots
        self.ins: isa.Instruction | None = None
        self.bound: dict[int, Bound] = {}  # the stream's bound instructions (set by the processor)
        self.binding: Bound | None = None  # what the running instruction bound itself to, if anything

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

    def runs(self, va: int, size: int, write: bool) -> list[tuple[int, int]]:
        key = (va, size, write)
        cache = self.translations
        runs = cache.runs.get(key)
        if runs is None:
            runs = self.mmu.translate_range(va, size, write)  # raises MmuFault: never cached
            if va + size <= VA_LIMIT and cache.remember(va, size):
                cache.runs[key] = runs
        return runs

    def load(self, t: Tensor) -> np.ndarray:
        """The tensor's elements as a read-only [n, h, w, c] array.

        A tensor in one physically contiguous run is a view of system memory (no copy): the
        units read it while they compute, and every unit writes its output only after that.
        """
        start, end = t.extent
        runs = self.runs(start, end - start, False)
        if len(runs) == 1:
            raw: memoryview | np.ndarray = self.memory.view(runs[0][0], end - start)
        else:
            raw = self.mmu.gather(start, end - start)
        arr = np.ndarray(t.shape, dtype=t.np_dtype, buffer=raw, strides=t.strides)
        arr.flags.writeable = False
        return arr

    def store(self, t: Tensor, values: np.ndarray) -> None:
        """Write ``values`` (any integer array of t's shape) to the tensor, saturating to its dtype."""
        data = _saturated(t, values)
        start, end = t.extent
        if t.dense:
            runs = self.runs(start, end - start, True)
            if len(runs) == 1:
                # np.copyto handles a source that overlaps the destination (an in-place COPY).
                dst = np.frombuffer(self.memory.view(runs[0][0], end - start), dtype=t.np_dtype)
                np.copyto(dst, data.reshape(-1))
            else:
                self.mmu.scatter(start, data)
            return
        # A strided tensor leaves gaps in its extent: read-modify-write them unchanged.
        raw = self.mmu.gather(start, end - start, write=True)
        np.ndarray(t.shape, dtype=t.np_dtype, buffer=raw, strides=t.strides)[...] = data
        self.mmu.scatter(start, raw)

    # --- binding --------------------------------------------------------------------
    def _cached_runs(self, t: Tensor, write: bool) -> list[tuple[int, int]] | None:
        start, end = t.extent
        return self.translations.runs.get((start, end - start, write))

    def loader(self, t: Tensor) -> Loader | None:
        """A function doing :meth:`load` of ``t`` with its translation looked up now; None if it
        was not kept (then the instruction stays unbound and translates every job).

        A tensor in one physical run is one read-only array over system memory made now and kept
        with the binding (it reads whatever memory holds when a job runs): a memory whose views
        are alive cannot be closed, so a processor's bindings must go before its memory does.
        """
        runs = self._cached_runs(t, False)
        if runs is None:
            return None
        view, size = self.memory.view, t.extent[1] - t.extent[0]
        shape, dtype, strides = t.shape, t.np_dtype, t.strides
        if len(runs) == 1:
            arr = np.ndarray(shape, dtype=dtype, buffer=view(runs[0][0], size), strides=strides)
            arr.flags.writeable = False
            return lambda: arr

        def gather() -> np.ndarray:
            raw = np.empty(size, dtype=np.uint8)
            pos = 0
            for pa, length in runs:
                raw[pos : pos + length] = np.frombuffer(view(pa, length), dtype=np.uint8)
                pos += length
            arr = np.ndarray(shape, dtype=dtype, buffer=raw, strides=strides)
            arr.flags.writeable = False
            return arr

        return gather

    def storer(self, t: Tensor) -> Storer | None:
        """A function doing :meth:`store` to a dense ``t`` with its translation looked up now; None
        for a strided tensor (a read-modify-write) or a translation that was not kept."""
        runs = self._cached_runs(t, True)
        if runs is None or not t.dense:
            return None
        # As in loader(): the destination's bytes, one array per physical run, kept with the binding.
        parts, pos = [], 0
        for pa, length in runs:
            parts.append((np.frombuffer(self.memory.view(pa, length), dtype=np.uint8), pos, pos + length))
            pos += length
        if len(parts) == 1:
            dst = parts[0][0]

            def store_one(values: np.ndarray) -> None:  # np.copyto handles a source overlapping dst
                np.copyto(dst, _saturated(t, values).reshape(-1).view(np.uint8))

            return store_one

        def store(values: np.ndarray) -> None:
            data = _saturated(t, values).reshape(-1).view(np.uint8)
            for part, begin, end in parts:
                np.copyto(part, data[begin:end])

        return store

    def compute(self, out: Tensor, fn: Callable[..., np.ndarray], *inputs: Tensor) -> None:
        """Store ``fn`` of the loaded ``inputs`` (in order) to ``out``, and bind the instruction to
        do the same in the stream's next jobs: ``fn`` holds only the instruction's parameters."""
        self.store(out, fn(*[self.load(t) for t in inputs]))
        loaders = [self.loader(t) for t in inputs]
        store = self.storer(out)
        if store is None or None in loaders:
            return
        bound_loaders = [load for load in loaders if load is not None]

        def run(job: _Job) -> bool:
            store(fn(*[load() for load in bound_loaders]))
            return True

        self.binding = run

    def _physical_spans(self, operands: list[tuple[Tensor, bool]]) -> list[tuple[int, int]] | None:
        """Each (tensor, written) operand's one physical run (pa, bytes) from the kept translations,
        or None if one is strided, lies in several runs or was not kept: a C unit bound to memory
        takes one dense run per operand."""
        spans = []
        for t, write in operands:
            runs = self._cached_runs(t, write)
            if not t.dense or runs is None or len(runs) != 1:
                return None
            spans.append(runs[0])
        return spans

    def bind_pool(self, inp: Tensor, out: Tensor, average: bool) -> None:
        """Bind a pooling instruction that :meth:`compute` just bound as one C call into memory
        (:class:`mac_array.BoundPool`), while the C kernels are selected, where the input and output
        are each one run and do not overlap."""
        assert self.ins is not None
        if self.binding is None or self.mac_isa is None:
            return
        spans = self._physical_spans([(inp, False), (out, True)])
        if spans is None or _overlap(*spans):
            return
        ins = self.ins
        geometry = (
            ins["filter_h"], ins["filter_w"], ins["stride_h"], ins["stride_w"], ins["pad_top"],
            ins["pad_left"], out.shape[1], out.shape[2],
        )  # fmt: skip
        view = self.memory.view
        try:
            pool = mac_array.BoundPool(
                view(*spans[0]), view(*spans[1]), inp.shape, inp.np_dtype, geometry, ins["act_min"],
                ins["act_max"], average,
            )  # fmt: skip
        except ValueError:  # what the unit does not take: the loading binding stays
            return

        def run_pool(job: _Job) -> bool:
            return job.mac_isa is not None and pool.run()  # else the general path (numpy)

        self.binding = run_pool

    def bind_lookup(
        self, out: Tensor, inputs: tuple[Tensor, ...], table: np.ndarray | Tensor, flips: tuple[int, ...]
    ) -> None:
        """Bind a table unit that :meth:`compute` just bound as one C lookup into memory
        (:class:`mac_array.BoundLookup`): ``table`` is the unit's computed table (ADD, SUB, MUL of
        bytes) or its table tensor, read from memory at each job (LUT, LUT2); ``flips`` turn each
        input's bytes into its index bits (0x80 for an int8 input indexed by value + 128).

        Only while the C kernels are selected, and only where every operand is one physical run of
        a dense tensor, the table does not overlap the output and the output overlaps an input
        only by being the same bytes; otherwise the loading binding stays.
        """
        if self.binding is None or self.mac_isa is None:
            return
        operands: list[tuple[Tensor, bool]] = [(t, False) for t in inputs] + [(out, True)]
        if isinstance(table, Tensor):
            operands.append((table, False))
        spans = self._physical_spans(operands)
        if spans is None:
            return
        out_pa, out_len = spans[len(inputs)]
        esize = out.np_dtype.itemsize
        for i, span in enumerate(spans):
            same_bytes = i < len(inputs) and span == (out_pa, out_len) and esize == 1
            if i != len(inputs) and _overlap(span, (out_pa, out_len)) and not same_bytes:
                return
        view = self.memory.view
        ins = [view(*span) for span in spans[: len(inputs)]]
        table_buf = view(*spans[-1]) if isinstance(table, Tensor) else table
        try:
            lookup = mac_array.BoundLookup(
                ins[0], ins[1] if len(ins) > 1 else None, table_buf, view(out_pa, out_len), esize, *flips
            )
        except ValueError:  # sizes the lookup does not take: the loading binding stays
            return

        def run_lookup(job: _Job) -> bool:
            return job.mac_isa is not None and lookup.run()  # else the general path (numpy)

        self.binding = run_lookup

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

    def plan(self, build: Callable[[], object], *params: np.ndarray | int | None) -> object:
        """The instruction's layer plan (numerics.plan_*; may be None), rebuilt only when a parameter changed.

        A plan depends on the instruction (the same for every run of a stream) and on the
        parameters in memory (filter, bias, per-channel quantization), which the job's owner may
        rewrite between jobs. The plan is kept with a digest of their bytes (:func:`param_digest`),
        not a copy: the device holds no second copy of a model's weights.

        A refused plan (None: the layer's bounds do not allow one) stays refused without a digest
        per job: the general path it falls back to is exact for any parameters, and hashing a
        large layer's weights only to learn that cost more than its GEMV.
        """
        assert self.ins is not None
        entry = self.plans.get(self.ins.offset)
        if entry is not None and entry[1] is None and entry[0] == _REFUSED:
            return None
        digest = param_digest(*params)
        if entry is not None and entry[0] == digest:
            return entry[1]
        plan = build()
        self.plans[self.ins.offset] = (digest if plan is not None else _REFUSED, plan)
        return plan

    def mac_plan(
        self,
        build: Callable[[], mac_array.MacPlan],
        filt: np.ndarray,
        bias: np.ndarray | None,
        multiplier: np.ndarray | int,
        shift: np.ndarray | int,
    ) -> mac_array.MacPlan:
        """The instruction's C MAC array plan, rebuilt only when a parameter changed.

        Unlike :meth:`plan` no digest is taken: the plan keeps a copy of its parameters and compares
        them with memory byte for byte (a memcmp, about five times cheaper than SHA-1 of the weights,
        and exact). A numpy plan in the slot (another ``VNPU_MAC_ARRAY``) is replaced, and vice versa.
        """
        assert self.ins is not None
        entry = self.plans.get(self.ins.offset)
        if entry is not None and isinstance(entry[1], mac_array.MacPlan):
            if entry[1].matches(filt, bias, multiplier, shift):
                return entry[1]
        plan = build()
        self.plans[self.ins.offset] = (b"", plan)  # no digest matches b"": plan() rebuilds its own
        return plan

    def bind_layer(self, inp: Tensor, filt: Tensor, out: Tensor, cout: int, compute: LayerRun) -> None:
        """Bind a layer that just ran with a plan: its operands' translations and checks.

        The bound layer still reads its parameters (filter, bias, per-channel quantization) from
        memory every job; ``compute`` runs the plan only while it was made from them (else it
        returns None, and the general path rebuilds the plan or fails the job, as before).
        """
        assert self.ins is not None
        flags = self.ins["flags"]
        per_tensor = (self.ins["multiplier"], self.ins["shift"])
        load_quant = load_bias = None
        if flags & isa.SPEC.flags["PER_CHANNEL"]:
            load_quant = self.loader(self.tensor("quant"))
            if load_quant is None:
                return
        if flags & isa.SPEC.flags["HAS_BIAS"]:
            load_bias = self.loader(self.tensor("bias"))
            if load_bias is None:
                return
        load_filter, load_input, store = self.loader(filt), self.loader(inp), self.storer(out)
        if load_filter is None or load_input is None or store is None:
            return

        def run(job: _Job) -> bool:
            multiplier, shift = per_tensor  # as quant() and bias() give them
            if load_quant is not None:
                q = load_quant()
                multiplier, shift = q[0, 0, :, 0].astype(np.int64), q[0, 0, :, 1].astype(np.int64)
            bias = load_bias().reshape(cout) if load_bias is not None else None
            result = compute(job, load_filter(), bias, multiplier, shift, load_input)
            if result is None:
                return False
            store(result)
            return True

        self.binding = run

    def bind_mac(
        self,
        inp: Tensor,
        filt: Tensor,
        out: Tensor,
        cout: int,
        filter_shape: tuple[int, ...],
        mac_isa: int,
        plan: mac_array.MacPlan,
        in_shape: tuple[int, ...] | None = None,
    ) -> None:
        """Bind a layer that just ran on the C MAC array with ``plan``.

        Where every operand is one physical run and the output overlaps none of the others, the
        binding is a :class:`mac_array.BoundRun`: one C call per job compares the parameters in
        memory with the plan's copies and writes the output straight into memory. Otherwise the
        bound layer loads its operands and the plan compares its parameters itself.
        """
        assert self.ins is not None
        direct = self._bound_run(inp, filt, out, plan, mac_isa)
        if direct is not None:

            def run_direct(job: _Job) -> bool:
                # VNPU_MAC_ARRAY changed, or a parameter did: the general path picks the variant
                # or rebuilds the plan (and binds again)
                return job.mac_isa == mac_isa and direct.run()

            self.binding = run_direct
            return
        offset = self.ins.offset

        def compute(
            job: _Job,
            filt: np.ndarray,
            bias: np.ndarray | None,
            multiplier: object,
            shift: object,
            load: Loader,
        ) -> np.ndarray | None:
            if job.mac_isa != mac_isa:  # VNPU_MAC_ARRAY changed: the general path picks the variant
                return None
            weights = filt.reshape(filter_shape)
            entry = job.plans.get(offset)
            plan = entry[1] if entry is not None else None
            if not isinstance(plan, mac_array.MacPlan) or not plan.matches(weights, bias, multiplier, shift):
                return None
            x = load()
            return mac_array.run(plan, x if in_shape is None else x.reshape(in_shape), mac_isa)

        self.bind_layer(inp, filt, out, cout, compute)

    def _bound_run(
        self, inp: Tensor, filt: Tensor, out: Tensor, plan: mac_array.MacPlan, mac_isa: int
    ) -> mac_array.BoundRun | None:
        """The layer's operands fixed to their memory for :meth:`bind_mac`, or None where it cannot
        be: an operand in several physical runs or not kept, a strided input, filter or output, or
        an output overlapping another operand (the kernels read those while they write it)."""
        assert self.ins is not None
        operands = {"input": (inp, False), "filter": (filt, False), "output": (out, True)}
        flags = self.ins["flags"]
        if flags & isa.SPEC.flags["PER_CHANNEL"]:
            operands["quant"] = (self.tensor("quant"), False)
        if flags & isa.SPEC.flags["HAS_BIAS"]:
            operands["bias"] = (self.tensor("bias"), False)
        found = self._physical_spans(list(operands.values()))
        if found is None:
            return None
        spans = dict(zip(operands, found, strict=True))
        if any(_overlap(span, spans["output"]) for name, span in spans.items() if name != "output"):
            return None
        view = self.memory.view
        # The plan's copy of the filter is the filter's bytes in memory (a dense tensor of its dtype);
        # the bias and quantization regions are compared as the raw bytes they are now.
        filter_mem = view(*spans["filter"])
        filter_copy = plan.params[0].reshape(-1).view(np.uint8)
        if filter_copy.nbytes != filter_mem.nbytes or not np.array_equal(
            np.frombuffer(filter_mem, np.uint8), filter_copy
        ):
            return None
        checks = [(filter_mem, filter_copy)]
        for name in ("bias", "quant"):
            if name in spans:
                mem = view(*spans[name])
                checks.append((mem, np.frombuffer(mem, np.uint8).copy()))
        try:
            return mac_array.BoundRun(plan, view(*spans["input"]), view(*spans["output"]), checks, mac_isa)
        except ValueError:  # sizes that do not match the plan: the loading binding handles the layer
            return None

    def bind_gemm(
        self, inp: Tensor, filt: Tensor, out: Tensor, shape: tuple[int, int], rq: nm.Requant
    ) -> None:
        """Bind a FULLY_CONNECTED that just ran on numpy: its plan's while the digest matches, or the
        general path's if the plan was refused (refused stays refused, as in plan())."""
        assert self.ins is not None
        offset, (rows, k), single = self.ins.offset, shape, rq.single_rounding
        cout = filt.shape[0] * filt.shape[1] * filt.shape[2]

        def compute(
            job: _Job,
            filt: np.ndarray,
            bias: np.ndarray | None,
            multiplier: object,
            shift: object,
            load: Loader,
        ) -> np.ndarray | None:
            if not single and job.mac_isa is not None:  # the general path takes the MAC array now
                return None
            weights = filt.reshape(cout, k)
            entry = job.plans.get(offset)
            if entry is not None and entry[1] is None and entry[0] == _REFUSED:
                now = replace(rq, multiplier=multiplier, shift=shift)  # as in memory now
                return nm.fully_connected(load().reshape(rows, k), weights, bias, now, fast=False)
            if entry is None or not isinstance(entry[1], nm.GemmPlan):
                return None
            if entry[0] != param_digest(weights, bias, multiplier, shift):  # as plan() compares
                return None
            return nm.run_fc_plan(load().reshape(rows, k), entry[1], weights)

        self.bind_layer(inp, filt, out, cout, compute)

    @cached_property
    def mac_isa(self) -> int | None:
        """The MAC array variant this job's layers run on (None: numpy), chosen once per job:
        ``selected_isa`` reads the environment and the CPU's variants, ~5 us a layer."""
        return mac_array.selected_isa()

    # --- units ------------------------------------------------------------------
    def op_NOP(self) -> None:  # noqa: N802 - named after the opcode
        self.binding = _done

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

        self.binding = irq

    def op_WAIT(self) -> None:  # noqa: N802
        assert self.ins is not None
        sem = self.expect("sem", ("INT32",))
        if sem.shape != (1, 1, 1, 1):
            raise self.fail(f"sem has shape {list(sem.shape)}, expected one element")
        want = self.ins["value"]
        delay = WAIT_POLL_S
        while int(self.mmu.gather(sem.va, 4).view("<i4")[0]) != want:
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

        self.binding = define

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
            mac = self.mac_plan(
                lambda: mac_array.plan_layer(
                    kind, weights, bias, rq, in_shape=inp.shape, in_dtype=inp.np_dtype,
                    geometry=tuple(geometry.values()), depth_multiplier=dm,
                ),
                weights, bias, rq.multiplier, rq.shift,
            )  # fmt: skip
            self.store(out, mac_array.run(mac, self.load(inp), isa))
            self.bind_mac(inp, filt, out, cout, filt.shape, isa, mac)
            return
        build = nm.plan_depthwise if depthwise else nm.plan_gemm
        plan = self.plan(
            lambda: build(weights, bias, rq, in_dtype=inp.np_dtype), weights, bias, rq.multiplier, rq.shift
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
        # LiteRT's one-rounding requantization: numpy's plans (the MAC array rounds twice).
        single = bool(ins["flags"] & isa.SPEC.flags["SINGLE_ROUNDING"])
        rq = self.requant(inp, filt, out, quant, single)
        if rq.float_scale:  # onnxruntime's requantization
            x = self.load(inp).reshape(rows, k)
            self.store(out, nm.fully_connected(x, weights, bias, rq, fast=False))
            return
        mac_isa = None if single else self.mac_isa
        if mac_isa is not None:  # the C MAC array: a 1x1 convolution of rows x 1 x 1 x K
            mac = self.mac_plan(
                lambda: mac_array.plan_layer(
                    mac_array.KIND_CONV, weights.reshape(cout, 1, 1, k), bias, rq, in_shape=(rows, 1, 1, k),
                    in_dtype=inp.np_dtype,
                ),
                weights.reshape(cout, 1, 1, k), bias, rq.multiplier, rq.shift,
            )  # fmt: skip
            self.store(out, mac_array.run(mac, self.load(inp).reshape(rows, 1, 1, k), mac_isa))
            self.bind_mac(inp, filt, out, cout, (cout, 1, 1, k), mac_isa, mac, (rows, 1, 1, k))
            return
        build = partial(nm.plan_gemm, weights, bias, rq, in_dtype=inp.np_dtype)
        plan = self.plan(build, weights, bias, rq.multiplier, rq.shift)
        x = self.load(inp).reshape(rows, k)
        if plan is not None:
            assert isinstance(plan, nm.GemmPlan)
            result = nm.run_fc_plan(x, plan, weights)
        else:
            result = nm.fully_connected(x, weights, bias, rq, fast=False)
        self.store(out, result)
        self.bind_gemm(inp, filt, out, (rows, k), rq)

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
        self.compute(out, fn, in1, in2)
        params = dict(fn.keywords)
        table = nm.add_table(in1.np_dtype, in2.np_dtype, params.pop("out_dtype"), **params)
        if table is not None:
            self.bind_lookup(out, (in1, in2), table, (0, 0))

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
        self.compute(out, fn, in1, in2)
        params = dict(fn.keywords)
        table = nm.mul_table(in1.np_dtype, in2.np_dtype, params.pop("out_dtype"), **params)
        if table is not None:
            self.bind_lookup(out, (in1, in2), table, (0, 0))

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
        self.compute(out, pool, inp)
        self.bind_pool(inp, out, average=fn is nm.avg_pool)

    def op_MAXPOOL(self) -> None:  # noqa: N802
        self._pool(nm.max_pool)

    def op_AVGPOOL(self) -> None:  # noqa: N802
        self._pool(nm.avg_pool)

    def op_LUT(self) -> None:  # noqa: N802
        inp = self.expect("input", _BYTE_TYPES)
        out = self.expect("output", tuple(_NP_DTYPES), inp.shape)
        table = self.expect("table", (out.dtype,))
        if np.prod(table.shape) != 256:
            raise self.fail(f"table has shape {list(table.shape)}, expected 256 elements")
        self.compute(out, partial(nm.lut, signed_input=inp.dtype == "INT8"), inp, table)
        self.bind_lookup(out, (inp,), table, (_INDEX_FLIP[inp.dtype],))

    def op_LUT2(self) -> None:  # noqa: N802
        out = self.expect("output", tuple(_NP_DTYPES))
        in1 = self.expect("input1", _BYTE_TYPES, out.shape)
        in2 = self.expect("input2", _BYTE_TYPES, out.shape)
        table = self.expect("table", (out.dtype,))
        if np.prod(table.shape) != 65536:
            raise self.fail(f"table has shape {list(table.shape)}, expected 65536 elements")
        self.compute(out, nm.lut2, in1, in2, table)
        self.bind_lookup(out, (in1, in2), table, (_INDEX_FLIP[in1.dtype], _INDEX_FLIP[in2.dtype]))

    def op_SOFTMAX(self) -> None:  # noqa: N802
        assert self.ins is not None
        ins = self.ins
        inp = self.expect("input", _BYTE_TYPES)
        out = self.expect("output", _BYTE_TYPES, inp.shape)
        lowest = int(np.iinfo(out.np_dtype).min)
        if out.zero_point != lowest:
            raise self.fail(f"output zero point {out.zero_point}, expected {lowest} (scale 1/256)")
        softmax = partial(
            nm.softmax,
            input_multiplier=ins["input_multiplier"],
            input_left_shift=ins["input_left_shift"],
            diff_min=ins["diff_min"],
            out_dtype=out.np_dtype,
        )
        self.compute(out, softmax, inp)

    def op_RESIZE_BILINEAR(self) -> None:  # noqa: N802
        assert self.ins is not None
        flags = self.ins["flags"]
        inp = self.expect("input", _BYTE_TYPES)
        out = self.expect("output", (inp.dtype,))
        if out.shape[0] != inp.shape[0] or out.shape[3] != inp.shape[3]:
            raise self.fail(f"output has shape {list(out.shape)}, input {list(inp.shape)}")
        resize = partial(
            nm.resize_bilinear,
            out_h=out.shape[1],
            out_w=out.shape[2],
            align_corners=bool(flags & isa.SPEC.flags["ALIGN_CORNERS"]),
            half_pixel_centers=bool(flags & isa.SPEC.flags["HALF_PIXEL_CENTERS"]),
            single_rounding=bool(flags & isa.SPEC.flags["SINGLE_ROUNDING"]),
        )
        self.compute(out, resize, inp)

    def op_ARG_MAX(self) -> None:  # noqa: N802
        inp = self.expect("input", _BYTE_TYPES)
        out = self.expect("output", ("INT32",), (*inp.shape[:3], 1))
        self.compute(out, nm.arg_max, inp)

    def op_COPY(self) -> None:  # noqa: N802
        src = self.tensor("src")
        dst = self.expect("dst", (src.dtype,), src.shape)
        self.compute(dst, _same_values, src)

    def op_FILL(self) -> None:  # noqa: N802
        assert self.ins is not None
        dst = self.tensor("dst")
        value = self.ins["value"]
        info = np.iinfo(dst.np_dtype)
        if not info.min <= value <= info.max:
            raise self.fail(f"value {value} does not fit {dst.dtype}")
        self.compute(dst, partial(np.full, dst.shape, value, dtype=np.int64))

    # --- driver ------------------------------------------------------------------
    def execute(self, ins: isa.Instruction) -> None:
        opcode = ins.spec.opcode
        if self.enabled is not None and opcode not in self.enabled:
            raise JobError(f"{ins.op} at byte {ins.offset}: opcode {opcode:#04x} is disabled by the firmware")
        self.ins = ins
        self.binding = None
        try:
            getattr(self, f"op_{ins.op}")()
        except ValueError as e:  # numerics refuse bad parameters with ValueError
            raise self.fail(str(e)) from None
        if self.binding is not None:  # it succeeded: the next job of this stream runs it bound
            self.bound[ins.offset] = self.binding

    def step(self, ins: isa.Instruction) -> None:
        """Run one instruction: bound if it was bound in an earlier job, else :meth:`execute`.

        An instruction binds itself only after it ran without a fault or an error, with every
        operand's translation kept; the binding lives in the address space's translation cache, so
        any change to the page tables it was made under drops it with the translations. Whatever
        a bound instruction checked at binding time (opcode enabled, slots, dtypes, shapes,
        addresses) depends only on the stream's bytes and those tables.
        """
        bound = self.bound.get(ins.offset)
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
        self._translations: OrderedDict[int, _Translations] = OrderedDict()  # by pt_root

    def _translations_for(self, pt_root: int) -> _Translations:
        """The address space's translation cache if its page tables are unchanged, else a new one."""
        with self._programs_lock:
            cache = self._translations.pop(pt_root, None)
        if cache is None or not cache.still_valid():
            cache = _Translations(self.memory, pt_root)
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
        result = self._run(pt_root, cmd_va, cmd_size, abort, on_irq, profile)
        profile.seconds = time.perf_counter() - start
        profile.status = result.status
        profile.cycles = result.cycles
        with _profile_lock:
            for sink in _profile_sinks:
                sink.append(profile)
        return result

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
        cycles = 0
        try:
            if pt_root % 4096 or not 0 <= pt_root < self.memory.size:
                raise JobError(f"page-table root {pt_root:#x} is not a page of system memory")
            if not 0 < cmd_size <= self.max_cmd_size:
                raise JobError(f"command stream size {cmd_size} is not in (0, {self.max_cmd_size}]")
            job = _Job(
                self.memory,
                pt_root,
                self.enabled_opcodes,
                abort,
                on_irq,
                self._translations_for(pt_root),
                self.max_tensor_elements,
            )
            # The stream's runs come from the address space's translation cache (an unchanged
            # stream of an unchanged space is not walked again) and are read as plain bytes.
            runs = job.runs(cmd_va, cmd_size, False)
            view = self.memory.view
            stream = bytes(view(*runs[0])) if len(runs) == 1 else b"".join(view(*r) for r in runs)
            program, job.tensors, job.plans = self._decode(stream)
            job.bound = job.translations.bound(program)
            for ins in program:
                if abort.is_set():
                    raise JobCancelled()
                cycles += 1
                if ins.op == "END":
                    return JobResult(0, 0, cycles)
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
        except MmuFault as e:
            return JobResult(-errno.EFAULT, e.va, cycles, str(e))
        except JobError as e:
            return JobResult(-errno.EIO, 0, cycles, str(e))
        except JobCancelled:
            return JobResult(-errno.ECANCELED, 0, cycles, "aborted by a device reset")
        except Exception as e:  # a model bug must fail the job, not kill the device
            log.exception("command processor: unexpected error")
            return JobResult(-errno.EIO, 0, cycles, f"internal error: {e!r}")
