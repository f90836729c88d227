"""KVM or TCG for the guest (``python -m qemu_tests --accel auto|kvm|tcg``).

``tcg`` always emulates (vng --disable-kvm); ``kvm`` asks vng for KVM without
checking; ``auto`` (the default) uses KVM where it can run a guest. Where
``/dev/kvm`` is missing or not open to this user, that is the answer. Where it
is there, KVM can still fail: on some hosts KVM_CREATE_VM works but QEMU's
``-cpu host`` (the CPU virtme-ng asks for under KVM) dies setting an MSR. So
auto probes once per host: it boots the guest's kernel under KVM with that
CPU, to a tiny initramfs whose init prints ``PROBE_MARK`` and powers off, and
caches the answer under ``<cache>/accel/`` (``vnpu_common.cache``), keyed by
the host's name, kernel and CPU and QEMU's version. A failed probe falls back
to TCG with QEMU's own last line as the reason. Remove the cache file to probe
again.

    python -m qemu_tests.accel [--kernel SPEC]    # the choice auto makes here, probing if need be
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from qemu_tests import preflight
from vnpu_common import cache
from vnpu_common.cli import OneLineArgumentParser, cli_main

MODES = ("auto", "kvm", "tcg")
KVM_DEVICE = Path("/dev/kvm")
QEMU = "qemu-system-x86_64"
# What the probe guest's init prints when it ran: the kernel booted and a user program ran.
PROBE_MARK = "VNPU-KVM-PROBE-OK"
# A KVM guest reaches its init in a second or two; a hung probe (a guest faulting in a loop) is a no.
PROBE_TIMEOUT = 60.0
PROBE_MEMORY = "256M"


@dataclass(frozen=True)
class Choice:
    """What the guest runs on: ``accel`` is "kvm" or "tcg"; ``reason`` is one line saying why."""

    accel: str
    reason: str

    @property
    def kvm(self) -> bool:
        return self.accel == "kvm"

    @property
    def name(self) -> str:
        return self.accel.upper()

    def line(self) -> str:
        return f"{self.name} ({self.reason})"


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    reason: str
    seconds: float = 0.0


def device_problem(dev: Path = KVM_DEVICE) -> str | None:
    """Why ``dev`` cannot be used by this process, or None."""
    if not dev.exists():
        return f"no {dev}"
    if not os.access(dev, os.R_OK | os.W_OK):
        return f"{dev} is not readable and writable by this user (add it to the kvm group)"
    return None


def _first_line(cmd: list[str]) -> str:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (r.stdout.splitlines() or [""])[0].strip()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def qemu_version(qemu: str | None = None) -> str:
    """QEMU's --version line ('' when there is no QEMU)."""
    qemu = qemu or shutil.which(QEMU)
    return _first_line([qemu, "--version"]) if qemu else ""


def host_identity(qemu: str) -> dict[str, str]:
    """What the probe's answer depends on: this host, its kernel (KVM), its CPU, and QEMU."""
    u = os.uname()
    return {
        "host": u.nodename,
        "kernel": f"{u.release} {u.version}",
        "machine": u.machine,
        "cpu": _cpu_model(),
        "qemu": qemu_version(qemu),
    }


def cache_file(identity: dict[str, str]) -> Path:
    key = cache.content_hash(json.dumps(identity, sort_keys=True))
    return cache.cache_root() / "accel" / f"kvm-probe-{key}.json"


# --- the probe guest ---------------------------------------------------------------------------


def cpio_entry(name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0)) -> bytes:
    """One entry of a "newc" cpio archive (the initramfs format), owned by root."""
    fields = [0, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(name) + 1, 0]
    header = b"070701" + b"".join(b"%08X" % f for f in fields)
    out = header + name.encode() + b"\0"
    out += b"\0" * (-len(out) % 4)
    out += data + b"\0" * (-len(data) % 4)
    return out


def cpio_archive(entries: list[bytes]) -> bytes:
    """``entries`` (cpio_entry's) and the trailer, padded to a 512-byte block."""
    archive = b"".join([*entries, cpio_entry("TRAILER!!!", 0)])
    return archive + b"\0" * (-len(archive) % 512)


def initramfs(busybox: bytes) -> bytes:
    """A tiny initramfs: a static busybox and an /init that prints PROBE_MARK and powers off."""
    init = f"#!/bin/busybox sh\n/bin/busybox echo {PROBE_MARK}\n/bin/busybox poweroff -f\n".encode()
    return cpio_archive(
        [
            cpio_entry("bin", 0o040755),
            cpio_entry("dev", 0o040755),
            cpio_entry("dev/console", 0o020600, rdev=(5, 1)),
            cpio_entry("bin/busybox", 0o100755, busybox),
            cpio_entry("init", 0o100755, init),
        ]
    )


def probe_command(qemu: str, image: Path, initrd: Path, accel: str = "kvm") -> list[str]:
    """QEMU as virtme-ng runs it under KVM (``-cpu host,topoext=on``), but with KVM only: vng's
    ``accel=kvm:tcg`` would hide a KVM that cannot start behind TCG. ``accel="tcg"`` (with vng's
    TCG CPU) boots the same guest without KVM: the tests check the probe guest itself that way."""
    return [
        qemu,
        "-machine",
        f"accel={accel}",
        "-cpu",
        "host,topoext=on" if accel == "kvm" else "max",
        "-m",
        PROBE_MEMORY,
        "-smp",
        "1",
        "-nodefaults",
        "-display",
        "none",
        "-no-reboot",
        "-serial",
        "stdio",
        "-kernel",
        str(image),
        "-initrd",
        str(initrd),
        "-append",
        "console=ttyS0 panic=-1 quiet rdinit=/init",
    ]


def _reason_line(text: str) -> str:
    """QEMU's own words: its first ``error`` line (``failed to set MSR 0x10a ...``), else its last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    return (errors or lines or [""])[0 if errors else -1][:300]


def probe(
    qemu: str, image: Path, busybox: Path, timeout: float = PROBE_TIMEOUT, accel: str = "kvm"
) -> ProbeResult:
    """Boot ``image`` under KVM (or ``accel``) to the tiny initramfs; ok when its init printed PROBE_MARK."""
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"vnpu-kvm-probe-{os.getpid()}"
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        initrd = workdir / "initramfs.cpio"
        initrd.write_bytes(initramfs(busybox.read_bytes()))
        cmd = probe_command(qemu, image, initrd, accel)
        t0 = time.monotonic()
        try:
            r = subprocess.run(
                cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            return ProbeResult(False, f"the {accel.upper()} probe guest did not finish in {timeout:.0f} s")
        except OSError as e:
            return ProbeResult(False, f"cannot run {qemu}: {e}")
        seconds = time.monotonic() - t0
        out = r.stdout.decode(errors="replace")
        if PROBE_MARK in out:
            return ProbeResult(
                True, f"a probe guest booted under {accel.upper()} in {seconds:.1f} s", seconds
            )
        err = _reason_line(r.stderr.decode(errors="replace")) or _reason_line(out)
        what = "KVM cannot run a guest here" if accel == "kvm" else "the probe guest failed"
        return ProbeResult(False, f"{what}: {err or f'QEMU exit code {r.returncode}'}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# --- the choice --------------------------------------------------------------------------------


def _home(path: Path) -> str:
    home = str(Path.home())
    return "~" + str(path)[len(home) :] if str(path).startswith(home + "/") else str(path)


def cached_answer(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("accel") in ("kvm", "tcg") else None


def choose(
    mode: str,
    image: Path | None,
    *,
    qemu: str | None = None,
    busybox: Path | None = None,
    dev: Path = KVM_DEVICE,
    run_probe: Callable[[str, Path, Path], ProbeResult] = probe,
    say: Callable[[str], None] | None = None,
) -> Choice:
    """The accelerator for ``mode`` ("auto", "kvm", "tcg"), probing (auto) where nothing is cached.

    ``image``: the kernel the probe boots (the guest's); ``qemu``, ``busybox``: found on PATH when
    None; ``run_probe``: the probe (tests pass a stand-in).
    """
    if mode not in MODES:
        raise ValueError(f"--accel {mode}: one of {', '.join(MODES)}")
    if mode == "tcg":
        return Choice("tcg", "--accel tcg")
    if mode == "kvm":
        return Choice("kvm", "--accel kvm")
    problem = device_problem(dev)
    if problem is not None:
        return Choice("tcg", f"auto: {problem}")
    qemu = qemu or shutil.which(QEMU)
    if qemu is None:
        return Choice("tcg", f"auto: no {QEMU} to probe KVM with")
    path = cache_file(host_identity(qemu))
    known = cached_answer(path)
    if known is not None:
        return Choice(known["accel"], f"auto: {known['reason']}; cached in {_home(path)}")
    if image is None or not image.exists():
        return Choice("tcg", "auto: KVM not probed yet (no kernel image to boot)")
    if busybox is None:
        found = next((p for n in preflight.BUSYBOX_NAMES if (p := preflight.Host().which_sbin(n))), None)
        busybox = Path(found) if found else None
    if busybox is None:
        return Choice("tcg", "auto: KVM not probed (no static busybox for the probe's initramfs)")
    if say is not None:
        say(f"probing KVM once for this host: {image.name} under KVM, -cpu host")
    result = run_probe(qemu, image, busybox)
    accel = "kvm" if result.ok else "tcg"
    record = {
        "accel": accel,
        "reason": result.reason,
        "probed": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "image": str(image),
        "identity": host_identity(qemu),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)
    return Choice(accel, f"auto: {result.reason}; cached in {_home(path)}")


def requirement(mode: str, choice: Choice | None) -> preflight.Requirement:
    """The --check line: which accelerator the run will use, and why. --accel kvm without a usable
    /dev/kvm is a missing requirement."""
    if mode == "kvm":
        problem = device_problem()
        if problem is not None:
            return preflight.Requirement("kvm", False, f"--accel kvm, but {problem}", "--accel auto or tcg")
    assert choice is not None
    return preflight.Requirement("kvm", True, f"the guest runs on {choice.line()}")


@cli_main("python -m qemu_tests.accel")
def main(argv: list[str] | None = None) -> int:
    p = OneLineArgumentParser(prog="python -m qemu_tests.accel", description=__doc__.split("\n\n")[0])
    p.add_argument("--kernel", metavar="SPEC", help="the kernel the probe boots (default: the harness's)")
    p.add_argument("--accel", choices=MODES, default="auto")
    args = p.parse_args(argv)
    kernel = preflight.select_kernel(override=args.kernel)
    choice = choose(args.accel, kernel.image if kernel else None, say=lambda m: print(f"accel: {m}"))
    print(f"accel: {choice.line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
