"""System sleep of vnpu.ko through the PM core, in a guest whose root file system is an initramfs.

    python -m qemu_tests.system_sleep            # build, boot, sleep, verdict (about a minute under TCG)
    python -m qemu_tests.system_sleep --check    # what the host lacks for it, one line each

The suite's guest (virtme-ng) has the host's file system as its root over virtio 9p, which has no
freeze/restore: a real device suspend resets its virtio device and the root is gone. So this
scenario boots the same kernel with the emulated NPU (the harness's device model, shared guest RAM
and ivshmem-doorbell) on an initramfs that holds everything the test needs: a static busybox,
/init (``system_sleep_init.sh``), vnpu.ko and the modules it depends on (from the kernel's
``modules.dep``, decompressed), the firmware image and the client (``system_sleep.c``, built here
static against the uapi headers). In the guest, the client puts jobs in flight and has the PM core
suspend every device at the deepest ``pm_test`` level the guest offers (``mem`` at ``core`` under
QEMU's q35 ACPI S3, else ``freeze`` at ``platform``), then checks the jobs, the driver's power
counters and the kernel log. Its last console line is the verdict, ``VNPU-SLEEP: PASS: ...`` or
``VNPU-SLEEP: FAIL: why``; the exit code is 0 for PASS, 1 for FAIL or no verdict, 2 when the run
could not start, EXIT_MISSING when the host lacks something. docs/qemu_tests.md describes it.
"""

from __future__ import annotations

import argparse
import gzip
import lzma
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from qemu_tests import accel, guest_run, harness, preflight
from uapi import firmware_format
from vnpu_common.cli import OneLineArgumentParser, cli_main

HERE = Path(__file__).resolve().parent
CLIENT_SOURCE = HERE / "system_sleep.c"
INIT_SCRIPT = HERE / "system_sleep_init.sh"
UAPI_INCLUDE = harness.REPO / "uapi"  # the client includes <drm/vnpu_accel.h> and <drm/vnpu_isa.h>
CLIENT_CFLAGS = ("-static", "-O2", "-Wall", "-Wextra", "-Werror")
LIBC_A = Path("/usr/lib/x86_64-linux-gnu/libc.a")  # what -static links
VERDICT = "VNPU-SLEEP:"
TIMEOUT = 300.0
# Jobs here run for a second and more on a loaded host: far from a hang.
MODULE_PARAMS = ("timeout_ms=30000",)
# "auto": the deepest level the guest offers (the init script decides), else "STATE LEVEL".
LEVELS = ("auto", "mem:core", "mem:platform", "mem:devices", "freeze:platform", "freeze:devices")
KERNEL_CMDLINE = ("console=ttyS0", "rdinit=/init", "panic=-1", "no_console_suspend", "loglevel=4")


class ScenarioError(RuntimeError):
    """The scenario could not be set up: one line saying why."""


@dataclass(frozen=True)
class GuestModule:
    """A kernel module the guest loads, in order: its file on the host and its insmod parameters."""

    name: str  # as in the initramfs: lib/modules/NAME
    path: Path
    params: tuple[str, ...] = ()


def modules_dep(release: str, root: Path = Path("/")) -> dict[str, list[Path]]:
    """``/lib/modules/R/modules.dep`` as module name -> [its file, then its dependencies' files]."""
    base = root / "lib" / "modules" / release
    dep = base / "modules.dep"
    try:
        text = dep.read_text()
    except OSError as e:
        raise ScenarioError(f"cannot read {dep}: {e.strerror}") from e
    out: dict[str, list[Path]] = {}
    for line in text.splitlines():
        target, sep, deps = line.partition(":")
        if sep:
            files = [target, *deps.split()]
            out[module_name(target)] = [base / f for f in files]
    return out


def module_name(path: str | Path) -> str:
    """``.../gpu-sched.ko.xz`` (or ``gpu-sched``) -> ``gpu_sched``, as the kernel names it."""
    name = Path(path).name
    return name.partition(".ko")[0].replace("-", "_")


def builtin_modules(release: str, root: Path = Path("/")) -> set[str]:
    """The names in ``/lib/modules/R/modules.builtin``: built into the kernel, nothing to load."""
    path = root / "lib" / "modules" / release / "modules.builtin"
    try:
        return {module_name(line) for line in path.read_text().split()}
    except OSError:
        return set()


def module_chain(release: str, vnpu_ko: Path, root: Path = Path("/")) -> list[GuestModule]:
    """The modules to insmod, dependencies first: guest_run's DEPENDENCIES, then vnpu.ko."""
    dep = modules_dep(release, root)
    builtin = builtin_modules(release, root)
    order: list[Path] = []
    for wanted in guest_run.DEPENDENCIES:
        if module_name(wanted) in builtin:
            continue
        files = dep.get(module_name(wanted))
        if files is None:
            raise ScenarioError(f"{wanted} is not in {root}lib/modules/{release}/modules.dep")
        # modules.dep lists the deepest dependency last, as modprobe loads them: from the end.
        for f in [*reversed(files[1:]), files[0]]:
            if f not in order:
                order.append(f)
    chain = [GuestModule(f"{module_name(f)}.ko", f) for f in order]
    return [*chain, GuestModule("vnpu.ko", vnpu_ko, MODULE_PARAMS)]


def module_bytes(path: Path) -> bytes:
    """The module's ELF bytes: busybox insmod takes them uncompressed (Debian ships .ko.xz)."""
    data = path.read_bytes()
    if path.name.endswith(".ko.xz"):
        return lzma.decompress(data)
    if path.name.endswith(".ko.gz"):
        return gzip.decompress(data)
    if path.name.endswith(".ko"):
        return data
    raise ScenarioError(f"{path}: not a .ko, .ko.xz or .ko.gz module")


def build_client(outdir: Path) -> Path:
    """Compile the client, static, against the uapi headers; a compiler error is one line."""
    out = outdir / "system_sleep"
    cmd = ["gcc", *CLIENT_CFLAGS, f"-I{UAPI_INCLUDE}", "-o", str(out), str(CLIENT_SOURCE)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        first = next((ln for ln in r.stderr.splitlines() if "error" in ln), r.stderr.strip()[:300])
        raise ScenarioError(f"building the client failed ({shlex.join(cmd)}): {first}")
    return out


def initramfs(busybox: Path, client: Path, modules: list[GuestModule], level: str = "auto") -> bytes:
    """The guest's root: busybox, /init, the client, the modules in load order, the firmware."""
    entry = accel.cpio_entry
    order = "".join(" ".join((m.name, *m.params)) + "\n" for m in modules)
    entries = [
        entry(d, 0o040755)
        for d in (
            "bin",
            "dev",
            "proc",
            "sys",
            "tmp",
            "lib",
            "lib/modules",
            "lib/firmware",
            "lib/firmware/vnpu",
        )
    ]
    entries += [
        entry("dev/console", 0o020600, rdev=(5, 1)),
        entry("bin/busybox", 0o100755, busybox.read_bytes()),
        entry("init", 0o100755, INIT_SCRIPT.read_bytes()),
        entry("system_sleep", 0o100755, client.read_bytes()),
        entry("sleep.conf", 0o100644, (level.replace(":", " ") + "\n").encode()),
        entry("modules.order", 0o100644, order.encode()),
        *(entry(f"lib/modules/{m.name}", 0o100644, module_bytes(m.path)) for m in modules),
        entry(
            f"lib/firmware/{firmware_format.FIRMWARE_NAME}",
            0o100644,
            firmware_format.DEFAULT_IMAGE_PATH.read_bytes(),
        ),
    ]
    return accel.cpio_archive(entries)


def qemu_command(
    image: Path, initrd: Path, sock: Path, ram: Path, cpus: int, kvm: bool, qemu: str = accel.QEMU
) -> list[str]:
    """QEMU with the NPU as the harness adds it (harness.qemu_opts), booting ``image`` to ``initrd``."""
    return [
        qemu,
        "-machine",
        "q35",
        # One TCG thread for all vCPUs: with multi-threaded TCG this boot hit an "Oops: int3" in
        # the kernel's own code patching (1 boot in 4 here), a race of emulated cross-modifying code.
        "-accel",
        "kvm" if kvm else "tcg,thread=single",
        "-cpu",
        "host" if kvm else "max",
        "-m",
        harness.GUEST_RAM,
        "-smp",
        str(cpus),
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
        " ".join(KERNEL_CMDLINE),
        *shlex.split(harness.qemu_opts(sock, ram)),
    ]


def verdict(console: str) -> tuple[bool, str]:
    """(passed, the verdict line) from the guest's console; no verdict is a failure saying so."""
    lines = [ln.strip() for ln in console.splitlines() if VERDICT in ln]
    if not lines:
        return False, f"{VERDICT} FAIL: the guest printed no verdict (it hung or its kernel died)"
    last = lines[-1][lines[-1].index(VERDICT) :]
    return last.startswith(f"{VERDICT} PASS"), last


def check(host: preflight.Host | None = None, kernel: str | None = None) -> list[preflight.Requirement]:
    """What the scenario needs from the host, one requirement each, with the fix."""
    host = host or preflight.Host()
    reqs = [r for r in preflight.check_host(host, kernel=kernel) if r.name in ("qemu", "busybox")]
    reqs += preflight.check_kernel(host, kernel)
    try:
        k = preflight.select_kernel(host, kernel)
    except ValueError:
        k = None
    if k is not None:
        dep = host.root / "lib" / "modules" / k.release / "modules.dep"
        if k.debian:
            image = preflight.kernel_packages(k.release)[0]  # it ships /lib/modules/R
            fix, packages = f"apt-get install {image}", (image,)
        else:
            fix, packages = (
                "boot an installed Debian kernel (--kernel RELEASE): its modules are in /lib/modules",
                (),
            )
        reqs.append(preflight.Requirement("kernel modules", dep.is_file(), str(dep), fix, packages))
    gcc = host.which("gcc")
    reqs.append(
        preflight.Requirement(
            "gcc", gcc is not None, gcc or "gcc not on PATH", "apt-get install gcc", ("gcc",)
        )
    )
    libc = host.root / LIBC_A.relative_to("/")
    reqs.append(
        preflight.Requirement(
            "static libc",
            libc.is_file(),
            f"{libc} (the client is linked -static)",
            "apt-get install libc6-dev",
            ("libc6-dev",),
        )
    )
    return reqs


def busybox_path(host: preflight.Host | None = None) -> Path:
    host = host or preflight.Host()
    found = next((p for n in preflight.BUSYBOX_NAMES if (p := host.which_sbin(n))), None)
    if found is None or not preflight.is_static_elf(Path(found)):
        raise ScenarioError("no static busybox (apt-get install busybox-static)")
    return Path(found)


def run(args: argparse.Namespace) -> int:
    clock = harness.Clock()
    missing = preflight.report(check(kernel=args.kernel), sys.stderr, only_missing=True)
    if missing:
        print(
            "system_sleep: host requirements missing (python -m qemu_tests.system_sleep --check)",
            file=sys.stderr,
        )
        return missing
    outdir = harness.results_dir(args.out)
    clock.say("results", str(outdir))
    kernel = preflight.select_kernel(override=args.kernel)
    assert kernel is not None  # the check found it
    choice = accel.choose(args.accel, kernel.image, say=lambda msg: clock.say("accel", msg))
    clock.say("accel", choice.line())
    try:
        module = harness.build_module(clock, kernel)
        client = build_client(outdir)
        clock.say("build", f"{client} ok")
        modules = module_chain(kernel.release, module)
        initrd = outdir / "initramfs.cpio"
        initrd.write_bytes(initramfs(busybox_path(), client, modules, args.level))
        clock.say("initramfs", f"{initrd}: {initrd.stat().st_size >> 10} KiB, {len(modules)} modules")
    except (ScenarioError, harness.HarnessError, OSError) as e:
        print(f"system_sleep: {e}", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="vnpu-sleep-"))
    server = harness.DeviceModelProcess(workdir, outdir / "device_model.log", verbose=args.verbose)
    console = outdir / "console.log"
    try:
        server.start()
        clock.say("server", f"device model ready ({server.socket})")
        cmd = qemu_command(kernel.image, initrd, server.socket, server.ram, args.cpus, choice.kvm)
        clock.say("boot", f"{kernel.release} on the initramfs ({choice.name})")
        t0 = time.monotonic()
        rc = harness.boot(cmd, args.timeout, clock, console)
        clock.say("guest", f"QEMU exit code {rc} after {time.monotonic() - t0:.1f} s")
    except harness.HarnessError as e:
        print(f"system_sleep: {e}", file=sys.stderr)
        return 2
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    passed, line = verdict(console.read_text(errors="replace") if console.exists() else "")
    clock.say("verdict", line)
    return 0 if passed else 1


def _level(text: str) -> str:
    if text not in LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r}: one of {', '.join(LEVELS)}")
    return text


def build_parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(
        prog="python -m qemu_tests.system_sleep",
        description="System sleep of vnpu.ko through the PM core (pm_test), with jobs in flight, "
        "in a QEMU guest whose root is an initramfs.",
    )
    p.add_argument("--check", action="store_true", help="only check the host's requirements")
    p.add_argument(
        "--kernel",
        metavar="RELEASE",
        help="an installed Debian kernel release (default: the harness's, the newest generic 6.12)",
    )
    p.add_argument(
        "--level",
        type=_level,
        default="auto",
        help="STATE:LEVEL of the sleep (default auto: mem:core where the guest has S3, else freeze:platform)",
    )
    p.add_argument(
        "--accel", choices=accel.MODES, default="auto", help="KVM or TCG (as python -m qemu_tests)"
    )
    p.add_argument("--cpus", type=int, default=2, help="guest vCPUs (default 2)")
    p.add_argument("--out", type=Path, help="results directory (default build/qemu_tests/<time>-<pid>/)")
    p.add_argument(
        "--timeout",
        type=float,
        default=TIMEOUT,
        help=f"seconds before QEMU is killed (default {TIMEOUT:.0f})",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="verbose device model log")
    return p


@cli_main("python -m qemu_tests.system_sleep")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.kernel is not None and "/" in args.kernel:
        print(f"system_sleep: --kernel {args.kernel}: an installed release, not a path", file=sys.stderr)
        return 2
    if args.check:
        return preflight.report(check(kernel=args.kernel))
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
