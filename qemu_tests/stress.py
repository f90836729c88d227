"""Stress: processes x threads submitting mixed real work at once, every output checked.

    python -m qemu_tests.stress --device shim --seconds 20 --procs 2 --threads 2
    python -m qemu_tests --exec 'python -m qemu_tests.stress --seconds 60'

Each thread alternates between two workloads until the time is up:

* a corpus model (tests/corpus/models, the small ones) through libteflon.so in tflite_runtime,
  its outputs compared byte for byte with TFLite's reference kernels (BUILTIN_REF, computed once
  per process before the clock starts);
* raw command streams: FILL of a value unique to the (process, thread, job), and COPY of random
  bytes between two BOs, read back and compared, so a result that went to the wrong file, BO or
  job would show.

Exit 0 when every output matched; the figures (jobs checked, mismatches) go to ``--json``.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vnpu_common.cli import OneLineArgumentParser, cli_main

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus" / "models"
# Small enough to compile and check in seconds under TCG; together they cover convolutions,
# depthwise, pooling, concatenation, resizing and uint8 I/O. (Not transformer_block: tflite_runtime
# 2.14's BUILTIN_REF is not deterministic on it, tests/corpus/test_corpus.py KNOWN_FAILURES.)
MODELS = ("ds_cnn_kws", "small_cnn_uint8", "densenet_small", "unet")
INPUT_SEED = 3
# libteflon.so's first load (dlopen, cffi's embedded interpreter start-up) is not thread-safe:
# a second thread loading it at the same time gets "Failed to load delegate".
_SETUP_LOCK = threading.Lock()


@dataclass
class StressStats:
    model_invokes: int = 0
    stream_jobs: int = 0
    mismatches: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def checked(self) -> int:
        return self.model_invokes + self.stream_jobs

    def add(self, other: StressStats) -> None:
        self.model_invokes += other.model_invokes
        self.stream_jobs += other.stream_jobs
        self.mismatches += other.mismatches
        self.errors += other.errors


def _references(models: tuple[str, ...]) -> dict[str, tuple[bytes, list[Any], list[Any]]]:
    """model -> (bytes, inputs, BUILTIN_REF outputs)."""
    import tflite_runtime.interpreter as tfl

    from delegate_teflon.run import invoke, make_interpreter, random_inputs
    from libaccel.compiler import check_tflite

    out = {}
    for name in models:
        model = (CORPUS / f"{name}.tflite").read_bytes()
        check_tflite(model)
        ref = make_interpreter(tfl, model, [], None)
        inputs = random_inputs(ref.get_input_details(), INPUT_SEED)
        out[name] = (model, inputs, invoke(ref, inputs))
    return out


def _thread(device: str, tag: int, deadline: float, refs: dict[str, Any], stats: StressStats) -> None:
    import numpy as np
    import tflite_runtime.interpreter as tfl

    import delegate_teflon
    from delegate_teflon.run import differing_bytes, invoke, make_interpreter
    from libaccel import Device, Job, JobBo
    from uapi.isa import SPEC, encode

    rng = random.Random(tag)
    int8 = SPEC.dtypes["INT8"].code
    with _SETUP_LOCK:
        delegate = tfl.load_delegate(delegate_teflon.library_path(), {"device": device, "log_level": "quiet"})
        interps = {name: make_interpreter(tfl, model, [delegate], 1) for name, (model, _, _) in refs.items()}
    with Device.open(device) as dev:
        size = 4096 + 64 * (tag % 16)
        src, dst = dev.create_bo(size), dev.create_bo(size)
        job_no = 0
        # At least one job each, however short the budget: the setup above can outlast it under TCG.
        while time.monotonic() < deadline or not (stats.model_invokes or job_no):
            if rng.random() < 0.3 and interps:
                name = rng.choice(sorted(interps))
                _, inputs, want = refs[name]
                got = invoke(interps[name], inputs)
                stats.model_invokes += 1
                if differing_bytes(got, want) != 0:
                    stats.mismatches += 1
                    if len(stats.errors) < 20:
                        stats.errors.append(f"{name}: outputs differ from BUILTIN_REF (worker {tag})")
                continue
            job_no += 1
            if rng.random() < 0.5:
                value = (tag * 7919 + job_no) % 255 - 127  # unique-ish per (worker, job), INT8 range
                stream = (
                    encode("TENSOR", slot=0, dtype=int8, va=dst.va, n=1, h=1, w=1, c=size, stride_c=1)
                    + encode("FILL", dst=0, value=value)
                    + encode("END")
                )
                want_bytes = np.full(size, value, np.int8).tobytes()
            else:
                data = rng.randbytes(size)
                src.write(data)
                stream = (
                    encode("TENSOR", slot=0, dtype=int8, va=src.va, n=1, h=1, w=1, c=size, stride_c=1)
                    + encode("TENSOR", slot=1, dtype=int8, va=dst.va, n=1, h=1, w=1, c=size, stride_c=1)
                    + encode("COPY", src=0, dst=1)
                    + encode("END")
                )
                want_bytes = data
            cmd = dev.create_bo_with(stream, read_only=True)
            dev.submit(Job(cmd, len(stream), [JobBo(src), JobBo(dst, write=True)]))
            cmd.close()
            dst.wait(timeout=60).raise_for_status()
            stats.stream_jobs += 1
            if dst.read(size) != want_bytes:
                stats.mismatches += 1
                if len(stats.errors) < 20:
                    stats.errors.append(f"stream job {job_no} of worker {tag}: output differs")


def _process(device: str, index: int, threads: int, seconds: float, out: Any) -> None:
    import faulthandler

    # A stuck worker prints every thread's stack before the parent gives up on it.
    faulthandler.dump_traceback_later(seconds + 600, exit=True)
    stats = StressStats()
    try:
        refs = _references(MODELS)
        deadline = time.monotonic() + seconds
        per = [StressStats() for _ in range(threads)]

        def one(t: int) -> None:
            try:
                _thread(device, index * 100 + t, deadline, refs, per[t])
            except Exception as e:  # noqa: BLE001 - reported as a failure of the run
                per[t].errors.append(f"worker {index * 100 + t}: {type(e).__name__}: {e}")

        pool = [threading.Thread(target=one, args=(t,)) for t in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        for s in per:
            stats.add(s)
    except Exception as e:  # noqa: BLE001
        stats.errors.append(f"process {index}: {type(e).__name__}: {e}")
    out.put(stats.__dict__)


def run(device: str, seconds: float, procs: int = 2, threads: int = 2) -> StressStats:
    from qemu_tests import leak_check

    baseline = leak_check.Baseline.take() if device != "shim" else None
    ctx = multiprocessing.get_context("spawn")  # tflite_runtime and the shim's threads do not fork
    out = ctx.Queue()
    children = [ctx.Process(target=_process, args=(device, i, threads, seconds, out)) for i in range(procs)]
    for c in children:
        c.start()
    total = StressStats()
    for _ in children:
        d = out.get(timeout=seconds + 900)
        total.add(StressStats(d["model_invokes"], d["stream_jobs"], d["mismatches"], d["errors"]))
    for c in children:
        c.join(60)
        if c.exitcode != 0:
            total.errors.append(f"a stress process exited with {c.exitcode}")
    if baseline is not None and (leaks := baseline.leaks()):
        total.errors.append(f"leaks (baseline, end): {leaks}")
    return total


@cli_main("python -m qemu_tests.stress")
def main(argv: list[str] | None = None) -> int:
    p = OneLineArgumentParser(prog="python -m qemu_tests.stress", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="kernel", help="kernel (default) or shim")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.seconds <= 0 or args.procs < 1 or args.threads < 1:
        p.error("--seconds, --procs and --threads must be positive")
    start = time.monotonic()
    s = run(args.device, args.seconds, args.procs, args.threads)
    print(
        f"stress: {s.checked} outputs checked ({s.model_invokes} model invokes, "
        f"{s.stream_jobs} stream jobs), {s.mismatches} mismatches, {len(s.errors)} errors "
        f"in {time.monotonic() - start:.1f} s "
        f"({args.procs} procs x {args.threads} threads, {args.device})"
    )
    if args.json:
        args.json.write_text(json.dumps({**s.__dict__, "checked": s.checked}, indent=1))
    for e in s.errors[:20]:
        print(f"stress: FAIL: {e}", file=sys.stderr)
    return 0 if not s.errors and s.checked else 1


if __name__ == "__main__":
    sys.exit(main())
