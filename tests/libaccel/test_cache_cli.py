"""accel cache: the cache directory's entries listed, and cleared of what the stack rebuilds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from libaccel.tools import cli
from vnpu_common.cli import ExitCode


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    for name, size in (
        ("compile/a.vnpucp", 3000),
        ("teflon-0123/libteflon.so", 1000),
        ("kernels/x/bzImage", 50),
    ):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"\0" * size)
    (root / "notes.txt").write_text("mine")
    (root / ".lock").write_text("")
    monkeypatch.setenv("VNPU_CACHE_DIR", str(root))
    return root


def test_the_listing_names_each_entry_its_size_and_what_it_is(cache: Path, capsys) -> None:  # noqa: ANN001
    assert cli.main(["cache", "--json"]) == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["root"] == str(cache)
    got = {e["name"]: (e["bytes"], e["rebuilt"]) for e in doc["entries"]}
    assert got == {
        "compile": (3000, True),
        "kernels": (50, False),
        "notes.txt": (4, False),
        "teflon-0123": (1000, True),
    }
    assert cli.main(["cache"]) == ExitCode.OK
    text = capsys.readouterr().out
    assert text.startswith(f"cache: {cache} (") and "libteflon.so" in text and "not the stack's" in text


def test_clear_removes_what_the_stack_rebuilds_and_keeps_the_rest(cache: Path, capsys) -> None:  # noqa: ANN001
    assert cli.main(["cache", "--clear"]) == ExitCode.OK
    assert sorted(p.name for p in cache.iterdir()) == [".lock", "kernels", "notes.txt"]
    assert "kept kernels, notes.txt" in capsys.readouterr().out
    assert cli.main(["cache", "--clear", "kernels"]) == ExitCode.OK
    assert not (cache / "kernels").exists()


def test_clearing_an_unknown_entry_is_one_line(cache: Path, capsys) -> None:  # noqa: ANN001
    assert cli.main(["cache", "--clear", "nope"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no entry 'nope'" in err
    assert (cache / "compile").exists()
