"""tools/sparse_checker.py: which sparse a kernel tree takes, decided by the tree's own check."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from qemu_tests import sid_kernel
from tools import sparse_checker


def _program(directory: Path, name: str, body: str) -> str:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def _tree_with_the_check(tmp_path: Path) -> Path:
    """A tree holding the 7.2 tree's own scripts/checker-valid.sh."""
    prepared = sid_kernel.prepared_releases(sid_kernel.CURRENT_SERIES)
    if not prepared:
        pytest.skip("no prepared 7.2 tree (python -m qemu_tests.sid_kernel 7.2)")
    source = sid_kernel.SidKernel(prepared[-1], sid_kernel.CURRENT_SERIES).source
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    shutil.copy2(source / "scripts" / "checker-valid.sh", tree / "scripts")
    return tree


def test_a_tree_without_the_check_takes_any_sparse(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    assert sparse_checker.accepted(_program(tmp_path, "sparse", "exit 0"), tmp_path)
    assert not sparse_checker.accepted(str(tmp_path / "no-such-sparse"), tmp_path)


def test_the_tree_s_check_refuses_a_sparse_that_cannot_parse_typeof_unqual(tmp_path: Path) -> None:
    tree = _tree_with_the_check(tmp_path)
    old = _program(tmp_path, "old-sparse", 'echo "$1:3:9: error: undefined identifier" >&2')
    new = _program(tmp_path, "new-sparse", "exit 0")
    assert not sparse_checker.accepted(old, tree)
    assert sparse_checker.accepted(new, tree)


def test_a_cached_build_is_found_newest_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VNPU_CACHE_DIR", str(tmp_path))
    for version in ("0.6.4", "0.6.5~rc1"):
        (tmp_path / "sparse" / version / "bin").mkdir(parents=True)
        _program(tmp_path / "sparse" / version / "bin", "sparse", "exit 0")
    assert [p.parent.parent.name for p in sparse_checker.cached_builds()] == ["0.6.5~rc1", "0.6.4"]
