"""Units bound to memory: a layer, a table lookup or a pool fixed to its operands' bytes in system
memory, run as one C call per job by a bound instruction (see the command processor's
``bind_mac``, ``bind_lookup`` and ``bind_pool``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import numerics as nm
from . import _RANGES, MacPlan, _check_positive, _softmax_tables32, cpu_isas, dynamic_spec, library

POOL_MAX_TAPS = 1 << 23  # window taps the pooling unit's int32 sums take (255 * taps < 2**31)
# struct mac_unit's kinds (MAC_UNIT_* in C)
UNIT_LAYER, UNIT_LOOKUP, UNIT_POOL, UNIT_COPY, UNIT_SOFTMAX, UNIT_DYNAMIC = 0, 1, 2, 3, 4, 5
CHECK_PACKED, CHECK_REPACK = 1, 2  # struct mac_check's packed (MAC_CHECK_* in C)


def _address(ffi: Any, buf: memoryview | np.ndarray, keep: list[np.ndarray], writable: bool = False) -> Any:
    """A pointer to ``buf``'s bytes for the kernels, with a numpy array over them kept in ``keep``.

    Not ``ffi.from_buffer``: its pointer holds a buffer export on the view of system memory for as
    long as it lives, which a garbage collection clearing the view reports as a BufferError, and a
    benchmark process tearing its devices down that way crashed. A numpy array keeps the view
    referenced without an export, as the loading bindings' arrays do."""
    arr = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
    if not arr.flags.c_contiguous or (writable and not arr.flags.writeable):
        raise ValueError("a bound unit's buffer must be contiguous (and writable for its output)")
    keep.append(arr)
    return ffi.cast("void *", arr.ctypes.data)


class BoundRun:
    """A plan fixed to its operands' memory: ``run()`` checks the layer's parameters and computes it
    straight into the output's memory in one C call (``mac_run_checked``).

    ``checks`` pairs each parameter region of the device's memory (filter, bias, per-channel
    quantization: the bytes as they are in memory) with the copy the plan was built from; ``run()``
    computes only while every region still equals its copy and returns False otherwise, leaving the
    output untouched. A copy of None marks a dense GEMM filter packed for VNNI
    (:attr:`MacPlan.packed_filter`): where any filter of its dtype would pack
    (:attr:`MacPlan.any_filter_packs`), the VNNI kernel packs the filter's memory afresh at each run
    and nothing is compared (the job reads its weights once); otherwise the memory is compared with
    the packing the kernel reads (twice, not three times). The output must not overlap the input or
    a checked region (the kernels read them while they write). The buffers stay referenced while
    this object lives.
    """

    def __init__(
        self,
        plan: MacPlan,
        inp: memoryview,
        out: memoryview,
        checks: list[tuple[memoryview, np.ndarray | None]],
        isa: int,
    ) -> None:
        mod = library()
        if mod is None:
            raise RuntimeError("the MAC array's C kernels are not available")
        in_bytes = int(np.prod(plan.in_shape))
        out_bytes = int(np.prod(plan.out_shape)) * plan.out_dtype.itemsize
        if inp.nbytes != in_bytes or out.nbytes != out_bytes:
            raise ValueError(
                f"bound layer: {inp.nbytes} input and {out.nbytes} output bytes, "
                f"the plan has {in_bytes} and {out_bytes}"
            )
        ffi = mod.ffi
        self._plan = plan
        self._keep: list[np.ndarray] = []
        x, y = _address(ffi, inp, self._keep), _address(ffi, out, self._keep, writable=True)
        self._checks = ffi.new("struct mac_check[]", max(len(checks), 1))
        for i, (mem, copy) in enumerate(checks):
            c = self._checks[i]
            if copy is None:
                if not plan.packed_filter or mem.nbytes != plan.params[0].nbytes:
                    raise ValueError(
                        f"bound layer: check {i} needs a packed GEMM filter of {mem.nbytes} bytes"
                    )
                c.packed = CHECK_REPACK if plan.any_filter_packs else CHECK_PACKED
                c.zp = plan.filter_zp
            elif mem.nbytes != copy.nbytes or not copy.flags.c_contiguous:
                raise ValueError(f"bound layer: check {i} compares {mem.nbytes} bytes with {copy.nbytes}")
            else:
                c.copy = _address(ffi, copy, self._keep)
            c.mem = _address(ffi, mem, self._keep)
            c.n = mem.nbytes
        self._args = (plan.layer, x, y, isa, self._checks, len(checks))
        self._run = mod.lib.mac_run_checked
        self._empty = out_bytes == 0
        self.groupable = not self._empty  # a UnitGroup can run it (an empty output has no work)

    def fill_unit(self, u: Any) -> bool:
        """Describe this layer in ``u`` (a ``struct mac_unit``) for :class:`UnitGroup`; False for an
        empty output, which :meth:`run` skips."""
        if self._empty:
            return False
        layer, x, y, isa, checks, nchecks = self._args
        u.kind, u.spec, u.a, u.out, u.isa, u.checks, u.nchecks = UNIT_LAYER, layer, x, y, isa, checks, nchecks
        return True

    def run(self) -> bool:
        """True when the layer ran, False when a parameter no longer matches the plan."""
        if self._empty:
            return True
        rc = self._run(*self._args)
        if rc < 0:
            raise MemoryError("MAC array: out of memory for the layer's buffers")
        return rc == 0


class BoundDynamic:
    """A dynamic plan (a FULLY_CONNECTED whose filter is an activation) fixed to its operands'
    memory: ``run()`` compares the ``checks`` (bias, per-channel quantization: each region of memory
    with the plan's copy) and computes the layer straight into the output's memory in one C call
    (``mac_run_dynamic``), the filter packed from ``filt`` (its extent's bytes, the filter's ``shape``
    at byte ``strides`` within them) as it is at that run. The output must not overlap the input,
    the filter or a checked region. The buffers stay referenced while this object lives."""

    def __init__(
        self,
        plan: MacPlan,
        inp: memoryview,
        filt: memoryview,
        shape: tuple[int, ...],
        strides: tuple[int, ...],
        out: memoryview,
        checks: list[tuple[memoryview, np.ndarray]],
        isa: int,
    ) -> None:
        mod = library()
        if mod is None:
            raise RuntimeError("the MAC array's C kernels are not available")
        in_bytes = int(np.prod(plan.in_shape))
        out_bytes = int(np.prod(plan.out_shape)) * plan.out_dtype.itemsize
        if inp.nbytes != in_bytes or out.nbytes != out_bytes:
            raise ValueError(
                f"dynamic layer: {inp.nbytes} input and {out.nbytes} output bytes, "
                f"the plan has {in_bytes} and {out_bytes}"
            )
        ffi = mod.ffi
        self._plan = plan
        self._keep: list[np.ndarray] = []
        f = np.frombuffer(filt, dtype=np.uint8)
        self._keep.append(f)
        self._spec = dynamic_spec(plan, f, shape, strides)
        x, y = _address(ffi, inp, self._keep), _address(ffi, out, self._keep, writable=True)
        self._checks = ffi.new("struct mac_check[]", max(len(checks), 1))
        for i, (mem, copy) in enumerate(checks):
            if mem.nbytes != copy.nbytes or not copy.flags.c_contiguous:
                raise ValueError(f"dynamic layer: check {i} compares {mem.nbytes} bytes with {copy.nbytes}")
            c = self._checks[i]
            c.mem, c.copy, c.n = _address(ffi, mem, self._keep), _address(ffi, copy, self._keep), mem.nbytes
        self._args = (self._spec, x, y, isa, self._checks, len(checks))
        self._run = mod.lib.mac_run_dynamic
        self._empty = out_bytes == 0
        self.groupable = not self._empty

    def fill_unit(self, u: Any) -> bool:
        """Describe this layer in ``u`` (a ``struct mac_unit``) for :class:`UnitGroup`; False for an
        empty output, which :meth:`run` skips."""
        if self._empty:
            return False
        spec, x, y, isa, checks, nchecks = self._args
        u.kind, u.spec, u.a, u.out, u.isa, u.checks, u.nchecks = (
            UNIT_DYNAMIC,
            spec,
            x,
            y,
            isa,
            checks,
            nchecks,
        )
        return True

    def run(self) -> bool:
        """True when the layer ran, False when a checked parameter no longer matches the plan."""
        if self._empty:
            return True
        rc = self._run(*self._args)
        if rc < 0:
            raise MemoryError("MAC array: out of memory for the layer's buffers")
        return rc == 0


def _strides_fit(shape: tuple[int, ...], strides: tuple[int, ...], nbytes: int) -> bool:
    """Every element of ``shape`` at byte ``strides`` (none negative) lies in a buffer of ``nbytes``."""
    if len(shape) != 4 or len(strides) != 4 or min(strides) < 0 or min(shape) < 1:
        return False
    return sum((d - 1) * s for d, s in zip(shape, strides, strict=True)) < nbytes


class BoundLookup:
    """The elementwise unit's table lookup fixed to its operands' memory (``mac_lookup``):
    ``run()`` writes ``out[i] = table[a[i] ^ flip_a]``, or with ``b``,
    ``table[((a[i] ^ flip_a) << 8) | (b[i] ^ flip_b)]``, in one C call.

    ``a`` and ``b`` hold n bytes, ``out`` n elements of the table's element size (1, 2 or 4 bytes);
    ``table`` (256 or 65536 elements: a computed table, or a view of memory read at each run) must
    not overlap ``out``, and ``out`` may overlap an input only by being the same bytes (element size
    1). The buffers stay referenced while this object lives.

    ``strided``: the output's 4-d shape and each input's byte strides within its buffer (0 where it
    is broadcast, a transposed order, ...), for inputs that are not dense (``mac_lookup_strided``);
    the output stays dense, and must not overlap a strided input.
    """

    def __init__(
        self,
        a: memoryview,
        b: memoryview | None,
        table: memoryview | np.ndarray,
        out: memoryview,
        esize: int,
        flip_a: int = 0,
        flip_b: int = 0,
        strided: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None = None,
    ) -> None:
        mod = library()
        if mod is None:
            raise RuntimeError("the MAC array's C kernels are not available")
        entries = 65536 if b is not None else 256
        if strided is None:
            n = a.nbytes
            if b is not None and b.nbytes != n:
                raise ValueError(f"lookup: inputs of {n} and {b.nbytes} bytes")
        else:
            shape = strided[0]
            n = int(np.prod(shape))
            for buf, strides in ((a, strided[1]), (b, strided[2])):
                if buf is not None and not _strides_fit(shape, strides, buf.nbytes):
                    raise ValueError(f"lookup: strides {strides} of shape {shape} leave {buf.nbytes} bytes")
        if esize not in (1, 2, 4) or out.nbytes != n * esize:
            raise ValueError(f"lookup: {n} elements, {out.nbytes} output bytes of {esize}-byte elements")
        table_bytes = memoryview(table).nbytes
        if table_bytes != entries * esize:
            raise ValueError(f"lookup: the table has {table_bytes} bytes, expected {entries * esize}")
        ffi = mod.ffi
        self._keep: list[np.ndarray] = []
        pointers = (
            _address(ffi, a, self._keep),
            ffi.NULL if b is None else _address(ffi, b, self._keep),
            _address(ffi, table, self._keep),
            _address(ffi, out, self._keep, writable=True),
        )
        self._lib = mod.lib
        self.groupable = True
        if strided is None:
            self._args: tuple[Any, ...] = (*pointers, n, esize, flip_a, flip_b)
            self._run = mod.lib.mac_lookup
        else:
            shape_c = ffi.new("int64_t[4]", list(strided[0]))
            sa, sb = ffi.new("int64_t[4]", list(strided[1])), ffi.new("int64_t[4]", list(strided[2]))
            self._keep_c = (shape_c, sa, sb)
            a_ptr, b_ptr, table_ptr, out_ptr = pointers
            self._args = (a_ptr, sa, b_ptr, sb, table_ptr, out_ptr, shape_c, esize, flip_a, flip_b)
            self._run = mod.lib.mac_lookup_strided

    def fill_unit(self, u: Any) -> bool:
        """Describe this lookup in ``u`` (a ``struct mac_unit``) for :class:`UnitGroup`."""
        u.kind = UNIT_LOOKUP
        if self._run is self._lib.mac_lookup:
            u.a, u.b, u.table, u.out, u.n, u.esize, u.fa, u.fb = self._args
        else:
            u.a, u.sa, u.b, u.sb, u.table, u.out, u.shape, u.esize, u.fa, u.fb = self._args
        return True

    def run(self) -> bool:
        """Always True (a lookup cannot fail): the form of a binding."""
        self._run(*self._args)
        return True


class BoundPool:
    """The pooling unit fixed to its operands' memory (``mac_pool``): ``run()`` writes MAXPOOL or
    AVGPOOL of the int8 / uint8 input into the output (the same dtype) in one C call, with the
    numpy path's arithmetic (:func:`numerics.max_pool`, :func:`numerics.avg_pool`).

    ``geometry`` is (filter_h, filter_w, stride_h, stride_w, pad_top, pad_left, out_h, out_w); the
    output must not overlap the input. A window with no input position raises ValueError at run
    time, as the numpy path does. ``isa`` is the C variant (by default the best this CPU runs).
    The buffers stay referenced while this object lives.
    """

    def __init__(
        self,
        inp: memoryview,
        out: memoryview,
        in_shape: tuple[int, int, int, int],
        dtype: np.dtype,
        geometry: tuple[int, int, int, int, int, int, int, int],
        act_min: int,
        act_max: int,
        average: bool,
        isa: int | None = None,
    ) -> None:
        mod = library()
        if mod is None:
            raise RuntimeError("the MAC array's C kernels are not available")
        n, h, w, c = in_shape
        fh, fw, sh, sw, pt, pl, oh, ow = geometry
        _check_positive("POOL", filter_h=fh, filter_w=fw, stride_h=sh, stride_w=sw)
        nm.check_clamp(act_min, act_max)
        if np.dtype(dtype) not in _RANGES:
            raise ValueError(f"pool: {dtype} input, expected int8 or uint8")
        if inp.nbytes != n * h * w * c or out.nbytes != n * oh * ow * c:
            raise ValueError(f"pool: {inp.nbytes} input, {out.nbytes} output bytes: {in_shape} -> {oh}x{ow}")
        if fh * fw > POOL_MAX_TAPS:  # the C sums are int32: 255 * taps must fit
            raise ValueError(f"pool: {fh}x{fw} windows, more than {POOL_MAX_TAPS} taps")
        ffi = mod.ffi
        self._spec = ffi.new("struct mac_pool *")
        for key, value in dict(
            n=n, h=h, w=w, c=c, fh=fh, fw=fw, sh=sh, sw=sw, pt=pt, pl=pl, oh=oh, ow=ow, lo=act_min,
            hi=act_max, average=int(average), in_signed=int(np.dtype(dtype) == np.int8),
            isa=max(cpu_isas()) if isa is None else isa,
        ).items():  # fmt: skip
            setattr(self._spec, key, value)
        self._keep: list[np.ndarray] = []
        self._buffers = (_address(ffi, inp, self._keep), _address(ffi, out, self._keep, writable=True))
        self._run = mod.lib.mac_pool
        self.groupable = True

    def fill_unit(self, u: Any) -> bool:
        """Describe this pool in ``u`` (a ``struct mac_unit``) for :class:`UnitGroup`."""
        u.kind, u.spec, (u.a, u.out) = UNIT_POOL, self._spec, self._buffers
        return True

    def run(self) -> bool:
        """True when it ran (a binding's form)."""
        rc = self._run(self._spec, *self._buffers)
        if rc == -1:
            raise MemoryError("pooling unit: out of memory")
        if rc == -2:
            raise ValueError("POOL: a window covers no input position (padding too large)")
        return True


class BoundCopy:
    """COPY between two views fixed to memory (``mac_copy_strided``): ``run()`` writes the source's
    elements to the destination's, each at its byte strides within its buffer (``src`` and ``dst``:
    the views' extents, which must not overlap), and nothing between them.
    """

    def __init__(
        self,
        src: memoryview,
        dst: memoryview,
        shape: tuple[int, ...],
        src_strides: tuple[int, ...],
        dst_strides: tuple[int, ...],
        esize: int,
    ) -> None:
        mod = library()
        if mod is None:
            raise RuntimeError("the MAC array's C kernels are not available")
        for what, buf, strides in (("source", src, src_strides), ("destination", dst, dst_strides)):
            if not _strides_fit(shape, strides, buf.nbytes - esize + 1):
                raise ValueError(f"copy: {what} strides {strides} of shape {shape} leave {buf.nbytes} bytes")
        if esize not in (1, 2, 4):
            raise ValueError(f"copy: {esize}-byte elements")
        ffi = mod.ffi
        self._keep: list[np.ndarray] = []
        self._c = (
            ffi.new("int64_t[4]", list(shape)),
            ffi.new("int64_t[4]", list(src_strides)),
            ffi.new("int64_t[4]", list(dst_strides)),
        )
        shape_c, ss, ds = self._c
        a, out = _address(ffi, src, self._keep), _address(ffi, dst, self._keep, writable=True)
        self._args = (a, ss, out, ds, shape_c, esize)
        self._run = mod.lib.mac_copy_strided
        self.groupable = True

    def fill_unit(self, u: Any) -> bool:
        """Describe this copy in ``u`` (a ``struct mac_unit``) for :class:`UnitGroup`."""
        u.kind = UNIT_COPY
        u.a, u.sa, u.out, u.sb, u.shape, u.esize = self._args
        return True

    def run(self) -> bool:
        """Always True (a copy cannot fail): the form of a binding."""
        self._run(*self._args)
        return True


class BoundSoftmax:
    """SOFTMAX of 8-bit rows fixed to its operands' memory (``mac_softmax``, the tables of
    :func:`numerics.softmax_tables`): ``run()`` writes the probabilities of every row of the input's
    last axis into the output in one C call, the bytes of :func:`numerics.softmax`. The output must
    not overlap the input. A row whose sum of exponentials leaves the reference's range raises
    ValueError at run time, as the numpy path does. The buffers stay referenced while this object
    lives."""

    def __init__(
        self,
        inp: memoryview,
        out: memoryview,
        depth: int,
        in_dtype: np.dtype,
        out_dtype: np.dtype,
        *,
        input_multiplier: int,
        input_left_shift: int,
        diff_min: int,
    ) -> None:
        mod = library()
        if mod is None:
            raise RuntimeError("the MAC array's C kernels are not available")
        out_dtype = nm.check_softmax(input_left_shift, out_dtype)
        if np.dtype(in_dtype) not in _RANGES:
            raise ValueError(f"SOFTMAX: input {in_dtype} is not int8 or uint8")
        if depth < 1 or inp.nbytes != out.nbytes or inp.nbytes % depth:
            raise ValueError(f"SOFTMAX: {inp.nbytes} input and {out.nbytes} output bytes in rows of {depth}")
        ffi = mod.ffi
        self._tables = _softmax_tables32(input_multiplier, input_left_shift, diff_min)
        self._spec = ffi.new("struct mac_softmax_unit *")
        self._spec.exps = ffi.cast("const int32_t *", self._tables[0].ctypes.data)
        self._spec.rescaled = ffi.cast("const int32_t *", self._tables[1].ctypes.data)
        self._spec.rows, self._spec.depth = inp.nbytes // depth, depth
        self._spec.in_signed = int(np.dtype(in_dtype) == np.int8)
        self._spec.out_signed = int(out_dtype == np.int8)
        self._keep: list[np.ndarray] = []
        self._buffers = (_address(ffi, inp, self._keep), _address(ffi, out, self._keep, writable=True))
        self._lib = mod.lib
        self.groupable = True

    def fill_unit(self, u: Any) -> bool:
        """Describe this softmax in ``u`` (a ``struct mac_unit``) for :class:`UnitGroup`."""
        u.kind, u.spec, (u.a, u.out) = UNIT_SOFTMAX, self._spec, self._buffers
        return True

    def run(self) -> bool:
        """True when it ran (a binding's form)."""
        s = self._spec
        x, y = self._buffers
        if self._lib.mac_softmax(x, y, s.rows, s.depth, s.in_signed, s.out_signed, s.exps, s.rescaled):
            raise ValueError(nm.SOFTMAX_RANGE_ERROR)
        return True


BoundUnit = BoundRun | BoundDynamic | BoundLookup | BoundPool | BoundCopy | BoundSoftmax


class UnitGroup:
    """Consecutive bound units of a stream run by one C call (``mac_run_units``) instead of a Python
    call each. The units keep their buffers referenced; this group keeps the units."""

    def __init__(self, units: list[BoundUnit]) -> None:
        mod = library()
        if mod is None:
            raise RuntimeError("the MAC array's C kernels are not available")
        self.units = units
        self._array = mod.ffi.new("struct mac_unit[]", max(len(units), 1))
        for i, unit in enumerate(units):
            if not unit.fill_unit(self._array[i]):
                raise ValueError(f"unit {i} ({type(unit).__name__}) has no work for a group")
        self._status = mod.ffi.new("int *")
        self._run = mod.lib.mac_run_units

    def run(self) -> int:
        """How many units ran before one did not (all of them: ``len(units)``): a layer whose
        parameters changed, or a pool window over no input; that unit's own ``run`` says which (False,
        or ValueError). Out of memory raises MemoryError."""
        done = self._run(self._array, len(self.units), self._status)
        if self._status[0] == -1:
            raise MemoryError("bound unit: out of memory")
        return done
