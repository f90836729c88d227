"""System sleep through the PM core in an initramfs-root guest (qemu_tests/system_sleep.py).

The boot (about 40 s under TCG) asserts on the guest's verdict; the rest checks on the host what
goes into the guest: the module order, the initramfs, the client's build, QEMU's command line.
"""

from __future__ import annotations

import lzma
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qemu_tests import preflight, system_sleep
from uapi import firmware_format

REPO = Path(__file__).resolve().parents[2]
RELEASE = "6.12.99+deb12-amd64"


def read_cpio(data: bytes) -> dict[str, bytes]:
    """A "newc" archive's files by name (what the kernel unpacks)."""
    files: dict[str, bytes] = {}
    at = 0
    while True:
        assert data[at : at + 6] == b"070701", f"no cpio header at {at}"
        fields = [int(data[at + 6 + 8 * i : at + 14 + 8 * i], 16) for i in range(13)]
        size, namesize = fields[6], fields[11]
        name = data[at + 110 : at + 110 + namesize - 1].decode()
        at += 110 + namesize
        at += -at % 4
        if name == "TRAILER!!!":
            return files
        files[name] = data[at : at + size]
        at += size + (-size % 4)


def fake_modules(root: Path, dep: str) -> None:
    base = root / "lib" / "modules" / RELEASE
    base.mkdir(parents=True)
    (base / "modules.dep").write_text(dep)


DEP = (
    "kernel/drivers/gpu/drm/drm.ko.xz:\n"
    "kernel/drivers/gpu/drm/drm_kms_helper.ko.xz: kernel/drivers/gpu/drm/drm.ko.xz\n"
    "kernel/drivers/gpu/drm/drm_shmem_helper.ko.xz: kernel/drivers/gpu/drm/drm_kms_helper.ko.xz "
    "kernel/drivers/gpu/drm/drm.ko.xz\n"
    "kernel/drivers/gpu/drm/scheduler/gpu-sched.ko.xz: kernel/drivers/gpu/drm/drm.ko.xz\n"
)


def test_module_chain_loads_each_dependency_once_before_its_users(tmp_path: Path) -> None:
    fake_modules(tmp_path, DEP)
    chain = system_sleep.module_chain(RELEASE, tmp_path / "vnpu.ko", root=tmp_path)
    assert [m.name for m in chain] == [
        "drm.ko",
        "drm_kms_helper.ko",
        "drm_shmem_helper.ko",
        "gpu_sched.ko",
        "vnpu.ko",
    ]
    assert (
        chain[3].path
        == tmp_path / "lib/modules" / RELEASE / "kernel/drivers/gpu/drm/scheduler/gpu-sched.ko.xz"
    )
    assert chain[-1].params == system_sleep.MODULE_PARAMS and chain[-1].path == tmp_path / "vnpu.ko"


def test_a_built_in_dependency_is_not_loaded(tmp_path: Path) -> None:
    fake_modules(tmp_path, "kernel/drivers/gpu/drm/drm_shmem_helper.ko.xz:\n")
    (tmp_path / "lib/modules" / RELEASE / "modules.builtin").write_text(
        "kernel/drivers/gpu/drm/drm.ko\nkernel/drivers/gpu/drm/scheduler/gpu-sched.ko\n"
    )
    chain = system_sleep.module_chain(RELEASE, tmp_path / "vnpu.ko", root=tmp_path)
    assert [m.name for m in chain] == ["drm_shmem_helper.ko", "vnpu.ko"]


def test_a_dependency_missing_from_modules_dep_is_named(tmp_path: Path) -> None:
    fake_modules(tmp_path, "kernel/drivers/gpu/drm/drm.ko.xz:\n")
    with pytest.raises(system_sleep.ScenarioError, match="drm_shmem_helper is not in .*modules.dep"):
        system_sleep.module_chain(RELEASE, tmp_path / "vnpu.ko", root=tmp_path)
    with pytest.raises(system_sleep.ScenarioError, match="cannot read .*6.12.1\\+deb12-amd64/modules.dep"):
        system_sleep.module_chain("6.12.1+deb12-amd64", tmp_path / "vnpu.ko", root=tmp_path)


def test_modules_go_into_the_guest_uncompressed(tmp_path: Path) -> None:
    elf = b"\x7fELF module bytes"
    (tmp_path / "a.ko.xz").write_bytes(lzma.compress(elf))
    (tmp_path / "b.ko").write_bytes(elf)
    (tmp_path / "c.ko.zst").write_bytes(b"zstd")
    assert system_sleep.module_bytes(tmp_path / "a.ko.xz") == elf
    assert system_sleep.module_bytes(tmp_path / "b.ko") == elf
    with pytest.raises(system_sleep.ScenarioError, match="c.ko.zst: not a .ko, .ko.xz or .ko.gz"):
        system_sleep.module_bytes(tmp_path / "c.ko.zst")


def test_the_initramfs_holds_init_busybox_client_modules_and_firmware(tmp_path: Path) -> None:
    (tmp_path / "busybox").write_bytes(b"busybox")
    (tmp_path / "client").write_bytes(b"client")
    (tmp_path / "drm.ko.xz").write_bytes(lzma.compress(b"drm"))
    (tmp_path / "vnpu.ko").write_bytes(b"vnpu")
    modules = [
        system_sleep.GuestModule("drm.ko", tmp_path / "drm.ko.xz"),
        system_sleep.GuestModule("vnpu.ko", tmp_path / "vnpu.ko", ("timeout_ms=30000",)),
    ]
    data = system_sleep.initramfs(tmp_path / "busybox", tmp_path / "client", modules, "freeze:devices")
    assert len(data) % 512 == 0
    files = read_cpio(data)
    assert files["init"] == system_sleep.INIT_SCRIPT.read_bytes()
    assert files["init"].startswith(b"#!/bin/busybox sh\n")
    assert files["bin/busybox"] == b"busybox" and files["system_sleep"] == b"client"
    assert files["modules.order"] == b"drm.ko\nvnpu.ko timeout_ms=30000\n"
    assert files["lib/modules/drm.ko"] == b"drm" and files["lib/modules/vnpu.ko"] == b"vnpu"
    assert files["sleep.conf"] == b"freeze devices\n"
    fw = files[f"lib/firmware/{firmware_format.FIRMWARE_NAME}"]
    assert fw == firmware_format.DEFAULT_IMAGE_PATH.read_bytes()
    assert {"dev/console", "proc", "sys", "lib/firmware/vnpu"} <= set(files)


@pytest.mark.skipif(
    shutil.which("gcc") is None or not system_sleep.LIBC_A.is_file(), reason="no gcc or no static libc"
)
def test_the_client_builds_static_with_warnings_as_errors(tmp_path: Path) -> None:
    client = system_sleep.build_client(tmp_path)
    assert preflight.is_static_elf(client)
    assert {"-static", "-Wall", "-Wextra", "-Werror"} <= set(system_sleep.CLIENT_CFLAGS)


def test_a_client_that_does_not_compile_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = Path(__file__).resolve().parents[1] / "c" / "does_not_compile.c"
    monkeypatch.setattr(system_sleep, "CLIENT_SOURCE", bad)
    with pytest.raises(system_sleep.ScenarioError, match="building the client failed .*undeclared"):
        system_sleep.build_client(tmp_path)


def test_qemu_boots_the_initramfs_with_the_npu_and_no_9p() -> None:
    cmd = system_sleep.qemu_command(
        Path("/boot/vmlinuz-x"),
        Path("/o/initramfs.cpio"),
        Path("/w/ivshmem.sock"),
        Path("/dev/shm/r"),
        2,
        False,
    )
    text = " ".join(cmd)
    assert cmd[cmd.index("-initrd") + 1] == "/o/initramfs.cpio"
    assert "rdinit=/init" in cmd[cmd.index("-append") + 1]
    assert "-device ivshmem-doorbell,chardev=vnpu-ivs" in text
    assert "mem-path=/dev/shm/r" in text and cmd[cmd.index("-accel") + 1] == "tcg,thread=single"
    assert "9p" not in text


def test_the_verdict_is_the_last_verdict_line() -> None:
    ok = "noise\nVNPU-SLEEP: PASS: mem at pm_test core: ...\ninit: the client exited with 0\n"
    assert system_sleep.verdict(ok) == (True, "VNPU-SLEEP: PASS: mem at pm_test core: ...")
    bad = "[ 1.0] x VNPU-SLEEP: FAIL: job 3: Input/output error\n"
    assert system_sleep.verdict(bad) == (False, "VNPU-SLEEP: FAIL: job 3: Input/output error")
    passed, line = system_sleep.verdict("kernel panic\n")
    assert not passed and "printed no verdict" in line


def test_check_names_what_is_missing_with_its_fix(tmp_path: Path) -> None:
    host = preflight.Host(root=tmp_path, path=str(tmp_path / "bin"), apt_names=lambda: [])
    lines = {r.name: r for r in system_sleep.check(host)}
    assert not lines["static libc"].ok and lines["static libc"].packages == ("libc6-dev",)
    assert not lines["gcc"].ok and "apt-get install gcc" in lines["gcc"].line()
    assert not lines["qemu"].ok and not lines["busybox"].ok
    assert "libc6-dev" in preflight.BASE_PACKAGES  # run.sh installs it
    # A kernel whose image and headers are there but not its modules.
    (tmp_path / "boot").mkdir()
    (tmp_path / "boot" / f"vmlinuz-{RELEASE}").write_bytes(b"")
    (tmp_path / "lib" / "modules" / RELEASE / "build").mkdir(parents=True)
    lines = {r.name: r for r in system_sleep.check(host, RELEASE)}
    assert not lines["kernel modules"].ok
    assert lines["kernel modules"].packages == (f"linux-image-{RELEASE}-unsigned",)


def test_a_bad_level_is_refused() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "qemu_tests.system_sleep", "--level", "mem:freezer"],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 2 and "'mem:freezer': one of auto" in r.stderr


@pytest.mark.boots_guest
@pytest.mark.skipif(
    any(not r.ok for r in system_sleep.check()),
    reason="host requirements missing: python -m qemu_tests.system_sleep --check (./run.sh installs them)",
)
def test_jobs_in_flight_survive_a_system_sleep_through_the_pm_core(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "qemu_tests.system_sleep", "--out", str(tmp_path), "--timeout", "300"],
        cwd=REPO, capture_output=True, text=True, timeout=420, check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert "VNPU-SLEEP: PASS" in out, out[-4000:]
    assert proc.returncode == 0, out[-4000:]
    assert "kernel: " in out and "PM: suspend exit" in out  # the PM core ran the sleep
