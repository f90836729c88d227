"""bench.performance: the one-run summary out of the parts' JSON, and the docs block it rewrites."""

from __future__ import annotations

import json
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
    # every target bench.performance checks, from docs/performance.md's table, with the part that measured it
    assert "| `model_vs_xnnpack` <= 1.2 x | model_bench | mobilenet_v1 | 2.00x | **missed** |" in text
    assert "| `model_vs_xnnpack_stretch` <= 1 x | model_bench | mobilenet_v1 | 2.00x | **missed** |" in text
    assert "| `corpus_vs_xnnpack` <= 3 x | corpus | unet | 12.00x | **missed** |" in text
    assert "| `attention_vs_xnnpack` <= 2 x | corpus | transformer_block (attention) | 2.00x | met |" in text
    assert "| `shim_round_trip_p50` <= 30 us | shim | shim | 400 us | **missed** |" in text
    assert "| `guest_round_trip_p50` <= 300 us | guest_cores2 | guest_cores2 | 400 us | **missed** |" in text
    assert (
        "| `guest_round_trip_over_floor` <= 1.5 x | guest_cores2 | guest_cores2 | 4.00x | **missed** |"
        in text
    )
    one_node = (
        "| `one_node_invoke_p50` <= 20 us | invoke_split | shim, a 1-node partition (one int8 ADD) | 46 us |"
    )
    assert one_node + " **missed** |" in text
    assert "| `transformer_block_partitions` 1 partition | corpus | transformer_block | 1 | met |" in text
    cores2 = (
        "| `cores2_vs_xnnpack_threads2` <= 1 x | model_bench_cores2 | mobilenet_v1: 2 NPU cores / 2 threads |"
    )
    assert cores2 + " 2.00x | **missed** |" in text
    guest_model = "| `guest_model_vs_shim` <= 1.5 x | shim_main_model, guest_cores2 |"
    assert guest_model + " mobilenet_v1_224_1.tflite: guest_cores2 / shim | 2.00x | **missed** |" in text
    assert "| guest_cores2 | mobilenet_v1_224_1.tflite | 9000 | 16.00 | 2.00x |" in text
    assert "| mobilenet_v1 | 2 | 2 | 6.00 | 3.00 | 2.00x |" in text
    # the corpus of these parts has no keyword spotter; no 1-core run to compare two cores with
    kws = "| `kws_vs_xnnpack` <= 3 x | corpus | - | - | not measured: corpus gave no figure for it |"
    assert kws in text
    no_cores = (
        "| `cores_not_slower` >= 1 x | shim, guest | - | - | not measured: shim, the guest boots gave no"
    )
    assert no_cores in text
    assert "a new input before every" in text.split("**Models against LiteRT XNNPACK**")[1].split("|")[0]
    # the invoke split: one column per profiled partition, one row per part, the invoke last
    assert "| part | empty job | 1 node |" in text
    assert "| the shim's ioctl handling | 20.0 | 20.0 |" in text
    assert "| **invoke** | **35.0** | **45.5** |" in text


def test_cores_rows_compare_the_most_cores_with_one() -> None:
    row = {"where": "shim", "mode": "threads", "workload": "empty job", "clients": 2}
    summary = {"cores": [row | {"cores": 1, "per_s": 100.0}, row | {"cores": 2, "per_s": 90.0}]}
    summary["cores"] += [
        row | {"clients": 4, "cores": 1, "per_s": 100.0},
        row | {"clients": 4, "cores": 2, "per_s": 150.0},
    ]
    rows = performance.cores_rows(summary)
    assert [(r.figure, r.met) for r in rows] == [("0.90x", False), ("1.50x", True)]
    assert rows[0].where == "shim threads, empty job, 2 client(s): 2 cores / 1" and rows[0].part == "shim"


def test_cores_rows_pair_the_runs_that_ran_next_to_each_other() -> None:
    """Runs of 1 and 2 cores alternate; the host's speed changes between the pairs, not within one."""
    row = {"where": "shim", "mode": "threads", "workload": "empty job", "clients": 1}
    one = row | {"cores": 1, "per_s": 200.0, "runs": [100.0, 200.0, 300.0]}
    two = row | {"cores": 2, "per_s": 220.0, "runs": [110.0, 180.0, 330.0]}  # 1.1x, 0.9x, 1.1x
    (r,) = performance.cores_rows({"cores": [one, two]})
    assert (r.figure, r.met) == ("1.10x", True)
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
    assert [(r.where, r.figure, r.met) for r in rows] == [
        ("guest_cores2 threads, model invoke, 1 client(s): 2 cores / 1", "0.80x", False)
    ]


def test_plan_skips_parts_and_boots_once_per_core_count(tmp_path: Path) -> None:
    names = [n for n, _ in performance.plan(tmp_path, performance.QUICK, [2, 1])]
    assert names == [
        "model_bench", "model_bench_cores2", "corpus", "invoke_split", "shim", "shim_main_model",
        "guest_cores2", "guest_cores1",
    ]  # fmt: skip
    cmd = dict(performance.plan(tmp_path, performance.QUICK, [1]))["guest_cores1"]
    assert cmd[cmd.index("--npu-cores") + 1] == "1" and "--kernel" in cmd[-1]


def test_plan_times_the_main_model_in_the_guest_and_on_the_shim_and_mobilenet_on_two_cores(
    tmp_path: Path,
) -> None:
    model = tmp_path / "main.tflite"
    parts = dict(performance.plan(tmp_path, performance.QUICK, [2], main_model=model))
    guest = parts["guest_cores2"][-1]
    assert f"python -m bench.main_model {model} --device kernel" in guest
    assert guest.index("python -m bench --kernel") < guest.index("&& python -m bench.main_model")
    shim = parts["shim_main_model"]
    assert (
        shim[shim.index("bench.main_model") + 1] == str(model) and shim[shim.index("--device") + 1] == "shim"
    )
    cores2 = parts["model_bench_cores2"]
    assert cores2[:2] == ["env", "VNPU_SHIM_CORES=2"] and cores2[cores2.index("--threads") + 1] == "2"


def test_every_performance_target_has_a_row_and_an_unmeasured_one_says_why(tmp_path: Path) -> None:
    write_parts(tmp_path)
    host = [name for name in PARTS if not name.startswith("guest_")]
    s = performance.summarize(tmp_path, {name: part_record() for name in host}, machine())
    rows = performance.target_rows(s)
    assert {r.key for r in rows} == set(performance.performance_targets())
    assert set(performance.performance_targets()) == set(performance.REPORTED)
    for key in ("guest_round_trip_p50", "guest_round_trip_over_floor", "guest_model_vs_shim"):
        (row,) = [r for r in rows if r.key == key]
        assert row.figure is None and row.mark == "not measured: a guest boot did not run (--skip)"
    empty = performance.summarize(tmp_path, {}, machine())
    unmeasured = performance.target_rows(empty)
    assert all(r.figure is None and "did not run" in r.mark for r in unmeasured)
    assert {r.key for r in unmeasured} == set(performance.performance_targets())


def test_a_target_the_table_gives_bench_performance_needs_a_measurement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        performance, "performance_targets", lambda: ["model_vs_xnnpack", "nothing_measures_this"]
    )
    with pytest.raises(KeyError, match="nothing_measures_this"):
        performance.target_rows({"parts": {}, "models": []})


def test_bench_main_model_times_a_model_with_a_new_input_each_invoke(tmp_path: Path) -> None:
    from bench import main_model
    from modelgen.ops import elementwise_model

    model = tmp_path / "add.tflite"
    model.write_bytes(elementwise_model("ADD", (1, 8, 8, 16)))
    out = tmp_path / "main_model.json"
    assert main_model.main([str(model), "--runs", "3", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["model"] == "add.tflite" and got["device"] == "shim" and got["invoke_ms"] > 0
    assert main_model.main([str(tmp_path / "missing.tflite"), "--json", str(out)]) == 2


def test_doc_block_replaces_only_between_markers() -> None:
    text = "a\n<!-- b -->\nold\n<!-- e -->\nz\n"
    assert replace_block(text, "<!-- b -->", "<!-- e -->", "new") == "a\n<!-- b -->\nnew\n<!-- e -->\nz\n"
    with pytest.raises(ValueError, match="markers"):
        replace_block("no markers", "<!-- b -->", "<!-- e -->", "new")


def test_source_commit_names_this_checkout() -> None:
    commit = performance.source_commit()
    assert commit == "unknown" or len(commit.removesuffix("-dirty")) >= 7
