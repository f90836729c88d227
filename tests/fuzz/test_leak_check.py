"""The long runs' leak accounting (qemu_tests.leak_check): readings, slab shrinking, the report.

The parsers and the report run on fixed text here; in the QEMU guest the shrink must reach the
kernel's caches and a baseline taken twice in a row must show no leak.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from qemu_tests import leak_check
from tests.fuzz.guest import guest_only

SLABINFO = """slabinfo - version: 2.1
# name <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab> : tunables ... : slabdata ...
kmalloc-64          1024   1280     64   64    1 : tunables    0    0    0 : slabdata     20     20      0
kmalloc-4k            70     80   4096    8    8 : tunables    0    0    0 : slabdata     10     10      0
dma_fence            300    336    96   42    1 : tunables    0    0    0 : slabdata      8      8      0
"""


def test_slabinfo_is_read_as_kb_per_cache() -> None:
    assert leak_check.slab_kb(SLABINFO) == {"kmalloc-64": 80, "kmalloc-4k": 320, "dma_fence": 32}


def test_meminfo_is_read_as_kb() -> None:
    text = "MemTotal:        1004256 kB\nSUnreclaim:        68548 kB\nHugePages_Total:       0\n"
    assert leak_check.meminfo(text) == {"MemTotal": 1004256, "SUnreclaim": 68548, "HugePages_Total": 0}


def test_slab_growth_names_the_largest_growers_first() -> None:
    before = {"a": 100, "b": 100, "c": 100}
    after = {"a": 100 + 63, "b": 100 + 640, "c": 100 + 64, "new": 4096}
    assert list(leak_check.slab_growth(before, after).items()) == [
        ("new", (0, 4096)),
        ("b", (100, 740)),
        ("c", (100, 164)),
    ]


def test_shrink_writes_each_cache_once(tmp_path: Path) -> None:
    for name in (":0000064", "kmalloc-4k"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "shrink").write_text("")
    (tmp_path / "kmalloc-64").symlink_to(tmp_path / ":0000064")  # a merged cache's alias
    (tmp_path / "broken").mkdir()  # no shrink file: skipped
    assert leak_check.shrink_slab_caches(tmp_path) == 2
    assert (tmp_path / ":0000064" / "shrink").read_text() == "1"
    assert leak_check.shrink_slab_caches(tmp_path / "missing") == 0


def test_the_caches_explain_the_slab_entry_and_do_not_count() -> None:
    leaks = {"meminfo SUnreclaim kB": (68548, 72616), "slab kmalloc-64 kB": (80, 2000), "bos": (0, 1)}
    assert leak_check.count_leaks(leaks) == 2


def test_slab_over_tolerance_is_reported_with_its_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    base = leak_check.Baseline(counters={"bos": 0}, mem={"SUnreclaim": 1000, "Shmem": 0}, slabs={"x": 8})
    monkeypatch.setattr(leak_check, "live_counters", lambda: {"bos": 0})
    monkeypatch.setattr(leak_check, "shrink_slab_caches", lambda: 0)
    monkeypatch.setattr(leak_check, "meminfo", lambda: {"SUnreclaim": 1000 + 4096, "Shmem": 0})
    monkeypatch.setattr(leak_check, "slab_kb", lambda: {"x": 8 + 4000})
    assert base.leaks() == {"meminfo SUnreclaim kB": (1000, 5096), "slab x kB": (8, 4008)}
    monkeypatch.setattr(leak_check, "meminfo", lambda: {"SUnreclaim": 1000 + 2048, "Shmem": 0})
    assert base.leaks() == {}


@guest_only
def test_guest_caches_shrink_and_a_quiet_baseline_has_no_leak() -> None:
    assert leak_check.shrink_slab_caches() > 20  # SLUB's sysfs is there and root may write it
    assert leak_check.slab_kb(), "/proc/slabinfo unreadable"
    assert leak_check.Baseline.take().leaks() == {}
