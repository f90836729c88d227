"""--accel auto|kvm|tcg: the KVM probe, its cache, the fallback to TCG and what vng is asked for.

Fake QEMUs (shell scripts standing in for qemu-system-x86_64) play a host where
KVM boots the probe guest, one where QEMU dies as it does on a host whose KVM
cannot set the CPU's MSRs, and one that hangs. The real probe runs too, on
whatever this host is: it must give a definite answer in one line.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
from pathlib import Path

import pytest

from qemu_tests import accel, harness, preflight
from vnpu_common.cli import CommandLineError

BUSYBOX = "#!/bin/sh\n"  # the probe only packs it into the initramfs; the fakes never run it


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test probes into a cache of its own."""
    monkeypatch.setenv("VNPU_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def fake_qemu(tmp_path: Path, boot: str) -> str:
    """A qemu-system-x86_64 that answers --version and otherwise does ``boot`` (a shell snippet)."""
    return _script(
        tmp_path / "qemu-system-x86_64",
        'if [ "$1" = --version ]; then echo "QEMU emulator version 7.2.99 (fake)"; exit 0; fi\n'
        f'echo "$@" > "{tmp_path}/argv"\n{boot}\n',
    )


BOOTS = f'echo "[    0.5] Run /init as init process"; echo {accel.PROBE_MARK}; exit 0'
DIES = (
    "echo 'qemu-system-x86_64: error: failed to set MSR 0x10a to 0x2000000' >&2\n"
    "echo 'qemu-system-x86_64: ../target/i386/kvm/kvm.c:3145: kvm_buf_set_msrs: Assertion failed.' >&2\n"
    "exit 134"
)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    kvm = tmp_path / "kvm"
    kvm.write_text("")  # stands in for /dev/kvm: it exists and this user may open it
    image = tmp_path / "vmlinuz"
    image.write_bytes(b"kernel")
    busybox = tmp_path / "busybox"
    busybox.write_text(BUSYBOX)
    return {"dev": kvm, "image": image, "busybox": busybox}


def _choose(files: dict[str, Path], qemu: str, mode: str = "auto", **kwargs) -> accel.Choice:
    return accel.choose(mode, files["image"], qemu=qemu, busybox=files["busybox"], dev=files["dev"], **kwargs)


def test_auto_picks_kvm_where_the_probe_guest_boots(tmp_path: Path, files: dict[str, Path]) -> None:
    qemu = fake_qemu(tmp_path, BOOTS)
    said: list[str] = []
    choice = _choose(files, qemu, say=said.append)
    assert choice.kvm and choice.name == "KVM"
    assert "booted under KVM" in choice.reason and "cached in" in choice.reason
    assert said and "probing KVM" in said[0]
    # The probe asked QEMU for KVM alone (no TCG fallback to hide a failure) with vng's KVM CPU.
    argv = (tmp_path / "argv").read_text().split()
    assert argv[argv.index("-machine") + 1] == "accel=kvm"
    assert argv[argv.index("-cpu") + 1].startswith("host")
    assert argv[argv.index("-kernel") + 1] == str(files["image"])


def test_the_answer_is_cached_per_host_and_qemu(
    tmp_path: Path, files: dict[str, Path], cache_dir: Path
) -> None:
    qemu = fake_qemu(tmp_path, BOOTS)
    assert _choose(files, qemu).kvm
    (cached,) = (cache_dir / "accel").glob("kvm-probe-*.json")

    def no_probe(*args: object) -> accel.ProbeResult:
        raise AssertionError("probed again")

    again = _choose(files, qemu, run_probe=no_probe)
    assert again.kvm and str(cached.name) in again.reason
    # Another QEMU (an upgrade) is another host as far as KVM goes: it is probed again.
    other = _script(
        tmp_path / "qemu-other",
        'if [ "$1" = --version ]; then echo "QEMU emulator version 9.0.0"; exit 0; fi\nexit 1\n',
    )
    assert not _choose(files, other).kvm
    assert len(list((cache_dir / "accel").glob("kvm-probe-*.json"))) == 2


def test_auto_falls_back_to_tcg_with_qemus_reason(tmp_path: Path, files: dict[str, Path]) -> None:
    choice = _choose(files, fake_qemu(tmp_path, DIES))
    assert not choice.kvm and choice.name == "TCG"
    assert "\n" not in choice.line()
    assert "KVM cannot run a guest here" in choice.reason
    assert "failed to set MSR 0x10a" in choice.reason  # QEMU's error line


def test_a_probe_guest_that_hangs_is_a_no(tmp_path: Path, files: dict[str, Path]) -> None:
    qemu = fake_qemu(tmp_path, "exec sleep 30")
    choice = _choose(files, qemu, run_probe=functools.partial(accel.probe, timeout=0.5))
    assert not choice.kvm and "did not finish" in choice.reason


def test_no_kvm_device_is_tcg_without_a_probe(tmp_path: Path, files: dict[str, Path]) -> None:
    def no_probe(*args: object) -> accel.ProbeResult:
        raise AssertionError("probed without /dev/kvm")

    missing = tmp_path / "no-kvm"
    choice = accel.choose("auto", files["image"], qemu="qemu", dev=missing, run_probe=no_probe)
    assert not choice.kvm and choice.reason == f"auto: no {missing}"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may open any file")
def test_a_kvm_device_this_user_cannot_open_is_tcg(tmp_path: Path) -> None:
    dev = tmp_path / "kvm"
    dev.write_text("")
    dev.chmod(0)
    assert "not readable and writable" in (accel.device_problem(dev) or "")


def test_forced_modes_never_probe(files: dict[str, Path]) -> None:
    def no_probe(*args: object) -> accel.ProbeResult:
        raise AssertionError("probed")

    assert _choose(files, "qemu", "tcg", run_probe=no_probe) == accel.Choice("tcg", "--accel tcg")
    assert _choose(files, "qemu", "kvm", run_probe=no_probe) == accel.Choice("kvm", "--accel kvm")
    with pytest.raises(ValueError):
        accel.choose("hvf", None)


def test_the_probe_initramfs_is_newc_with_an_init_and_a_console() -> None:
    data = accel.initramfs(b"\x7fELF static busybox")
    assert data.startswith(b"070701") and len(data) % 512 == 0
    names = []
    pos = 0
    while True:
        header = data[pos : pos + 110]
        assert header[:6] == b"070701"
        fields = [int(header[6 + 8 * i : 14 + 8 * i], 16) for i in range(13)]
        mode, filesize, namesize = fields[1], fields[6], fields[11]
        name = data[pos + 110 : pos + 110 + namesize - 1].decode()
        pos += 110 + namesize
        pos += -pos % 4
        body = data[pos : pos + filesize]
        pos += filesize + (-filesize % 4)
        if name == "TRAILER!!!":
            break
        names.append(name)
        if name == "init":
            assert mode & 0o111 and accel.PROBE_MARK.encode() in body
        if name == "dev/console":
            assert stat.S_ISCHR(mode) and (fields[9], fields[10]) == (5, 1)
    assert {"init", "bin/busybox", "dev/console"} <= set(names)


def _real_host() -> tuple[str, Path, Path]:
    qemu = shutil.which(accel.QEMU)
    kernel = preflight.select_kernel()
    busybox = next((p for n in preflight.BUSYBOX_NAMES if (p := preflight.Host().which_sbin(n))), None)
    if not (qemu and kernel and kernel.image.exists() and busybox and preflight.is_static_elf(Path(busybox))):
        pytest.skip("needs QEMU, a kernel image and a static busybox")
    return qemu, kernel.image, Path(busybox)


def test_the_probe_guest_boots_to_its_init_and_powers_off() -> None:
    """The probe's own guest, booted without KVM (seconds under TCG): the kernel reaches the tiny
    initramfs's init, which prints the mark, and QEMU exits."""
    qemu, image, busybox = _real_host()
    result = accel.probe(qemu, image, busybox, timeout=300, accel="tcg")
    assert result.ok, result.reason
    assert result.reason.startswith("a probe guest booted under TCG in ")


def test_the_real_probe_gives_a_one_line_answer_on_this_host() -> None:
    """On this host as it is: KVM where the probe guest boots, else TCG with QEMU's reason (on the
    hosts whose KVM dies setting MSR 0x10a under -cpu host, the fallback)."""
    if accel.device_problem() is not None:
        pytest.skip(accel.device_problem() or "")
    qemu, image, busybox = _real_host()
    result = accel.probe(qemu, image, busybox)
    assert result.reason and "\n" not in result.reason
    choice = accel.choose("auto", image, run_probe=lambda *a: result)
    assert choice.kvm == result.ok
    assert choice.reason.startswith(f"auto: {result.reason}; cached in ")
    if not result.ok:
        assert choice.line().startswith("TCG (auto: ")


# --- the harness ---------------------------------------------------------------------------------


def test_vng_is_asked_for_kvm_only_when_chosen() -> None:
    kernel = Path("/boot/vmlinuz-6.12.117+deb12-amd64")
    common = (["true"], Path("/tmp/s.sock"), Path("/dev/shm/r"), Path("/tmp/o"), 2, kernel)
    assert "--disable-kvm" in harness.vng_command(*common)
    assert "--disable-kvm" not in harness.vng_command(*common, kvm=True)


def test_accel_option_and_the_cmdline_alias() -> None:
    parse = harness.build_parser().parse_args
    assert parse([]).accel == "auto"
    assert parse(["--accel", "tcg"]).accel == "tcg"
    with pytest.raises(CommandLineError, match="--accel: invalid choice: 'xen'"):
        parse(["--accel", "xen"])
    assert parse(["--cmdline", "swiotlb=65536,force"]).kernel_args == ["swiotlb=65536,force"]
    assert parse(["--cmdline", "nokaslr", "--append", "quiet"]).kernel_args == ["nokaslr", "quiet"]


def test_check_says_which_accelerator_the_run_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []

    def choose(mode: str, image: Path | None, **kwargs: object) -> accel.Choice:
        seen.append(mode)
        return accel.Choice("tcg", "auto: KVM cannot run a guest here: failed to set MSR 0x10a")

    monkeypatch.setattr(accel, "choose", choose)
    args = harness.build_parser().parse_args(["--check"])
    lines = [r.line() for r in harness.check_lines(args, None, None, [])]
    names = [line.split()[1] for line in lines]
    assert names.index("kvm:") == names.index("qemu:") + 1  # right after the qemu line
    (kvm,) = [line for line in lines if line.split()[1] == "kvm:"]
    assert kvm.startswith("ok") and "the guest runs on TCG (auto: KVM cannot run a guest here" in kvm
    assert seen == ["auto"]


def test_check_with_forced_kvm_and_no_device_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accel, "device_problem", lambda dev=accel.KVM_DEVICE: "no /dev/kvm")
    req = accel.requirement("kvm", accel.Choice("kvm", "--accel kvm"))
    assert not req.ok and "--accel kvm, but no /dev/kvm" in req.line()
