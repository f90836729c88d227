"""Host side of the QEMU harness: install, build, start the device model, boot, collect results.

One guest boot runs the whole in-guest suite (``python -m qemu_tests``) or
one command (``python -m qemu_tests --exec CMD``). docs/qemu_tests.md
describes the flow.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from device_model.qemu_server import READY_MARK, parse_size
from qemu_tests import (
    accel,
    debug_kernel,
    foreign_ivshmem,
    guest_end,
    guest_run,
    kcidb,
    kernel_args,
    ktap,
    matrix,
    preflight,
    sid_kernel,
)
from uapi import hw_layout
from vnpu_common import cache, config
from vnpu_common.cli import OneLineArgumentParser, cli_main

REPO = Path(__file__).resolve().parent.parent
MODULE_DIR = REPO / "kernel" / "drivers_accel_stub"
# What a run needs beside the package: the module's sources, which it builds, and the suites the
# guest runs. An installed wheel has neither; main() checks for them before it installs or writes.
CHECKOUT_FILES = (MODULE_DIR / "Makefile", REPO / "tests" / "kernel")
GUEST_OUT = "/tmp/vnpu-out"  # where the --rwdir appears inside the guest
# Where the host's cache root (vnpu_common.cache.cache_root(): what the host built, libteflon.so and
# the MAC array) appears read-only inside the guest, whatever HOME, XDG_CACHE_HOME or VNPU_CACHE_DIR
# made it on the host: the guest's own HOME is root's and its /tmp a tmpfs.
GUEST_CACHE = "/tmp/vnpu-cache"
GUEST_RAM = "1G"
# In the results directory: the guest's /proc/cmdline, and the harness's record of the boot.
CMDLINE = guest_run.CMDLINE
BOOT_INFO = "boot.json"
# In the results directory: guest_run's arguments, read by the guest (--args-file) rather than carried
# on the kernel command line (base64 in virtme-ng's virtme.exec=), which holds only 2048 bytes.
GUEST_ARGS = "guest_args.json"
# Modules udev would load at boot for the emulated machine's devices and CPU features, which the
# suites never use: q35's AHCI controller and its DVD drive (libata, SCSI, sr_mod, cdrom), KVM (the
# CPU model has SVM/VMX), the ICH9 LPC and SMBus functions (the iTCO watchdog), vng's i6300esb
# watchdog, the PC speaker, the PS/2 mouse and input events, QEMU's fw_cfg, and the CPU-feature
# crypto modules. Under TCG each load reads the module
# through 9p and runs its init emulated: the guest waits for them (udev settle) before the command
# starts, 7 s of a 16 s boot on a quiet 2-core machine, 30 s under load. A blacklisted module still
# loads when named (modprobe NAME).
GUEST_MODULE_BLACKLIST = (
    "ahci",
    "kvm_amd",
    "kvm_intel",
    "lpc_ich",
    "i2c_i801",
    "i6300esb",
    "pcspkr",
    "aesni_intel",
    "ghash_clmulni_intel",
    "sha1_ssse3",
    "sha256_ssse3",
    "sha512_ssse3",
    "crc32_pclmul",
    "crct10dif_pclmul",
    "ccp",
    "powernow_k8",
    "psmouse",
    "evdev",
    "qemu_fw_cfg",
)
# --timeout's default: the suite takes about 6 minutes on a quiet 2-core machine, and TCG slows
# down several times when the host is busy; the debug kernel (KASAN, lockdep) is slower still.
TIMEOUT = 1800.0
DEBUG_TIMEOUT = 3600.0
# The compiler's op grid and networks run here too, on vnpu.ko (VNPU_TEST_DEVICE=kernel in the guest).
DEFAULT_SUITES = (
    "tests/conformance",
    "tests/kernel",
    "tests/compiler/test_op_grid.py",
    "tests/compiler/test_new_ops.py",
    "tests/compiler/test_networks.py",
    "tests/delegate/test_networks.py",
    "tests/delegate/test_prepared_invoke.py",  # libteflon.so's C invoke: its own ioctls on vnpu.ko
    "tests/corpus/test_corpus.py",
    "tests/onnx/test_onnx_networks.py",  # quantized ONNX networks through accel run, onnxruntime in the guest
    "tests/ort_ep/test_ort_ep_guest.py",  # onnxruntime with the vnpu EP library on vnpu.ko
    "tests/litert_npu/test_litert_guest.py",  # LiteRT with the vnpu dispatch library on vnpu.ko
    "tests/fuzz/test_ioctl_fuzz.py",  # the ioctl fuzzer on vnpu.ko (VNPU_FUZZ_SECONDS, default 30)
    "tests/fuzz/test_fault_inject.py",  # device-model faults, one round of each, on vnpu.ko
    "tests/fuzz/test_stress.py",  # processes x threads of models and streams (VNPU_STRESS_SECONDS)
)


class HarnessError(RuntimeError):
    """A phase failed before the tests could run."""


@dataclass
class Clock:
    """Prints each phase with the host time since the harness started (``[host  12.3s]``)."""

    start: float = field(default_factory=time.monotonic)
    quiet: bool = False

    def say(self, phase: str, msg: str) -> None:
        if not self.quiet:
            # Host time since the harness started; guest_run's lines carry the guest's uptime.
            print(f"[host {time.monotonic() - self.start:6.1f}s] {phase}: {msg}", flush=True)


def venv_bin() -> Path:
    """The venv's bin/: vng calls ``virtme-run`` by name, so it must be on PATH."""
    return Path(sys.executable).parent


def host_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{venv_bin()}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


# --- install ---------------------------------------------------------------


def missing_apt_packages(packages: list[str]) -> list[str]:
    missing = []
    for p in packages:
        r = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True, check=False
        )
        if "install ok installed" not in r.stdout:
            missing.append(p)
    return missing


def install(clock: Clock, release: str | None = None, debug: bool = False, sid: bool = False) -> None:
    """Install what run.sh installs and is missing; a no-op taking a moment when everything is present.

    ``release``: the Debian kernel to install instead of the newest one apt offers.
    ``debug``: also what the debug kernel's build needs.
    ``sid``: also what fetching and preparing a kernel of Debian unstable needs.
    """
    try:
        missing = missing_apt_packages(preflight.debian_packages(release=release, debug=debug, sid=sid))
    except LookupError as e:
        raise HarnessError(str(e)) from e
    if missing:
        clock.say("install", f"apt-get install {' '.join(missing)}")
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run([*sudo, "apt-get", "update", "-q"], check=True, env=env)
        subprocess.run([*sudo, "apt-get", "install", "-y", "-q", *missing], check=True, env=env)
    if not (venv_bin() / "vng").exists():
        clock.say("install", "pip install virtme-ng")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "virtme-ng"], check=True)
    clock.say("install", "ok" if not missing else f"installed {' '.join(missing)}")


# --- build -----------------------------------------------------------------


def module_build_dir(kernel: preflight.Kernel) -> Path:
    """Where vnpu.ko is built for ``kernel``: ``build/kmod-<release>/``, one directory per kernel.

    Kbuild writes its objects next to the sources, so runs for different
    kernels (a matrix, concurrent runs) each build in a copy of the sources.
    The copy sits two levels under the repo, as kernel/drivers_accel_stub
    does, because the Kbuild file finds the uapi header at $(src)/../../uapi.
    """
    return REPO / "build" / f"kmod-{matrix.subdir_name(kernel.release, ())}"


def module_path(kernel: preflight.Kernel) -> Path:
    return module_build_dir(kernel) / "vnpu.ko"


def build_guest_libraries(clock: Clock) -> None:
    """Build the host libraries the guest loads from the build cache: its view of the host is
    read-only, so what a fresh checkout has not built yet could not be built there."""
    import delegate_teflon
    import vnpu_ort_ep
    from libaccel.tools import trace

    for name, library_path in (
        ("libteflon.so", delegate_teflon.library_path),
        (vnpu_ort_ep.LIBRARY_NAME, vnpu_ort_ep.library_path),  # onnxruntime's plugin EP
    ):
        try:
            path = library_path()
        except Exception as e:  # a compiler's error of any kind: one line, and the harness stops
            raise HarnessError(f"building {name} for the guest failed: {e}") from e
        clock.say("build", f"{path} ok")
    # accel trace's interposer: the guest would otherwise compile it (seconds under TCG) per tracer.
    try:
        clock.say("build", f"{trace.library()} ok")
    except Exception as e:
        raise HarnessError(f"building accel trace's interposer for the guest failed: {e}") from e


def build_command(kernel: preflight.Kernel) -> list[str]:
    """The make command that builds vnpu.ko for ``kernel`` in its own directory: the module a user
    builds, with no test knob."""
    return ["make", "-C", str(module_build_dir(kernel)), f"KDIR={kernel.build}"]


def default_npu_cores() -> int:
    """The device model's default core count (its --cores default)."""
    from device_model.npu import DEFAULT_CORES

    return DEFAULT_CORES


def build_module(clock: Clock, kernel: preflight.Kernel) -> Path:
    """Build vnpu.ko against ``kernel``'s build tree in its own directory; returns the module."""
    # *.mod.c is modpost's output for whichever kernel the in-tree build last targeted: not a source.
    sources = [
        p
        for pat in ("Makefile", "Kbuild", "*.c", "*.h")
        for p in MODULE_DIR.glob(pat)
        if not p.name.endswith(".mod.c")
    ]
    if not any(p.name == "Kbuild" for p in sources):
        raise HarnessError(f"no kernel module sources in {MODULE_DIR}")
    build = module_build_dir(kernel)
    build.mkdir(parents=True, exist_ok=True)
    for src in sources:
        # copy2 keeps the mtime, so make rebuilds exactly what changed since the last copy.
        shutil.copy2(src, build / src.name)
    module = build / "vnpu.ko"
    r = subprocess.run(
        build_command(kernel),
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0 or not module.exists():
        sys.stdout.write(r.stdout[-4000:])
        sys.stdout.write(r.stderr[-4000:])
        raise HarnessError(f"module build failed (make -C {build} KDIR={kernel.build}, exit {r.returncode})")
    clock.say("build", f"{module.relative_to(REPO)} ok (against {kernel.build})")
    return module


# --- device model ----------------------------------------------------------

# A guest line that asks the harness to kill the device model (with --allow-kill-request).
KILL_REQUEST = b"VNPU-KILL-DEVICE-MODEL"
# The device model's fault-injection control file (device_model.faults), in the results directory
# the guest shares: the guest writes a spec here, the device model reads it before every job.
FAULT_CONTROL = "faults.json"


class DeviceModelProcess:
    """The ``vnpu-device-model`` server, started before QEMU and stopped after it."""

    def __init__(
        self,
        workdir: Path,
        log_path: Path,
        verbose: bool = False,
        fault_control: Path | None = None,
        cores: int | None = None,
        core_processes: bool | None = None,
    ) -> None:
        self.fault_control = fault_control
        self.cores = cores  # the NPU's cores (--cores), None: the device model's default
        # Each core's jobs in a worker process (--core-processes); None: the device model's default.
        self.core_processes = core_processes
        self.socket = workdir / "ivshmem.sock"
        self.ram = Path("/dev/shm") / f"vnpu-ram-{os.getpid()}"
        self.log_path = log_path
        self.verbose = verbose
        self.proc: subprocess.Popen[str] | None = None
        self._log = None
        self._pump: threading.Thread | None = None
        self.killed = False  # by kill(), as the guest asked
        self.forced = ""  # the signal stop() had to send: it did not exit after QEMU

    def start(self, timeout: float = 30.0) -> None:
        cmd = [
            sys.executable,
            "-m",
            "device_model.qemu_server",
            "--socket",
            str(self.socket),
            "--ram",
            str(self.ram),
            "--ram-size",
            GUEST_RAM,
        ]
        if self.fault_control is not None:
            # A spec a killed run left in a reused --out directory must not fault this run's jobs.
            for stale in (
                self.fault_control,
                self.fault_control.with_name(self.fault_control.name + ".status.json"),
            ):
                stale.unlink(missing_ok=True)
            cmd += ["--fault-control", str(self.fault_control)]
        if self.cores is not None:
            cmd += ["--cores", str(self.cores)]
        if self.core_processes is not None:
            cmd.append("--core-processes" if self.core_processes else "--no-core-processes")
        if self.verbose:
            cmd.append("--verbose")
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=self._log, text=True, cwd=REPO, env=host_env()
        )
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if line.startswith(READY_MARK):
                break
            if not line and self.proc.poll() is not None:
                raise HarnessError(
                    f"device model exited ({self.proc.returncode}) before it was ready; see {self.log_path}"
                )
            if time.monotonic() > deadline:
                raise HarnessError(f"device model not ready after {timeout:.0f}s; see {self.log_path}")
        # Keep draining stdout so the server can never block on a full pipe.
        self._pump = threading.Thread(target=self._drain, daemon=True)
        self._pump.start()

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            if self._log:
                self._log.write(line)

    def kill(self) -> None:
        """SIGKILL the server, as a crash would: the guest's driver must time its jobs out."""
        if self.proc is not None and self.proc.poll() is None:
            self.killed = True
            self.proc.kill()

    def stop(self, timeout: float = 10.0) -> int | None:
        """Wait for the server to exit (it does when QEMU disconnects), else SIGTERM, then SIGKILL."""
        rc = None
        if self.proc is not None:
            try:
                rc = self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.forced = "SIGTERM"
                self.proc.send_signal(signal.SIGTERM)
                try:
                    rc = self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.forced = "SIGKILL"
                    self.proc.kill()
                    rc = self.proc.wait()
        if self._pump:
            self._pump.join(timeout=2)
        if self._log:
            self._log.close()
            self._log = None
        for p in (self.ram, self.socket):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
        return rc


# --- boot ------------------------------------------------------------------


def cached_trees() -> list[Path]:
    """Host trees the guest re-mounts with 9p ``cache=loose``: the repo (with its venv) and Python's prefix.

    vng's root 9p mount has no cache, so every Python import stats and reads
    files through virtio under TCG; a read-only cached mount of the trees
    Python imports from makes start-up markedly faster. System prefixes are
    left alone.
    """
    trees = [REPO]
    base = Path(sys.base_prefix).resolve()
    if base not in (Path("/"), Path("/usr"), Path("/usr/local")) and REPO not in base.parents:
        trees.append(base)
    return trees


def qemu_opts(
    sock: Path, ram: Path, cached: list[Path] | None = None, foreign_sock: Path | None = None
) -> str:
    """The QEMU options that add the NPU (shared guest RAM, ivshmem-doorbell), the cached 9p exports
    and, with ``foreign_sock``, a second ivshmem-doorbell that is not the NPU (foreign_ivshmem.py)."""
    opts = [
        f"-object memory-backend-file,id=vnpu-ram,size={GUEST_RAM},share=on,mem-path={ram}",
        "-machine memory-backend=vnpu-ram",
        f"-chardev socket,path={sock},id=vnpu-ivs",
        f"-device ivshmem-doorbell,chardev=vnpu-ivs,vectors={hw_layout.NUM_VECTORS}",
    ]
    if foreign_sock is not None:
        opts += foreign_ivshmem.qemu_opts(foreign_sock)
    for i, tree in enumerate(cached or []):
        opts.append(f"-fsdev local,id=vnpu-fs{i},path={tree},security_model=none,readonly=on,multidevs=remap")
        opts.append(f"-device virtio-9p-pci,fsdev=vnpu-fs{i},mount_tag=vnpu-fs{i}")
    return " ".join(opts)


def guest_script(guest_cmd: list[str], cached: list[Path]) -> str:
    """The shell line vng runs: mount the cached trees over themselves (best effort), then the command."""
    mounts = [
        f"mount -t 9p -o trans=virtio,version=9p2000.L,access=any,msize=524288,cache=loose,ro "
        f"vnpu-fs{i} {shlex.quote(str(tree))} 2>/dev/null"
        for i, tree in enumerate(cached)
    ]
    return "; ".join([*mounts, f"cd {shlex.quote(str(REPO))}", f"exec {shlex.join(guest_cmd)}"])


def vng_command(
    guest_cmd: list[str],
    sock: Path,
    ram: Path,
    outdir: Path,
    cpus: int,
    kernel_image: Path,
    foreign_sock: Path | None = None,
    extra_kernel_args: Sequence[str] = (),
    kvm: bool = False,
    host_cache: Path | None = None,
) -> list[str]:
    """The vng command line; ``extra_kernel_args`` go on the guest kernel's command line (vng --append);
    ``kvm``: let vng use KVM (accel.choose decided it works), else TCG (--disable-kvm); ``host_cache``
    (default: the cache root) appears at GUEST_CACHE."""
    cached = cached_trees()
    host_cache = cache.cache_root() if host_cache is None else host_cache
    if "," in str(host_cache) or "=" in str(host_cache):  # vng's --rodir and QEMU's -fsdev split there
        raise HarnessError(f"the cache directory {str(host_cache)!r} has a ',' or '=': set {cache.ENV}")
    # One "--opt=value" word, as for --qemu-opts; vng splits it shell-style into one --kopt per word.
    words = [f"modprobe.blacklist={','.join(GUEST_MODULE_BLACKLIST)}", *extra_kernel_args]
    append = [f"--append={kernel_args.join(words)}"]
    return [
        str(venv_bin() / "vng"),
        "--run",
        str(kernel_image),
        *([] if kvm else ["--disable-kvm"]),
        "--memory",
        GUEST_RAM,
        "--cpus",
        str(cpus),
        "--rwdir",
        f"{GUEST_OUT}={outdir}",
        f"--rodir={GUEST_CACHE}={host_cache}",
        # One "--opt=value" word: vng's argparse rejects a separate value starting with "-".
        f"--qemu-opts={qemu_opts(sock, ram, cached, foreign_sock)}",
        *append,
        "--exec",
        guest_script(guest_cmd, cached),
    ]


def guest_command(args: argparse.Namespace, module: Path | None = None) -> list[str]:
    """The in-guest command: the venv's python (the guest's /usr/bin/python3 lacks our packages)."""
    cmd = [sys.executable, "-m", "qemu_tests.guest_run", "--out", GUEST_OUT, "--repo", str(REPO)]
    cmd += ["--cache-dir", GUEST_CACHE]
    if args.no_module:
        cmd.append("--no-module")
    elif module is not None:
        cmd += ["--module", str(module)]
    if args.exec_cmd is not None:
        cmd += ["--exec", args.exec_cmd]
    else:
        cmd += ["--suites", *args.suites]
        if args.pytest_args:
            cmd += ["--pytest-args", args.pytest_args]
    return cmd


class Terminated(SystemExit):
    """The harness got SIGTERM while a guest ran; exits 143 as a SIGTERMed shell command does."""


def _terminated(signum: int, frame: object) -> None:
    raise Terminated(128 + signum)


ALIVE_EVERY = 30.0  # seconds of guest silence before the harness says it still runs


class Alive:
    """While the guest is silent, one ``guest still running`` line per ``every`` seconds (a daemon
    thread), so a long command under TCG does not look hung."""

    def __init__(self, clock: Clock, every: float) -> None:
        self.clock, self.every = clock, every
        self.started = self.last = time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def heard(self) -> None:
        self.last = time.monotonic()

    def _run(self) -> None:
        while not self._done.wait(min(self.every, max(0.1, self.last + self.every - time.monotonic()))):
            now = time.monotonic()
            if now - self.last >= self.every:
                quiet = now - self.last
                self.clock.say(
                    "guest", f"still running, {now - self.started:.0f} s (no output for {quiet:.0f} s)"
                )
                self.last = now

    def __enter__(self) -> Alive:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def boot(
    cmd: list[str],
    timeout: float,
    clock: Clock,
    log_path: Path,
    on_line: Callable[[bytes], None] | None = None,
    alive_every: float = ALIVE_EVERY,
) -> BootResult:
    """Run vng; returns the guest command's exit code (matrix.EXIT_TIMEOUT when the timer killed it).

    The guest's output is copied line by line to our stdout and to
    ``log_path``. vng must write into a pipe: QEMU opens its output chardevs
    as files (``/proc/self/fd/1``), which truncates and overwrites a regular
    file stdout. After ``alive_every`` seconds without a line (a long model
    compile, a slow TCG test), one line says the guest still runs.
    """
    # vng and QEMU run in a session of their own: a SIGTERM to the harness (timeout(1), a CI
    # runner cancelling a job) must take the guest down too, not leave QEMU running. The handler
    # is in place before the guest starts and everything after it is inside the try, so a SIGTERM
    # at any moment ends the guest; the kill timer is a daemon thread, so it never holds the exit.
    # While Popen runs (the guest may already run, its pid not yet known) a SIGTERM is only noted,
    # and acted on as soon as Popen returns.
    starting, pending = True, []

    def on_sigterm(signum: int, frame: object) -> None:
        if starting:
            pending.append(signum)
            return
        _terminated(signum, frame)

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, on_sigterm)
    proc: subprocess.Popen[bytes] | None = None
    timer: threading.Timer | None = None
    expired: list[bool] = []
    try:
        try:
            proc = subprocess.Popen(
                cmd,
                env=host_env(),
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as e:
            raise HarnessError(f"cannot start the guest ({cmd[0]}): {e.strerror or e}") from e
        starting = False
        if pending:
            raise Terminated(128 + pending[0])
        assert proc.stdout is not None
        pid = proc.pid

        def expire() -> None:
            expired.append(True)
            os.killpg(pid, signal.SIGKILL)

        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        timer.start()
        alive = Alive(clock, alive_every)
        with open(log_path, "wb") as log, alive:
            for line in proc.stdout:
                alive.heard()
                sys.stdout.buffer.write(line)
                sys.stdout.buffer.flush()
                log.write(line)
                if on_line is not None:
                    on_line(line)
        rc = proc.wait()
    except (KeyboardInterrupt, Terminated):
        if proc is not None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()
        raise
    finally:
        if timer is not None:
            timer.cancel()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if expired:
        clock.say("boot", f"guest killed after {timeout:.0f}s")
        return BootResult(matrix.EXIT_TIMEOUT, True)
    return BootResult(rc, False)


@dataclass(frozen=True)
class BootResult:
    """How vng ended: the guest command's exit code, and whether the harness's timer killed it."""

    rc: int
    timed_out: bool


# --- main ------------------------------------------------------------------

RESULTS = REPO / "build" / "qemu_tests"


def results_dir(out: Path | None) -> Path:
    """A fresh results directory: ``out``, else a new ``build/qemu_tests/<time>-<pid>/``.

    Runs never share a directory, so concurrent runs (several developers, CI)
    cannot delete each other's results; ``build/qemu_tests/latest`` points at
    the newest.
    """
    if out is not None:
        out = out.resolve()
        out.mkdir(parents=True, exist_ok=True)
        for stale in [
            *out.glob("junit*.xml"),
            *(
                out / n
                for n in ("dmesg.txt", "kmemleak.txt", "console.log", "results.ktap", CMDLINE, BOOT_INFO)
            ),
        ]:
            stale.unlink(missing_ok=True)
        return out
    run = RESULTS / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    run.mkdir(parents=True)
    latest = RESULTS / "latest"
    tmp = RESULTS / f".latest-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(run.name)
    os.replace(tmp, latest)
    return run


def _spec(text: str) -> str:
    try:
        return preflight.kernel_spec(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _entries(text: str) -> list[matrix.Entry]:
    try:
        return matrix.parse_entries(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _kernel_args(text: str) -> list[str]:
    try:
        return list(kernel_args.parse(text))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(
        prog="python -m qemu_tests",
        description="Boot the vnpu stack under QEMU (KVM where it works, else TCG) and run the in-guest "
        "test suite, or one command.",
    )
    p.add_argument(
        "--exec",
        dest="exec_cmd",
        metavar="CMD",
        help="run CMD (sh -c) in the prepared guest instead of the suite; exit with its code",
    )
    p.add_argument(
        "--suites",
        nargs="+",
        default=list(DEFAULT_SUITES),
        help=f"test paths for the in-guest pytest (default: {' '.join(DEFAULT_SUITES)})",
    )
    p.add_argument("--pytest-args", default="", help="extra arguments for the in-guest pytest (one string)")
    p.add_argument(
        "--out", type=Path, default=None, help="results directory (default build/qemu_tests/<time>-<pid>/)"
    )
    p.add_argument(
        "--check",
        action="store_true",
        help=f"only check the host's requirements: one line each, exit 0 or {preflight.EXIT_MISSING}",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--kernel",
        metavar="SPEC",
        type=_spec,
        help="the kernel: a release R (/boot/vmlinuz-R, built against /lib/modules/R/build), a kernel "
        f"build directory, a bzImage (with --kdir), {debug_kernel.SPEC!r} (KASAN, lockdep, kmemleak; "
        f"built once and cached), or a series X.Y ({sid_kernel.CURRENT_SERIES}: the newest generic kernel "
        f"of Debian {sid_kernel.SUITE}, fetched and prepared once into the cache) "
        f"(default ${preflight.KERNEL_ENV}, else the newest installed generic 6.12 kernel)",
    )
    which.add_argument(
        "--matrix",
        metavar="SPEC[ARGS],...",
        type=_entries,
        help="run once per entry (results in one subdirectory each), print a table, write summary.json; "
        "an entry is a kernel SPEC, optionally with extra kernel arguments in brackets: "
        "'6.12.117+deb12-amd64,6.12.117+deb12-amd64[swiotlb=65536,force]'",
    )
    p.add_argument(
        "--append",
        "--cmdline",
        dest="kernel_args",
        metavar="ARGS",
        type=_kernel_args,
        action="extend",
        default=[],
        help="extra arguments for the guest kernel's command line (vng --append), e.g. "
        "'swiotlb=65536,force'; may be repeated; with --matrix, every entry gets them",
    )
    p.add_argument(
        "--accel",
        choices=accel.MODES,
        default="auto",
        help="KVM or TCG for the guest: auto (default) uses KVM where a probe guest boots under it "
        "(probed once per host and cached), else TCG with the reason; kvm or tcg force one",
    )
    p.add_argument(
        "--kcidb",
        type=Path,
        metavar="FILE",
        help="also write the run as KCIDB I/O JSON (checkout, build, tests, kernel, device) to FILE",
    )
    p.add_argument("--kdir", type=Path, metavar="DIR", help="the build tree of the bzImage --kernel names")
    p.add_argument("--no-install", action="store_true", help="skip the install phase")
    p.add_argument("--no-build", action="store_true", help="use the already built vnpu.ko")
    p.add_argument(
        "--module",
        type=Path,
        metavar="KO",
        help="load this vnpu.ko (.ko or .ko.xz, e.g. a DKMS build: python -m tools.dkms test) instead of "
        "building one; it must be built for the guest's kernel and lie under a directory the guest sees",
    )
    p.add_argument("--no-module", action="store_true", help="boot with the device but do not load vnpu.ko")
    p.add_argument("--cpus", type=int, default=2, help="guest vCPUs (default 2)")
    p.add_argument(
        "--npu-cores",
        type=int,
        default=None,
        metavar="N",
        help="the emulated NPU's cores (device model --cores; default: the device model's, 2)",
    )
    p.add_argument(
        "--npu-core-processes",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run each NPU core's jobs in a device-model worker process (vnpu-device-model "
        "--core-processes; default: threads)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help=f"seconds before the guest is killed (default {TIMEOUT:.0f}, debug kernel {DEBUG_TIMEOUT:.0f})",
    )
    p.add_argument(
        "--allow-kill-request",
        action="store_true",
        help=f"SIGKILL the device model when the guest prints {KILL_REQUEST.decode()} (crash tests)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="verbose device model log")
    return p


@cli_main("python -m qemu_tests")
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (missing := checkout_missing()) is not None:
        print(missing, file=sys.stderr)
        return preflight.EXIT_MISSING
    if args.kdir is not None and args.kernel is None:
        parser.error("--kdir goes with --kernel (a bzImage path)")
    if args.module is not None and (args.no_module or args.matrix is not None):
        parser.error("--module is one kernel's vnpu.ko: not with --no-module or --matrix")
    if args.matrix is not None:
        return run_matrix(args)
    if args.check:
        return preflight.report(check_lines(args, args.kernel, args.kdir, args.kernel_args))
    outdir = results_dir(args.out)
    clock = Clock()
    clock.say("results", str(outdir))
    record = kcidb.Run(outdir)
    rc = run_kernel(args, args.kernel, args.kdir, outdir, clock, record).rc
    write_kcidb(args.kcidb, [record], clock)
    return rc


def checkout_missing() -> str | None:
    """The one-line reason this package cannot boot the guest (it is not in a checkout), or None."""
    absent = next((path for path in CHECKOUT_FILES if not path.exists()), None)
    if absent is None:
        return None
    return (
        f"python -m qemu_tests needs a checkout of vnpu ({absent} is missing: it builds vnpu.ko from "
        "kernel/ and runs tests/ in the guest); run it from a clone of the repository"
    )


def write_kcidb(path: Path | None, records: list[kcidb.Run], clock: Clock) -> None:
    """--kcidb FILE: the run (every kernel of a matrix) as KCIDB I/O JSON."""
    if path is None:
        return
    data = kcidb.write(path, REPO, records)
    clock.say("kcidb", f"{path}: {len(data['builds'])} build(s), {len(data['tests'])} tests (KCIDB I/O v5.0)")


@dataclass(frozen=True)
class Outcome:
    """How far one kernel's run got: its exit code, the build column, the kernel's release."""

    rc: int
    build: str
    release: str


def check_lines(
    args: argparse.Namespace, spec: str | None, kdir: Path | None, words: Sequence[str]
) -> list[preflight.Requirement]:
    """--check's lines: the host's requirements, the accelerator the guest will run on (after the
    qemu line; auto probes KVM here if this host has no cached answer) and the extra kernel arguments."""
    reqs = preflight.check_host(guest_ram=parse_size(GUEST_RAM), kernel=spec, kdir=kdir)
    try:
        kernel = preflight.select_kernel(override=spec, kdir=kdir)
    except ValueError:
        kernel = None
    choice = accel.choose(args.accel, kernel.image if kernel else None)
    line = accel.requirement(args.accel, choice)
    at = next((i + 1 for i, r in enumerate(reqs) if r.name == "qemu"), 0)
    return [*reqs[:at], line, *reqs[at:], *kernel_args_line(words)]


def kernel_args_line(words: Sequence[str]) -> list[preflight.Requirement]:
    """The --check line for extra kernel arguments, when there are any."""
    if not words:
        return []
    return [preflight.Requirement("kernel arguments", True, f"{kernel_args.join(words)} (vng --append)")]


def record_boot(
    outdir: Path,
    spec: str | None,
    kernel: preflight.Kernel,
    words: Sequence[str],
    choice: accel.Choice | None = None,
) -> list[str]:
    """Write boot.json (the kernel, the extra arguments, the guest's /proc/cmdline, KVM or TCG); return
    the extra arguments missing from that command line (none when the guest did not save it)."""
    saved = outdir / CMDLINE
    cmdline = saved.read_text().strip() if saved.exists() else None
    info = {
        "kernel": spec or kernel.release,
        "release": kernel.release,
        "image": str(kernel.image),
        "kernel_args": list(words),
        "cmdline": cmdline,
    }
    if choice is not None:
        info["accel"], info["accel_reason"] = choice.accel, choice.reason
    (outdir / BOOT_INFO).write_text(json.dumps(info, indent=2) + "\n")
    return kernel_args.missing(words, cmdline) if cmdline is not None else []


def add_junit_properties(outdir: Path, properties: dict[str, str]) -> None:
    """Add ``properties`` to every test suite of the run's JUnit files (the Jenkins schema's
    ``<properties>``), so a JUnit file says which kernel and command line it ran on."""
    for path in sorted(outdir.glob("junit*.xml")):
        try:
            tree = ET.parse(path)
        except ET.ParseError:
            continue  # report() says so
        root = tree.getroot()
        for suite in [root] if root.tag == "testsuite" else root.iter("testsuite"):
            props = suite.find("properties")
            if props is None:
                props = ET.Element("properties")
                suite.insert(0, props)
            for name, value in properties.items():
                ET.SubElement(props, "property", name=name, value=value)
        tree.write(path, encoding="utf-8", xml_declaration=True)


def guest_timeout(args: argparse.Namespace, spec: str | None) -> float:
    """--timeout, else the default for the kernel ``spec`` names."""
    if args.timeout is not None:
        return args.timeout
    return DEBUG_TIMEOUT if spec == debug_kernel.SPEC else TIMEOUT


def run_kernel(
    args: argparse.Namespace,
    spec: str | None,
    kdir: Path | None,
    outdir: Path,
    clock: Clock,
    record: kcidb.Run | None = None,
) -> Outcome:
    """Install, check, build, boot and report for one kernel (``spec``; None: the default kernel).

    ``record`` gets what the run learns on the way (for --kcidb)."""
    outcome = _run_kernel(args, spec, kdir, outdir, clock, record or kcidb.Run(outdir))
    if record is not None:
        record.build_status, record.release = outcome.build, record.release or outcome.release
    return outcome


def _run_kernel(
    args: argparse.Namespace,
    spec: str | None,
    kdir: Path | None,
    outdir: Path,
    clock: Clock,
    record: kcidb.Run,
) -> Outcome:
    guest_ram = parse_size(GUEST_RAM)
    spec = spec or config.KERNEL.get()
    record.spec = spec
    try:
        wanted = preflight.select_kernel(override=spec, kdir=kdir) if spec else None
    except ValueError:
        wanted = None  # the preflight below says what is wrong with the spec
    release = wanted.release if wanted is not None else (spec or "default")
    debug = spec == debug_kernel.SPEC
    series = spec if spec is not None and sid_kernel.is_series(spec) else None
    build = matrix.BUILD_SKIPPED
    module = None
    try:
        if not args.no_install:
            try:
                install(
                    clock,
                    wanted.release if wanted is not None and wanted.debian else None,
                    debug,
                    series is not None,
                )
            except (HarnessError, subprocess.CalledProcessError) as e:
                # The preflight below says what is still missing and how to fix it.
                clock.say("install", f"failed: {e}")
        # A missing piece is one line with its fix here, not an error deep inside vng.
        if preflight.report(
            preflight.check_host(guest_ram=guest_ram, kernel=spec, kdir=kdir), sys.stderr, only_missing=True
        ):
            print("qemu_tests: host requirements missing (python -m qemu_tests --check)", file=sys.stderr)
            return Outcome(preflight.EXIT_MISSING, matrix.BUILD_MISSING, release)
        if debug:
            build = matrix.BUILD_FAILED
            try:
                debug_kernel.ensure_built(lambda phase, msg: clock.say("kernel", f"{phase}: {msg}"))
            except debug_kernel.BuildError as e:
                raise HarnessError(f"debug kernel: {e}") from e
        if series is not None:
            build = matrix.BUILD_FAILED
            try:
                sid_kernel.ensure_prepared(
                    series,
                    lambda phase, msg: clock.say("kernel", f"{phase}: {msg}"),
                    refresh=not args.no_install,
                )
            except sid_kernel.PrepareError as e:
                raise HarnessError(f"{series} kernel: {e}") from e
            # The prepared tree's own checks (config, compiler), which the first preflight could not make.
            if preflight.report(
                preflight.check_kernel(preflight.Host(), spec), sys.stderr, only_missing=True
            ):
                return Outcome(preflight.EXIT_MISSING, matrix.BUILD_MISSING, release)
        kernel = preflight.select_kernel(override=spec, kdir=kdir)
        assert kernel is not None  # the preflight found it
        release = kernel.release
        clock.say("preflight", f"ok; kernel {kernel.release}")
        if args.accel == "kvm" and (problem := accel.device_problem()) is not None:
            print(f"qemu_tests: --accel kvm, but {problem} (--accel auto or tcg)", file=sys.stderr)
            return Outcome(preflight.EXIT_MISSING, matrix.BUILD_MISSING, release)
        choice = accel.choose(args.accel, kernel.image, say=lambda msg: clock.say("accel", msg))
        clock.say("accel", choice.line())
        record.release, record.image = kernel.release, str(kernel.image)
        record.kernel_build = str(kernel.build)
        record.compiler = preflight.kernel_compiler_text(kernel)
        record.accel, record.accel_reason = choice.accel, choice.reason
        if args.module is not None:
            module = args.module.resolve()
            if not module.is_file():
                raise HarnessError(f"--module {args.module}: no such file")
            clock.say("build", f"not built: --module {module}")
        elif not args.no_module and not args.no_build:
            build = matrix.BUILD_FAILED
            record.build_start, t0 = kcidb.now(), time.monotonic()
            record.build_command = shlex.join(build_command(kernel))
            try:
                module = build_module(clock, kernel)
            finally:
                record.build_seconds = time.monotonic() - t0
            build = matrix.BUILD_OK
        elif not args.no_module:
            module = module_path(kernel)
            if not module.exists():
                raise HarnessError(f"{module} is not built (drop --no-build)")
        record.module = str(module or "")
        build_guest_libraries(clock)
    except (HarnessError, subprocess.CalledProcessError) as e:
        print(f"qemu_tests: {e}", file=sys.stderr)
        return Outcome(2, build, release)

    words = args.kernel_args  # extra kernel command-line arguments
    workdir = Path(tempfile.mkdtemp(prefix="vnpu-qemu-"))
    server = DeviceModelProcess(
        workdir,
        outdir / "device_model.log",
        verbose=args.verbose,
        fault_control=outdir / FAULT_CONTROL,
        cores=args.npu_cores,
        core_processes=args.npu_core_processes,
    )
    # Always there: probe refuses it at once, and tests/kernel/test_foreign_ivshmem.py checks how.
    foreign = foreign_ivshmem.ForeignIvshmemProcess(workdir)
    try:
        server.start()
        clock.say("server", f"device model ready ({server.socket})")
        try:
            foreign.start()
        except RuntimeError as e:
            raise HarnessError(str(e)) from e
        guest = guest_command(args, module)
        # The arguments go through a file in the results directory (the guest's GUEST_OUT).
        (outdir / GUEST_ARGS).write_text(json.dumps(guest[3:]) + "\n")
        guest = [*guest[:3], "--args-file", f"{GUEST_OUT}/{GUEST_ARGS}"]
        cmd = vng_command(
            guest,
            server.socket,
            server.ram,
            outdir,
            args.cpus,
            kernel.image,
            foreign.socket,
            words,
            choice.kvm,
        )
        extra = f"; kernel arguments: {kernel_args.join(words)}" if words else ""
        clock.say("boot", f"starting the guest (vng, {choice.name}){extra}")
        on_line = None
        if args.allow_kill_request:

            def on_line(line: bytes) -> None:
                if line.strip() == KILL_REQUEST:
                    clock.say("server", "killing the device model (SIGKILL), as the guest asked")
                    server.kill()

        record.kernel_args, record.cpus, record.memory = list(words), args.cpus, GUEST_RAM
        record.npu_cores, record.exec_cmd = args.npu_cores or default_npu_cores(), args.exec_cmd
        record.qemu = accel.qemu_version()
        record.boot_start, t0 = kcidb.now(), time.monotonic()
        timeout = guest_timeout(args, spec)
        booted = boot(cmd, timeout, clock, outdir / "console.log", on_line)
        if boot_never_began(booted, outdir / "console.log"):
            # Under TCG vng now and then exits 255 at once, before the guest prints a byte: no test
            # ran, so one more boot cannot hide a failure.
            clock.say("boot", "vng exited 255 before the guest printed anything: booting once more")
            booted = boot(cmd, timeout, clock, outdir / "console.log", on_line)
        rc = booted.rc
        record.guest_rc, record.guest_seconds = rc, time.monotonic() - t0
    except HarnessError as e:
        print(f"qemu_tests: {e}", file=sys.stderr)
        return Outcome(2, build, release)
    finally:
        server_rc = server.stop()
        foreign.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    say_guest_end(clock, outdir, booted, timeout, server, server_rc)
    lost = record_boot(outdir, spec, kernel, words, choice)
    if words and not lost and (outdir / CMDLINE).exists():
        clock.say("guest", f"/proc/cmdline has {kernel_args.join(words)}")
    if lost:
        # The run would say it had arguments it did not have (a command line over the kernel's limit).
        print(f"qemu_tests: the guest's /proc/cmdline lacks {kernel_args.join(lost)}", file=sys.stderr)
        rc = rc or 2

    if args.exec_cmd is not None:
        return Outcome(rc, build, release)
    cmdline = outdir / CMDLINE
    add_junit_properties(
        outdir,
        {
            "kernel.release": kernel.release,
            "kernel.args": kernel_args.join(words),
            "kernel.cmdline": cmdline.read_text().strip() if cmdline.exists() else "",
            "qemu.accel": choice.accel,
        },
    )
    return Outcome(report(outdir, rc, clock), build, release)


def boot_never_began(booted: BootResult, console: Path) -> bool:
    """vng's 255 with an empty console: the guest ended before its console opened."""
    return booted.rc == guest_end.VNG_NO_EXIT_CODE and not booted.timed_out and not _read(console).strip()


def say_guest_end(
    clock: Clock,
    outdir: Path,
    booted: BootResult,
    timeout: float,
    server: DeviceModelProcess,
    server_rc: int | None,
) -> guest_end.GuestEnd:
    """Say how the guest ended and why (guest_end.diagnose), with the lines that show it."""
    end = guest_end.diagnose(
        booted.rc,
        _read(outdir / "console.log"),
        timed_out=booted.timed_out,
        timeout=timeout,
        model_rc=None if server.forced else server_rc,
        model_log=_read(server.log_path),
        model_killed_on_request=server.killed,
        ran=any((outdir / name).exists() for name in ("results.ktap", "junit.xml")),
    )
    model = f"stopped by the harness ({server.forced})" if server.forced else guest_end.exit_status(server_rc)
    clock.say("guest", f"{guest_end.exit_status(booted.rc)}; device model {model}")
    if not end.ok:
        clock.say("guest", end.headline)
        for line in end.details:
            print(f"  | {line}", flush=True)
        clock.say("guest", f"console: {outdir / 'console.log'}; device model log: {server.log_path}")
    if server.forced:
        clock.say(
            "server", f"the device model did not exit after the guest: the harness sent {server.forced}"
        )
    return end


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def run_matrix(args: argparse.Namespace) -> int:
    """One run per entry of ``args.matrix``, each in its own subdirectory; then the table, summary.json.

    --append's arguments go to every entry, before the entry's own.
    """
    entries = [matrix.Entry(e.spec, (*args.kernel_args, *e.kernel_args)) for e in args.matrix]
    if args.check:
        rcs = []
        for entry in entries:
            print(f"== {entry.name}")
            rcs.append(preflight.report(check_lines(args, entry.spec, None, entry.kernel_args)))
        return max(rcs)
    top = results_dir(args.out)
    print(f"qemu_tests: matrix of {len(entries)} kernels; results in {top}", flush=True)
    results: list[matrix.KernelResult] = []
    records: list[kcidb.Run] = []
    names: list[str] = []
    for entry in entries:
        spec = entry.spec
        try:
            kernel = preflight.select_kernel(override=spec)
        except ValueError:
            kernel = None
        names.append(matrix.subdir_name(entry.subdir_base(kernel.release if kernel else spec), names))
        sub = results_dir(top / names[-1])
        clock = Clock()
        clock.say("matrix", f"kernel {entry.name}: {sub}")
        run_args = argparse.Namespace(**{**vars(args), "kernel_args": list(entry.kernel_args)})
        records.append(kcidb.Run(sub))
        outcome = run_kernel(run_args, spec, None, sub, clock, records[-1])
        seconds = time.monotonic() - clock.start
        results.append(
            matrix.collect(
                entry.name, outcome.release, outcome.build, outcome.rc, sub, seconds, entry.kernel_args
            )
        )
    matrix.write_summary(top / "summary.json", results)
    write_kcidb(args.kcidb, records, Clock())
    sys.stdout.write("\n" + matrix.table(results))
    print(f"qemu_tests: summary {top / 'summary.json'}", flush=True)
    return matrix.exit_code(results, preflight.EXIT_MISSING)


def report(outdir: Path, rc: int, clock: Clock) -> int:
    """Print KTAP from the guest's JUnit XML; non-zero if anything failed or results are missing."""
    junit = outdir / "junit.xml"
    files = sorted(outdir.glob("junit*.xml"))
    if not junit.exists():
        print(f"qemu_tests: no JUnit results at {junit} (guest exit code {rc})", file=sys.stderr)
        return rc or 1
    suites = [s for f in files for s in ktap.parse_junit(f.read_text())]
    text = ktap.to_ktap(suites)
    sys.stdout.write(text)
    (outdir / "results.ktap").write_text(text)
    failed = sum(c.failed for s in suites for c in s.cases)
    total = sum(len(s.cases) for s in suites)
    clock.say("tests", f"{total} tests, {failed} failed; JUnit XML: {', '.join(map(str, files))}")
    dmesg = outdir / "dmesg.txt"
    splats: dict[str, int] = {}
    if dmesg.exists():
        clock.say("tests", f"guest kernel log: {dmesg}")
        # The same reports the matrix counts; each one is quoted, and any one fails the run.
        log = dmesg.read_text(errors="replace")
        splats = matrix.count_splats(log)
        if splats:
            kmemleak = outdir / "kmemleak.txt"
            leaks = kmemleak.read_text(errors="replace") if kmemleak.exists() else ""
            sys.stdout.write(matrix.quote_splats(log, leaks))
            kinds = ", ".join(f"{k} {n}" for k, n in splats.items())
            clock.say("tests", f"kernel reports in the guest's log: {kinds}; the run fails")
    # The plain closing line CI tools read: "N passed, N failed".
    skipped = sum(c.outcome == "skip" for s in suites for c in s.cases)
    print(f"qemu_tests: {total - failed - skipped} passed, {failed} failed, {skipped} skipped", flush=True)
    if failed or rc or splats:
        return rc or 1
    return 0
