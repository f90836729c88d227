"""vnpu.ko's Kconfig names real symbols, and the ones the module needs.

The symbols it depends on and selects must exist in the Debian 6.12 kernel the QEMU
harness boots (its /boot/config-*), and what it selects must provide the modules
vnpu.ko links against (gpu-sched, drm_shmem_helper).
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KCONFIG = ROOT / "kernel" / "drivers_accel_stub" / "Kconfig"
KBUILD = ROOT / "kernel" / "drivers_accel_stub" / "Kbuild"
# The modules vnpu.ko depends on (modinfo's depends:) and the Kconfig symbols that build them.
MODULE_SYMBOLS = {"gpu-sched": "DRM_SCHED", "drm_shmem_helper": "DRM_GEM_SHMEM_HELPER"}


def _entries(text: str) -> dict[str, list[str]]:
    """The config symbol, its ``depends on`` symbols and its ``select`` symbols."""
    (symbol,) = re.findall(r"^config\s+(\w+)\s*$", text, re.M)
    depends_lines = re.findall(r"^\s*depends on\s+(.+)$", text, re.M)
    depends = [s for line in depends_lines for s in re.findall(r"\w+", line)]
    selects = re.findall(r"^\s*select\s+(\w+)", text, re.M)
    return {"config": [symbol], "depends": depends, "select": selects}


def test_kbuild_builds_the_module_for_the_symbol() -> None:
    (symbol,) = _entries(KCONFIG.read_text())["config"]
    assert f"obj-$(CONFIG_{symbol}) += vnpu.o" in KBUILD.read_text()


def test_selects_provide_the_modules_vnpu_needs() -> None:
    assert set(_entries(KCONFIG.read_text())["select"]) >= set(MODULE_SYMBOLS.values())


def test_symbols_exist_in_the_debian_kernel_config() -> None:
    configs = sorted(glob.glob("/boot/config-6.12*-amd64"))
    if not configs:
        pytest.skip("no Debian 6.12 kernel installed (/boot/config-6.12*-amd64): ./run.sh installs one")
    entries = _entries(KCONFIG.read_text())
    for config in configs:
        enabled = dict(re.findall(r"^CONFIG_(\w+)=([ym])$", Path(config).read_text(), re.M))
        for symbol in entries["depends"] + entries["select"]:
            assert symbol in enabled, f"{symbol} is not set in {config}"
