"""Empty-job round trip, jobs/s, and throughput across NPU cores, on the shim or the kernel device.

An empty job is a command stream that is just END: what it measures is the
whole path (ioctl, validation, scheduler, doorbell, device model, MSI-X,
fence) with no device work. Round trip: submit one job, wait for its fence,
repeat; the time spent in the submit call is reported on its own (the rest
is the wait: scheduler, device, interrupt, wake-up). Throughput: each of P
processes queues jobs back to back and waits for the last one.

On the kernel device the table also shows the doorbell floor: vnpu.ko's debugfs
``doorbell_rtt`` times NOP control commands, which the device model acknowledges from
its doorbell thread with no work and no thread hand-off, so it is the bare doorbell ->
device -> MSI-X -> waiter round trip a job's round trip is set against. It is read before
each quarter of the round trips (FLOOR_READS), so that both are taken in the same seconds.

The cores table (bench/cores.py) gives jobs/s and model invokes/s with 1, 2 and 4
clients, on 1 and 2 cores on the shim, at the device's core count on the kernel.

Timings on a shared machine move with its load, so the JSON records the
load average before and after the run (inside a QEMU guest that is the
guest's own load; the host's must be noted by whoever runs it).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import RESULTS
from bench import cores as core_bench
from bench.clients import EmptyJob, collect_results, percentile, wait_until_ready, wall_seconds
from vnpu_common import config
from vnpu_common.cli import OneLineArgumentParser, cli_main

DEFAULT_OUT = RESULTS / "bench.json"
FLOOR_READS = 4  # the kernel's doorbell floor, read before each quarter of the round trips


@dataclass(frozen=True)
class LatencyResult:
    backend: str
    iterations: int
    p50_us: float
    p90_us: float
    p99_us: float
    mean_us: float
    min_us: float
    submit_p50_us: float  # of the round trip, time inside the submit call


@dataclass(frozen=True)
class ThroughputResult:
    backend: str
    processes: int
    jobs: int
    seconds: float
    jobs_per_s: float


def round_trip(
    device_name: str,
    iterations: int,
    warmup: int = 10,
    chunks: int = 1,
    between: Callable[[], None] | None = None,
) -> LatencyResult:
    """The empty job's round trip, ``iterations`` times in ``chunks`` runs back to back, with
    ``between`` called before each run (the kernel's doorbell floor is read there, so that the
    round trip and its floor see the host in the same moments)."""
    ej = EmptyJob(device_name)
    try:
        for _ in range(warmup):
            ej.submit()
            ej.wait()
        samples = []
        submits = []
        clock = time.perf_counter_ns
        for c in range(chunks):
            if between is not None:
                between()
            for _ in range(iterations * (c + 1) // chunks - iterations * c // chunks):
                t0 = clock()
                ej.submit()
                t1 = clock()
                ej.wait()
                t2 = clock()
                samples.append((t2 - t0) / 1000)
                submits.append((t1 - t0) / 1000)
    finally:
        ej.close()
    return LatencyResult(
        backend=device_name,
        iterations=iterations,
        p50_us=percentile(samples, 50),
        p90_us=percentile(samples, 90),
        p99_us=percentile(samples, 99),
        mean_us=statistics.fmean(samples),
        min_us=min(samples),
        submit_p50_us=percentile(submits, 50),
    )


def _stream_jobs(device_name: str, jobs: int, ready: mp.Queue, start: mp.Event, queue: mp.Queue) -> None:
    try:
        ej = EmptyJob(device_name)
        ej.submit()
        ej.wait()
        ready.put(True)
        start.wait()
        t0 = time.perf_counter()
        for _ in range(jobs):
            ej.submit()
        ej.wait()  # jobs of one file run in order: the last fence covers them all
        queue.put(("ok", t0, time.perf_counter()))
        ej.close()
    except Exception as e:
        queue.put(("error", repr(e), 0.0))


def throughput(device_name: str, processes: int, jobs_per_process: int) -> ThroughputResult:
    # The shim runs device threads inside the process: a fork could copy a lock
    # one of them holds, so shim workers start fresh. Kernel workers fork
    # (a Python start-up costs seconds under TCG).
    ctx = mp.get_context("spawn" if device_name == "shim" else "fork")
    start = ctx.Event()
    ready = ctx.Queue()
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_stream_jobs, args=(device_name, jobs_per_process, ready, start, queue))
        for _ in range(processes)
    ]
    for p in procs:
        p.start()
    # Start the clock only when every worker has its device open and warm.
    wait_until_ready(ready, len(procs), 300)
    start.set()
    seconds = wall_seconds(collect_results(procs, queue, 600))
    total = processes * jobs_per_process
    return ThroughputResult(device_name, processes, total, seconds, total / seconds)


@dataclass
class DoorbellFloor:
    """The bare doorbell -> device -> MSI-X -> waiter round trip, timed by vnpu.ko (CMD_NOP)."""

    samples: int
    min_us: float
    p50_us: float
    p90_us: float
    p99_us: float


def doorbell_floor() -> DoorbellFloor:
    """Read vnpu.ko's debugfs ``doorbell_rtt`` (the kernel device only; needs root and debugfs)."""
    from libaccel.tools import debugfs

    (directory,) = debugfs.device_dirs(None)[:1]
    r = debugfs.parse((directory / "doorbell_rtt").read_text())
    assert isinstance(r, dict)
    us = {k: r[f"{k}_ns"] / 1000 for k in ("min", "p50", "p90", "p99")}
    return DoorbellFloor(samples=r["samples"], **{f"{k}_us": v for k, v in us.items()})


def combined_floor(reads: Sequence[DoorbellFloor]) -> DoorbellFloor:
    """Several reads of the floor as one: every sample counted, the lowest minimum, and the median
    of each read's percentile (each read's samples are summarized by vnpu.ko)."""
    return DoorbellFloor(
        samples=sum(r.samples for r in reads),
        min_us=min(r.min_us for r in reads),
        p50_us=statistics.median(r.p50_us for r in reads),
        p90_us=statistics.median(r.p90_us for r in reads),
        p99_us=statistics.median(r.p99_us for r in reads),
    )


def round_trip_with_floor(device_name: str, iterations: int) -> tuple[LatencyResult, DoorbellFloor | None]:
    """The round trip, and on the kernel device the doorbell floor read before each of
    FLOOR_READS runs of it: the host of a shared machine changes speed from one second to the
    next, and a floor read at another moment than the round trip made their ratio move 4x."""
    if device_name != "kernel":
        return round_trip(device_name, iterations), None
    reads: list[DoorbellFloor] = []
    lat = round_trip(
        device_name, iterations, chunks=FLOOR_READS, between=lambda: reads.append(doorbell_floor())
    )
    return lat, combined_floor(reads)


def in_guest() -> bool:
    return bool(config.GUEST.get())


def format_table(lat: LatencyResult, tps: list[ThroughputResult], floor: DoorbellFloor | None = None) -> str:
    lines = [
        f"backend: {lat.backend}",
        f"{'empty-job round trip':<28}{'p50':>10}{'p90':>10}{'p99':>10}{'mean':>10}{'min':>10}",
        f"{'  (us, ' + str(lat.iterations) + ' jobs)':<28}"
        f"{lat.p50_us:>10.1f}{lat.p90_us:>10.1f}{lat.p99_us:>10.1f}{lat.mean_us:>10.1f}{lat.min_us:>10.1f}",
        f"{'  of which submit call, p50':<28}{lat.submit_p50_us:>10.1f}",
    ]
    if floor is not None:
        lines += [
            f"{'doorbell floor (us, ' + str(floor.samples) + ')':<28}"
            f"{floor.p50_us:>10.1f}{floor.p90_us:>10.1f}{floor.p99_us:>10.1f}{'':>10}{floor.min_us:>10.1f}",
            f"{'  round trip / floor, p50':<28}{lat.p50_us / floor.p50_us:>10.2f}",
        ]
    lines += [
        f"{'throughput':<28}{'procs':>10}{'jobs':>10}{'jobs/s':>10}",
    ]
    for t in tps:
        lines.append(f"{'':<28}{t.processes:>10}{t.jobs:>10}{t.jobs_per_s:>10.0f}")
    return "\n".join(lines)


@cli_main("python -m bench")
def main(argv: list[str] | None = None) -> int:
    p = OneLineArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument(
        "out", nargs="?", type=Path, default=DEFAULT_OUT, help=f"JSON output (default {DEFAULT_OUT})"
    )
    p.add_argument("--kernel", action="store_true", help="the kernel device (default inside the QEMU guest)")
    p.add_argument("--shim", action="store_true", help="the in-process shim (default on the host)")
    p.add_argument("--iterations", type=int, default=200, help="round trips to time (default 200)")
    p.add_argument("--jobs", type=int, default=200, help="jobs per process for throughput (default 200)")
    p.add_argument("--processes", type=int, nargs="+", default=[1, 4], help="process counts (default 1 4)")
    p.add_argument(
        "--clients",
        type=int,
        nargs="+",
        default=[1, 2, 4],
        help="client counts of the cores table (default 1 2 4)",
    )
    p.add_argument(
        "--cores",
        type=int,
        nargs="+",
        default=[1, 2],
        help="shim core counts of the cores table (default 1 2; the kernel device has its own)",
    )
    p.add_argument(
        "--invokes", type=int, default=20, help="model invokes per client, cores table (default 20)"
    )
    p.add_argument(
        "--repeat", type=int, default=1, help="runs of the cores table, each row the median (default 1)"
    )
    p.add_argument(
        "--beside",
        type=int,
        default=100,
        help="empty-job round trips timed beside another file's model invokes (default 100)",
    )
    p.add_argument(
        "--core-modes",
        nargs="+",
        choices=tuple(core_bench.MODES),
        default=[core_bench.THREADS],
        help="how the shim's device model runs its cores in the cores table: threads of this process, "
        "worker processes (device_model.core_worker), or both (default threads)",
    )
    p.add_argument("--no-cores-table", action="store_true", help="skip the cores table")
    args = p.parse_args(argv)
    if args.kernel and args.shim:
        p.error("--kernel and --shim are exclusive")
    device = "kernel" if args.kernel or (in_guest() and not args.shim) else "shim"
    if min(args.iterations, args.jobs, args.invokes, args.repeat, args.beside) < 1:
        p.error("--iterations, --jobs, --invokes, --repeat and --beside must be positive")
    if min(args.processes) < 1 or min(args.clients) < 1 or min(args.cores) < 1:
        p.error("--processes, --clients and --cores must be positive")

    load_before = os.getloadavg()
    lat, floor = round_trip_with_floor(device, args.iterations)
    tps = [throughput(device, n, args.jobs) for n in args.processes]
    print(format_table(lat, tps, floor))
    by_cores = core_bench.CoresReport([], [])
    if not args.no_cores_table:
        if device == "kernel":
            by_cores = core_bench.kernel_table(
                args.clients, args.jobs, args.invokes, args.repeat, args.beside
            )
        else:
            by_cores = core_bench.shim_table(
                args.cores,
                args.clients,
                args.jobs,
                args.invokes,
                args.repeat,
                args.beside,
                tuple(dict.fromkeys(args.core_modes)),
            )
        print(core_bench.format_table(by_cores))
    result = {
        "backend": device,
        "host": platform.node(),
        "in_qemu_guest": in_guest(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "round_trip": asdict(lat),
        "doorbell_floor": asdict(floor) if floor else None,
        "throughput": [asdict(t) for t in tps],
        "throughput_by_cores": [asdict(r) for r in by_cores.throughput],
        "round_trip_beside_model": [asdict(r) for r in by_cores.beside],
        "mac_array_share": asdict(by_cores.mac_share) if by_cores.mac_share else None,
        "core_process_hand_off": asdict(by_cores.hand_off) if by_cores.hand_off else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {args.out}")
    return 0
