"""vnpu.ko's sources pass the kernel's checkpatch.pl (--strict --no-tree)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNEL_DIR = ROOT / "kernel" / "drivers_accel_stub"
SOURCE_TARBALL = Path("/usr/src/linux-source-6.12.tar.xz")
CACHE = Path(os.environ.get("VNPU_CACHE_DIR", Path.home() / ".cache" / "vnpu")) / "checkpatch"


def _checkpatch() -> Path:
    """checkpatch.pl from Debian's linux-source-6.12, unpacked once into the cache."""
    script = CACHE / "linux-source-6.12" / "scripts" / "checkpatch.pl"
    if script.exists():
        return script
    if not SOURCE_TARBALL.exists():
        pytest.skip(f"{SOURCE_TARBALL} missing: install Debian's linux-source-6.12 (./run.sh does)")
    tmp = CACHE.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(SOURCE_TARBALL) as tar:
        members = [m for m in tar if m.name.startswith("linux-source-6.12/scripts/")]
        tar.extractall(tmp, members=members, filter="data")
    shutil.rmtree(CACHE, ignore_errors=True)
    tmp.rename(CACHE)
    return script


def _sources() -> list[Path]:
    files = sorted(KERNEL_DIR.glob("*.[ch]"))
    files = [f for f in files if not f.name.endswith(".mod.c")]
    return files + [ROOT / "uapi" / "drm" / "vnpu_accel.h", ROOT / "uapi" / "drm" / "vnpu_isa.h"]


@pytest.mark.parametrize("source", _sources(), ids=lambda p: p.name)
def test_checkpatch_clean(source: Path) -> None:
    proc = subprocess.run(
        ["perl", str(_checkpatch()), "--no-tree", "--quiet", "--show-types", "-f", str(source)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
