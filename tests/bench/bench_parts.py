"""The parts' JSON of a small ``bench.performance`` run, written for the tests that read a summary.

The benches write their results under ``build/bench/`` and nothing of a run is committed, so a test
that needs a summary makes one here: one model_bench model with the device model's part, the same
on two NPU cores against two threads, corpus models without it, an invoke split, the shim's round
trip (no doorbell floor), the main job's model on the shim, and a guest boot whose floor has p50, min
and p99 but no p90 and which timed the main job's model too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import performance

PARTS = (
    "model_bench",
    "model_bench_cores2",
    "corpus",
    "invoke_split",
    "shim",
    "shim_main_model",
    "guest_cores2",
)


def write_parts(out: Path) -> None:
    """Each part's JSON in ``out``, where ``bench.performance.summarize`` reads it."""
    model = {"name": "mobilenet_v1", "invoke_ms": 9.0, "device_ms": 8.5, "exact": True}
    model["cpu_runtime_ms"] = {"ai_edge_litert": 4.5}
    (out / "model_bench.json").write_text(json.dumps({"models": [model]}))
    cores2 = model | {"invoke_ms": 6.0, "cpu_threads": 2, "cpu_runtime_ms": {"ai_edge_litert": 3.0}}
    (out / "model_bench_cores2.json").write_text(json.dumps({"models": [cores2]}))
    main_model = {"model": "mobilenet_v1_224_1.tflite", "runs": 3, "load_ms": 900.0, "invoke_ms": 8.0}
    (out / "shim_main_model.json").write_text(json.dumps(main_model))
    corpus = {"name": "unet", "vnpu_ms": 6.0, "xnnpack_ms": 0.5, "differing_bytes": 0}
    corpus |= {"npu_nodes": 9, "nodes": 10, "partitions": 2}
    block = corpus | {"name": "transformer_block", "vnpu_ms": 0.1, "xnnpack_ms": 0.05, "partitions": 1}
    (out / "corpus.json").write_text(json.dumps({"models": [corpus, block]}))
    parts_us = {"the shim's ioctl handling": 20.0, "device model (the job)": 10.0}
    splits = [
        {"name": "empty job", "nodes": 0, "plain_invoke_us": 35.0, "parts_us": parts_us},
        {"name": "1 node", "nodes": 1, "plain_invoke_us": 45.5, "parts_us": parts_us},
    ]
    (out / "invoke_split.json").write_text(json.dumps({"invoke_split": splits}))
    rt = {"p50_us": 400.0, "p90_us": 500.0, "p99_us": 900.0, "min_us": 200.0, "submit_p50_us": 150.0}
    cores = [
        {"mode": "", "cores": 2, "clients": 2, "workload": "empty job", "per_s": 3000.0, "exact": True},
        {"mode": "", "cores": 2, "clients": 2, "workload": "model invoke", "per_s": 40.0, "exact": True},
    ]
    (out / "guest_cores2").mkdir()
    floor = {"p50_us": 100.0, "min_us": 10.0, "p99_us": 300.0}
    guest = {"round_trip": rt, "doorbell_floor": floor, "throughput_by_cores": cores}
    (out / "guest_cores2" / "bench.json").write_text(json.dumps(guest))
    guest_model = main_model | {"load_ms": 9000.0, "invoke_ms": 16.0}
    (out / "guest_cores2" / "main_model.json").write_text(json.dumps(guest_model))
    shim_cores = [dict(c, mode="processes") for c in cores]
    (out / "shim.json").write_text(json.dumps({"round_trip": rt, "throughput_by_cores": shim_cores}))


def part_record() -> dict[str, Any]:
    """What ``bench.performance.run_part`` records of a part."""
    return {"seconds": 1.0, "load_before": [0.1, 0, 0], "load_after": [0.2, 0, 0], "command": "x"}


def machine() -> dict[str, Any]:
    """What ``bench.performance.machine`` records of the host."""
    info = {"cpu": "CPU", "cpus": 2, "simd": ["avx2"], "kernel": "k", "python": "3", "numpy": "1"}
    return info | {"qemu": "q"}


def summary(out: Path) -> dict[str, Any]:
    """The summary.json a run of these parts writes (without measuring anything)."""
    write_parts(out)
    s = performance.summarize(out, {name: part_record() for name in PARTS}, machine())
    return s | {"when": "now", "command": "python -m bench.performance", "commit": "abc1234"}
