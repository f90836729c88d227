"""vnpu.ko's Kconfig names real symbols, and the ones the module needs.

The symbols it depends on and selects must exist in the Debian 6.12 kernel the QEMU
harness boots (its /boot/config-*), and what it selects must provide the modules
vnpu.ko links against (gpu-sched, drm_shmem_helper) and the facilities it calls
(request_firmware: FW_LOADER; dev_coredumpv: WANT_DEV_COREDUMP, as ivpu selects them).
The driver has one symbol and no test-knob option: no build of it can turn the stream check off.
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
# Facilities the driver calls, which a config may otherwise leave out.
CALLED_SYMBOLS = {"FW_LOADER", "WANT_DEV_COREDUMP"}
DRIVER_SYMBOL = "DRM_ACCEL_VNPU"


def _blocks(text: str) -> dict[str, str]:
    """Each ``config`` entry's text, by symbol."""
    parts = re.split(r"^config\s+(\w+)\s*$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _entries(text: str) -> dict[str, list[str]]:
    """The driver's config symbol, its ``depends on`` symbols and its ``select`` symbols."""
    block = _blocks(text)[DRIVER_SYMBOL]
    depends_lines = re.findall(r"^\s*depends on\s+(.+)$", block, re.M)
    depends = [s for line in depends_lines for s in re.findall(r"\w+", line)]
    selects = re.findall(r"^\s*select\s+(\w+)", block, re.M)
    return {"config": [DRIVER_SYMBOL], "depends": depends, "select": selects}


def test_kconfig_declares_the_driver_only() -> None:
    assert set(_blocks(KCONFIG.read_text())) == {DRIVER_SYMBOL}


def test_kbuild_builds_the_module_for_the_symbol() -> None:
    (symbol,) = _entries(KCONFIG.read_text())["config"]
    assert f"obj-$(CONFIG_{symbol}) += vnpu.o" in KBUILD.read_text()


def test_selects_provide_the_modules_vnpu_needs() -> None:
    assert set(_entries(KCONFIG.read_text())["select"]) >= set(MODULE_SYMBOLS.values()) | CALLED_SYMBOLS


def test_symbols_exist_in_the_debian_kernel_config() -> None:
    configs = sorted(glob.glob("/boot/config-6.12*-amd64"))
    if not configs:
        pytest.skip("no Debian 6.12 kernel installed (/boot/config-6.12*-amd64): ./run.sh installs one")
    entries = _entries(KCONFIG.read_text())
    for config in configs:
        enabled = dict(re.findall(r"^CONFIG_(\w+)=([ym])$", Path(config).read_text(), re.M))
        for symbol in entries["depends"] + entries["select"]:
            assert symbol in enabled, f"{symbol} is not set in {config}"
