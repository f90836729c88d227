"""bench.jobs: the round trip taken in runs with a call before each (where the kernel's doorbell
floor is read), and several floor reads combined into one."""

from __future__ import annotations

from bench.jobs import DoorbellFloor, combined_floor, round_trip, round_trip_with_floor


def test_the_round_trip_runs_in_chunks_with_a_call_before_each() -> None:
    calls: list[int] = []
    lat = round_trip("shim", 10, warmup=1, chunks=4, between=lambda: calls.append(1))
    assert len(calls) == 4 and lat.iterations == 10
    assert 0 < lat.min_us <= lat.p50_us <= lat.p90_us <= lat.p99_us


def test_the_shim_has_no_floor() -> None:
    lat, floor = round_trip_with_floor("shim", 5)
    assert floor is None and lat.iterations == 5


def test_floor_reads_combine_as_medians_with_the_lowest_minimum() -> None:
    reads = [
        DoorbellFloor(256, 10.0, 40.0, 90.0, 300.0),
        DoorbellFloor(256, 50.0, 200.0, 400.0, 900.0),
        DoorbellFloor(256, 30.0, 100.0, 150.0, 500.0),
    ]
    assert combined_floor(reads) == DoorbellFloor(768, 10.0, 100.0, 150.0, 500.0)
