"""The doorbell floor: vnpu.ko's debugfs ``doorbell_rtt`` times NOP control commands.

It is the bare doorbell -> device -> MSI-X -> waiter round trip that ``python -m bench --kernel``
sets a job's round trip against, so it must be a real, ordered measurement that leaves the
device working.
"""

from __future__ import annotations

from bench.jobs import FLOOR_READS, doorbell_floor, format_table, round_trip, round_trip_with_floor
from libaccel.tools import debugfs


def test_doorbell_rtt_is_an_ordered_measurement_and_the_device_still_runs_jobs() -> None:
    (directory,) = debugfs.device_dirs(None)[:1]
    r = debugfs.parse((directory / "doorbell_rtt").read_text())
    assert isinstance(r, dict) and r["samples"] == 256
    assert 0 < r["min_ns"] <= r["p50_ns"] <= r["p90_ns"] <= r["p99_ns"]
    lat = round_trip("kernel", iterations=20, warmup=2)  # jobs still complete after the NOPs
    floor = doorbell_floor()
    assert floor.samples == 256 and 0 < floor.min_us <= floor.p50_us
    table = format_table(lat, [], floor)
    assert "doorbell floor" in table and "round trip / floor" in table


def test_accel_state_does_not_run_the_measurement() -> None:
    (directory,) = debugfs.device_dirs(None)[:1]
    state = debugfs.read_state(directory)
    assert "doorbell_rtt" not in state and "counters" in state


def test_the_floor_is_read_before_each_run_of_the_round_trip() -> None:
    lat, floor = round_trip_with_floor("kernel", 8)
    assert floor is not None and floor.samples == FLOOR_READS * 256 and lat.iterations == 8
    assert 0 < floor.min_us <= floor.p50_us <= floor.p90_us
