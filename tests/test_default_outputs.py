"""A command run with its default output paths leaves the checkout's tracked files as they were.

Every bench CLI's default output (read from its argparse defaults), the QEMU harness's results
directories and the tools' default output directories are under the checkout's ``build/``, which
git ignores; only an explicit option (``--markdown``, ``--plots``, ``--out``, ``--json``) writes
anywhere else.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import shutil
import subprocess
from pathlib import Path

import pytest

import bench
from qemu_tests import harness, main_job
from tools import dkms, upstream

ROOT = bench.ROOT
BUILD = ROOT / "build"


class _Parsed(Exception):  # noqa: N818 - not an error: carries the parser out of main()
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


def _bench_clis() -> list[str]:
    """Every module of the bench package with a ``main`` (``__main__`` runs ``bench.jobs``)."""
    names = [
        m.name for m in pkgutil.iter_modules(bench.__path__, "bench.") if not m.name.startswith("bench._")
    ]
    return sorted(n for n in names if callable(getattr(importlib.import_module(n), "main", None)))


def _defaults(module: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """The Path defaults of ``module.main``'s parser, by option (``main`` stops at parsing)."""

    def stop(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Parsed(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", stop)
    with pytest.raises(_Parsed) as parsed:
        importlib.import_module(module).main([])
    return {a.dest: a.default for a in parsed.value.parser._actions if isinstance(a.default, Path)}


def _ignored(path: Path) -> bool:
    """git ignores ``path`` (which need not exist) in this checkout."""
    done = subprocess.run(
        ["git", "check-ignore", "-q", str(path)], cwd=ROOT, capture_output=True, check=False
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode == 0


def _check_in_build(path: Path) -> None:
    assert path.is_relative_to(BUILD), f"{path} is not under {BUILD}"
    if shutil.which("git") and (ROOT / ".git").exists():  # a checkout, not an unpacked sdist
        assert _ignored(path), f"git does not ignore {path}"


def test_every_bench_cli_is_found() -> None:
    clis = _bench_clis()
    assert {"bench.jobs", "bench.model_bench", "bench.corpus", "bench.performance"} <= set(clis)
    assert {"bench.reliability", "bench.layer_bench"} <= set(clis)


@pytest.mark.parametrize("module", _bench_clis())
def test_a_bench_cli_writes_under_build_by_default(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = _defaults(module, monkeypatch)
    assert defaults, f"{module}: no default output path"
    for dest, path in defaults.items():
        assert path.is_relative_to(bench.RESULTS), f"{module} --{dest}: {path} is not under {bench.RESULTS}"
        _check_in_build(path)


def test_the_bench_results_directory_is_ignored() -> None:
    _check_in_build(bench.RESULTS)
    _check_in_build(bench.RESULTS / "performance" / "summary.json")


def test_harness_and_tool_outputs_are_under_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for path in (harness.RESULTS, main_job.WORKDIR, dkms.DEFAULT_OUT, dkms.TEST_DIR, upstream.DEFAULT_OUT):
        _check_in_build(path)
    monkeypatch.setattr(harness, "RESULTS", tmp_path)
    run = harness.results_dir(None)  # without --out: a new directory under RESULTS
    assert run.parent == tmp_path and (tmp_path / "latest").resolve() == run
