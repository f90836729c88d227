"""A first-use build killed half-way leaves nothing in /tmp: it stages in the cache directory, and
the next build there removes what it left; a build that runs says so on stderr."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = "import delegate_teflon; print(delegate_teflon.library_path())"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VNPU_")}
    return dict(env, VNPU_CACHE_DIR=str(tmp_path / "cache"), TMPDIR=str(tmp_path / "tmp"), **extra)


def test_a_killed_build_leaves_nothing_in_tmp_and_the_next_build_sweeps(tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir()
    killer = tmp_path / "cc"
    killer.write_text("#!/bin/sh\nkill -KILL $PPID\nexit 1\n")  # the compiler's parent dies mid-build
    killer.chmod(0o755)
    r = subprocess.run(
        [sys.executable, "-c", BUILD],
        cwd=ROOT,
        env=_env(tmp_path, CC=str(killer)),
        capture_output=True,
        text=True,
    )
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert list((tmp_path / "tmp").iterdir()) == []
    (build_dir,) = (tmp_path / "cache").glob("teflon-*")
    assert not (build_dir / "libteflon.so").exists()
    assert [p.name.startswith(".build-") for p in build_dir.iterdir() if p.is_dir()] == [True]

    r = subprocess.run(
        [sys.executable, "-c", BUILD], cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()) == build_dir / "libteflon.so"
    assert sorted(p.name for p in build_dir.iterdir()) == [".lock", "BUILD_ID", "libteflon.so"]
    assert list((tmp_path / "tmp").iterdir()) == []
    # A build that really ran said so, in one line and a done line; the cached library says nothing.
    building, built = r.stderr.splitlines()
    assert building == "vnpu: building the TFLite delegate libteflon.so (once, ~2 s)\u2026"
    assert built.startswith("vnpu: built the TFLite delegate libteflon.so in ") and str(build_dir) in built
    r = subprocess.run(
        [sys.executable, "-c", BUILD], cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True
    )
    assert (r.returncode, r.stderr) == (0, "")
