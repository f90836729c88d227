"""The ioctl fuzzer: random and structure-aware calls on a vnpu device, checked for kernel damage.

    python -m qemu_tests.ioctl_fuzz --device kernel --seconds 30 --seed 1 [--procs 2 --threads 2]
    python -m qemu_tests --exec 'python -m qemu_tests.ioctl_fuzz --seconds 30'   # from the host

Two kinds of step, interleaved by every worker:

* random: every vnpu ioctl and the DRM core ones libaccel uses, with random fields (small handles,
  boundary values, random 64-bit words), random flags, user pointers that are valid, NULL,
  unmapped or kernel addresses, and (on the kernel) random argument sizes in the request number;
* structure-aware: valid-looking SUBMITs whose command streams are generated from the ISA
  description (uapi/vnpu_isa.toml) over the file's BOs, with random BO lists and directions,
  command offsets, in/out syncobj graphs, and random GEM closes, munmaps and file closes between.

Every worker (``--procs`` processes x ``--threads`` threads) is seeded from ``--seed``, so a run is
reproducible up to thread interleaving; a failure prints a one-line reproducer. On the kernel,
after every batch the parent checks dmesg for splats (qemu_tests.matrix.SPLATS); at the end it
checks that the driver's debugfs counts and /proc/meminfo's unreclaimable slab and shmem are back
to their baseline, and that a known-good job still gives the right bytes. Exit 0 when all hold.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import json
import multiprocessing
import queue
import random
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cffi
import numpy as np

from libaccel.backends import Backend
from libaccel.errors import AccelError
from qemu_tests import leak_check
from uapi import bindings as b
from uapi.bindings import ffi
from uapi.isa import SPEC, encode
from vnpu_common.cli import OneLineArgumentParser, cli_main

# Instructions the structure-aware streams leave out: WAIT spins on memory until the job timeout
# (fault injection covers hangs on purpose; here each one would stall the queue for seconds).
SKIPPED_OPS = frozenset({"WAIT"})
# The DRM core ioctls libaccel uses, and the vnpu ones.
IOCTLS = dict(b.IOCTLS)
NAMES = tuple(IOCTLS)
# Upper bounds for count fields of DRM core ioctls. 6.12's drm_syncobj_array_find() allocates
# count_handles * 4 bytes with kmalloc_array() and no __GFP_NOWARN: past KMALLOC_MAX_SIZE (4 MiB) the
# page allocator WARNs (found by this fuzzer; DRM core code, the same with any DRM driver, not
# vnpu.ko's to fix). Counts stay below that so that a real splat is not drowned by a known one.
CORE_COUNT_LIMITS = {("DRM_IOCTL_SYNCOBJ_WAIT", "count_handles"): 1 << 20}
# Random calls per burst on the kernel. A burst's arguments are drawn by numpy all at once (some
# tens of numpy calls, each costly under TCG, spread over the burst) and issued by one loop of libc
# ioctl calls; a structure-aware SUBMIT built in Python costs as much as a whole burst.
RANDOM_BURST = 256
RAW_SHARE = 0.1  # of a burst's calls: the request re-encoded with a random size and direction
POOL_BUFFER = 4096  # bytes in each of a worker's buffers that valid random pointers point into
POOL_SLACK = 4096  # bytes after each that the kernel may write into past the room a pointer left
BOGUS_POINTERS = (0, 1, 0x1000, 0xFFFF_FFFF_FFFF_F000, 0xFFFF_8880_0000_0000, 0x7FFF_FFFF_F000, 1 << 47)
INTERESTING = (0, 1, 2, 3, 7, 8, 0xFF, 0x1000, 0xFFFF, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF, 1 << 32)
_INTERESTING = np.array(INTERESTING, np.uint64)
_BOGUS = np.array(BOGUS_POINTERS, np.uint64)
_POINTER_SIZES = np.array((8, 64, 4096), np.uint64)


@dataclass
class FuzzStats:
    """What one worker (or a whole run, summed) did."""

    ioctls: int = 0
    random_ioctls: int = 0
    streams: int = 0
    submits_accepted: int = 0
    jobs_completed: int = 0
    jobs_failed: int = 0
    closes: int = 0
    munmaps: int = 0
    file_closes: int = 0
    errnos: Counter[str] = field(default_factory=Counter)

    def add(self, other: FuzzStats) -> None:
        for k in self.__dataclass_fields__:
            if k == "errnos":
                self.errnos.update(other.errnos)
            else:
                setattr(self, k, getattr(self, k) + getattr(other, k))


class FuzzFailure(RuntimeError):
    """A check failed: the message says which; ``reproducer`` re-runs the failing seed."""

    def __init__(self, message: str, reproducer: str = "") -> None:
        super().__init__(message)
        self.reproducer = reproducer


@functools.cache
def _kernel_node() -> str:
    # Discovery (pyudev) costs most of a second under TCG: once per process, not per open.
    from libaccel.discovery import list_devices

    devices = list_devices()
    if not devices:
        raise FuzzFailure("no vnpu device (/dev/accel/accel*)")
    return devices[0].node


def _open(device: str) -> Backend:
    if device == "shim":
        from libaccel.backends.shim import ShimBackend

        return ShimBackend()
    from libaccel.backends.kernel import KernelBackend

    return KernelBackend(_kernel_node() if device == "kernel" else device)


@dataclass(frozen=True)
class _Slot:
    """One field of an ioctl argument, for the byte-level random mode."""

    name: str
    offset: int
    size: int
    pointer: bool
    limit: int | None


POINTER_FIELDS = ("handles", "jobs", "bos", "in_syncobjs", "name", "date", "desc")


@functools.cache
def _layout(name: str) -> tuple[int, tuple[_Slot, ...]]:
    """(size, fields) of ioctl ``name``'s argument struct."""
    ctype = ffi.typeof(f"struct {b.ABI.ioctls[name].struct}")
    slots = tuple(
        _Slot(f, t.offset, ffi.sizeof(t.type), f in POINTER_FIELDS, CORE_COUNT_LIMITS.get((name, f)))
        for f, t in ctype.fields
    )
    return ffi.sizeof(ctype), slots


# libc's ioctl through cffi's ABI mode for the random bursts: a failure (most random calls fail) is a
# return value and errno, not an OSError to build and catch, which under TCG costs several times
# the call itself (measured in the guest: 51 us against fcntl.ioctl's 166 us for an EINVAL).
_libc_ffi = cffi.FFI()
_libc_ffi.cdef("int ioctl(int fd, unsigned long request, void *arg);")
_libc = _libc_ffi.dlopen(None)

_PLAIN, _POINTER, _HANDLE, _DEADLINE = range(4)


@dataclass(frozen=True)
class _Packer:
    """ioctl ``name``'s argument as a struct.Struct of its fields, and how each field is drawn."""

    struct: struct.Struct
    kinds: np.ndarray  # _PLAIN, _POINTER, _HANDLE or _DEADLINE per field
    masks: np.ndarray  # the field's width
    limits: np.ndarray  # CORE_COUNT_LIMITS bound, 0 for none


@functools.cache
def _packer(name: str) -> _Packer:
    size, slots = _layout(name)
    fmt, at = "<", 0
    for slot in sorted(slots, key=lambda s: s.offset):
        fmt += "x" * (slot.offset - at) + {1: "B", 2: "H", 4: "I", 8: "Q"}[slot.size]
        at = slot.offset + slot.size
    fmt += "x" * (size - at)
    ordered = sorted(slots, key=lambda s: s.offset)
    kinds = [
        _POINTER if s.pointer else _HANDLE if s.name == "handle" else _DEADLINE
        if s.name.startswith("timeout") else _PLAIN
        for s in ordered
    ]  # fmt: skip
    return _Packer(
        struct.Struct(fmt),
        np.array(kinds, np.int8),
        np.array([(1 << (8 * s.size)) - 1 for s in ordered], np.uint64),
        np.array([s.limit or 0 for s in ordered], np.uint64),
    )


def warm_up() -> None:
    """Parse every C type the workers use once, before they fork (cffi's parser is slow under TCG)."""
    for name in IOCTLS:
        _packer(name)
        ffi.typeof(f"struct {b.ABI.ioctls[name].struct} *")
    for t in ("struct drm_vnpu_job[]", "struct drm_vnpu_job_bo[]", "uint32_t[]", "uint8_t[]", "uintptr_t"):
        ffi.typeof(t)
    for t in ("drm_vnpu_bo_create", "drm_syncobj_create", "drm_vnpu_bo_wait", "drm_syncobj_destroy"):
        ffi.typeof(f"struct {t} *")
    ffi.typeof("struct drm_syncobj_wait *")


@dataclass
class _Bo:
    handle: int
    size: int
    va: int
    mmap_offset: int
    read_only: bool
    view: memoryview | None = None


@dataclass
class _File:
    backend: Backend
    bos: list[_Bo] = field(default_factory=list)
    syncobjs: list[int] = field(default_factory=list)
    keep: list[Any] = field(default_factory=list)  # cffi arrays the pending SUBMITs point into


class Worker:
    """One fuzzing thread: its own files, BOs and syncobjs, its own seeded random stream."""

    def __init__(self, device: str, seed: int, stats: FuzzStats | None = None) -> None:
        self.device = device
        self.rng = random.Random(seed)
        self.stats = stats or FuzzStats()
        self.files: list[_File] = []
        self.burst = 1 if device == "shim" else RANDOM_BURST
        # POOL_SLACK bytes past each: a pointer leaves room for 8, 64 or 4096 bytes, but the kernel
        # writes as much as it has (DRM_IOCTL_VERSION copies strlen(desc) bytes, whatever length
        # the call asked for), and past the buffer that was the heap's next chunk ("double free or
        # corruption" in a long run).
        self._pool = [
            ffi.new("uint8_t[]", self.rng.randbytes(POOL_BUFFER) + bytes(POOL_SLACK)) for _ in range(8)
        ]
        self.pool = [int(ffi.cast("uintptr_t", buf)) for buf in self._pool]
        self.np_rng = np.random.default_rng(self.rng.getrandbits(64))

    # --- calls ------------------------------------------------------------------------------
    def call(self, f: _File, name: str, arg: Any) -> bool:
        """One ioctl; an errno is an expected outcome (counted), anything else propagates."""
        self.stats.ioctls += 1
        try:
            f.backend.ioctl(IOCTLS[name], arg)
        except AccelError as e:
            self.stats.errnos[
                f"{name.removeprefix('DRM_IOCTL_')}:{errno.errorcode.get(e.errno, e.errno)}"
            ] += 1
            return False
        return True

    def file(self) -> _File:
        if not self.files or (len(self.files) < 3 and self.rng.random() < 0.02):
            self.files.append(_File(_open(self.device)))
        return self.rng.choice(self.files)

    def value(self, bits: int) -> int:
        r = self.rng.random()
        if r < 0.4:
            v = self.rng.choice(INTERESTING)
        elif r < 0.7:
            v = self.rng.randrange(16)
        else:
            v = self.rng.getrandbits(bits)
        return v & ((1 << bits) - 1)

    def pointer(self, f: _File, size: int) -> int:
        """A user pointer: to ``size`` random bytes (mostly), or one that must fault.

        The random bytes come from the worker's pool (filled once): the kernel only reads them.
        """
        del f
        if self.rng.random() < 0.75:
            size = min(max(1, size), POOL_BUFFER)
            return self.rng.choice(self.pool) + self.rng.randrange(POOL_BUFFER - size + 1)
        return self.rng.choice(BOGUS_POINTERS)

    # --- random mode --------------------------------------------------------------------------
    def random_ioctl(self, f: _File) -> None:
        self.stats.random_ioctls += 1
        name = self.rng.choice(list(IOCTLS))
        struct = b.ABI.ioctls[name].struct
        arg = ffi.new(f"struct {struct} *")
        for fname, ftype in ffi.typeof(arg).item.fields:
            kind = ftype.type
            if kind.kind != "primitive":
                continue
            bits = 8 * ffi.sizeof(kind)
            if fname in ("handles", "jobs", "bos", "in_syncobjs", "name", "date", "desc"):
                setattr(arg, fname, self.pointer(f, self.rng.choice((8, 64, 4096))))
            elif fname == "handle" and f.bos and self.rng.random() < 0.5:
                arg.handle = self.rng.choice(f.bos).handle
            elif fname.endswith(("timeout_nsec", "timeout_ns")):
                # Absolute deadlines: now-ish, so a wait cannot stall the run.
                setattr(arg, fname, time.monotonic_ns() + self.rng.choice((0, 1_000_000)))
            else:
                v = self.value(bits)
                limit = CORE_COUNT_LIMITS.get((name, fname))
                if limit is not None:
                    v %= limit
                elif kind.cname.startswith("int") or kind.cname in ("long", "int", "short", "char"):
                    v -= (1 << bits) if v >> (bits - 1) else 0
                setattr(arg, fname, v)
        if self.call(f, name, arg) and name == "DRM_IOCTL_VNPU_BO_CREATE":
            f.bos.append(_Bo(arg.handle, arg.size, arg.va, arg.mmap_offset, bool(arg.flags & 1)))
        elif name == "DRM_IOCTL_SYNCOBJ_CREATE" and arg.handle:
            f.syncobjs.append(arg.handle)
        f.keep.clear()

    def random_burst(self, f: _File) -> None:
        """``self.burst`` random calls (kernel): most at the byte level, the rest raw requests."""
        g = self.np_rng
        names = [NAMES[i] for i in g.integers(len(NAMES), size=self.burst).tolist()]
        raw = (g.random(self.burst) < RAW_SHARE).tolist()
        for name, r in zip(names, raw, strict=True):
            if r:
                self.raw_ioctl(f, name)
        self.bytes_burst(f, [n for n, r in zip(names, raw, strict=True) if not r])

    def _values(self, k: int) -> np.ndarray:
        """``k`` 64-bit field values as :meth:`value` draws them (boundary, small or random)."""
        g = self.np_rng
        r = g.random(k)
        return np.where(
            r < 0.4,
            _INTERESTING[g.integers(len(_INTERESTING), size=k)],
            np.where(
                r < 0.7,
                g.integers(16, size=k).astype(np.uint64),
                g.bit_generator.random_raw(k),  # 64 random bits each
            ),
        )

    def bytes_burst(self, f: _File, names: list[str]) -> None:
        """Random calls at the byte level (kernel): the fields :meth:`random_ioctl` fills, drawn for
        the whole burst by numpy at once, packed into one buffer and issued in the drawn order.

        Under TCG a cffi struct, or a Python loop drawing the fields, per call costs many times
        what the ioctl costs; this path is what makes millions of calls affordable.
        """
        g = self.np_rng
        packers = [_packer(n) for n in names]
        kinds = np.concatenate([p.kinds for p in packers])
        k = len(kinds)
        # Pointers: mostly into the worker's pool with room for 8, 64 or 4096 bytes; else bogus.
        room = np.uint64(POOL_BUFFER + 1) - np.minimum(_POINTER_SIZES[g.integers(3, size=k)], POOL_BUFFER)
        pointers = np.where(
            g.random(k) < 0.75,
            np.array(self.pool, np.uint64)[g.integers(len(self.pool), size=k)]
            + (g.random(k) * room).astype(np.uint64),
            _BOGUS[g.integers(len(_BOGUS), size=k)],
        )
        plain = self._values(k)
        handles = plain
        if f.bos:
            known = np.array([bo.handle for bo in f.bos], np.uint64)
            handles = np.where(g.random(k) < 0.5, known[g.integers(len(known), size=k)], plain)
        # Absolute deadlines: now, or (one in ten) a millisecond later: a wait that blocks costs a
        # whole jiffy or more, and drm_syncobj's timed wait is the same code at any length.
        later = np.where(g.random(k) < 0.1, 1_000_000, 0).astype(np.uint64)
        deadlines = np.uint64(time.monotonic_ns()) + later
        values = np.select(
            [kinds == _POINTER, kinds == _HANDLE, kinds == _DEADLINE], [pointers, handles, deadlines], plain
        )
        values &= np.concatenate([p.masks for p in packers])
        limits = np.concatenate([p.limits for p in packers])
        bounded = limits > 0
        values[bounded] %= limits[bounded]
        flat = values.tolist()
        buf = bytearray(sum(p.struct.size for p in packers))
        offsets, at, v = [], 0, 0
        for p in packers:
            p.struct.pack_into(buf, at, *flat[v : v + len(p.kinds)])
            offsets.append(at)
            at += p.struct.size
            v += len(p.kinds)
        base = _libc_ffi.from_buffer(buf)
        fd = f.backend.fileno()
        ioctl, libc = _libc.ioctl, _libc_ffi
        errs = [
            libc.errno if ioctl(fd, req, base + at) < 0 else 0
            for req, at in zip([IOCTLS[n] for n in names], offsets, strict=True)
        ]
        self.stats.ioctls += len(names)
        self.stats.random_ioctls += len(names)
        for (name, err), n in Counter(zip(names, errs, strict=True)).items():
            if err:
                self.stats.errnos[f"{name.removeprefix('DRM_IOCTL_')}:{errno.errorcode.get(err, err)}"] += n
        created = [
            (name, at)
            for name, at, err in zip(names, offsets, errs, strict=True)
            if not err and name in ("DRM_IOCTL_VNPU_BO_CREATE", "DRM_IOCTL_SYNCOBJ_CREATE")
        ]
        for name, at in created:
            view = memoryview(buf)[at:]
            if name == "DRM_IOCTL_VNPU_BO_CREATE":
                a = ffi.from_buffer("struct drm_vnpu_bo_create *", view)
                f.bos.append(_Bo(a.handle, a.size, a.va, a.mmap_offset, bool(a.flags & 1)))
            else:
                f.syncobjs.append(ffi.from_buffer("struct drm_syncobj_create *", view).handle)

    def raw_ioctl(self, f: _File, name: str) -> None:
        """The request with a random argument size (and direction bits): -EINVAL/-ENOTTY/-EFAULT."""
        request = IOCTLS[name]
        size = self.rng.choice((0, 1, 7, 8, 16, 64, 255, 4096, 16383))
        direction = self.rng.choice((0, 1, 2, 3))
        raw = (request & 0xFFFF) | (size << 16) | (direction << 30)
        self.stats.ioctls += 1
        self.stats.random_ioctls += 1
        buf = bytearray(self.rng.randbytes(max(size, 1)))
        for (ioctl, count), limit in CORE_COUNT_LIMITS.items():
            if ioctl == name:  # the same bound on the count the kernel will read from these bytes
                at = ffi.offsetof(f"struct {b.ABI.ioctls[name].struct}", count)
                if at + 4 <= len(buf):
                    buf[at : at + 4] = (int.from_bytes(buf[at : at + 4], "little") % limit).to_bytes(
                        4, "little"
                    )
        try:
            fcntl.ioctl(f.backend.fileno(), raw, buf, True)  # type: ignore[attr-defined]
        except OSError as e:
            self.stats.errnos[f"raw:{errno.errorcode.get(e.errno, e.errno)}"] += 1

    # --- structure-aware mode ------------------------------------------------------------------
    def bo_create(self, f: _File) -> _Bo | None:
        arg = ffi.new("struct drm_vnpu_bo_create *")
        arg.size = self.rng.choice((4096, 8192, 3 * 4096, self.rng.randrange(1, 65536)))
        arg.flags = b.DRM_VNPU_BO_DEVICE_READ_ONLY if self.rng.random() < 0.2 else 0
        if not self.call(f, "DRM_IOCTL_VNPU_BO_CREATE", arg):
            return None
        bo = _Bo(arg.handle, arg.size, arg.va, arg.mmap_offset, bool(arg.flags))
        f.bos.append(bo)
        return bo

    def stream(self, f: _File, max_len: int, bos: list[_Bo] | None = None) -> bytes:
        """A command stream from the ISA description over ``bos`` (default: the file's)."""
        bos = bos or f.bos
        self.stats.streams += 1
        out = bytearray()
        # Tensor descriptors first (small, contiguous, inside a listed BO), so that the operations
        # after them get past "slot used before any TENSOR" and reach the shape and bounds checks.
        defined = self.rng.randrange(1, min(SPEC.slots, 6) + 1)
        for slot in range(defined):
            dtype = self.rng.choice(list(SPEC.dtypes.values()))
            n, h, w, c = 1, self.rng.choice((1, 2, 4)), self.rng.choice((1, 2, 4)), self.rng.choice((1, 4, 8))
            bo = self.rng.choice(bos) if bos else None
            extent = n * h * w * c * dtype.size
            va = bo.va + self.rng.randrange(max(1, bo.size - extent + 1)) if bo else self.rng.getrandbits(40)
            out += encode(
                "TENSOR", slot=slot, dtype=dtype.code, va=va, n=n, h=h, w=w, c=c,
                stride_n=h * w * c * dtype.size, stride_h=w * c * dtype.size, stride_w=c * dtype.size,
                stride_c=dtype.size, zero_point=self.rng.randrange(-4, 5),
            )  # fmt: skip
        ops = [i for i in SPEC.instructions if i.name not in SKIPPED_OPS and i.name != "END"]
        for _ in range(self.rng.randrange(1, 5)):
            spec = self.rng.choice(ops)
            values: dict[str, int] = {}
            for fs in spec.fields:
                if fs.type == "flags":
                    values[fs.name] = sum(SPEC.flags[a] for a in fs.allowed if self.rng.random() < 0.3)
                elif fs.is_operand or fs.name == "slot":
                    values[fs.name] = self.rng.randrange(defined if self.rng.random() < 0.95 else SPEC.slots)
                elif fs.name == "dtype":
                    values[fs.name] = self.rng.choice(list(SPEC.dtypes.values())).code
                elif fs.type == "u64" and bos:
                    bo = self.rng.choice(bos if self.rng.random() < 0.9 else f.bos)
                    values[fs.name] = bo.va + self.rng.choice((0, 0, 8, bo.size - 8, bo.size, 1 << 20))
                elif fs.type == "i32":
                    values[fs.name] = self.rng.randrange(-128, 128)
                elif fs.type == "u64":
                    values[fs.name] = self.rng.getrandbits(40)
                else:
                    values[fs.name] = self.rng.choice((0, 1, 1, 2, 4, 8, 16, 64))
            for fs in spec.fields:
                if fs.is_operand and fs.when is not None and not values.get("flags", 0) & SPEC.flags[fs.when]:
                    values[fs.name] = 0
            try:
                out += encode(spec.name, **values)
            except ValueError:
                continue
        out += encode("END")
        if self.rng.random() < 0.1:  # and now and then a damaged one
            i = self.rng.randrange(len(out))
            out[i] ^= 1 << self.rng.randrange(8)
        return bytes(out[:max_len])

    def submit(self, f: _File) -> None:
        while len(f.bos) < 2:
            if self.bo_create(f) is None:
                return
        writable = [bo for bo in f.bos if not bo.read_only]
        cmd = self.rng.choice(writable or f.bos)
        others = [bo for bo in f.bos if bo is not cmd]
        listed = [cmd, *self.rng.sample(others, self.rng.randrange(1, min(len(others), 5) + 1))]
        stream = self.stream(f, cmd.size, listed[1:])
        offset = self.rng.choice((0, 0, 0, 8, cmd.size - len(stream) if cmd.size >= len(stream) else 0))
        offset -= offset % 8
        try:
            if cmd.view is None:
                cmd.view = f.backend.mmap(cmd.mmap_offset, cmd.size)
            cmd.view[offset : offset + len(stream)] = stream
        except (AccelError, ValueError, IndexError):
            pass
        jobs = ffi.new("struct drm_vnpu_job[]", self.rng.choice((1, 1, 1, 1, 2)))
        keep: list[Any] = [jobs]
        for j in jobs:
            # Read for the command BO, read-write for the rest; now and then a bad direction.
            flags = [1] + [1 if bo.read_only else 3 for bo in listed[1:]]
            if self.rng.random() < 0.1:
                flags[self.rng.randrange(len(flags))] = self.rng.choice((0, 2, 4, 0xFF))
            bos = ffi.new(
                "struct drm_vnpu_job_bo[]", list(zip((bo.handle for bo in listed), flags, strict=True))
            )
            keep.append(bos)
            j.bos, j.bo_count = int(ffi.cast("uintptr_t", bos)), len(listed)
            j.cmd_bo_handle, j.cmd_offset = cmd.handle, offset
            j.cmd_size = len(stream) if self.rng.random() < 0.95 else self.value(32)
            if f.syncobjs and self.rng.random() < 0.5:
                ins = ffi.new("uint32_t[]", self.rng.sample(f.syncobjs, min(len(f.syncobjs), 2)))
                keep.append(ins)
                j.in_syncobjs, j.in_syncobj_count = int(ffi.cast("uintptr_t", ins)), len(ins)
            if f.syncobjs and self.rng.random() < 0.6:
                j.out_syncobj = self.rng.choice(f.syncobjs)
        arg = ffi.new("struct drm_vnpu_submit *")
        arg.jobs, arg.job_count = int(ffi.cast("uintptr_t", jobs)), len(jobs)
        arg.job_struct_size = ffi.sizeof("struct drm_vnpu_job")
        if self.call(f, "DRM_IOCTL_VNPU_SUBMIT", arg):
            self.stats.submits_accepted += 1
            if self.rng.random() < 0.3:
                self.bo_wait(f, cmd)

    def bo_wait(self, f: _File, bo: _Bo) -> None:
        arg = ffi.new("struct drm_vnpu_bo_wait *")
        arg.handle = bo.handle
        arg.timeout_ns = time.monotonic_ns() + 3_000_000_000
        if self.call(f, "DRM_IOCTL_VNPU_BO_WAIT", arg):
            if arg.job_status == 0:
                self.stats.jobs_completed += 1
            else:
                self.stats.jobs_failed += 1

    def syncobj(self, f: _File) -> None:
        r = self.rng.random()
        if r < 0.5 or not f.syncobjs:
            arg = ffi.new("struct drm_syncobj_create *")
            arg.flags = self.rng.choice((0, 0, 1))
            if self.call(f, "DRM_IOCTL_SYNCOBJ_CREATE", arg):
                f.syncobjs.append(arg.handle)
        elif r < 0.75:
            h = f.syncobjs.pop(self.rng.randrange(len(f.syncobjs)))
            arg = ffi.new("struct drm_syncobj_destroy *")
            arg.handle = h
            self.call(f, "DRM_IOCTL_SYNCOBJ_DESTROY", arg)
        else:
            handles = ffi.new("uint32_t[]", self.rng.sample(f.syncobjs, min(3, len(f.syncobjs))))
            arg = ffi.new("struct drm_syncobj_wait *")
            arg.handles, arg.count_handles = int(ffi.cast("uintptr_t", handles)), len(handles)
            arg.flags = self.rng.choice((0, 1, 2, 3))
            arg.timeout_nsec = time.monotonic_ns() + self.rng.choice((0, 2_000_000))
            self.call(f, "DRM_IOCTL_SYNCOBJ_WAIT", arg)

    def gem_close(self, f: _File) -> None:
        if not f.bos:
            return
        bo = f.bos.pop(self.rng.randrange(len(f.bos)))
        if bo.view is not None and self.rng.random() < 0.5:
            self.munmap(bo)
        arg = ffi.new("struct drm_gem_close *")
        arg.handle = bo.handle
        self.call(f, "DRM_IOCTL_GEM_CLOSE", arg)
        self.stats.closes += 1

    def munmap(self, bo: _Bo) -> None:
        if bo.view is None:
            return
        obj = bo.view.obj
        bo.view.release()
        bo.view = None
        # The kernel backend's view is an mmap of its own (munmap it); the shim's is a window on
        # the device's memory, which stays.
        if self.device != "shim":
            obj.close()
        self.stats.munmaps += 1

    def close_file(self) -> None:
        if not self.files:
            return
        f = self.files.pop(self.rng.randrange(len(self.files)))
        for bo in f.bos:
            if self.rng.random() < 0.5:
                self.munmap(bo)  # the rest stay mapped past the close, as a careless program leaves them
        f.backend.close()
        for bo in f.bos:
            self.munmap(bo)
        self.stats.file_closes += 1

    # --- the loop ---------------------------------------------------------------------------------
    def step(self) -> None:
        r = self.rng.random()
        if r < 0.45:
            f = self.file()
            if self.device == "shim":
                self.random_ioctl(f)
            else:
                self.random_burst(f)
        elif r < 0.70:
            self.submit(self.file())
        elif r < 0.80:
            self.bo_create(self.file())
        elif r < 0.88:
            self.syncobj(self.file())
        elif r < 0.94:
            self.gem_close(self.file())
        elif r < 0.97:
            f = self.file()
            if f.bos:
                self.munmap(self.rng.choice(f.bos))
        else:
            self.close_file()

    def run(self, seconds: float, max_steps: int | None = None) -> FuzzStats:
        deadline = time.monotonic() + seconds
        steps = 0
        try:
            while time.monotonic() < deadline and (max_steps is None or steps < max_steps):
                self.step()
                steps += 1
        finally:
            while self.files:
                self.close_file()
        return self.stats


# --- process / thread fan-out -------------------------------------------------------------------------
def _process(device: str, seed: int, threads: int, seconds: float, out: Any) -> None:
    warm_up()  # a no-op after a fork from a warmed-up parent
    totals = FuzzStats()
    errors: list[str] = []

    def one(index: int) -> None:
        try:
            totals.add(Worker(device, seed * 1000 + index).run(seconds))
        except BaseException as e:  # noqa: BLE001 - reported to the parent as a failure
            errors.append(f"thread {index}: {type(e).__name__}: {e}")

    pool = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    d = {k: getattr(totals, k) for k in totals.__dataclass_fields__}
    d["errnos"] = dict(totals.errnos)
    out.put((seed, d, errors))


def dmesg() -> str:
    return subprocess.run(["dmesg"], capture_output=True, text=True, check=False).stdout


@dataclass
class RunResult:
    """A whole fuzz run: what it did and what it found."""

    seed: int
    seconds: float
    procs: int
    threads: int
    stats: FuzzStats
    splats: dict[str, int]
    leaks: dict[str, tuple[int, int]]
    failures: list[str]

    @property
    def ok(self) -> bool:
        return not self.failures


def run(
    device: str,
    seed: int,
    seconds: float,
    procs: int = 1,
    threads: int = 1,
    batch: float = 5.0,
    check_kernel: bool | None = None,
    on_batch: Callable[[int, FuzzStats], None] | None = None,
) -> RunResult:
    """Fuzz for ``seconds`` in ``procs`` x ``threads`` workers, in batches of ``batch`` seconds."""
    from qemu_tests.matrix import count_splats

    kernel = device != "shim" if check_kernel is None else check_kernel
    stats = FuzzStats()
    failures: list[str] = []
    splats: dict[str, int] = {}
    base_splats = count_splats(dmesg()) if kernel else {}
    baseline = leak_check.Baseline.take() if kernel else None
    warm_up()
    if device == "kernel":
        _kernel_node()  # discovered once here, not by every forked worker of every batch
    start = time.monotonic()
    # The shim's device lives in the process with its threads, which a fork would leave behind:
    # spawn there. On the kernel fork is safe and quick (no re-import per batch under TCG).
    ctx = multiprocessing.get_context("spawn" if device == "shim" else "fork")
    batch_index = 0
    while time.monotonic() - start < seconds and not failures:
        left = min(batch, seconds - (time.monotonic() - start))
        out = ctx.Queue()
        seeds = [seed * 1009 + batch_index * 101 + p for p in range(procs)]
        children = [ctx.Process(target=_process, args=(device, s, threads, left, out)) for s in seeds]
        for c in children:
            c.start()
        results = []
        for _ in children:
            try:
                results.append(out.get(timeout=left + 120))
            except queue.Empty:  # a worker died before reporting: its exit code says how
                break
        for c in children:
            c.join(30)
            if c.exitcode != 0:
                failures.append(f"worker process died (exit {c.exitcode}) in batch {batch_index}")
        for s, d, errors in results:
            st = FuzzStats(**{k: v for k, v in d.items() if k != "errnos"})
            st.errnos.update(d["errnos"])
            stats.add(st)
            failures += [f"seed {s}: {e}" for e in errors]
        if kernel:
            now = count_splats(dmesg())
            splats = {k: v - base_splats.get(k, 0) for k, v in now.items() if v > base_splats.get(k, 0)}
            if splats:
                failures.append(f"kernel splats after batch {batch_index}: {splats}")
        if on_batch:
            on_batch(batch_index, stats)
        batch_index += 1
    leaks: dict[str, tuple[int, int]] = {}
    if baseline is not None and not failures:
        leaks = baseline.leaks()
        if leaks:
            failures.append(f"leaks (baseline, end): {leaks}")
    if not failures:
        try:
            check_device_works(device)
        except (AccelError, FuzzFailure) as e:
            failures.append(f"the known-good job failed after fuzzing: {e}")
    return RunResult(seed, time.monotonic() - start, procs, threads, stats, splats, leaks, failures)


def check_device_works(device: str) -> None:
    """A FILL job on a fresh file writes exactly the bytes it should."""
    from libaccel import Device
    from libaccel.job import Job, JobBo

    with Device.open("shim" if device == "shim" else device) as dev:
        out = dev.create_bo(4096)
        count = 4096
        stream = (
            encode(
                "TENSOR",
                slot=0,
                dtype=SPEC.dtypes["INT8"].code,
                va=out.va,
                n=1,
                h=1,
                w=1,
                c=count,
                stride_c=1,
            )
            + encode("FILL", dst=0, value=0x5A)
            + encode("END")
        )
        cmd = dev.create_bo_with(stream, read_only=True)
        dev.submit(Job(cmd, len(stream), [JobBo(cmd, read=True), JobBo(out, write=True)]))
        out.wait(timeout=10).raise_for_status()
        got = out.read(count)
        if got != b"\x5a" * count:
            raise FuzzFailure(f"FILL wrote {sum(x != 0x5A for x in got)} wrong bytes")


def reproducer(device: str, seed: int, seconds: float, procs: int, threads: int) -> str:
    cmd = f"python -m qemu_tests.ioctl_fuzz --device {device} --seed {seed} --seconds {seconds:g}"
    cmd += f" --procs {procs} --threads {threads}"
    return cmd if device == "shim" else f"python -m qemu_tests --exec '{cmd}'"


@cli_main("python -m qemu_tests.ioctl_fuzz")
def main(argv: list[str] | None = None) -> int:
    p = OneLineArgumentParser(prog="python -m qemu_tests.ioctl_fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="kernel", help="kernel (default), shim, or /dev/accel/accelN")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=float, default=5.0, help="seconds between dmesg checks")
    p.add_argument("--json", type=Path, help="write the run's figures here")
    args = p.parse_args(argv)
    if args.seconds <= 0 or args.procs < 1 or args.threads < 1:
        p.error("--seconds, --procs and --threads must be positive")
    try:
        res = run(args.device, args.seed, args.seconds, args.procs, args.threads, args.batch)
    except (FuzzFailure, AccelError) as e:
        print(f"ioctl_fuzz: {e}", file=sys.stderr)
        return 2
    s = res.stats
    print(
        f"ioctl_fuzz: {s.ioctls} ioctls ({s.random_ioctls} random), {s.streams} streams, "
        f"{s.submits_accepted} submits accepted, {s.jobs_completed} jobs ok / {s.jobs_failed} failed, "
        f"{s.closes} GEM closes, {s.munmaps} munmaps, {s.file_closes} file closes in {res.seconds:.1f} s "
        f"({args.procs} procs x {args.threads} threads, seed {args.seed})"
    )
    if args.json:
        doc = {k: getattr(res, k) for k in ("seed", "seconds", "procs", "threads", "splats", "failures")}
        doc["stats"] = {k: getattr(s, k) for k in s.__dataclass_fields__ if k != "errnos"}
        doc["stats"]["errnos"] = dict(s.errnos)
        doc["leaks"] = {k: list(v) for k, v in res.leaks.items()}
        args.json.write_text(json.dumps(doc, indent=1, sort_keys=True))
    for f in res.failures:
        print(f"ioctl_fuzz: FAIL: {f}", file=sys.stderr)
    if res.failures:
        print("reproduce: " + reproducer(args.device, args.seed, args.seconds, args.procs, args.threads))
        return 1
    print("ioctl_fuzz: no splats, no leaks, the known-good job ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
