"""The QEMU harness's command lines: what it asks vng and QEMU for."""

from __future__ import annotations

from pathlib import Path

import pytest

from device_model.qemu_server import parse_size
from qemu_tests import harness


def test_vng_command_is_tcg_with_shared_ram_and_ivshmem() -> None:
    kernel = Path("/boot/vmlinuz-6.12.117+deb12-amd64")
    cmd = harness.vng_command(["true"], Path("/tmp/s.sock"), Path("/dev/shm/r"), Path("/tmp/o"), 2, kernel)
    assert cmd[cmd.index("--run") + 1] == str(kernel)
    assert "--disable-kvm" in cmd and "-enable-kvm" not in " ".join(cmd)
    assert cmd[cmd.index("--memory") + 1] == harness.GUEST_RAM
    assert cmd[cmd.index("--rwdir") + 1] == f"{harness.GUEST_OUT}=/tmp/o"
    (opts,) = [c for c in cmd if c.startswith("--qemu-opts=")]
    assert f"memory-backend-file,id=vnpu-ram,size={harness.GUEST_RAM},share=on,mem-path=/dev/shm/r" in opts
    assert "-machine memory-backend=vnpu-ram" in opts
    assert "-chardev socket,path=/tmp/s.sock,id=vnpu-ivs" in opts
    assert "-device ivshmem-doorbell,chardev=vnpu-ivs,vectors=2" in opts
    assert cmd[-2] == "--exec" and cmd[-1].endswith("; exec true")
    # The repo (and its venv) is re-mounted read-only with a page cache: imports under TCG are slow.
    assert f"path={harness.REPO},security_model=none,readonly=on" in opts
    assert f"cache=loose,ro vnpu-fs0 {harness.REPO} " in cmd[-1]


def test_guest_command_uses_the_venv_python_by_absolute_path() -> None:
    args = harness.build_parser().parse_args(["--exec", "accel info"])
    cmd = harness.guest_command(args)
    assert Path(cmd[0]).is_absolute() and cmd[1:3] == ["-m", "qemu_tests.guest_run"]
    assert cmd[-2:] == ["--exec", "accel info"]
    args = harness.build_parser().parse_args([])
    cmd = harness.guest_command(args)
    assert cmd[cmd.index("--suites") + 1 :] == list(harness.DEFAULT_SUITES)


@pytest.mark.parametrize(
    ("text", "value"), [("1G", 1 << 30), ("512M", 512 << 20), ("4096", 4096), ("8k", 8192)]
)
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "G", "1T", "-1G", "x"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)
