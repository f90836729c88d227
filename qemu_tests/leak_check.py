"""Leak accounting for the guest's long runs: the driver's live-object counts and the kernel's memory.

A run takes a :class:`Baseline` before it starts and calls :meth:`Baseline.leaks` at the end. Two
kinds of evidence:

* vnpu.ko's debugfs counters of live objects (``LIVE_COUNTERS``) must be back at their baseline
  exactly;
* /proc/meminfo's unreclaimable slab and shmem may end at most ``MEMINFO_TOLERANCE_KB`` above it.

Freed slab objects do not give their pages back at once: SLUB keeps empty per-CPU partial slabs,
and on a KASAN kernel every freed object waits in KASAN's quarantine (up to 1/32 of RAM) with its
slab page still allocated. Both read as unreclaimable-slab growth that is no leak, so both readings
are taken after asking every cache to shrink (``/sys/kernel/slab/*/shrink``: kmem_cache_shrink()
frees empty slabs and drains the cache's quarantine). When the slab still grew, the caches that
grew most are named (``/proc/slabinfo``) so the report says where to look.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

# /proc/meminfo tolerance at the end of a run: slab pages a cache keeps for its next allocations
# and per-CPU page lists move by a few hundred KiB between readings; a per-object leak over the
# thousands of objects a run creates exceeds this.
MEMINFO_TOLERANCE_KB = {"SUnreclaim": 2048, "Shmem": 1024}
# debugfs counters that must return to their baseline (live objects, not totals). "mappings" are
# VA ranges in any context's device page tables; "syncobjs" the handles in open files' tables.
LIVE_COUNTERS = (
    "files",
    "contexts",
    "bos",
    "bo_bytes",
    "mappings",
    "syncobjs",
    "jobs",
    "jobs_on_device",
    "cmdbufs",
)
# How many of the caches that grew a report names, and the least growth worth naming.
SLAB_REPORT_TOP = 8
SLAB_REPORT_MIN_KB = 64
# Seconds the counters get to settle at the end (jobs still draining, files being released).
SETTLE_S = 10.0

SLAB_SYSFS = Path("/sys/kernel/slab")
SLABINFO = Path("/proc/slabinfo")
MEMINFO = Path("/proc/meminfo")
PAGE_KB = 4


def meminfo(text: str | None = None) -> dict[str, int]:
    """/proc/meminfo as {field: kB}."""
    out = {}
    for line in (MEMINFO.read_text() if text is None else text).splitlines():
        key, _, rest = line.partition(":")
        if rest.split():
            out[key] = int(rest.split()[0])
    return out


def slab_kb(text: str | None = None) -> dict[str, int]:
    """Each cache's slab memory in kB from /proc/slabinfo (version 2.1), {} where it cannot be read."""
    if text is None:
        try:
            text = SLABINFO.read_text()
        except OSError:
            return {}
    out: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith(("slabinfo", "#")):
            continue
        head, _, slabdata = line.partition(": slabdata")
        fields, data = head.split(), slabdata.split()
        if len(fields) < 6 or len(data) < 2:
            continue
        pages_per_slab, num_slabs = int(fields[5]), int(data[1])
        out[fields[0]] = num_slabs * pages_per_slab * PAGE_KB
    return out


def shrink_slab_caches(root: Path = SLAB_SYSFS) -> int:
    """Shrink every slab cache (empty slabs freed, KASAN quarantine drained); how many were shrunk.

    Merged caches appear as symlinks to one directory: each directory is written once. A kernel
    without SLUB's sysfs (or a reader without root) shrinks nothing, and the reading is as before.
    """
    done = 0
    try:
        caches = sorted(root.iterdir())
    except OSError:
        return 0
    for cache in caches:
        if cache.is_symlink():
            continue
        try:
            fd = os.open(cache / "shrink", os.O_WRONLY)  # never O_CREAT: only the kernel's file
        except OSError:
            continue
        try:
            os.write(fd, b"1")
            done += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return done


def slab_growth(before: dict[str, int], after: dict[str, int]) -> dict[str, tuple[int, int]]:
    """The caches that grew most from ``before`` to ``after`` (kB), largest first."""
    deltas = ((kb - before.get(k, 0), k) for k, kb in after.items())
    grown = sorted(((d, k) for d, k in deltas if d >= SLAB_REPORT_MIN_KB), reverse=True)
    return {k: (before.get(k, 0), after[k]) for _, k in grown[:SLAB_REPORT_TOP]}


def live_counters() -> dict[str, int]:
    """The live-object counts of every vnpu device's debugfs ``counters``, summed over devices."""
    from libaccel.tools import debugfs

    out: dict[str, int] = {}
    for d in sorted(debugfs.DEBUGFS.glob("accel/*/counters")):
        parsed = debugfs.parse(d.read_text())
        if isinstance(parsed, dict):
            for k in LIVE_COUNTERS:
                if isinstance(parsed.get(k), int):
                    out[k] = out.get(k, 0) + parsed[k]
    return out


@dataclass(frozen=True)
class Baseline:
    """The live debugfs counters, /proc/meminfo and per-cache slab before a run, for its leak check."""

    counters: dict[str, int]
    mem: dict[str, int]
    slabs: dict[str, int]

    @classmethod
    def take(cls) -> Baseline:
        shrink_slab_caches()
        return cls(live_counters(), meminfo(), slab_kb())

    def leaks(self) -> dict[str, tuple[int, int]]:
        """What is not back at its baseline, as {what: (baseline, now)}; {} when nothing leaked.

        Unreclaimable slab over its tolerance is reported with the caches that grew most, as
        ``slab <cache> kB`` entries after the ``meminfo SUnreclaim kB`` one.
        """
        leaks: dict[str, tuple[int, int]] = {}
        deadline = time.monotonic() + SETTLE_S
        while True:
            now = live_counters()
            leaks = {k: (v, now.get(k, 0)) for k, v in self.counters.items() if now.get(k, 0) != v}
            if not leaks or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        shrink_slab_caches()
        mem = meminfo()
        for key, tol in MEMINFO_TOLERANCE_KB.items():
            if key in self.mem and mem.get(key, 0) - self.mem[key] > tol:
                leaks[f"meminfo {key} kB"] = (self.mem[key], mem[key])
        if "meminfo SUnreclaim kB" in leaks:
            leaks.update({f"slab {k} kB": v for k, v in slab_growth(self.slabs, slab_kb()).items()})
        return leaks


def count_leaks(leaks: dict[str, tuple[int, int]] | dict[str, list[int]]) -> int:
    """How many leaks a report holds: the named caches explain the slab entry, they are not more."""
    return sum(1 for k in leaks if not k.startswith("slab "))
