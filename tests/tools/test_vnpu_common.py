"""vnpu_common.cache: where the cache is, and that concurrent builders build a target once."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from vnpu_common import cache
from vnpu_common.cli import OneLineArgumentParser


def test_cache_root_prefers_vnpu_cache_dir_then_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VNPU_CACHE_DIR", str(tmp_path / "own"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_root() == tmp_path / "own"
    monkeypatch.delenv("VNPU_CACHE_DIR")
    assert cache.cache_root() == tmp_path / "xdg" / "vnpu"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.cache_root() == Path.home() / ".cache" / "vnpu"


def _build(out_dir: Path) -> None:
    with open(out_dir / "builds.log", "a") as log:  # one line per build that ran
        log.write("built\n")
    time.sleep(0.1)  # a window in which an unlocked second caller would start a build of its own
    staged = out_dir / "staged"
    staged.write_text("library")
    cache.publish(staged, out_dir / "lib.so")


def _race(target: str) -> str:
    return cache.build_once(Path(target), _build).read_text()


def test_concurrent_callers_build_once(tmp_path: Path) -> None:
    target = tmp_path / "key" / "lib.so"
    with multiprocessing.get_context("fork").Pool(4) as pool:
        results = pool.map(_race, [str(target)] * 8)
    assert results == ["library"] * 8
    assert (tmp_path / "key" / "builds.log").read_text() == "built\n"
    assert [p.name for p in (tmp_path / "key").iterdir() if p.name.startswith(".lib.so")] == []


def test_a_real_build_says_so_on_stderr_and_a_cached_one_says_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "key" / "lib.so"
    assert cache.build_once(target, _build, "the thing (once, ~1 s)").read_text() == "library"
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "vnpu: building the thing (once, ~1 s)\u2026"
    assert err[1].startswith("vnpu: built the thing in ") and err[1].endswith(f" s: {target}")
    assert len(err) == 2
    cache.build_once(target, _build, "the thing (once, ~1 s)")
    assert capsys.readouterr().err == ""


def test_content_hash_separates_parts() -> None:
    assert cache.content_hash(["ab", "c"]) != cache.content_hash(["a", "bc"])
    assert cache.content_hash(["ab", b"c"]) == cache.content_hash([b"ab", "c"])
    assert len(cache.content_hash([])) == 16


class _Usage(Exception):
    pass


class _Parser(OneLineArgumentParser):
    usage_error = _Usage


class _Prefixed(_Parser):
    prefix_prog = True


@pytest.mark.parametrize(("parser_class", "want"), [(_Parser, ""), (_Prefixed, "tool sub: ")])
def test_a_refused_command_line_is_one_line(parser_class: type[_Parser], want: str) -> None:
    ap = parser_class(prog="tool")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=parser_class)
    sub.add_parser("sub").add_argument("n", type=int)
    with pytest.raises(_Usage) as e:
        ap.parse_args(["sub", "1\n2"])
    assert str(e.value) == want + "argument n: invalid int value: '1\\n2'"
