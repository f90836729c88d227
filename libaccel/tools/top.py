"""``accel top``: live NPU use per client and per device, like intel_gpu_top or nvtop (docs/tools.md).

Per client (one open file of a vnpu node, whichever processes hold it): the DRM usage
stats in ``/proc/<pid>/fdinfo/<fd>`` (:mod:`libaccel.tools.fdinfo`): NPU busy time
(``drm-engine-npu``) and memory (``drm-total-memory``, ``drm-resident-memory``). Two
samples ``--interval`` apart give the busy share: busy ns gained / wall ns elapsed.

Per device: the clients' sum, and from vnpu.ko's debugfs ``counters`` (root only) the
jobs completed per second and the live BO bytes, and from its ``power`` file the power state
and power-ups (runtime PM); without debugfs those show as ``-`` or not at all.
Only processes whose ``/proc/<pid>/fd`` this user may read are seen (all, for root).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from libaccel import discovery
from libaccel.errors import AccelError
from libaccel.tools import fdinfo

ACCEL_PREFIX = "/dev/accel/accel"


@dataclass(frozen=True)
class ClientSample:
    """One open vnpu file at one instant."""

    client_id: int
    pdev: str
    pids: tuple[int, ...]
    comm: str
    npu_ns: int
    memory_total: int
    memory_resident: int
    jobs: int | None = None  # fdinfo vnpu-jobs: jobs of this file that ended


@dataclass
class ClientRow:
    client_id: int
    pids: list[int]
    comm: str
    npu_percent: float  # share of the interval the NPU spent on this client's jobs
    npu_ns: int  # total since the file was opened
    memory_total: int
    memory_resident: int
    jobs_per_s: float | None = None  # from fdinfo vnpu-jobs; None on a kernel without it


@dataclass
class DeviceRow:
    pdev: str
    node: str | None
    npu_percent: float  # the clients' sum (jobs of files closed during the interval are not seen)
    jobs_per_s: float | None  # from debugfs counters; None without them
    bo_bytes: int | None
    clients: list[ClientRow] = field(default_factory=list)
    power: str | None = None  # from debugfs power: "on" or "off" (runtime PM); None without it
    power_ups: int | None = None


def scan_clients(proc: Path = Path("/proc")) -> dict[int, ClientSample]:
    """Every open vnpu file this user can see, by DRM client id (several fds may share one)."""
    found: dict[int, ClientSample] = {}
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            fds = list((pid_dir / "fd").iterdir())
        except OSError:
            continue  # gone, or not ours to read
        for fd in fds:
            try:
                if not os.readlink(fd).startswith(ACCEL_PREFIX):
                    continue
                info = fdinfo.parse((pid_dir / "fdinfo" / fd.name).read_text())
            except (OSError, fdinfo.FdInfoError):
                continue
            if info.driver != "vnpu" or info.client_id is None:
                continue
            pid = int(pid_dir.name)
            prev = found.get(info.client_id)
            pids = tuple(sorted({pid, *(prev.pids if prev else ())}))
            found[info.client_id] = ClientSample(
                client_id=info.client_id,
                pdev=info.pdev or "?",
                pids=pids,
                comm=prev.comm if prev else _comm(pid_dir),
                npu_ns=info.engine_ns("npu"),
                memory_total=info.memory_bytes("total"),
                memory_resident=info.memory_bytes("resident"),
                jobs=info.jobs,
            )
    return found


def _comm(pid_dir: Path) -> str:
    try:
        return (pid_dir / "comm").read_text().strip()
    except OSError:
        return "?"


def read_counters(pdev: str, debugfs: Path = Path("/sys/kernel/debug/accel")) -> dict[str, int] | None:
    """vnpu.ko's debugfs ``counters`` of the device at PCI slot ``pdev``; None if unreadable."""
    try:
        text = (debugfs / pdev / "counters").read_text()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if value.strip().lstrip("-").isdigit():
            out[key.strip()] = int(value)
    return out


def read_power(pdev: str, debugfs: Path = Path("/sys/kernel/debug/accel")) -> dict[str, str] | None:
    """vnpu.ko's debugfs ``power`` (state, power_ups, ...) of the device at ``pdev``; None if unreadable."""
    try:
        text = (debugfs / pdev / "power").read_text()
    except OSError:
        return None
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines()) if v}


def _debugfs_slots(debugfs: Path) -> set[str]:
    try:
        return {p.name for p in debugfs.iterdir() if (p / "counters").exists()}
    except OSError:
        return set()  # not root, or no debugfs: device rows come from the nodes and fdinfo


def _jobs(counters: dict[str, int] | None) -> int | None:
    if counters is None:
        return None
    return counters.get("jobs_done", 0) + counters.get("jobs_failed", 0)


def measure(
    interval: float,
    proc: Path = Path("/proc"),
    debugfs: Path = Path("/sys/kernel/debug/accel"),
    sleep: Callable[[float], None] = time.sleep,
) -> list[DeviceRow]:
    """Two samples ``interval`` seconds apart, as one row per device with its clients."""
    nodes = {d.pci_slot: d.node for d in discovery.list_devices()}
    slots = set(nodes) | _debugfs_slots(debugfs)
    t0 = time.monotonic_ns()
    before = scan_clients(proc)
    counters0 = {slot: read_counters(slot, debugfs) for slot in slots}
    sleep(interval)
    t1 = time.monotonic_ns()
    after = scan_clients(proc)
    counters1 = {slot: read_counters(slot, debugfs) for slot in slots}
    wall = max(t1 - t0, 1)
    devices: dict[str, DeviceRow] = {}
    for slot in sorted(slots | {c.pdev for c in after.values()}):
        c0, c1 = counters0.get(slot), counters1.get(slot)
        j0, j1 = _jobs(c0), _jobs(c1)
        devices[slot] = DeviceRow(
            pdev=slot,
            node=nodes.get(slot),
            npu_percent=0.0,
            jobs_per_s=(j1 - j0) * 1e9 / wall if j0 is not None and j1 is not None else None,
            bo_bytes=c1.get("bo_bytes") if c1 else None,
        )
        power = read_power(slot, debugfs)
        if power is not None:
            devices[slot].power = power.get("state")
            ups = power.get("power_ups", "")
            devices[slot].power_ups = int(ups) if ups.isdigit() else None
    for cid, s in sorted(after.items()):
        gained = s.npu_ns - (before[cid].npu_ns if cid in before else 0)
        pct = min(100.0, 100.0 * max(gained, 0) / wall)
        row = ClientRow(cid, list(s.pids), s.comm, pct, s.npu_ns, s.memory_total, s.memory_resident)
        if s.jobs is not None:
            prev = before[cid].jobs if cid in before else None
            ended = s.jobs - (prev or 0)
            row.jobs_per_s = max(ended, 0) * 1e9 / wall
        devices[s.pdev].clients.append(row)
        devices[s.pdev].npu_percent = min(100.0, devices[s.pdev].npu_percent + pct)
    for d in devices.values():
        d.clients.sort(key=lambda r: (-r.npu_percent, r.client_id))
    return list(devices.values())


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def render(devices: list[DeviceRow], interval: float) -> str:
    out = []
    for d in devices:
        jobs = "-" if d.jobs_per_s is None else f"{d.jobs_per_s:.1f}"
        power = "" if d.power is None else f"power {d.power} ({d.power_ups} ups)  "
        out.append(
            f"{d.node or '?'} ({d.pdev})  NPU {d.npu_percent:5.1f}%  jobs/s {jobs}  "
            f"BOs {_bytes(d.bo_bytes)}  {power}clients {len(d.clients)}  [{interval:g} s]"
        )
        rows = [["PID", "COMMAND", "CLIENT", "NPU%", "NPU TIME", "JOBS/S", "MEMORY", "RESIDENT"]]
        for c in d.clients:
            rows.append(
                [
                    ",".join(map(str, c.pids)),
                    c.comm,
                    str(c.client_id),
                    f"{c.npu_percent:.1f}",
                    f"{c.npu_ns / 1e9:.3f} s",
                    "-" if c.jobs_per_s is None else f"{c.jobs_per_s:.1f}",
                    _bytes(c.memory_total),
                    _bytes(c.memory_resident),
                ]
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        out += ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(out)


def main(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        from libaccel.tools.session import UsageError

        raise UsageError(f"accel top: --interval must be positive, not {args.interval}")
    if not discovery.list_devices():
        raise AccelError(
            errno.ENODEV, "top", "no vnpu device (load vnpu.ko in the QEMU guest; the shim has no fdinfo)"
        )
    count = 1 if args.once else args.count
    n = 0
    while count is None or n < count:
        devices = measure(args.interval)
        n += 1
        if args.json:
            print(
                json.dumps({"interval_s": args.interval, "devices": [asdict(d) for d in devices]}), flush=True
            )
        else:
            if not args.once and sys.stdout.isatty():
                print("\033[H\033[2J", end="")  # a live screen, as top does
            print(render(devices, args.interval), flush=True)
    return 0
