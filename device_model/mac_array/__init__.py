"""The MAC array in C: CONV2D, DEPTHWISE_CONV2D and FULLY_CONNECTED for the command processor.

:mod:`device_model.numerics` is the readable reference; these kernels (``mac_array.c``, built with
cffi on first use by :mod:`.build`) compute the same bytes faster: exact int32 accumulation modulo
2**32 (int16 operands through AVX2's ``vpmaddwd`` when every ``x - zp`` and ``w - zp`` fits,
int32 otherwise; u8 x s8 through AVX-512 VNNI's ``vpdpbusd`` when every ``w - zp`` is int8 and the
input zero point is a value of the input dtype) and TFLite's requantization, with per-channel
constants.

Which implementation runs is chosen per layer call by ``VNPU_MAC_ARRAY``:

* ``auto`` (default): the fastest C kernels this CPU runs; numpy when the C build fails (logged
  once, with the reason and what to do);
* ``numpy``: the numpy reference path;
* ``generic`` / ``avx2`` / ``avx512vnni``: at most that C variant (a CPU without it runs the best
  one below it, with a warning).

A plan (:func:`plan_layer`) holds the packed weights and per-channel constants of one layer, and a
copy of the parameters it was built from: the command processor keeps it while
:meth:`MacPlan.matches` finds the layer's parameters in memory unchanged (a byte comparison, about
five times faster than the SHA-1 digest numpy's plans are kept by, and exact).

A FULLY_CONNECTED whose filter is an activation (attention's Q.K^T and scores.V, written by the job
itself or by the one before) has a *dynamic* plan (``plan_layer(..., dynamic=True)``): everything
but the filter, which the C kernels pack from memory at each run (:func:`run_dynamic`,
``mac_run_dynamic``); nothing of the filter is kept or compared.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from vnpu_common import config

from .. import numerics as nm

log = logging.getLogger(__name__)

ENV = config.MAC_ARRAY.name
ISA_GENERIC = 0
ISA_AVX2 = 1
ISA_AVX512VNNI = 2
ISA_NAMES = {ISA_GENERIC: "generic", ISA_AVX2: "avx2", ISA_AVX512VNNI: "avx512vnni"}
KIND_CONV = 0
KIND_DEPTHWISE = 1
NR = 16  # output channels per packed GEMM panel (mac_array.c's NR)
DW_BLOCK = 16  # depthwise channels per AVX2 block (mac_array.c's DW_BLOCK)
DW_VNNI = 64  # depthwise channels per VNNI block (mac_array.c's DW_VNNI)
# Position of channel c % 16 inside its block of packed depthwise weights (mac_array.c's dw_perm).
_DW_POS = np.array([0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15])
_RANGES = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255)}
_I16 = (-(2**15), 2**15 - 1)

_lock = threading.Lock()
_module: ModuleType | None = None
_failed: str | None = None
_warned: set[str] = set()
_cpu_isas: dict[int, list[int]] = {}
_BY_NAME = {name: isa for isa, name in ISA_NAMES.items()}


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning(message)


def library() -> ModuleType | None:
    """The built extension (``ffi``, ``lib``), built now on first use; None if it cannot be built."""
    global _module, _failed
    if _module is not None or _failed is not None:
        return _module
    with _lock:
        if _module is None and _failed is None:
            from . import build

            try:
                t0 = time.perf_counter()  # ensure_built says on stderr when it really builds
                path = build.ensure_built()
                _module = build.load(path)
                log.debug("MAC array library %s ready in %.2f s", path, time.perf_counter() - t0)
            except Exception as e:  # no compiler, no Python headers, a read-only cache...
                _failed = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
                _warn_once(
                    f"MAC array: the C kernels could not be built ({_failed}); using the numpy path. "
                    "Install gcc and the Python headers (python3-dev), or check "
                    "`python -m device_model.mac_array.build`; set VNPU_MAC_ARRAY=numpy to choose numpy."
                )
    return _module


def build_failure() -> str | None:
    """Why the C kernels could not be built (None when they were, or were not tried yet)."""
    library()
    return _failed


def cpu_isas() -> list[int]:
    """The C variants this host can run (empty when the library cannot be built)."""
    mod = library()
    if mod is None:
        return []
    isas = _cpu_isas.get(id(mod))
    if isas is None:  # asked on every layer call; the CPU does not change
        best = int(mod.lib.mac_cpu_isa())
        isas = _cpu_isas[id(mod)] = [isa for isa in ISA_NAMES if isa <= best]
    return isas


_selected: dict[str, int | None] = {}  # selected_isa by the variable's value (the CPU's are fixed)


def selected_isa() -> int | None:
    """The C variant ``VNPU_MAC_ARRAY`` selects now, or None for the numpy path (asked once per job:
    worked out once per value of the variable: the raw value is the key)."""
    raw = config.MAC_ARRAY.raw()
    if raw in _selected:
        return _selected[raw]
    isa = _selected[raw] = _select(raw)
    return isa


def _select(raw: str) -> int | None:
    try:
        mode = config.MAC_ARRAY.parse_value(raw) if raw.strip() else "auto"
    except config.ConfigError as e:
        # Read at each job: the device model warns and runs on rather than fail the job.
        _warn_once(f"MAC array: {e}; using auto")
        mode = "auto"
    if mode == "numpy":
        return None
    isas = cpu_isas()
    if not isas:
        return None
    if mode in _BY_NAME:
        if _BY_NAME[mode] not in isas:
            _warn_once(f"MAC array: {ENV}={mode} but this CPU cannot run it; using {ISA_NAMES[max(isas)]}")
        return min(_BY_NAME[mode], max(isas))
    return max(isas)


@dataclass
class MacPlan:
    """One layer's C-side description (``struct mac_layer``) and the arrays it points into."""

    layer: Any  # cffi struct mac_layer *
    keep: tuple[np.ndarray, ...]  # packed weights, bias, multipliers, shifts: alive while the plan is
    in_shape: tuple[int, ...]
    out_shape: tuple[int, int, int, int]
    out_dtype: np.dtype
    params: tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]  # filter, bias, mult., shift
    filter_zp: int = 0
    dynamic: bool = False  # the filter is packed from memory at each run; params[0] holds no values

    @property
    def packed_filter(self) -> bool:
        """Whether a bound run can check the filter's memory against the VNNI kernel's packed copy
        (``struct mac_check``'s ``packed``): a GEMM layer with int8 weights packed for VNNI."""
        return self.layer.kind != KIND_DEPTHWISE and bool(self.layer.packed8)

    @property
    def any_filter_packs(self) -> bool:
        """Whether every filter of this dtype and zero point packs for VNNI (int8 with zero point 0,
        uint8 with 128: each byte less the zero point is an int8), so that a bound run may pack the
        filter's memory afresh at each run instead of comparing it (``MAC_CHECK_REPACK``)."""
        dtype = self.params[0].dtype
        return self.packed_filter and (dtype, self.filter_zp) in (
            (np.dtype(np.int8), 0),
            (np.dtype(np.uint8), 128),
        )

    def matches(
        self,
        filt: np.ndarray,
        bias: np.ndarray | None,
        multiplier: nm.ArrayLike,
        shift: nm.ArrayLike,
        filter_values: bool = True,
    ) -> bool:
        """True if these parameters are byte for byte the ones the plan was built from (a dynamic
        plan's filter: its shape and dtype only); with ``filter_values`` False, the filter's values
        are not compared either (whether only the filter changed)."""
        f0, b0, m0, s0 = self.params
        if filt.shape != f0.shape or filt.dtype != f0.dtype or (bias is None) != (b0 is None):
            return False
        mod = library()
        assert mod is not None
        if filter_values and not self.dynamic and filt.size:
            f = np.ascontiguousarray(filt)  # the layer's weights in memory: a view, no copy
            if not mod.lib.mac_equal(mod.ffi.from_buffer(f), mod.ffi.from_buffer(f0), f.nbytes):
                return False
        return (bias is None or _same(mod, bias, b0)) and _same(mod, multiplier, m0) and _same(mod, shift, s0)


def _same(mod: ModuleType, value: nm.ArrayLike, kept: np.ndarray) -> bool:
    """``np.array_equal(value, kept)``; a memcmp when shape and dtype agree (per-channel constants
    are compared on every layer call, and array_equal costs several microseconds each)."""
    a = np.asarray(value)
    if a.shape != kept.shape or a.dtype != kept.dtype or a.ndim == 0:
        return bool(np.array_equal(a, kept))
    a = np.ascontiguousarray(a)
    return a.size == 0 or bool(mod.lib.mac_equal(mod.ffi.from_buffer(a), mod.ffi.from_buffer(kept), a.nbytes))


def _check_positive(name: str, **values: int) -> None:
    for key, v in values.items():
        if v < 1:
            raise ValueError(f"{name}: {key} must be >= 1, got {v}")


def _per_channel(v: nm.ArrayLike, c: int) -> np.ndarray:
    # Always a copy: the C layer keeps a pointer to it, and ``v`` may be a view of job memory.
    return np.array(np.broadcast_to(np.asarray(v, dtype=np.int64).reshape(-1), (c,)), np.int32, order="C")


def _pack_vnni(
    kind: int, wq: np.ndarray, bias32: np.ndarray, mult: np.ndarray, shifts: np.ndarray, input_zp: int,
    in_dtype: np.dtype, output_zp: int, single: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | tuple[()]:  # fmt: skip
    """The VNNI kernels' operands (mac_array.c, "AVX-512 VNNI"): int8 weights, the bias with
    ``-z * sum(w - w_zp)`` folded in (modulo 2**32), where z = input_zp + 128 for int8 input (the
    kernels read ``x ^ 0x80``) and input_zp for uint8, and the requantization constants. Empty when
    the layer does not qualify: a weight outside int8 once w_zp is subtracted, or z not a byte
    (window positions outside the input must read z).

    GEMM weights are [panel][K4 / 4][NR][4]; depthwise weights [tap quad][block of 64 channels]
    [j][lane l][i][4 taps] for channel 16 l + 4 j + i, the order dw_vnni's unpacks produce."""
    z = input_zp + (128 if in_dtype == np.int8 else 0)
    if not 0 <= z <= 255 or (wq.size and (int(wq.min()) < -128 or int(wq.max()) > 127)):
        return ()
    if kind == KIND_DEPTHWISE:
        cout = bias32.size
        taps = wq.size // cout if cout else 0
        k4, cpad = -(-taps // 4) * 4, -(-cout // DW_VNNI) * DW_VNNI
        grid = np.zeros((k4, cpad), dtype=np.int8)
        grid[:taps, :cout] = wq.reshape(taps, cout)
        packed8 = grid.reshape(k4 // 4, 4, cpad // DW_VNNI, 4, 4, 4).transpose(0, 2, 4, 3, 5, 1)
        sums = wq.reshape(taps, cout).astype(np.int64).sum(axis=0)
    else:
        cout, k = wq.shape
        k4, cpad = -(-k // 4) * 4, -(-cout // NR) * NR
        grid = np.zeros((cpad, k4), dtype=np.int8)
        grid[:cout, :k] = wq
        packed8 = grid.reshape(cpad // NR, NR, k4 // 4, 4).transpose(0, 2, 1, 3)
        sums = wq.astype(np.int64).sum(axis=1)
    bias8 = np.zeros(cpad, np.int64)
    bias8[:cout] = bias32.astype(np.int64) - z * sums
    return (
        np.ascontiguousarray(packed8),
        (bias8 & 0xFFFFFFFF).astype(np.uint32).view(np.int32),
        _requant_rows(mult, shifts, output_zp, cpad, single),
    )


def _requant_rows(
    mult: np.ndarray, shifts: np.ndarray, output_zp: int, cpad: int, single: bool = False
) -> np.ndarray:
    """The VNNI requantization's per-channel constants, [11][cpad] int32 (mac_array.c's
    ``rq_vnni_init`` names the rows).

    With x the accumulator shifted left, p = x * m exact in 64 bits and e the right shift, TFLite's
    SRDHM then RoundingDivideByPOT is one floor division: floor((p + C - [p < T] * 2**31) / 2**S)
    with S = 31 + e, C = 2**30 + (e > 0) * 2**(30 + e), T = -2**30 when e > 0 (else never true).
    ``single`` (TFLITE_SINGLE_ROUNDING) is that division with no left shift, S = 31 - shift (e =
    S - 31 may be negative), C = 2**(S - 1) and T never true. When every channel has 1 <= e <= 21,
    C also carries output_zp * 2**S (no 64-bit overflow, and the result plus output_zp stays an
    int32), so the kernel adds no zero point, and divides by 2**32 (the high half of the 64-bit
    lane) and then by 2**(e - 1) in 32-bit lanes. The 64-bit rows hold, per block of 16 channels,
    the 8 even channels then the 8 odd ones (vpmuldq's two halves).
    """
    cout = mult.size
    left = np.zeros(cpad, np.int64)
    e = np.zeros(cpad, np.int64)
    if single:
        e[:cout] = -shifts.astype(np.int64)
    else:
        left[:cout] = np.maximum(shifts, 0)
        e[:cout] = np.maximum(-shifts.astype(np.int64), 0)
    m = np.zeros(cpad, np.int64)
    m[:cout] = mult
    fold = cout > 0 and bool(np.all((e[:cout] >= 1) & (e[:cout] <= 21)))
    if single:
        c = np.left_shift(np.int64(1), 30 + e)
        t = np.full(cpad, np.iinfo(np.int64).min)
    else:
        c = (1 << 30) + np.where(e > 0, np.left_shift(1, 30 + e), 0)
        t = np.where(e > 0, -(1 << 30), np.iinfo(np.int64).min)
    if fold:
        c[:cout] += np.int64(output_zp) << (31 + e[:cout])
    m_odd = np.zeros(cpad, np.int64)
    m_odd[0::2] = m[1::2]  # vpmuldq reads the low half of each 64-bit lane
    flags = np.zeros(cpad, np.int64)
    flags[:1] = int(bool(left.any())) | int(fold) << 1

    def split(v: np.ndarray) -> np.ndarray:  # int64 [cpad] -> [block of 16][8 even, 8 odd], 2 int32 rows
        return np.ascontiguousarray(v.reshape(-1, 8, 2).transpose(0, 2, 1)).view(np.int32).reshape(2, cpad)

    rows32 = np.stack([left, np.maximum(e - 1, 0), m, m_odd]).astype(np.int32)
    return np.concatenate([rows32, split(c), split(t), split(31 + e), flags[None].astype(np.int32)])


def plan_layer(
    kind: int,
    filt: np.ndarray,
    bias: np.ndarray | None,
    rq: nm.Requant,
    *,
    in_shape: tuple[int, int, int, int],
    in_dtype: np.dtype,
    geometry: tuple[int, int, int, int, int, int, int, int] = (1, 1, 1, 1, 0, 0, 1, 1),
    depth_multiplier: int = 1,
    dynamic: bool = False,
) -> MacPlan:
    """The plan of a CONV2D (filter [Cout, KH, KW, Cin]; FULLY_CONNECTED: [Cout, 1, 1, K] with the
    input as [rows, 1, 1, K]) or DEPTHWISE_CONV2D (filter [1, KH, KW, Cout]) layer, with ``rq``'s
    zero points and requantization (fixed point, two roundings or ``single_rounding``'s one: the
    MAC array has no ``float_scale``).

    ``geometry`` is (stride_h, stride_w, dilation_h, dilation_w, pad_top, pad_left, out_h, out_w).
    Bad parameters raise ValueError with the numpy path's checks and messages.

    ``dynamic`` (FULLY_CONNECTED only): the filter is an activation, read from memory at each run
    (:func:`run_dynamic`); ``filt`` gives its shape and dtype, and the operands' width is worked out
    from the dtypes' ranges, not from the values."""
    input_zp, filter_zp, output_zp = rq.input_zp, rq.filter_zp, rq.output_zp
    multiplier, shift, act_min, act_max = rq.multiplier, rq.shift, rq.act_min, rq.act_max
    name = "DEPTHWISE_CONV2D" if kind == KIND_DEPTHWISE else "CONV2D"
    if rq.float_scale:
        raise ValueError(f"{name}: the MAC array requantizes with a fixed-point multiplier")
    sh, sw, dh, dw, pt, pl, oh, ow = geometry
    _check_positive(name, stride_h=sh, stride_w=sw, dilation_h=dh, dilation_w=dw)
    if kind == KIND_DEPTHWISE:
        _check_positive(name, depth_multiplier=depth_multiplier)
    nm.check_zero_points(name, input_zp, filter_zp)
    nm.check_clamp(act_min, act_max)
    nm.check_shift(shift)
    in_dtype, out_dtype = np.dtype(in_dtype), np.dtype(rq.out_dtype)
    if in_dtype not in _RANGES or out_dtype not in _RANGES:
        raise ValueError(f"{name}: input and output must be int8 or uint8")
    n, h, w, cin = in_shape
    if kind == KIND_DEPTHWISE:
        _, kh, kw, cout = filt.shape
    else:
        cout, kh, kw, _ = filt.shape
    in_lo, in_hi = _RANGES[in_dtype]
    if dynamic:
        if kind != KIND_CONV or (kh, kw, n * h * w) != (1, 1, n) or filt.dtype not in _RANGES:
            raise ValueError(f"{name}: a dynamic filter is a FULLY_CONNECTED's int8 or uint8 [Cout, 1, 1, K]")
        f_lo, f_hi = _RANGES[np.dtype(filt.dtype)]
        wq = np.array([[f_lo - filter_zp, f_hi - filter_zp]], np.int32)  # the range any filter spans
    else:
        wq = filt.astype(np.int32).reshape(filt.shape[0], kh * kw * filt.shape[3]) - np.int32(
            filter_zp
        )  # [Cout, K] / [1, T*C]
    narrow = (
        _I16[0] <= in_lo - input_zp
        and in_hi - input_zp <= _I16[1]
        and (wq.size == 0 or (_I16[0] <= int(wq.min()) and int(wq.max()) <= _I16[1]))
    )
    elem = np.int16 if narrow else np.int32
    if dynamic:
        kpad = cin + cin % 2
        cout_pad = -(-cout // NR) * NR
        packed = np.zeros(0, elem)  # mac_run_dynamic packs the filter at each run
    elif kind == KIND_DEPTHWISE:
        taps = kh * kw
        kpad = taps + taps % 2
        cout_pad = -(-cout // DW_BLOCK) * DW_BLOCK
        grid = np.zeros((kpad, cout_pad), dtype=np.int32)
        positions = (np.arange(cout) // DW_BLOCK) * DW_BLOCK + _DW_POS[np.arange(cout) % DW_BLOCK]
        grid[:taps, positions] = wq.reshape(taps, cout)
        packed = grid.reshape(kpad // 2, 2, cout_pad).transpose(0, 2, 1)  # [pairs][Cout_pad][2]
    else:
        k = kh * kw * cin
        kpad = k + k % 2
        cout_pad = -(-cout // NR) * NR
        grid = np.zeros((cout_pad, kpad), dtype=np.int32)
        grid[:cout, :k] = wq
        packed = grid.reshape(cout_pad // NR, NR, kpad // 2, 2).transpose(0, 2, 1, 3)  # [panel][pair][NR][2]
    packed = np.ascontiguousarray(packed, dtype=elem)
    # A copy, never a view: the plan outlives the job whose memory ``bias`` may point into.
    bias32 = np.zeros(cout, np.int32) if bias is None else np.array(bias, dtype=np.int32, order="C")
    mult = _per_channel(multiplier, cout)
    shifts = _per_channel(shift, cout)
    out_lo, out_hi = _RANGES[out_dtype]
    dw_bias = bias32  # depthwise: input_zp * sum(w - w_zp) folded in (mac_array.c's dw_bias)
    if kind == KIND_DEPTHWISE:
        sums = wq.reshape(kh * kw, cout).astype(np.int64).sum(axis=0)
        folded = (bias32.astype(np.int64) - np.int64(input_zp) * sums) & 0xFFFFFFFF
        dw_bias = np.ascontiguousarray(folded.astype(np.uint32).view(np.int32))

    mod = library()
    if mod is None:
        raise RuntimeError("the MAC array's C kernels are not available")
    ffi = mod.ffi
    layer = ffi.new("struct mac_layer *")
    for key, value in dict(
        n=n, h=h, w=w, cin=cin, kh=kh, kw=kw, cout=cout, stride_h=sh, stride_w=sw, dil_h=dh, dil_w=dw,
        pad_top=pt, pad_left=pl, out_h=oh, out_w=ow, depth_multiplier=depth_multiplier, kpad=kpad,
        cout_pad=cout_pad, kind=kind, wide=int(not narrow), in_signed=int(in_dtype == np.int8),
        out_signed=int(out_dtype == np.int8), input_zp=input_zp, output_zp=output_zp,
        lo=max(act_min, out_lo), hi=min(act_max, out_hi), zp_byte_ok=int(in_lo <= input_zp <= in_hi),
        simple_quant=int(not np.any(mult == nm.INT32_MIN)), single_rounding=int(rq.single_rounding),
    ).items():  # fmt: skip
        setattr(layer, key, value)
    layer.packed = ffi.cast("const void *", packed.ctypes.data)
    layer.bias = ffi.cast("const int32_t *", bias32.ctypes.data)
    layer.multiplier = ffi.cast("const int32_t *", mult.ctypes.data)
    layer.shift = ffi.cast("const int32_t *", shifts.ctypes.data)
    layer.dw_bias = ffi.cast("const int32_t *", dw_bias.ctypes.data)
    vnni: tuple[np.ndarray, ...] = ()
    if not dynamic and depth_multiplier == 1 and ISA_AVX512VNNI in cpu_isas():  # VNNI depthwise: dm 1
        vnni = _pack_vnni(kind, wq, bias32, mult, shifts, input_zp, in_dtype, output_zp, rq.single_rounding)
        if vnni:
            packed8, bias8, rq = vnni
            layer.packed8 = ffi.cast("const int8_t *", packed8.ctypes.data)
            layer.bias8 = ffi.cast("const int32_t *", bias8.ctypes.data)
            layer.rq = ffi.cast("const int32_t *", rq.ctypes.data)
            layer.rq_n = rq.shape[1]
            layer.k4 = packed8.shape[0 if kind == KIND_DEPTHWISE else 1] * 4  # taps or K, rounded up to 4
    params = (
        # a dynamic plan keeps the filter's shape and dtype, no values (a read-only broadcast of one zero)
        np.broadcast_to(np.zeros((), filt.dtype), filt.shape) if dynamic else np.array(filt, order="C"),
        None if bias is None else np.array(bias),
        np.array(multiplier),
        np.array(shift),
    )
    keep = (packed, bias32, mult, shifts, dw_bias, *vnni)
    return MacPlan(
        layer, keep, tuple(in_shape), (n, oh, ow, cout), out_dtype, params, int(filter_zp), dynamic
    )


def run(plan: MacPlan, inp: np.ndarray, isa: int) -> np.ndarray:
    """The layer's output [N, OH, OW, Cout] in the output dtype, from its input (any strides)."""
    if inp.shape != plan.in_shape:
        raise ValueError(f"input shape {inp.shape} is not the planned {plan.in_shape}")
    mod = library()
    assert mod is not None  # a plan exists only when the library does
    x = np.ascontiguousarray(inp)
    out = np.empty(plan.out_shape, dtype=plan.out_dtype)
    if out.size == 0:
        return out
    ffi = mod.ffi
    if mod.lib.mac_run(plan.layer, ffi.from_buffer(x), ffi.from_buffer(out), isa) != 0:
        raise MemoryError("MAC array: out of memory for the layer's buffers")
    return out


def dynamic_spec(
    plan: MacPlan, filt: np.ndarray | memoryview, shape: tuple[int, ...], strides: tuple[int, ...]
) -> Any:
    """The ``struct mac_dynamic`` of a dynamic ``plan`` whose filter is the bytes of ``filt`` (kept
    alive by the caller): a 4-d ``shape`` [d0, d1, d2, K] of d0 * d1 * d2 = Cout rows (the
    FULLY_CONNECTED's filter tensor) at byte ``strides``; ValueError when they do not fit the plan
    or the buffer."""
    mod = library()
    if mod is None:
        raise RuntimeError("the MAC array's C kernels are not available")
    f0 = plan.params[0]
    buf = filt if isinstance(filt, np.ndarray) else np.frombuffer(filt, np.uint8)
    if (
        not plan.dynamic
        or len(shape) != 4
        or (shape[0] * shape[1] * shape[2], shape[3]) != (f0.shape[0], f0.shape[3])
    ):
        raise ValueError(f"dynamic layer: a filter of shape {tuple(shape)}, the plan's is {f0.shape}")
    if (
        len(strides) != 4
        or min(strides) < 0
        or sum((d - 1) * s for d, s in zip(shape, strides, strict=True)) >= max(buf.nbytes, 1)
    ):
        raise ValueError(
            f"dynamic layer: strides {tuple(strides)} of {tuple(shape)} leave {buf.nbytes} bytes"
        )
    ffi = mod.ffi
    spec = ffi.new("struct mac_dynamic *")
    spec.layer = plan.layer
    spec.filter = ffi.cast("const void *", buf.ctypes.data)
    spec.shape = list(shape)
    spec.strides = list(strides)
    spec.zp = plan.filter_zp
    spec.filter_signed = int(f0.dtype == np.int8)
    return spec


def run_dynamic(plan: MacPlan, inp: np.ndarray, filt: np.ndarray, isa: int) -> np.ndarray:
    """The output of a dynamic ``plan`` (:func:`plan_layer` with ``dynamic``) on its input and the
    filter ``filt`` of the plan's shape and dtype (either of any strides: gathered first), the
    filter packed in C for this run alone."""
    if inp.shape != plan.in_shape:
        raise ValueError(f"input shape {inp.shape} is not the planned {plan.in_shape}")
    if filt.dtype != plan.params[0].dtype:
        raise ValueError(f"dynamic layer: a {filt.dtype} filter, the plan's is {plan.params[0].dtype}")
    mod = library()
    assert mod is not None  # a plan exists only when the library does
    x = np.ascontiguousarray(inp)
    out = np.empty(plan.out_shape, dtype=plan.out_dtype)
    if out.size == 0:
        return out
    f = np.ascontiguousarray(filt)  # the loaded filter already is (a view of memory, or a gather)
    spec = dynamic_spec(plan, f.reshape(-1).view(np.uint8), f.shape, f.strides)
    ffi = mod.ffi
    if mod.lib.mac_run_dynamic(spec, ffi.from_buffer(x), ffi.from_buffer(out), isa, ffi.NULL, 0) < 0:
        raise MemoryError("MAC array: out of memory for the layer's buffers")
    return out


@functools.lru_cache(maxsize=nm.BYTE_TABLES)
def _softmax_tables32(mult: int, left_shift: int, diff_min: int) -> tuple[np.ndarray, np.ndarray]:
    """numerics' softmax tables as the int32 arrays mac_softmax reads (their values are int32)."""
    exps, rescaled = nm.softmax_tables(mult, left_shift, diff_min)
    return np.ascontiguousarray(exps, dtype=np.int32), np.ascontiguousarray(rescaled, dtype=np.int32)


def softmax(
    inp: np.ndarray, *, input_multiplier: int, input_left_shift: int, diff_min: int, out_dtype: np.dtype
) -> np.ndarray:
    """:func:`numerics.softmax` of an 8-bit input in C (``mac_softmax``), identical bytes: one pass
    per row instead of numpy's ~40 over the whole tensor, which cost a 12-class row ~200 us."""
    out_dtype = nm.check_softmax(input_left_shift, out_dtype)
    if inp.dtype not in _RANGES:
        raise ValueError(f"SOFTMAX: input {inp.dtype} is not int8 or uint8")
    mod = library()
    if mod is None:
        raise RuntimeError("the MAC array's C kernels are not available")
    exps, rescaled = _softmax_tables32(input_multiplier, input_left_shift, diff_min)
    x = np.ascontiguousarray(inp)
    out = np.empty(x.shape, dtype=out_dtype)
    depth = x.shape[-1] if x.ndim else 1
    rows = x.size // depth if depth else 0
    ffi = mod.ffi
    signs = int(x.dtype == np.int8), int(out_dtype == np.int8)
    status = mod.lib.mac_softmax(
        ffi.from_buffer(x), ffi.from_buffer(out), rows, depth, *signs,
        ffi.from_buffer("int32_t[]", exps), ffi.from_buffer("int32_t[]", rescaled),
    )  # fmt: skip
    if status != 0:
        raise ValueError(nm.SOFTMAX_RANGE_ERROR)
    return out


@functools.lru_cache(maxsize=64)
def _resize_axes(
    out_h: int, out_w: int, h: int, w: int, align_corners: bool, half_pixel_centers: bool
) -> tuple[np.ndarray, ...]:
    """numerics' resize_axis tables of both axes, as the contiguous int64 arrays the C reads."""
    rows = nm.resize_axis(out_h, h, align_corners, half_pixel_centers)
    cols = nm.resize_axis(out_w, w, align_corners, half_pixel_centers)
    return tuple(np.ascontiguousarray(t, dtype=np.int64) for t in (*rows, *cols))


def resize_bilinear(
    inp: np.ndarray,
    out_h: int,
    out_w: int,
    align_corners: bool,
    half_pixel_centers: bool,
    single_rounding: bool = False,
    isa: int | None = None,
) -> np.ndarray:
    """:func:`numerics.resize_bilinear` in C (``mac_resize_bilinear``, the variant ``isa``, by default
    the best this CPU runs), identical bytes: one pass over the output instead of numpy's int64
    gathers of the whole tensor (a 1x48x48x32 output took ~5 ms)."""
    if inp.ndim != 4 or inp.dtype not in _RANGES:
        raise ValueError(f"RESIZE_BILINEAR: input {inp.dtype} {inp.shape}, expected 4-d int8 or uint8")
    for key, v in (("out_h", out_h), ("out_w", out_w)):
        if v < 1:
            raise ValueError(f"RESIZE_BILINEAR: {key} must be >= 1, got {v}")  # numerics' words
    mod = library()
    if mod is None:
        raise RuntimeError("the MAC array's C kernels are not available")
    n, h, w, c = inp.shape
    x = np.ascontiguousarray(inp)
    out = np.empty((n, out_h, out_w, c), dtype=inp.dtype)
    if out.size == 0:
        return out
    ffi = mod.ffi
    axes = _resize_axes(out_h, out_w, h, w, align_corners, half_pixel_centers)  # every index inside
    tables = [ffi.from_buffer("int64_t[]", t) for t in axes]
    dims = ffi.new("int64_t[6]", [n, h, w, c, out_h, out_w])
    flags = int(inp.dtype == np.int8), int(single_rounding)
    if isa is None:
        isa = max(cpu_isas())
    mod.lib.mac_resize_bilinear(ffi.from_buffer(x), ffi.from_buffer(out), dims, *tables, *flags, isa)
    return out


# The units bound to memory (one C call per job), re-exported here for the command processor.
from .bound import POOL_MAX_TAPS as POOL_MAX_TAPS  # noqa: E402
from .bound import BoundCopy as BoundCopy  # noqa: E402
from .bound import BoundDynamic as BoundDynamic  # noqa: E402
from .bound import BoundLookup as BoundLookup  # noqa: E402
from .bound import BoundPool as BoundPool  # noqa: E402
from .bound import BoundRun as BoundRun  # noqa: E402
from .bound import BoundSoftmax as BoundSoftmax  # noqa: E402
from .bound import BoundUnit as BoundUnit  # noqa: E402
from .bound import UnitGroup as UnitGroup  # noqa: E402
