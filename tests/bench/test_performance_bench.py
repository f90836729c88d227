"""bench.performance: the one-run summary out of the parts' JSON, and the docs block it rewrites."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_parts import PARTS, machine, part_record, write_parts

from bench import performance
from bench.doc_block import replace_block


def test_summary_has_ratios_round_trip_over_floor_and_the_cores_table(tmp_path: Path) -> None:
    write_parts(tmp_path)
    s = performance.summarize(tmp_path, {name: part_record() for name in PARTS}, machine())
    ratios = [(m["name"], m["ratio"]) for m in s["models"]]
    assert ratios == [("mobilenet_v1", 2.0), ("unet", 12.0), ("transformer_block", 2.0)]
    guest = next(r for r in s["round_trip"] if r["where"] == "guest_cores2")
    assert guest["over_floor"] == 4.0
    assert guest["floor_p99_us"] == 300.0 and "floor_p90_us" not in guest  # what the part measured
    assert "floor_p50_us" not in next(r for r in s["round_trip"] if r["where"] == "shim")
    s |= {"when": "now", "command": "python -m bench.performance", "commit": "abc1234"}
    text = performance.render(s)
    assert "Command: `python -m bench.performance` (commit abc1234)." in text
    assert "| mobilenet_v1 | model_bench | 9.00 | 4.50 | 2.0x | 8.50 (1.9x) | yes |" in text
    assert "| guest_cores2 | 400 | 500 | 900 | 200 | 150 | 100 (10) | 4.0x |" in text
    assert "| shim | processes | 2 | 2 | 3000 | 40.0 | yes |" in text
    assert "| guest_cores2 | threads | 2 | 2 | 3000 | 40.0 | yes |" in text
    # the targets the figures check, from docs/performance.md's table
    assert "| `model_vs_xnnpack` <= 1.2 x | mobilenet_v1 | 2.00x | **missed** |" in text
    assert "| `model_vs_xnnpack_stretch` <= 1 x | mobilenet_v1 | 2.00x | **missed** |" in text
    assert "| `corpus_vs_xnnpack` <= 3 x | unet | 12.00x | **missed** |" in text
    assert "| `shim_round_trip_p50` <= 30 us | shim | 400 us | **missed** |" in text
    assert "| `guest_round_trip_p50` <= 300 us | guest_cores2 | 400 us | **missed** |" in text
    assert "| `guest_round_trip_over_floor` <= 1.5 x | guest_cores2 | 4.00x | **missed** |" in text
    one_node = (
        "| `one_node_invoke_p50` <= 40 us | shim, a 1-node partition (one int8 ADD) | 46 us | **missed** |"
    )
    assert one_node in text
    assert "| `transformer_block_partitions` 1 partition | transformer_block | 1 | met |" in text
    # the invoke split: one column per profiled partition, one row per part, the invoke last
    assert "| part | empty job | 1 node |" in text
    assert "| the shim's ioctl handling | 20.0 | 20.0 |" in text
    assert "| **invoke** | **35.0** | **45.5** |" in text
    assert "cores_not_slower" not in text.split("Against the targets")[1]  # no 1-core run to compare with


def test_cores_rows_compare_the_most_cores_with_one() -> None:
    row = {"where": "shim", "mode": "threads", "workload": "empty job", "clients": 2}
    summary = {"cores": [row | {"cores": 1, "per_s": 100.0}, row | {"cores": 2, "per_s": 90.0}]}
    summary["cores"] += [
        row | {"clients": 4, "cores": 1, "per_s": 100.0},
        row | {"clients": 4, "cores": 2, "per_s": 150.0},
    ]
    rows = performance.cores_rows(summary)
    assert [(r[3], r[4]) for r in rows] == [("0.90x", False), ("1.50x", True)]
    assert rows[0][2] == "shim threads, empty job, 2 client(s): 2 cores / 1"


def test_cores_rows_pair_the_runs_that_ran_next_to_each_other() -> None:
    """Runs of 1 and 2 cores alternate; the host's speed changes between the pairs, not within one."""
    row = {"where": "shim", "mode": "threads", "workload": "empty job", "clients": 1}
    one = row | {"cores": 1, "per_s": 200.0, "runs": [100.0, 200.0, 300.0]}
    two = row | {"cores": 2, "per_s": 220.0, "runs": [110.0, 180.0, 330.0]}  # 1.1x, 0.9x, 1.1x
    (r,) = performance.cores_rows({"cores": [one, two]})
    assert (r[3], r[4]) == ("1.10x", True)
    assert performance.pair_ratio(one, two | {"runs": [110.0]}) == 220.0 / 200.0  # not paired


def test_cores_rows_compare_within_a_guest_boot() -> None:
    row = {"mode": "threads", "workload": "model invoke", "clients": 1}
    summary = {
        "cores": [
            row | {"where": "guest_cores2", "cores": 2, "per_s": 120.0},
            row | {"where": "guest_cores2", "cores": 1, "per_s": 150.0},  # core_mask 0x1, same boot
            row | {"where": "guest_cores1", "cores": 1, "per_s": 999.0},  # another boot: not compared
        ]
    }
    rows = performance.cores_rows(summary)
    assert [(r[2], r[3], r[4]) for r in rows] == [
        ("guest_cores2 threads, model invoke, 1 client(s): 2 cores / 1", "0.80x", False)
    ]


def test_plan_skips_parts_and_boots_once_per_core_count(tmp_path: Path) -> None:
    names = [n for n, _ in performance.plan(tmp_path, performance.QUICK, [2, 1])]
    assert names == ["model_bench", "corpus", "invoke_split", "shim", "guest_cores2", "guest_cores1"]
    cmd = dict(performance.plan(tmp_path, performance.QUICK, [1]))["guest_cores1"]
    assert cmd[cmd.index("--npu-cores") + 1] == "1" and "--kernel" in cmd[-1]


def test_doc_block_replaces_only_between_markers() -> None:
    text = "a\n<!-- b -->\nold\n<!-- e -->\nz\n"
    assert replace_block(text, "<!-- b -->", "<!-- e -->", "new") == "a\n<!-- b -->\nnew\n<!-- e -->\nz\n"
    with pytest.raises(ValueError, match="markers"):
        replace_block("no markers", "<!-- b -->", "<!-- e -->", "new")


def test_source_commit_names_this_checkout() -> None:
    commit = performance.source_commit()
    assert commit == "unknown" or len(commit.removesuffix("-dirty")) >= 7
