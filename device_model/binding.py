"""The binding cache: an instruction that ran without a fault or an error binds itself (its
operands' translations, checks and constant parameters) for the stream's next jobs in the same,
unchanged page tables, and a layer keeps its plan while its parameters in memory are unchanged.

The bindings of a stream live in its address space's :class:`~.tensor_access.Translations`, so any
change to the page tables they were made under drops them; the command processor's units bind
themselves through :class:`Bindings` and run bound through ``Bound`` (see
:meth:`.command_processor._Job.step` and docs/device_model.md, "Instruction binding").
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np

from . import mac_array
from . import numerics as nm
from .tensor_access import Loader, Tensor, TensorAccess, Translations, overlap

# An instruction bound to its job-independent state: it runs on a job (the command processor's,
# with ``mac_isa`` and ``bindings``) and returns False when it cannot (a layer's parameters
# changed), and the instruction then takes the general path.
Bound = Callable[[Any], bool]
REFUSED = b"refused"  # the digest slot of a layer whose plan was refused (never a SHA-1 digest)
# The digest slot of a numpy FULLY_CONNECTED whose filter is an activation: no plan, no digest, the
# general path at every job (a plan keyed on an activation's bytes would never be reused).
DYNAMIC = b"dynamic"


def c_unit(bound: Bound, unit: mac_array.BoundUnit, mac_isa: int | None = None) -> Bound:
    """Mark ``bound`` as running the C ``unit`` alone, so that a run of such instructions can be one
    C call (:mod:`.bound_stream`): for the variant ``mac_isa``, or for any when None (the unit
    needs only the C kernels selected)."""
    bound.unit = unit  # type: ignore[attr-defined]
    bound.unit_isa = mac_isa  # type: ignore[attr-defined]
    return bound


class StreamBindings(dict):
    """A stream's bound instructions by offset (:data:`Bound`), and :attr:`runner`: the command
    processor's way to run them all at once, made when every instruction is bound and dropped when
    any binding changes."""

    def __init__(self) -> None:
        super().__init__()
        self.runner: object | None = None

    def __setitem__(self, offset: int, bound: Bound) -> None:
        super().__setitem__(offset, bound)
        self.runner = None


class LayerArgs(NamedTuple):
    """What a bound layer reads from memory at each job, for its plan run (:data:`LayerRun`)."""

    filt: np.ndarray
    bias: np.ndarray | None
    multiplier: object
    shift: object
    load: Loader  # the input, loaded when the run needs it


# A bound layer's plan run: (job, its arguments) -> its output, or None when the plan in the slot
# was not made from these parameters.
LayerRun = Callable[[Any, LayerArgs], "np.ndarray | None"]


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


def stream_bindings(translations: Translations, program: object, limit: int) -> StreamBindings:
    """The bound instructions of ``program`` (a decoded stream) in an address space, by stream
    offset; all are dropped when more than ``limit`` streams have bindings (streams evicted from
    the command processor's program cache)."""
    entry = translations.bindings.get(id(program))
    if entry is None or entry[0] is not program:
        if len(translations.bindings) >= limit:
            translations.bindings.clear()
        entry = (program, StreamBindings())
        translations.bindings[id(program)] = entry
    return entry[1]


@dataclass(frozen=True)
class LayerParams:
    """Where a layer reads its parameters at each job besides its filter: the per-tensor
    (multiplier, shift) of the instruction, or the per-channel ``quant`` tensor, and the ``bias``
    tensor if it has one."""

    per_tensor: tuple[int, int]
    quant: Tensor | None
    bias: Tensor | None


class Bindings:
    """A job's side of the binding cache: what the running instruction bound itself to
    (:attr:`binding`), the stream's bound instructions (:attr:`bound`) and its layer plans by
    stream offset (:attr:`plans`), both shared by the stream's jobs."""

    def __init__(self, access: TensorAccess) -> None:
        self.access = access
        self.bound: dict[int, Bound] = {}  # the stream's bound instructions (set by the processor)
        self.plans: dict[int, tuple[bytes, object]] = {}  # layer plans by parameter digest (per stream)
        self.binding: Bound | None = None  # what the running instruction bound itself to, if anything

    def compute(self, out: Tensor, fn: Callable[..., np.ndarray], *inputs: Tensor) -> None:
        """Store ``fn`` of the loaded ``inputs`` (in order) to ``out``, and bind the instruction to
        do the same in the stream's next jobs: ``fn`` holds only the instruction's parameters."""
        access = self.access
        access.store(out, fn(*[access.load(t) for t in inputs]))
        loaders = [access.loader(t) for t in inputs]
        store = access.storer(out)
        if store is None or None in loaders:
            return
        bound_loaders = [load for load in loaders if load is not None]

        def run(job: Any) -> bool:
            store(fn(*[load() for load in bound_loaders]))
            return True

        self.binding = run

    def bind_pool(
        self,
        inp: Tensor,
        out: Tensor,
        geometry: tuple[int, int, int, int, int, int, int, int],
        act: tuple[int, int],
        average: bool,
        mac_isa: int | None,
    ) -> None:
        """Bind a pooling instruction that :meth:`compute` just bound as one C call into memory
        (:class:`mac_array.BoundPool`; see :meth:`_bind_unit`). ``geometry`` is (filter_h,
        filter_w, stride_h, stride_w, pad_top, pad_left, out_h, out_w), ``act`` (act_min, act_max)."""
        self._bind_unit(
            inp,
            out,
            mac_isa,
            lambda x, y: mac_array.BoundPool(
                x, y, inp.shape, inp.np_dtype, geometry, act[0], act[1], average, isa=mac_isa
            ),
            variant=True,
        )

    def bind_softmax(self, inp: Tensor, out: Tensor, params: dict[str, int], mac_isa: int | None) -> None:
        """Bind a SOFTMAX that :meth:`compute` just bound as one C call into memory
        (:class:`mac_array.BoundSoftmax`; see :meth:`_bind_unit`): a unit of the stream's C runs,
        not a Python closure that loads, computes and stores. ``params`` are the instruction's
        input_multiplier, input_left_shift and diff_min."""
        self._bind_unit(
            inp,
            out,
            mac_isa,
            lambda x, y: mac_array.BoundSoftmax(x, y, inp.shape[-1], inp.np_dtype, out.np_dtype, **params),
        )

    def _bind_unit(
        self,
        inp: Tensor,
        out: Tensor,
        mac_isa: int | None,
        make: Callable[[memoryview, memoryview], Any],
        variant: bool = False,
    ) -> None:
        """Replace the loading binding :meth:`compute` just made with the C unit ``make`` builds on
        the input's and output's memory, while the C kernels are selected, where the two are each
        one physical run and do not overlap; the loading binding stays where the unit refuses them
        (ValueError). With ``variant`` the unit is built for ``mac_isa`` alone (:func:`c_unit`)."""
        if self.binding is None or mac_isa is None:
            return
        spans = self.access.physical_spans([(inp, False), (out, True)])
        if spans is None or overlap(*spans):
            return
        view = self.access.memory.view
        try:
            unit = make(view(*spans[0]), view(*spans[1]))
        except ValueError:
            return

        def run_unit(job: Any) -> bool:
            return job.mac_isa is not None and unit.run()  # else the general path (numpy)

        self.binding = c_unit(run_unit, unit, mac_isa if variant else None)

    def bind_lookup(
        self,
        out: Tensor,
        inputs: tuple[Tensor, ...],
        table: np.ndarray | Tensor,
        flips: tuple[int, ...],
        mac_isa: int | None,
    ) -> None:
        """Bind a table unit that :meth:`compute` just bound as one C lookup into memory
        (:class:`mac_array.BoundLookup`): ``table`` is the unit's computed table (ADD, SUB, MUL of
        bytes) or its table tensor, read from memory at each job (LUT, LUT2); ``flips`` turn each
        input's bytes into its index bits (0x80 for an int8 input indexed by value + 128).

        Only while the C kernels are selected, and only where every operand is one physical run
        (an input strided within its run: broadcast or transposed), the output and the table are
        dense, the table does not overlap the output and the output overlaps an input only by being
        the same dense bytes; otherwise the loading binding stays.
        """
        if self.binding is None or mac_isa is None:
            return
        operands: list[tuple[Tensor, bool]] = [(t, False) for t in inputs] + [(out, True)]
        if isinstance(table, Tensor):
            if not table.dense:
                return
            operands.append((table, False))
        spans = self.access.physical_spans(operands, strided_reads=True)
        if spans is None:
            return
        out_pa, out_len = spans[len(inputs)]
        esize = out.np_dtype.itemsize
        for i, span in enumerate(spans):
            same_bytes = i < len(inputs) and inputs[i].dense and span == (out_pa, out_len) and esize == 1
            if i != len(inputs) and overlap(span, (out_pa, out_len)) and not same_bytes:
                return
        view = self.access.memory.view
        ins = [view(*span) for span in spans[: len(inputs)]]
        table_buf = view(*spans[-1]) if isinstance(table, Tensor) else table
        strided = None
        if not all(t.dense for t in inputs):
            b_strides = inputs[1].strides if len(inputs) > 1 else (0, 0, 0, 0)
            strided = (out.shape, inputs[0].strides, b_strides)
        try:
            lookup = mac_array.BoundLookup(
                ins[0], ins[1] if len(ins) > 1 else None, table_buf, view(out_pa, out_len), esize, *flips,
                strided=strided,
            )  # fmt: skip
        except ValueError:  # sizes the lookup does not take: the loading binding stays
            return

        def run_lookup(job: Any) -> bool:
            return job.mac_isa is not None and lookup.run()  # else the general path (numpy)

        self.binding = c_unit(run_lookup, lookup)

    def bind_copy(self, src: Tensor, dst: Tensor, mac_isa: int | None) -> None:
        """Bind a COPY as one C copy of the elements between the two views
        (:class:`mac_array.BoundCopy`), a unit a bound stream runs with its neighbours in one call:
        for a strided destination (a slice of a concatenation's channels, say), which :meth:`compute`
        cannot bind (its store of a strided tensor reads and writes the gaps), and in place of
        :meth:`compute`'s binding for a dense one.

        Only while the C kernels are selected, with each view's extent one physical run and the
        two not overlapping; otherwise :meth:`compute`'s binding, if any, stays.
        """
        if mac_isa is None:
            return
        access = self.access
        start, end = dst.extent
        access.runs(start, end - start, True)  # the store gathered and scattered it: keep its run
        spans = access.physical_spans([(src, False)], strided_reads=True)
        dst_runs = access.cached_runs(dst, True)
        if spans is None or dst_runs is None or len(dst_runs) != 1 or overlap(spans[0], dst_runs[0]):
            return
        view = access.memory.view
        try:
            views = view(*spans[0]), view(*dst_runs[0])
            copy = mac_array.BoundCopy(*views, src.shape, src.strides, dst.strides, src.np_dtype.itemsize)
        except ValueError:
            return

        def run_copy(job: Any) -> bool:
            return job.mac_isa is not None and copy.run()  # else the general path (numpy)

        self.binding = c_unit(run_copy, copy)

    def plan(
        self,
        offset: int,
        build: Callable[[], object],
        *params: np.ndarray | int | None,
        activation: Callable[[], bool] | None = None,
    ) -> object:
        """The layer plan (numerics.plan_*; may be None) of the instruction at ``offset``, rebuilt
        only when a parameter changed.

        A plan depends on the instruction (the same for every run of a stream) and on the
        parameters in memory (filter, bias, per-channel quantization), which the job's owner may
        rewrite between jobs. The plan is kept with a digest of their bytes (:func:`param_digest`),
        not a copy: the device holds no second copy of a model's weights.

        A refused plan (None: the layer's bounds do not allow one) stays refused without a digest
        per job: the general path it falls back to is exact for any parameters, and hashing a
        large layer's weights only to learn that cost more than its GEMV.

        ``activation`` (a FULLY_CONNECTED's): whether the filter is written by an earlier
        instruction of the stream. Such a layer, or one whose parameters changed since its plan was
        made (an input, or an earlier job's output), is :data:`DYNAMIC` from then on: no plan and no
        digest, the general path at every job.
        """
        entry = self.plans.get(offset)
        if entry is not None and entry[1] is None and entry[0] in (REFUSED, DYNAMIC):
            return None
        numpy_plan = entry is not None and isinstance(entry[1], nm.GemmPlan)
        if activation is not None and not numpy_plan and activation():
            self.plans[offset] = (DYNAMIC, None)  # an activation's bytes are never digested
            return None
        digest = param_digest(*params)
        if entry is not None and entry[0] == digest:
            return entry[1]
        if activation is not None and numpy_plan:  # made from other parameters: they change
            self.plans[offset] = (DYNAMIC, None)
            return None
        plan = build()
        self.plans[offset] = (digest if plan is not None else REFUSED, plan)
        return plan

    def mac_plan(
        self,
        offset: int,
        build: Callable[..., mac_array.MacPlan],
        filt: np.ndarray,
        bias: np.ndarray | None,
        multiplier: np.ndarray | int,
        shift: np.ndarray | int,
        activation: Callable[[], bool] | None = None,
    ) -> mac_array.MacPlan:
        """The C MAC array plan of the instruction at ``offset``, rebuilt only when a parameter changed.

        Unlike :meth:`plan` no digest is taken: the plan keeps a copy of its parameters and compares
        them with memory byte for byte (a memcmp, about five times cheaper than SHA-1 of the weights,
        and exact). A numpy plan in the slot (another ``VNPU_MAC_ARRAY``) is replaced, and vice versa.

        With ``activation`` (a FULLY_CONNECTED's: whether an earlier instruction of the stream writes
        the filter), ``build(dynamic=True)`` makes a dynamic plan, which keeps no copy of the filter
        and packs it from memory at each run, for a filter the stream writes, and for one that changed
        between jobs while the layer's other parameters did not (an input, or an earlier job's
        output); a dynamic plan stays dynamic.
        """
        entry = self.plans.get(offset)
        old = entry[1] if entry is not None and isinstance(entry[1], mac_array.MacPlan) else None
        if old is not None and old.matches(filt, bias, multiplier, shift):
            return old
        dynamic = activation is not None and (
            (
                old is not None
                and (old.dynamic or old.matches(filt, bias, multiplier, shift, filter_values=False))
            )
            or activation()
        )
        plan = build(dynamic=True) if dynamic else build()
        self.plans[offset] = (b"", plan)  # no digest matches b"": plan() rebuilds its own
        return plan

    def bind_layer(
        self, inp: Tensor, filt: Tensor, out: Tensor, cout: int, params: LayerParams, compute: LayerRun
    ) -> None:
        """Bind a layer that just ran with a plan: its operands' translations and checks.

        The bound layer still reads its parameters (filter, bias, per-channel quantization) from
        memory every job; ``compute`` runs the plan only while it was made from them (else it
        returns None, and the general path rebuilds the plan or fails the job, as before).
        """
        access = self.access
        per_tensor = params.per_tensor
        load_quant = load_bias = None
        if params.quant is not None:
            load_quant = access.loader(params.quant)
            if load_quant is None:
                return
        if params.bias is not None:
            load_bias = access.loader(params.bias)
            if load_bias is None:
                return
        load_filter, load_input, store = access.loader(filt), access.loader(inp), access.storer(out)
        if load_filter is None or load_input is None or store is None:
            return

        def run(job: Any) -> bool:
            multiplier, shift = per_tensor  # as the units' quant() and bias() give them
            if load_quant is not None:
                q = load_quant()
                multiplier, shift = q[0, 0, :, 0].astype(np.int64), q[0, 0, :, 1].astype(np.int64)
            bias = load_bias().reshape(cout) if load_bias is not None else None
            result = compute(job, LayerArgs(load_filter(), bias, multiplier, shift, load_input))
            if result is None:
                return False
            store(result)
            return True

        self.binding = run

    def bind_mac(
        self,
        offset: int,
        params: LayerParams,
        inp: Tensor,
        filt: Tensor,
        out: Tensor,
        filter_shape: tuple[int, ...],
        mac_isa: int,
        plan: mac_array.MacPlan,
        in_shape: tuple[int, ...] | None = None,
    ) -> None:
        """Bind the layer at ``offset`` that just ran on the C MAC array with ``plan``.

        Where every operand is one physical run and the output overlaps none of the others, the
        binding is a :class:`mac_array.BoundRun`: one C call per job compares the parameters in
        memory with the plan's copies and writes the output straight into memory. Otherwise the
        bound layer loads its operands and the plan compares its parameters itself. A dynamic plan
        binds as a :class:`mac_array.BoundDynamic` (:meth:`_bound_dynamic`), or loads its operands
        and runs :func:`mac_array.run_dynamic`.
        """
        if plan.dynamic:
            self._bind_dynamic(offset, params, inp, filt, out, filter_shape, mac_isa, plan, in_shape)
            return
        direct = self._bound_run(inp, filt, out, params, plan, mac_isa)
        if direct is not None:

            def run_direct(job: Any) -> bool:
                # VNPU_MAC_ARRAY changed, or a parameter did: the general path picks the variant
                # or rebuilds the plan (and binds again)
                return job.mac_isa == mac_isa and direct.run()

            self.binding = c_unit(run_direct, direct, mac_isa)
            return

        def compute(job: Any, a: LayerArgs) -> np.ndarray | None:
            if job.mac_isa != mac_isa:  # VNPU_MAC_ARRAY changed: the general path picks the variant
                return None
            weights = a.filt.reshape(filter_shape)
            entry = job.bindings.plans.get(offset)
            plan = entry[1] if entry is not None else None
            if not isinstance(plan, mac_array.MacPlan) or not plan.matches(
                weights, a.bias, a.multiplier, a.shift
            ):
                return None
            x = a.load()
            return mac_array.run(plan, x if in_shape is None else x.reshape(in_shape), mac_isa)

        self.bind_layer(inp, filt, out, out.shape[3], params, compute)

    def _bind_dynamic(
        self,
        offset: int,
        params: LayerParams,
        inp: Tensor,
        filt: Tensor,
        out: Tensor,
        filter_shape: tuple[int, ...],
        mac_isa: int,
        plan: mac_array.MacPlan,
        in_shape: tuple[int, ...] | None,
    ) -> None:
        """:meth:`bind_mac` of a dynamic plan: one C call into memory where the operands allow it
        (:meth:`_bound_dynamic`), else a loading binding that packs the loaded filter in C."""
        direct = self._bound_dynamic(inp, filt, out, params, plan, mac_isa)
        if direct is not None:

            def run_direct(job: Any) -> bool:
                return job.mac_isa == mac_isa and direct.run()  # else the general path

            self.binding = c_unit(run_direct, direct, mac_isa)
            return

        def compute(job: Any, a: LayerArgs) -> np.ndarray | None:
            if job.mac_isa != mac_isa:
                return None
            weights = a.filt.reshape(filter_shape)
            entry = job.bindings.plans.get(offset)
            plan = entry[1] if entry is not None else None
            if not isinstance(plan, mac_array.MacPlan) or not plan.dynamic:
                return None
            if not plan.matches(weights, a.bias, a.multiplier, a.shift):
                return None
            x = a.load()
            return mac_array.run_dynamic(
                plan, x if in_shape is None else x.reshape(in_shape), weights, mac_isa
            )

        self.bind_layer(inp, filt, out, out.shape[3], params, compute)

    def _bound_dynamic(
        self,
        inp: Tensor,
        filt: Tensor,
        out: Tensor,
        params: LayerParams,
        plan: mac_array.MacPlan,
        mac_isa: int,
    ) -> mac_array.BoundDynamic | None:
        """A dynamic plan's operands fixed to their memory, or None where they cannot be (as
        :meth:`_bound_run`): the filter may be strided (read at its strides within its extent), the
        others dense, each one physical run, the output overlapping none of the others."""
        operands = {"input": (inp, False), "filter": (filt, False), "output": (out, True)}
        if params.quant is not None:
            operands["quant"] = (params.quant, False)
        if params.bias is not None:
            operands["bias"] = (params.bias, False)
        if not all(t.dense for name, (t, _) in operands.items() if name != "filter"):
            return None
        found = self.access.physical_spans(list(operands.values()), strided_reads=True)
        if found is None:
            return None
        spans = dict(zip(operands, found, strict=True))
        if any(overlap(span, spans["output"]) for name, span in spans.items() if name != "output"):
            return None
        view = self.access.memory.view
        checks = []
        for name in ("bias", "quant"):
            if name in spans:
                mem = view(*spans[name])
                checks.append((mem, np.frombuffer(mem, np.uint8).copy()))
        try:
            return mac_array.BoundDynamic(
                plan, view(*spans["input"]), view(*spans["filter"]), filt.shape, filt.strides,
                view(*spans["output"]), checks, mac_isa,
            )  # fmt: skip
        except ValueError:  # sizes that do not match the plan: the loading binding handles the layer
            return None

    def _bound_run(
        self,
        inp: Tensor,
        filt: Tensor,
        out: Tensor,
        params: LayerParams,
        plan: mac_array.MacPlan,
        mac_isa: int,
    ) -> mac_array.BoundRun | None:
        """The layer's operands fixed to their memory for :meth:`bind_mac`, or None where it cannot
        be: an operand in several physical runs or not kept, a strided input, bias, quantization or
        output, or an output overlapping another operand (the kernels read those while they write
        it). A strided filter (attention's transposed keys) is compared as the bytes of its extent."""
        operands = {"input": (inp, False), "filter": (filt, False), "output": (out, True)}
        if params.quant is not None:
            operands["quant"] = (params.quant, False)
        if params.bias is not None:
            operands["bias"] = (params.bias, False)
        if not all(t.dense for name, (t, _) in operands.items() if name != "filter"):
            return None
        found = self.access.physical_spans(list(operands.values()), strided_reads=True)
        if found is None:
            return None
        spans = dict(zip(operands, found, strict=True))
        if any(overlap(span, spans["output"]) for name, span in spans.items() if name != "output"):
            return None
        view = self.access.memory.view
        # The plan's copy of the filter is the filter's bytes in memory (a dense tensor of its dtype);
        # a strided filter's is its extent's bytes as they are now, which must read as the plan's
        # filter. The bias and quantization regions are compared as the raw bytes they are now.
        filter_mem = view(*spans["filter"])
        if filt.dense:
            filter_copy = plan.params[0].reshape(-1).view(np.uint8)
            now = np.frombuffer(filter_mem, np.uint8)
        else:
            filter_copy = np.frombuffer(filter_mem, np.uint8).copy()
            now = np.ndarray(filt.shape, dtype=filt.np_dtype, buffer=filter_copy, strides=filt.strides)
            now = now.reshape(-1).view(np.uint8)
        planned = plan.params[0].reshape(-1).view(np.uint8)
        if now.nbytes != planned.nbytes or not np.array_equal(now, planned):
            return None
        # A dense GEMM filter packed for VNNI is compared with that packing, which its kernel reads
        # anyway: a job then reads the filter twice (memory and packing), not three times.
        checks: list[tuple[memoryview, np.ndarray | None]] = [
            (filter_mem, None if filt.dense and plan.packed_filter else filter_copy)
        ]
        for name in ("bias", "quant"):
            if name in spans:
                mem = view(*spans[name])
                checks.append((mem, np.frombuffer(mem, np.uint8).copy()))
        try:
            return mac_array.BoundRun(plan, view(*spans["input"]), view(*spans["output"]), checks, mac_isa)
        except ValueError:  # sizes that do not match the plan: the loading binding handles the layer
            return None

    def bind_gemm(
        self,
        offset: int,
        params: LayerParams,
        inp: Tensor,
        filt: Tensor,
        out: Tensor,
        shape: tuple[int, int],
        rq: nm.Requant,
    ) -> None:
        """Bind the FULLY_CONNECTED at ``offset`` that just ran on numpy: its plan's while the digest
        matches, or the general path's if the plan was refused or the filter is dynamic (either
        stays so, as in plan())."""
        rows, k = shape
        cout = filt.shape[0] * filt.shape[1] * filt.shape[2]

        def compute(job: Any, a: LayerArgs) -> np.ndarray | None:
            if job.mac_isa is not None:  # the general path takes the MAC array now
                return None
            weights = a.filt.reshape(cout, k)
            entry = job.bindings.plans.get(offset)
            if entry is not None and entry[1] is None and entry[0] in (REFUSED, DYNAMIC):
                now = replace(rq, multiplier=a.multiplier, shift=a.shift)  # as in memory now
                return nm.fully_connected(a.load().reshape(rows, k), weights, a.bias, now, fast=False)
            if entry is None or not isinstance(entry[1], nm.GemmPlan):
                return None
            if entry[0] != param_digest(weights, a.bias, a.multiplier, a.shift):  # as plan() compares
                return None
            return nm.run_fc_plan(a.load().reshape(rows, k), entry[1], weights)

        self.bind_layer(inp, filt, out, cout, params, compute)
