"""Throughput across NPU cores: jobs/s and model invokes/s with 1, 2, 4 clients, on 1 and 2 cores.

Each client is one open file of the device, doing one of two workloads back to back:

* ``empty job``: a stream that is just END (the driver, scheduler, doorbell and interrupt
  path with no device work), queued back to back, waiting for the last one;
* ``model invoke``: a MobileNetV1-shaped int8 network (128x128, width 0.5) compiled as one
  NPU partition, run and waited for, over and over, each run on the next of ``POOL`` distinct
  input sets (a new input each invoke, as in every model bench here); every output is compared
  byte for byte with the same input's output from one client alone, so concurrency that changed
  a result shows as ``exact: no``.

A third measure is the head-of-line blocking the cores remove: the empty-job round trip of one
file while another file invokes the model back to back. On one core every empty job waits for
the model job ahead of it; with two, it runs on the idle core.

On the shim a last line times the C MAC array (which releases the GIL) inside the device's
jobs: its share bounds what two core threads can gain (Amdahl).

The shim's device model can run its cores as threads of the shim's process (the default) or
as worker processes with their own GIL (``device_model.core_worker``): ``modes`` picks which,
and the table's ``run as`` column tells the rows apart. In the guest the device model's mode
is a host setting (``vnpu-device-model --core-processes``) the guest cannot see: ``-`` there.

The shim's rows also give the host CPUs busy during the run (``CPUs``: CPU seconds of the
shim's process and its core workers per second), the direct sign of whether a second core
really used a second CPU; the guest's share of the host is not visible from inside it.

On the kernel device the clients are processes (forked: a Python start-up costs seconds
under TCG) and the cores are the device's (``python -m qemu_tests --npu-cores N``), all of them
and core 0 alone through the driver's debugfs ``core_mask`` in the same boot. The
shim's device lives inside one process, so its clients are threads sharing one shim device
made with each core count in turn (``--repeat`` alternates them); their Python work shares
the GIL with the device model's core threads, whose compute (numpy, the cffi MAC array) runs
without it.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.clients import EmptyJob, collect_results, percentile, wait_until_ready, wall_seconds
from bench.input_feed import POOL

EMPTY, MODEL = "empty job", "model invoke"
THREADS, PROCESSES = "threads", "processes"  # how the device model runs its cores
MODES = {THREADS: False, PROCESSES: True}  # ShimDevice's core_processes
MODEL_NAME = "mobilenet_v1_128_0.5"


@dataclass(frozen=True)
class CoreThroughput:
    backend: str
    mode: str  # THREADS or PROCESSES; "" on the kernel device (the host's setting)
    cores: int
    clients: int
    workload: str  # EMPTY or MODEL
    count: int  # jobs or invokes, all clients together, per run
    seconds: float  # of the median run
    per_s: float  # the median over the runs
    exact: bool  # every model output equal to the lone client's (always true for empty jobs)
    runs: tuple[float, ...] = ()  # per_s of every run, in the order they ran
    # Host CPUs busy on average over the median run: CPU seconds of the shim's process (clients,
    # driver, device model) and its core workers per second; None on the kernel device.
    cpus: float | None = None


def median_rows(rows: list[CoreThroughput]) -> list[CoreThroughput]:
    """One row per (backend, cores, clients, workload): the median run, every run's rate kept."""
    groups: dict[tuple[str, str, int, int, str], list[CoreThroughput]] = {}
    for r in rows:
        groups.setdefault((r.backend, r.mode, r.cores, r.clients, r.workload), []).append(r)
    out = []
    for same in groups.values():
        mid = sorted(same, key=lambda r: r.per_s)[(len(same) - 1) // 2]
        out.append(
            CoreThroughput(
                mid.backend,
                mid.mode,
                mid.cores,
                mid.clients,
                mid.workload,
                mid.count,
                mid.seconds,
                statistics.median(r.per_s for r in same),
                all(r.exact for r in same),
                tuple(r.per_s for r in same),
                mid.cpus,
            )
        )
    return out


@dataclass(frozen=True)
class RoundTripBeside:
    """Empty-job round trips of one file while another file invokes the model back to back."""

    backend: str
    mode: str
    cores: int
    samples: int
    p50_us: float
    p90_us: float
    background_invokes: int  # the model invokes the other file finished meanwhile


@dataclass(frozen=True)
class MacShare:
    """How much of the model's device time runs in the C MAC array, which releases the GIL."""

    invokes: int
    job_ms: float  # the device's time in the jobs (Npu._run), all invokes
    mac_ms: float  # of which inside mac_array.run, BoundRun.run and UnitGroup.run (the C kernels)

    @property
    def share(self) -> float:
        return self.mac_ms / self.job_ms

    @property
    def two_core_bound(self) -> float:
        """Amdahl: the most two cores can speed the jobs up when only the MAC array runs in parallel."""
        return 1 / ((1 - self.share) + self.share / 2)


@dataclass(frozen=True)
class HandOff:
    """With core processes: the CPU a model job costs the device model's own process and its worker."""

    invokes: int
    parent_ms: float  # CPU of the core thread in the jobs (Npu._run): hand-off and completion
    worker_ms: float  # CPU of the core's worker process over the same invokes

    @property
    def two_core_bound(self) -> float:
        """Amdahl: the most two cores can speed the jobs up when only the core thread's part is serial."""
        serial = self.parent_ms / (self.parent_ms + self.worker_ms)
        return 1 / (serial + (1 - serial) / 2)


@dataclass
class CoresReport:
    throughput: list[CoreThroughput]
    beside: list[RoundTripBeside]
    mac_share: MacShare | None = None
    hand_off: HandOff | None = None


def hand_off(work: ModelWork, invokes: int) -> HandOff:
    """CPU per model job in the device model's process and in the worker, on a 1-core shim in process mode.

    CPU time, unlike a rate, hardly depends on how busy the host is: it shows how much of a job
    still runs in the one process (under its GIL) once the core's work is in a worker.
    """
    from device_model.npu import Npu
    from libaccel import Device
    from libaccel.backends.shim import ShimBackend, ShimDevice
    from libaccel.compiler import PartitionRunner

    parent = [0.0]
    run_job = Npu._run

    def timed(*args: Any) -> Any:
        t0 = time.thread_time()  # the core thread's own CPU: waiting for the worker costs none
        try:
            return run_job(*args)
        finally:
            parent[0] += time.thread_time() - t0

    shim = ShimDevice(num_cores=1, core_processes=True)
    try:
        worker = shim.npu.cores[0].worker
        assert worker is not None and worker.pid is not None
        dev = Device(ShimBackend(shim))
        with PartitionRunner(dev, work.compiled) as runner:
            runner.run(work.feed(0))
            Npu._run = timed  # type: ignore[method-assign]
            try:
                w0 = _proc_cpu_seconds(worker.pid)
                for i in range(invokes):
                    runner.run(work.feed(i))
                worker_s = _proc_cpu_seconds(worker.pid) - w0
            finally:
                Npu._run = run_job  # type: ignore[method-assign]
        dev.close()
    finally:
        shim.close()
    return HandOff(invokes, parent[0] * 1000, worker_s * 1000)


def mac_share(work: ModelWork, invokes: int) -> MacShare:
    """Time the device's jobs and the MAC array inside them, on a 1-core shim (wrapping both)."""
    import device_model.mac_array as mac
    from device_model.npu import Npu
    from libaccel import Device
    from libaccel.backends.shim import ShimBackend, ShimDevice
    from libaccel.compiler import PartitionRunner

    totals = {"job": 0.0, "mac": 0.0}
    run_job, run_mac, run_bound, run_group = Npu._run, mac.run, mac.BoundRun.run, mac.UnitGroup.run
    run_replay = Npu.run_prepared  # a job the shim validated once runs here, past _run

    def timed(key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args)
            finally:
                totals[key] += time.perf_counter() - t0

        return wrapper

    shim = ShimDevice(num_cores=1, core_processes=False)  # the jobs must run in this process
    try:
        dev = Device(ShimBackend(shim))
        with PartitionRunner(dev, work.compiled) as runner:
            runner.run(work.feed(0))
            Npu._run, mac.run = timed("job", run_job), timed("mac", run_mac)  # type: ignore[method-assign]
            Npu.run_prepared = timed("job", run_replay)  # type: ignore[method-assign]
            mac.BoundRun.run = timed("mac", run_bound)  # type: ignore[method-assign]  # layers bound to memory
            mac.UnitGroup.run = timed("mac", run_group)  # type: ignore[method-assign]  # a bound stream's C runs
            try:
                for i in range(invokes):
                    runner.run(work.feed(i))
            finally:
                Npu._run, mac.run = run_job, run_mac  # type: ignore[method-assign]
                Npu.run_prepared = run_replay  # type: ignore[method-assign]
                mac.BoundRun.run = run_bound  # type: ignore[method-assign]
                mac.UnitGroup.run = run_group  # type: ignore[method-assign]
        dev.close()
    finally:
        shim.close()
    return MacShare(invokes, totals["job"] * 1000, totals["mac"] * 1000)


@dataclass
class ModelWork:
    """The benchmark model, compiled once; its distinct input sets, which the invokes take in turn (a
    new input each invoke, :mod:`bench.input_feed`), and the output a lone client gets for each."""

    compiled: Any
    feeds: list[dict[int, np.ndarray]]
    expected: list[dict[int, np.ndarray]] | None = None

    def feed(self, i: int) -> dict[int, np.ndarray]:
        """The input set of the ``i``-th invoke."""
        return self.feeds[i % len(self.feeds)]

    def equals_alone(self, i: int, out: dict[int, np.ndarray]) -> bool:
        """Whether the ``i``-th invoke's outputs are the lone client's for its input set."""
        assert self.expected is not None
        return all(np.array_equal(out[k], v) for k, v in self.expected[i % len(self.expected)].items())

    @classmethod
    def build(cls) -> ModelWork:
        import modelgen as g
        from libaccel.compiler import compile_partition, graph_from_tflite
        from uapi.isa import SPEC

        model = g.mobilenet_v1_model(128, 0.5, 10, seed=1)
        graph = graph_from_tflite(model)
        compiled = compile_partition(graph, [n.index for n in graph.nodes], SPEC.version)
        feeds = [
            dict(zip(graph.inputs, g.random_inputs(model, seed=1 + k), strict=True)) for k in range(POOL)
        ]
        return cls(compiled, feeds)

    def run_alone(self, dev: Any) -> None:
        from libaccel.compiler import PartitionRunner

        with PartitionRunner(dev, self.compiled) as runner:
            self.expected = [{k: v.copy() for k, v in runner.run(f).items()} for f in self.feeds]


def _client(
    open_device: Callable[[], Any],
    workload: str,
    count: int,
    work: ModelWork | None,
    ready: Any,
    start: Any,
    results: Any,
) -> None:
    """One client: warm up, report ready, wait for the start, run ``count`` units, report."""
    try:
        dev = open_device()
        try:
            if workload == EMPTY:
                ej = EmptyJob(dev)
                ej.submit()
                ej.wait()
                ready.put(True)
                start.wait()
                t0 = time.perf_counter()
                for _ in range(count):
                    ej.submit()
                ej.wait()  # a file's jobs run in order: the last fence covers them all
                results.put(("ok", t0, time.perf_counter(), True))
                return
            from libaccel.compiler import PartitionRunner

            assert work is not None and work.expected is not None
            with PartitionRunner(dev, work.compiled) as runner:
                runner.run(work.feed(0))
                ready.put(True)
                start.wait()
                exact = True
                t0 = time.perf_counter()
                for i in range(count):
                    out = runner.run(work.feed(i))
                    exact &= work.equals_alone(i, out)
                results.put(("ok", t0, time.perf_counter(), exact))
        finally:
            dev.close()
    except Exception as e:
        ready.put(False)
        results.put(("error", repr(e), 0.0, False))


def _background(open_device: Callable[[], Any], work: ModelWork, ready: Any, stop: Any, results: Any) -> None:
    """Invoke the model back to back until ``stop`` is set; report how many invokes ended."""
    try:
        from libaccel.compiler import PartitionRunner

        dev = open_device()
        try:
            with PartitionRunner(dev, work.compiled) as runner:
                runner.run(work.feed(0))
                ready.put(True)
                n = 0
                while not stop.is_set():
                    runner.run(work.feed(n))
                    n += 1
                results.put(("ok", n))
        finally:
            dev.close()
    except Exception as e:
        ready.put(False)
        results.put(("error", repr(e)))


def _round_trip_beside(
    spawn: Callable[..., Any],
    make_sync: Callable[[], tuple[Any, Any, Any]],
    open_device: Callable[[], Any],
    backend: str,
    mode: str,
    cores: int,
    work: ModelWork,
    samples: int,
) -> RoundTripBeside:
    ready, stop, results = make_sync()
    worker = spawn(_background, open_device, work, ready, stop, results)
    times: list[float] = []
    try:
        if ready.get(timeout=600):
            dev = open_device()
            try:
                ej = EmptyJob(dev)
                for _ in range(5):
                    ej.submit()
                    ej.wait()
                for _ in range(samples):
                    t0 = time.perf_counter_ns()
                    ej.submit()
                    ej.wait()
                    times.append((time.perf_counter_ns() - t0) / 1000)
            finally:
                dev.close()
    finally:
        stop.set()
    status, value = results.get(timeout=600)
    worker.join(timeout=60)
    if status != "ok":
        raise RuntimeError(f"benchmark client failed: {value}")
    return RoundTripBeside(backend, mode, cores, samples, percentile(times, 50), percentile(times, 90), value)


def _measure(
    spawn: Callable[..., Any],
    make_sync: Callable[[], tuple[Any, Any, Any]],
    open_device: Callable[[], Any],
    backend: str,
    mode: str,
    cores: int,
    clients: int,
    workload: str,
    count: int,
    work: ModelWork | None,
    cpu_clock: Callable[[], float] | None = None,
) -> CoreThroughput:
    ready, start, results = make_sync()
    workers = [
        spawn(_client, open_device, workload, count, work, ready, start, results) for _ in range(clients)
    ]
    # The clock starts only when every client has its file open and warm.
    wait_until_ready(ready, len(workers), 600)
    cpu0 = cpu_clock() if cpu_clock is not None else 0.0
    start.set()
    got = collect_results(workers, results, 1200)
    cpu = cpu_clock() - cpu0 if cpu_clock is not None else None
    seconds = wall_seconds(got)
    total = clients * count
    # The CPU time runs from the start signal to the last result: a little wider than ``seconds``.
    cpus = None if cpu is None else cpu / seconds
    exact = all(r[3] for r in got)
    return CoreThroughput(
        backend, mode, cores, clients, workload, total, seconds, total / seconds, exact, (), cpus
    )


def _proc_cpu_seconds(pid: int) -> float:
    """CPU time of process ``pid``, every thread, in nanoseconds' resolution (/proc's schedstat)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])  # time on a CPU, ns
        except FileNotFoundError:
            pass  # the thread ended meanwhile
    return total / 1e9


def _shim_cpu_clock(shim: Any) -> Callable[[], float]:
    """CPU seconds of this process and the shim device's core workers (process mode), so far."""
    pids = [c.worker.pid for c in shim.npu.cores if c.worker is not None and c.worker.pid is not None]

    def clock() -> float:
        return time.process_time() + sum(_proc_cpu_seconds(p) for p in pids)

    return clock


def _start_thread(target: Callable[..., None], *args: Any) -> threading.Thread:
    t = threading.Thread(target=target, args=args, daemon=True)
    t.start()
    return t


def shim_table(
    core_counts: list[int],
    client_counts: list[int],
    jobs: int,
    invokes: int,
    repeat: int = 1,
    beside_samples: int = 100,
    modes: tuple[str, ...] = (THREADS,),
) -> CoresReport:
    """The shim's rows: a fresh shim device per core mode and count, clients as threads.

    With ``repeat`` > 1 the devices alternate run by run, every other run in reverse order
    (threads 1, 2, processes 1, 2, then processes 2, 1, threads 2, 1, ...), so a change in the
    machine's load, or what the device before leaves behind, hits all alike; each row is the median
    run.
    """
    from libaccel import Device
    from libaccel.backends.shim import ShimBackend, ShimDevice

    work = ModelWork.build()
    rows = []
    beside = []
    devices = [(m, c) for m in modes for c in core_counts]
    order = (d for r in range(repeat) for d in (devices if r % 2 == 0 else devices[::-1]))
    for run, (mode, cores) in enumerate(order):
        shim = ShimDevice(num_cores=cores, core_processes=MODES[mode])
        try:

            def open_device(shim: ShimDevice = shim) -> Any:
                return Device(ShimBackend(shim))

            if work.expected is None:
                dev = open_device()
                try:
                    work.run_alone(dev)
                finally:
                    dev.close()

            def sync() -> tuple[Any, Any, Any]:
                return queue.Queue(), threading.Event(), queue.Queue()

            for workload, count in ((EMPTY, jobs), (MODEL, invokes)):
                for clients in client_counts:
                    rows.append(
                        _measure(
                            _start_thread,
                            sync,
                            open_device,
                            "shim",
                            mode,
                            cores,
                            clients,
                            workload,
                            count,
                            work,
                            _shim_cpu_clock(shim),
                        )
                    )
            if run < len(devices):  # once per device
                beside.append(
                    _round_trip_beside(
                        _start_thread, sync, open_device, "shim", mode, cores, work, beside_samples
                    )
                )
        finally:
            shim.close()
    handed = hand_off(work, invokes) if PROCESSES in modes else None
    return CoresReport(median_rows(rows), beside, mac_share(work, invokes), handed)


def _fork(target: Callable[..., None], *args: Any) -> Any:
    p = mp.get_context("fork").Process(target=target, args=args)
    p.start()
    return p


def kernel_table(
    client_counts: list[int], jobs: int, invokes: int, repeat: int = 1, beside_samples: int = 100
) -> CoresReport:
    """The kernel device's rows; clients are forked processes.

    With the driver's debugfs ``core_mask`` (root, debugfs mounted), the rows are those of every
    core and of core 0 alone, in the same boot, alternating run by run (all cores, one, one, all,
    ...) so that a change in the host's load hits both alike; without it, of every core only. Each row
    is the median of ``repeat`` runs.
    """
    from libaccel import Device

    def open_device() -> Any:
        return Device.open("kernel")

    work = ModelWork.build()
    dev = open_device()
    try:
        cores = dev.params.num_cores
        work.run_alone(dev)
    finally:
        dev.close()  # before any fork: a client must not share the parent's file
    ctx = mp.get_context("fork")

    def sync() -> tuple[Any, Any, Any]:
        return ctx.Queue(), ctx.Event(), ctx.Queue()

    from libaccel.tools.debugfs import knob_files

    masks = knob_files("core_mask")  # the cores new jobs may go to, per device
    old = [f.read_text().strip() for f in masks]
    counts = [cores, 1] if masks and cores > 1 else [cores]

    def use_cores(n: int) -> None:
        for f in masks:
            f.write_text(str((1 << n) - 1))

    rows = []
    beside = []
    try:
        for run in range(repeat):
            for n in counts if run % 2 == 0 else counts[::-1]:  # A B B A: neither goes first always
                use_cores(n)
                for workload, count in ((EMPTY, jobs), (MODEL, invokes)):
                    for clients in client_counts:
                        args = ("kernel", "", n, clients, workload, count, work)
                        rows.append(_measure(_fork, sync, open_device, *args))
                if run == 0:
                    beside.append(
                        _round_trip_beside(_fork, sync, open_device, "kernel", "", n, work, beside_samples)
                    )
    finally:
        for f, value in zip(masks, old, strict=True):
            f.write_text(value)
    return CoresReport(median_rows(rows), beside)


def format_table(report: CoresReport) -> str:
    rows = report.throughput
    head = (
        f"{'throughput by cores':<26}{'run as':>10}{'cores':>6}{'clients':>8}{'count':>7}{'per s':>9}"
        f"{'x 1 client':>11}{'CPUs':>6}"
    )
    lines = [head + "  exact  runs (per s)"]
    alone = {(r.backend, r.mode, r.cores, r.workload): r.per_s for r in rows if r.clients == 1}
    for r in rows:
        base = alone.get((r.backend, r.mode, r.cores, r.workload))
        scale = f"{r.per_s / base:>11.2f}" if base else f"{'-':>11}"
        unit = "jobs" if r.workload == EMPTY else "invokes"
        runs = " ".join(f"{x:.0f}" for x in r.runs)
        cpus = "-" if r.cpus is None else f"{r.cpus:.2f}"
        lines.append(
            f"{'  ' + r.workload + ' (' + unit + ')':<26}{r.mode or '-':>10}{r.cores:>6}{r.clients:>8}"
            f"{r.count:>7}{r.per_s:>9.1f}{scale}{cpus:>6}  {'yes' if r.exact else 'NO ':<5}  {runs}"
        )
    if report.beside:
        lines.append(
            f"{'empty-job round trip':<26}{'run as':>10}{'cores':>6}{'p50 us':>10}{'p90 us':>10}"
            f"{'samples':>9}  beside"
        )
        for b in report.beside:
            lines.append(
                f"{'  beside model invokes':<26}{b.mode or '-':>10}{b.cores:>6}{b.p50_us:>10.1f}"
                f"{b.p90_us:>10.1f}{b.samples:>9}"
                f"  {b.background_invokes} invokes"
            )
    if report.hand_off is not None:
        h = report.hand_off
        lines.append(
            f"CPU per model job with core processes: {h.parent_ms / h.invokes:.2f} ms in the device "
            f"model's process, {h.worker_ms / h.invokes:.2f} ms in the worker ({h.invokes} invokes, "
            f"1 core): two cores speed the jobs up {h.two_core_bound:.2f}x at most"
        )
    if report.mac_share is not None:
        m = report.mac_share
        lines.append(
            f"device time in the C MAC array (GIL released): {m.mac_ms:.0f} of {m.job_ms:.0f} ms "
            f"({m.share:.0%}, {m.invokes} invokes, 1 core): two cores speed the jobs up "
            f"{m.two_core_bound:.2f}x at most"
        )
    return "\n".join(lines)
