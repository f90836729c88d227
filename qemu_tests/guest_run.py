"""Guest side of the QEMU harness: bring the NPU up, then run the suite or one command.

Runs inside the vng guest, by the venv's absolute python. The host's ``/`` is
the guest's root (read-only, with overlays), so results go to ``--out``, the
``--rwdir`` shared with the host.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import MutableMapping
from pathlib import Path

from qemu_tests.kernel_oops import KmsgWatch, wait_unless_oops
from vnpu_common import cache, config

PCI_VENDOR = "0x1af4"
PCI_DEVICE = "0x1110"
DEPENDENCIES = ("drm", "drm_shmem_helper", "gpu-sched")
CMDLINE = "cmdline.txt"  # the guest's /proc/cmdline, saved in the results directory


def say(msg: str) -> None:
    print(f"[guest {time.monotonic():7.1f}s] {msg}", flush=True)


def find_ivshmem() -> Path | None:
    """The sysfs directory of the ivshmem-doorbell PCI device (1af4:1110), if QEMU added it."""
    for dev in sorted(glob.glob("/sys/bus/pci/devices/*")):
        p = Path(dev)
        try:
            if (p / "vendor").read_text().strip() == PCI_VENDOR and (
                p / "device"
            ).read_text().strip() == PCI_DEVICE:
                return p
        except OSError:
            continue
    return None


def run(cmd: list[str]) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")


def wait_for(path: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if glob.glob(path):
            return True
        time.sleep(0.05)
    return False


def setup(repo: Path, module: Path | None) -> None:
    dev = find_ivshmem()
    if dev is None:
        raise RuntimeError("no ivshmem-doorbell PCI device (1af4:1110) in the guest")
    say(f"NPU PCI device at {dev.name}")
    kmemleak_clear()
    if module is None:
        return
    run(["modprobe", "-a", *DEPENDENCIES])
    # request_firmware() searches this path first: the repo's firmware/ directory.
    Path("/sys/module/firmware_class/parameters/path").write_text(str(repo / "firmware"))
    params = module_params()
    # Tests that reload the module (kernel_helpers.insmod_command) load it the same way.
    os.environ[config.MODULE_PARAMS.name] = " ".join(params)
    # Tests scale their subprocess time limits by it (trace_helpers.run_trace).
    os.environ[config.TIMEOUT_SCALE.name] = str(CHECKING_KERNEL_TIMEOUT_SCALE if checking_kernel() else 1)
    run(["insmod", str(module), *params])
    if not wait_for("/dev/accel/accel*", 10.0):
        raise RuntimeError("vnpu.ko loaded but no /dev/accel/accel* appeared (see dmesg)")
    say("vnpu.ko loaded, " + ", ".join(sorted(glob.glob("/dev/accel/accel*"))))


# Present only on a kernel with CONFIG_DEBUG_KMEMLEAK (the debug kernel), once debugfs is mounted.
KMEMLEAK = Path("/sys/kernel/debug/kmemleak")
# Present only on a kernel with CONFIG_LOCKDEP.
LOCKDEP = Path("/proc/lockdep")
# A kernel that checks every lock and allocation runs several times slower under TCG: a job that
# is merely slow there would hit the driver's default 5 s job timeout.
CHECKING_KERNEL_MODULE_PARAMS = ("timeout_ms=30000",)
# Likewise the tests' own time limits for whole programs (a traced delegate run took over 300 s there).
CHECKING_KERNEL_TIMEOUT_SCALE = 4


def checking_kernel() -> bool:
    return LOCKDEP.exists() or KMEMLEAK.exists()


def module_params() -> list[str]:
    """vnpu.ko's parameters for the running kernel: a longer job timeout on a checking kernel."""
    return list(CHECKING_KERNEL_MODULE_PARAMS) if checking_kernel() else []


def kmemleak_clear() -> None:
    """Forget the objects allocated so far: leaks found later are the driver's and the suite's, not boot's."""
    if KMEMLEAK.exists():
        KMEMLEAK.write_text("clear")


def kmemleak_scan(out: Path) -> None:
    """Scan for leaks now (the debug kernel has no scan thread) and save the report as kmemleak.txt.

    A scan that finds leaks also logs "kmemleak: N new suspected memory leaks", which
    the harness counts as a splat; the objects and their allocation stacks are in the file.
    """
    if not KMEMLEAK.exists():
        return
    KMEMLEAK.write_text("scan")
    report = KMEMLEAK.read_text()
    (out / "kmemleak.txt").write_text(report)
    say(f"kmemleak: {report.count('unreferenced object')} unreferenced objects")


def save_cmdline(out: Path) -> None:
    """The kernel's command line as the guest booted with it (the harness checks --append's words)."""
    try:
        (out / CMDLINE).write_text(Path("/proc/cmdline").read_text())
    except OSError as e:
        say(f"cannot save /proc/cmdline: {e}")


def save_dmesg(out: Path) -> None:
    r = subprocess.run(["dmesg"], capture_output=True, text=True, check=False)
    (out / "dmesg.txt").write_text(r.stdout)


def pytest_command(out: Path, suites: list[str], marker: str, junit: str, extra: str) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-m",
        marker,
        f"--junitxml={out / junit}",
    ]
    # The conformance suite runs on either backend; here it is the kernel's.
    if any(Path(s).parts[:2] == ("tests", "conformance") for s in suites):
        cmd += ["--backend", "kernel"]
    return cmd + ["-q", "--durations=10", *shlex.split(extra), *suites]


def isolated_modules(paths: list[str]) -> list[str]:
    """The test modules under ``paths`` that mark tests ``isolated`` (the second pytest process
    collects only these: importing every module again costs that process most of its time under
    TCG). A path that is a file stays as it is."""
    found: list[str] = []
    for path in paths:
        p = Path(path)
        if not p.is_dir():
            found.append(path)
            continue
        for module in sorted(p.rglob("test_*.py")):
            if "mark.isolated" in module.read_text(errors="replace"):
                found.append(str(module))
    return found


def run_suites(args: argparse.Namespace) -> int:
    """Two pytest processes: everything, then the ``isolated`` kernel tests (module reload, dmesg).

    The reload needs the device closed, and only a fresh process guarantees
    no file of the first run is still open.
    """
    rc = 0
    # "slow" marks the full 224x224 networks: under TCG they would double the run; the main job
    # (./run.sh main) runs MobileNetV1 224 on vnpu.ko instead.
    passes = [("not isolated and not slow", args.suites, "junit.xml")]
    kernel = isolated_modules([s for s in args.suites if Path(s).parts[:2] == ("tests", "kernel")])
    if kernel:
        passes.append(("isolated", kernel, "junit-isolated.xml"))
    watch = watch_kernel_log()
    for marker, suites, junit in passes:
        cmd = pytest_command(args.out, suites, marker, junit, args.pytest_args)
        say("pytest " + shlex.join(cmd[3:]))
        r = run_watched(cmd, watch)
        # 5: nothing collected for this marker, which is not a failure.
        rc = rc or (0 if r == 5 else r)
        if watch is not None and watch.oops is not None:
            break  # the kernel is in an unknown state: no further pass
    return rc


def watch_kernel_log() -> KmsgWatch | None:
    """A running :class:`KmsgWatch` on /dev/kmsg, or None (said) when the log cannot be read."""
    watch = KmsgWatch()
    watch.start()
    time.sleep(0.05)
    if watch.error is not None:
        say(f"kernel log not watched ({watch.error}): an Oops ends the run at its timeout")
        return None
    return watch


def run_watched(cmd: list[str], watch: KmsgWatch | None) -> int:
    """Run ``cmd``; after a kernel Oops it gets kernel_oops.GRACE_S to end, then it is killed."""
    proc = subprocess.Popen(cmd, start_new_session=True)
    rc = wait_unless_oops(proc, watch)
    if watch is not None and watch.oops is not None:
        say(f"guest kernel: {watch.oops!r}: the tests stop here (the report is in dmesg.txt)")
    return rc


def mount_debugfs() -> None:
    if not os.path.ismount("/sys/kernel/debug"):
        subprocess.run(["mount", "-t", "debugfs", "debugfs", "/sys/kernel/debug"], check=False)


def set_environment(
    env: MutableMapping[str, str], venv_bin: Path, module: Path, cache_dir: Path | None
) -> None:
    """The guest's environment for the command and the suites (``env``: os.environ)."""
    env["PATH"] = f"{venv_bin}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
    # The root is read-only: no bytecode or pytest cache writes.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env[config.GUEST.name] = "1"
    if cache_dir is not None:  # what the host built (libteflon.so, the MAC array), wherever its cache is
        env[cache.ENV] = str(cache_dir)
    # The host's cache is read-only in the guest: compile caches go to the guest's /tmp.
    env.setdefault(config.COMPILE_CACHE.name, "/tmp/vnpu-compile-cache")
    # Device-agnostic suites (the compiler's op grid, networks) run on the kernel device here.
    env.setdefault(config.TEST_DEVICE.name, "kernel")
    # Entry-point plugin discovery scans every installed distribution: seconds under TCG.
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env[config.MODULE.name] = str(module)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--args-file"] and len(argv) == 2:
        # The harness's arguments, written to the shared results directory: the kernel command line
        # (which carries this command) is short.
        argv = json.loads(Path(argv[1]).read_text())
    p = argparse.ArgumentParser(prog="guest_run")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--repo", type=Path, required=True)
    p.add_argument("--no-module", action="store_true")
    # The host builds vnpu.ko per kernel (build/kmod-<release>/); the in-tree build is the default.
    p.add_argument("--module", type=Path, help="the vnpu.ko to load")
    p.add_argument("--exec", dest="exec_cmd")
    p.add_argument("--cache-dir", type=Path, help="the host's cache root, as the guest sees it")
    p.add_argument("--suites", nargs="*", default=[])
    p.add_argument("--pytest-args", default="")
    args = p.parse_args(argv)

    module = args.module or args.repo / "kernel" / "drivers_accel_stub" / "vnpu.ko"
    set_environment(os.environ, Path(sys.executable).parent, module, args.cache_dir)
    save_cmdline(args.out)
    mount_debugfs()
    os.chdir(args.repo)
    try:
        setup(args.repo, None if args.no_module else module)
    except (RuntimeError, OSError) as e:
        say(f"setup failed: {e}")
        save_dmesg(args.out)
        return 3
    try:
        if args.exec_cmd is not None:
            say(f"exec: {args.exec_cmd}")
            return subprocess.run(["sh", "-c", args.exec_cmd], check=False).returncode
        return run_suites(args)
    finally:
        try:
            kmemleak_scan(args.out)
        except OSError as e:
            say(f"kmemleak scan failed: {e}")
        save_dmesg(args.out)


if __name__ == "__main__":
    sys.exit(main())
