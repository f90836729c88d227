"""vnpu.ko's sources pass the kernel's checkpatch.pl (--strict --no-tree)."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from vnpu_common.cache import cache_root

ROOT = Path(__file__).resolve().parents[2]
KERNEL_DIR = ROOT / "kernel" / "drivers_accel_stub"
SOURCE_TARBALL = Path("/usr/src/linux-source-6.12.tar.xz")
CACHE = cache_root() / "checkpatch"


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


# What Kbuild leaves next to the sources (.gitignore): not sources.
BUILD_PRODUCTS = ("*.o", "*.ko", "*.mod", "*.mod.c", "*.cmd", "*.o.d", "Module.symvers", "modules.order")
UAPI_HEADERS = [ROOT / "uapi" / "drm" / "vnpu_accel.h", ROOT / "uapi" / "drm" / "vnpu_isa.h"]


def _kernel_files() -> list[Path]:
    """Every file of the driver's directory that is not a build product or hidden."""
    return sorted(
        f
        for f in KERNEL_DIR.iterdir()
        if f.is_file() and not f.name.startswith(".") and not any(f.match(p) for p in BUILD_PRODUCTS)
    )


def _sources() -> list[Path]:
    return _kernel_files() + UAPI_HEADERS


def test_kernel_sources_exist() -> None:
    names = {f.name for f in _kernel_files()}
    assert {"vnpu_drv.c", "Kbuild", "Kconfig", "Makefile"} <= names


def _checkpatch_args(source: Path, tmp_path: Path) -> tuple[list[str], Path]:
    """checkpatch's command line and directory for ``source``.

    The uapi headers are checked where the kernel installs them, as include/uapi/drm/NAME:
    checkpatch knows that userspace headers cannot use the kernel's BIT() macros.
    """
    if source in UAPI_HEADERS:
        dest = tmp_path / "include" / "uapi" / "drm" / source.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, dest)
        return [str(dest.relative_to(tmp_path))], tmp_path
    return [str(source.relative_to(ROOT))], ROOT


@pytest.mark.parametrize("source", _sources(), ids=lambda p: p.name)
def test_checkpatch_strict_clean(source: Path, tmp_path: Path) -> None:
    files, cwd = _checkpatch_args(source, tmp_path)
    proc = subprocess.run(
        ["perl", str(_checkpatch()), "--no-tree", "--strict", "--quiet", "--show-types", "-f", *files],
        capture_output=True,
        text=True,
        cwd=cwd,
    )
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr
