"""The host preflight: a missing requirement is one line with its fix; the kernel picker; one package list."""

from __future__ import annotations

import dataclasses
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qemu_tests import harness, preflight

REPO = Path(__file__).resolve().parents[2]
NEW = "6.12.117+deb12-amd64"
OLD = "6.12.107+deb12-amd64"
APT = [
    *preflight.kernel_packages(OLD),
    *preflight.kernel_packages("6.12.115+deb12-amd64"),
    *preflight.kernel_packages(NEW),
    "linux-image-6.12.119+deb12-rt-amd64-unsigned",
    "linux-headers-6.12.119+deb12-rt-amd64",
]


# --- the kernel picker -----------------------------------------------------


def test_pick_kernel_takes_the_newest_generic_image_with_headers() -> None:
    assert preflight.pick_kernel(APT) == NEW


def test_pick_kernel_compares_numbers_not_strings() -> None:
    names = [
        *preflight.kernel_packages("6.12.99+deb12-amd64"),
        *preflight.kernel_packages("6.12.100+deb12-amd64"),
    ]
    assert preflight.pick_kernel(names) == "6.12.100+deb12-amd64"


def test_pick_kernel_skips_an_image_without_headers() -> None:
    names = [*preflight.kernel_packages(OLD), f"linux-image-{NEW}-unsigned", f"linux-headers-{NEW}-dbg"]
    assert preflight.pick_kernel(names) == OLD


@pytest.mark.parametrize(
    "release",
    [
        "6.12.120+deb12-rt-amd64",  # PREEMPT_RT
        "6.12.120+deb12-cloud-amd64",  # no DRM
        "6.1.0-40-amd64",  # another series
        "6.13.1+deb12-amd64",
    ],
)
def test_pick_kernel_ignores_other_flavours_and_series(release: str) -> None:
    assert (
        preflight.pick_kernel([*preflight.kernel_packages(release), *preflight.kernel_packages(OLD)]) == OLD
    )


def test_pick_kernel_ignores_signed_images_and_metapackages() -> None:
    names = [
        "linux-image-6.12-amd64",
        f"linux-image-{NEW}",
        f"linux-headers-{NEW}",
        "linux-headers-6.12-amd64",
    ]
    assert preflight.pick_kernel(names) is None


def test_pick_kernel_of_nothing_is_none() -> None:
    assert preflight.pick_kernel([]) is None


# --- a fake host ------------------------------------------------------------


def _exe(path: Path, data: bytes = b"#!/bin/sh\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(0o755)
    return path


def _static_elf() -> bytes:
    """A minimal 64-bit ELF header with one PT_LOAD program header and no PT_INTERP."""
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    header[32:40] = (64).to_bytes(8, "little")  # e_phoff
    header[54:56] = (56).to_bytes(2, "little")  # e_phentsize
    header[56:58] = (1).to_bytes(2, "little")  # e_phnum
    phdr = bytearray(56)
    phdr[:4] = (1).to_bytes(4, "little")  # PT_LOAD
    return bytes(header + phdr)


def _dynamic_elf() -> bytes:
    elf = bytearray(_static_elf())
    elf[64:68] = (3).to_bytes(4, "little")  # PT_INTERP
    return bytes(elf)


def fake_host(tmp_path: Path, release: str | None = NEW, missing: tuple[str, ...] = ()) -> preflight.Host:
    """A host under tmp_path with everything present except the names in ``missing``."""
    bin_dir = tmp_path / "usr" / "bin"
    bin_dir.mkdir(parents=True)
    (tmp_path / "dev" / "shm").mkdir(parents=True)
    for name in ("qemu-system-x86_64", "file", "make", "x86_64-linux-gnu-gcc-12"):
        if name not in missing:
            _exe(bin_dir / name)
    if "busybox" not in missing:
        _exe(bin_dir / "busybox", _static_elf())
    if "modprobe" not in missing:
        _exe(tmp_path / "usr" / "sbin" / "modprobe")
    if release is not None:
        if "image" not in missing:
            _exe(tmp_path / "boot" / f"vmlinuz-{release}")
        if "headers" not in missing:
            config = tmp_path / "lib" / "modules" / release / "build" / "include" / "config" / "auto.conf"
            config.parent.mkdir(parents=True)
            accel = "# CONFIG_DRM_ACCEL is not set" if "accel" in missing else "CONFIG_DRM_ACCEL=y"
            config.write_text(
                f'{accel}\nCONFIG_CC_VERSION_TEXT="x86_64-linux-gnu-gcc-12 (Debian 12.2.0-14) 12.2.0"\n'
            )
    include = tmp_path / "include"
    include.mkdir()
    if "python.h" not in missing:
        (include / "Python.h").write_text("")
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    if "vng" not in missing:
        _exe(venv / "vng")
        _exe(venv / "virtme-run")
    return preflight.Host(
        root=tmp_path, path=str(bin_dir), python_include=include, venv_bin=venv, apt_names=lambda: APT
    )


@pytest.fixture(autouse=True)
def _no_kernel_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(preflight.KERNEL_ENV, raising=False)


def _check(host: preflight.Host, **kwargs: object) -> tuple[int, str, list[preflight.Requirement]]:
    reqs = preflight.check_host(host, guest_ram=1 << 20, **kwargs)  # type: ignore[arg-type]
    out = io.StringIO()
    return preflight.report(reqs, out), out.getvalue(), reqs


def test_everything_present_is_exit_0(tmp_path: Path) -> None:
    rc, out, _ = _check(fake_host(tmp_path))
    assert rc == 0, out
    assert "MISSING" not in out
    assert f"kernel image: {tmp_path}/boot/vmlinuz-{NEW}" in out


@pytest.mark.parametrize(
    ("missing", "name", "fix"),
    [
        ("qemu-system-x86_64", "qemu", "apt-get install qemu-system-x86"),
        ("busybox", "busybox", "apt-get install busybox-static"),
        ("file", "file", "apt-get install file"),
        ("make", "make", "apt-get install make"),
        ("modprobe", "kmod", "apt-get install kmod"),
        ("image", "kernel image", f"apt-get install linux-image-{NEW}-unsigned"),
        ("headers", "kernel headers", f"apt-get install linux-headers-{NEW}"),
        ("x86_64-linux-gnu-gcc-12", "kernel compiler", "apt-get install gcc-12"),
        ("accel", "kernel config", f"use a generic -amd64 kernel ({preflight.KERNEL_ENV})"),
        ("python.h", "python headers", "apt-get install python3-dev"),
        ("vng", "virtme-ng", "install virtme-ng"),
    ],
)
def test_a_missing_requirement_is_one_line_with_its_fix(
    tmp_path: Path, missing: str, name: str, fix: str
) -> None:
    host = fake_host(tmp_path, missing=(missing,))
    # A missing image or build tree is looked for under the release the override names.
    rc, out, _ = _check(host, kernel=NEW if missing in ("image", "headers") else None)
    assert rc == preflight.EXIT_MISSING
    (line,) = [x for x in out.splitlines() if "MISSING" in x]
    assert line.startswith(f"preflight: MISSING  {name}: ")
    assert line.endswith(fix), line


def test_a_dynamic_busybox_is_missing(tmp_path: Path) -> None:
    host = fake_host(tmp_path)
    _exe(tmp_path / "usr" / "bin" / "busybox", _dynamic_elf())
    rc, out, _ = _check(host)
    assert rc == preflight.EXIT_MISSING
    assert "busybox is dynamically linked" in out and "fix: apt-get install busybox-static" in out


def test_the_real_busybox_decision_matches_file(tmp_path: Path) -> None:
    """is_static_elf agrees with `file -L`, which virtme-ng asks, on this machine's binaries."""
    if shutil.which("file") is None:
        pytest.skip("no `file` command")
    for binary in filter(None, [shutil.which("busybox"), shutil.which("ls"), sys.executable]):
        text = subprocess.run(["file", "-L", binary], capture_output=True, text=True, check=True).stdout
        static = "statically linked" in text or "static-pie linked" in text
        assert preflight.is_static_elf(Path(binary)) == static, text


def test_no_kernel_installed_names_the_packages_apt_offers(tmp_path: Path) -> None:
    rc, out, _ = _check(fake_host(tmp_path, release=None))
    assert rc == preflight.EXIT_MISSING
    (line,) = [x for x in out.splitlines() if "MISSING" in x]
    assert line.startswith("preflight: MISSING  kernel: no generic 6.12 kernel with headers installed")
    assert line.endswith(f"fix: apt-get install linux-image-{NEW}-unsigned linux-headers-{NEW}")


def test_small_dev_shm_is_missing(tmp_path: Path) -> None:
    reqs = preflight.check_host(fake_host(tmp_path), guest_ram=1 << 60)
    (shm,) = [r for r in reqs if r.name == "/dev/shm"]
    assert not shm.ok and "--shm-size" in shm.fix


def test_the_newest_installed_kernel_is_chosen_unless_overridden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = fake_host(tmp_path, release=OLD)
    for release in (NEW, "6.12.119+deb12-cloud-amd64"):
        _exe(tmp_path / "boot" / f"vmlinuz-{release}")
        (tmp_path / "lib" / "modules" / release / "build").mkdir(parents=True)
    _exe(tmp_path / "boot" / "vmlinuz-6.12.200+deb12-amd64")  # an image without headers
    assert preflight.select_kernel(host).release == NEW  # type: ignore[union-attr]
    assert preflight.select_kernel(host, override=OLD).release == OLD  # type: ignore[union-attr]
    monkeypatch.setenv(preflight.KERNEL_ENV, OLD)
    kernel = preflight.select_kernel(host)
    assert kernel == preflight.Kernel(
        OLD, tmp_path / "boot" / f"vmlinuz-{OLD}", tmp_path / f"lib/modules/{OLD}/build"
    )


def test_harness_check_option_exits_with_the_preflight_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        preflight, "check_host", lambda **_: [preflight.Requirement("qemu", False, "gone", "x")]
    )
    assert harness.main(["--check"]) == preflight.EXIT_MISSING
    monkeypatch.setattr(preflight, "check_host", lambda **_: [preflight.Requirement("qemu", True, "here")])
    assert harness.main(["--check"]) == 0


def test_a_harness_run_stops_before_the_build_with_the_missing_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = preflight.Requirement("busybox", False, "dynamic", "apt-get install busybox-static")
    monkeypatch.setattr(
        preflight, "check_host", lambda **_: [preflight.Requirement("qemu", True, "here"), missing]
    )
    monkeypatch.setattr(
        harness, "build_module", lambda *_: pytest.fail("built despite a missing requirement")
    )
    assert harness.main(["--no-install", "--out", str(tmp_path)]) == preflight.EXIT_MISSING
    err = capsys.readouterr().err
    assert f"preflight: {missing.line()}" in err and "qemu: here" not in err


# --- one package list -------------------------------------------------------


def test_every_package_a_fix_names_is_in_the_install_list(tmp_path: Path) -> None:
    """With everything missing, the fixes name only packages run.sh installs."""
    everything = ("qemu-system-x86_64", "busybox", "file", "make", "modprobe", "python.h", "vng")
    host = fake_host(tmp_path, missing=everything)
    named = {p for r in preflight.check_host(host) for p in r.packages}
    (tmp_path / "boot" / f"vmlinuz-{NEW}").unlink()
    named |= {p for r in preflight.check_host(host) for p in r.packages}
    (tmp_path / "usr" / "bin" / "x86_64-linux-gnu-gcc-12").unlink()
    named |= {p for r in preflight.check_host(host) for p in r.packages}
    packages = set(preflight.debian_packages(host))
    # gcc-12 is the kernel's compiler: linux-headers depends on it, so installing the headers installs it.
    assert named - packages == {"gcc-12"}
    assert {
        "busybox-static",
        "file",
        "qemu-system-x86",
        "python3-dev",
        *preflight.kernel_packages(NEW),
    } <= named


def test_the_install_list_needs_apt_lists(tmp_path: Path) -> None:
    host = dataclasses.replace(fake_host(tmp_path), apt_names=list)
    with pytest.raises(LookupError, match="apt-get update"):
        preflight.debian_packages(host)
    assert preflight.debian_packages(host, release=OLD)[-2:] == list(preflight.kernel_packages(OLD))


def test_run_sh_installs_the_preflight_list() -> None:
    """run.sh names no packages of its own: it installs what preflight --apt-packages prints."""
    text = (REPO / "run.sh").read_text()
    body = text[text.index("install_debian_packages() {") : text.index("install_venv() {")]
    code = "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("#"))
    assert re.search(r"list=\$\(python3 -m qemu_tests\.preflight --apt-packages", code)
    assert re.search(r'for p in \$list; do\n.*missing\+=\("\$p"\)', code)
    for name in (*preflight.BASE_PACKAGES, preflight.PYTHON_DEV_PACKAGE, "linux-image-", "linux-headers-"):
        assert not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w])", code), f"run.sh names {name} itself"


def test_apt_packages_cli_prints_the_list(tmp_path: Path) -> None:
    """The command run.sh runs, with the system python3 (standard library only)."""
    python3 = shutil.which("python3")
    if python3 is None:
        pytest.skip("no python3 on PATH")
    r = subprocess.run(
        [python3, "-m", "qemu_tests.preflight", "--apt-packages"], cwd=REPO, capture_output=True, text=True
    )
    if r.returncode == preflight.EXIT_MISSING:
        assert "apt-get update" in r.stderr
        pytest.skip("apt offers no 6.12 kernel here")
    assert r.returncode == 0, r.stderr
    listed = r.stdout.split()
    assert set(preflight.BASE_PACKAGES) <= set(listed)
    assert sum(p.startswith("linux-image-6.12.") for p in listed) == 1
    assert sum(p.startswith("linux-headers-6.12.") for p in listed) == 1
