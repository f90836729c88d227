"""buildcache: where the cache is, and that concurrent builders build a target once."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

import buildcache


def test_cache_root_prefers_vnpu_cache_dir_then_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VNPU_CACHE_DIR", str(tmp_path / "own"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert buildcache.cache_root() == tmp_path / "own"
    monkeypatch.delenv("VNPU_CACHE_DIR")
    assert buildcache.cache_root() == tmp_path / "xdg" / "vnpu"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert buildcache.cache_root() == Path.home() / ".cache" / "vnpu"


def _build(out_dir: Path) -> None:
    with open(out_dir / "builds.log", "a") as log:  # one line per build that ran
        log.write("built\n")
    time.sleep(0.1)  # a window in which an unlocked second caller would start a build of its own
    staged = out_dir / "staged"
    staged.write_text("library")
    buildcache.publish(staged, out_dir / "lib.so")


def _race(target: str) -> str:
    return buildcache.build_once(Path(target), _build).read_text()


def test_concurrent_callers_build_once(tmp_path: Path) -> None:
    target = tmp_path / "key" / "lib.so"
    with multiprocessing.get_context("fork").Pool(4) as pool:
        results = pool.map(_race, [str(target)] * 8)
    assert results == ["library"] * 8
    assert (tmp_path / "key" / "builds.log").read_text() == "built\n"
    assert [p.name for p in (tmp_path / "key").iterdir() if p.name.startswith(".lib.so")] == []


def test_content_hash_separates_parts() -> None:
    assert buildcache.content_hash(["ab", "c"]) != buildcache.content_hash(["a", "bc"])
    assert buildcache.content_hash(["ab", b"c"]) == buildcache.content_hash([b"ab", "c"])
    assert len(buildcache.content_hash([])) == 16
