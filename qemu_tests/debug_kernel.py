"""The debug kernel: Debian's 6.12 source built once with KASAN, lockdep, debugobjects and kmemleak.

    python -m qemu_tests --kernel debug          # build it if the cache lacks it, then run the suite on it
    python -m qemu_tests.debug_kernel            # only build it (or say where the cached one is)
    python -m qemu_tests.debug_kernel --print    # the cached build tree's path (exit 3 when not built)

The source is /usr/src/linux-source-6.12.tar.xz (Debian's linux-source-6.12),
configured as ``make defconfig`` plus the committed fragment
qemu_tests/debug_kernel.config (merge_config.sh, then olddefconfig, then a
check that every line of the fragment holds). The result lives in
``~/.cache/vnpu/kernels/<name>/``, where <name> carries the source package's
version and a hash of the fragment and the compiler, so a change to either
builds a new kernel next to the old one:

    source/   the unpacked source
    build/    make O=build: arch/x86/boot/bzImage, the modules, and what an
              out-of-tree module build needs (the harness's KDIR)
    build.log the full make log
    done.json written last: a tree without it is an interrupted build

This module uses the standard library only (the preflight imports it).
docs/qemu_tests.md shows a build and a run.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from vnpu_common import cache
from vnpu_common.cli import OneLineArgumentParser, cli_main

# The --kernel / --matrix word that names this kernel.
SPEC = "debug"
SOURCE_PACKAGE = "linux-source-6.12"
SOURCE_TARBALL = Path("/usr/src") / f"{SOURCE_PACKAGE}.tar.xz"
FRAGMENT = Path(__file__).resolve().with_name("debug_kernel.config")
# The kernel's own compiler for 6.12 on bookworm (the Debian kernels are built with it too).
COMPILER = "gcc"
# Debian packages the build needs beyond the harness's own (preflight.BASE_PACKAGES): the
# kernel's build prerequisites (Documentation/process/changes.rst) and the source.
BUILD_PACKAGES: tuple[tuple[str, str], ...] = (
    # (program or file checked, package)
    ("gcc", "gcc"),
    ("make", "make"),
    ("flex", "flex"),
    ("bison", "bison"),
    ("bc", "bc"),
    ("perl", "perl"),
    ("xz", "xz-utils"),
    ("/usr/include/libelf.h", "libelf-dev"),
    ("/usr/include/openssl/ssl.h", "libssl-dev"),
    ("depmod", "kmod"),
    (str(SOURCE_TARBALL), SOURCE_PACKAGE),
)
JOBS = 2
# virtme-ng's module directory for a build tree (.virtme_mods): vng would make it at the first
# boot; making it at the end of the build keeps concurrent boots from racing on it.
VIRTME_PREP = Path(sys.executable).parent / "virtme-prep-kdir-mods"
PROGRESS_SECONDS = 30.0
DONE = "done.json"


class BuildError(RuntimeError):
    """The debug kernel could not be configured or built; the message says where to look."""


def cache_root() -> Path:
    """Where built kernels live: ``kernels/`` in the project's one cache root."""
    return cache.cache_root() / "kernels"


def _first_line(cmd: list[str]) -> str:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        return ""
    return r.stdout.splitlines()[0].strip() if r.returncode == 0 and r.stdout else ""


def source_version() -> str:
    """The installed linux-source-6.12 package's version (6.12.117-1~deb12u1); '' when not installed."""
    return _first_line(["dpkg-query", "-W", "-f=${Version}\\n", SOURCE_PACKAGE])


@dataclass(frozen=True)
class DebugKernel:
    """One cached debug kernel: where it lives and what it was built from."""

    version: str  # the source package's version
    config_hash: str  # of the fragment and the compiler

    @property
    def name(self) -> str:
        version = re.sub(r"[^\w.+-]", "_", self.version)
        return f"{SOURCE_PACKAGE}-{version}-debug-{self.config_hash}"

    @property
    def root(self) -> Path:
        return cache_root() / self.name

    @property
    def source(self) -> Path:
        return self.root / "source"

    @property
    def build(self) -> Path:
        return self.root / "build"

    @property
    def image(self) -> Path:
        return self.build / "arch" / "x86" / "boot" / "bzImage"

    @property
    def log(self) -> Path:
        return self.root / "build.log"

    @property
    def done(self) -> Path:
        return self.root / DONE

    def is_built(self) -> bool:
        return self.done.is_file() and self.image.is_file()


def config_hash(fragment: bytes, compiler: str) -> str:
    return hashlib.sha256(fragment + b"\0" + compiler.encode()).hexdigest()[:12]


def current() -> DebugKernel:
    """The debug kernel the installed source, the committed fragment and the compiler make."""
    return DebugKernel(
        version=source_version() or "unknown",
        config_hash=config_hash(FRAGMENT.read_bytes(), _first_line([COMPILER, "--version"])),
    )


# --- the fragment ----------------------------------------------------------

_SET = re.compile(r"^(CONFIG_\w+)=(.*)$")
_UNSET = re.compile(r"^# (CONFIG_\w+) is not set$")


def parse_config(text: str) -> dict[str, str]:
    """A .config or fragment as {option: value}; ``# X is not set`` and ``X=n`` both read as 'n'."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if m := _SET.match(line):
            values[m[1]] = m[2]
        elif m := _UNSET.match(line):
            values[m[1]] = "n"
    return values


def unmet(fragment: dict[str, str], final: dict[str, str]) -> list[str]:
    """Fragment lines the final .config does not honour (Kconfig drops a value whose dependencies fail)."""
    return [
        f"{key}={want} (got {final.get(key, 'n')})"
        for key, want in fragment.items()
        if final.get(key, "n") != want
    ]


# --- the build -------------------------------------------------------------


def locate(what: str) -> str | None:
    """Where a build prerequisite is: a file path as is, a program on PATH (or in /usr/sbin, /sbin)."""
    if what.startswith("/"):
        return what if Path(what).exists() else None
    return shutil.which(what) or shutil.which(what, path="/usr/sbin:/sbin")


def missing_requirements() -> list[tuple[str, str]]:
    """(what, package) for every build prerequisite this host lacks."""
    return [(what, package) for what, package in BUILD_PACKAGES if locate(what) is None]


Say = Callable[[str, str], None]


def _print_say(phase: str, msg: str) -> None:
    print(f"debug kernel: {phase}: {msg}", flush=True)


@contextmanager
def _lock(path: Path, say: Say) -> Iterator[None]:
    """One builder per cache entry: a second run waits for the first and then finds the kernel built."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("build", f"another run is building this kernel; waiting for it ({path})")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _make(kernel: DebugKernel, *targets: str) -> list[str]:
    # nice: the machine's cores are shared; the build must not starve other work.
    return ["nice", "make", "-C", str(kernel.source), f"O={kernel.build}", f"-j{JOBS}", *targets]


def _run_logged(cmd: list[str], log: Path, on_line: Callable[[str], None] | None = None) -> int:
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            f.write(line)
            if on_line is not None:
                on_line(line)
        return proc.wait()


def _fail(kernel: DebugKernel, what: str) -> BuildError:
    tail = kernel.log.read_text(errors="replace").splitlines()[-15:] if kernel.log.exists() else []
    return BuildError("\n".join([f"{what}; full log: {kernel.log}", *tail]))


# Kbuild's quiet output: one line per object ("  CC [M]  drivers/accel/ivpu/ivpu_drv.o").
_COMPILED = re.compile(r"^\s+(CC|AS)(\s\[M\])?\s+\S+\.o$")


def ensure_built(say: Say = _print_say, kernel: DebugKernel | None = None) -> DebugKernel:
    """The cached debug kernel, built first when the cache lacks it (20-60 minutes on 2 cores)."""
    kernel = kernel or current()
    if kernel.is_built():
        say("cache", f"{kernel.root} (built {json.loads(kernel.done.read_text()).get('finished', '?')})")
        return kernel
    missing = missing_requirements()
    if missing:
        raise BuildError(
            "the debug kernel build needs: "
            + ", ".join(w for w, _ in missing)
            + f"; fix: apt-get install {' '.join(sorted({p for _, p in missing}))}"
        )
    with _lock(cache_root() / f"{kernel.name}.lock", say):
        if kernel.is_built():  # another run built it while this one waited
            return ensure_built(say, kernel)
        _build(kernel, say)
    return kernel


def _build(kernel: DebugKernel, say: Say) -> None:
    start = time.monotonic()
    kernel.root.mkdir(parents=True, exist_ok=True)
    kernel.log.write_text("")
    say("build", f"{kernel.name}; log {kernel.log}")
    if not (kernel.source / "Makefile").is_file():
        say("extract", f"{SOURCE_TARBALL} -> {kernel.source}")
        shutil.rmtree(kernel.source, ignore_errors=True)
        partial = kernel.root / "source.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        tar = ["tar", "-xJf", str(SOURCE_TARBALL), "-C", str(partial), "--strip-components=1"]
        if _run_logged(tar, kernel.log) != 0:
            raise _fail(kernel, f"unpacking {SOURCE_TARBALL} failed")
        partial.rename(kernel.source)

    say("config", f"make defconfig + {FRAGMENT.name} (merge_config.sh) + olddefconfig")
    kernel.build.mkdir(exist_ok=True)
    config = kernel.build / ".config"
    steps = [
        _make(kernel, "defconfig"),
        [
            str(kernel.source / "scripts" / "kconfig" / "merge_config.sh"),
            "-m",
            "-O",
            str(kernel.build),
            str(config),
            str(FRAGMENT),
        ],
        _make(kernel, "olddefconfig"),
    ]
    for cmd in steps:
        if _run_logged(cmd, kernel.log) != 0:
            raise _fail(kernel, f"configuring failed: {' '.join(cmd)}")
    bad = unmet(parse_config(FRAGMENT.read_text()), parse_config(config.read_text()))
    if bad:
        raise BuildError(f"{FRAGMENT} asks for options the kernel's Kconfig refused: {'; '.join(bad)}")

    say("compile", f"make -j{JOBS} bzImage modules (nice); progress every {PROGRESS_SECONDS:.0f}s")
    compiled = 0
    last = time.monotonic()
    lock = threading.Lock()

    def on_line(line: str) -> None:
        nonlocal compiled, last
        if _COMPILED.match(line.rstrip("\n")):
            with lock:
                compiled += 1
                now = time.monotonic()
                if now - last >= PROGRESS_SECONDS:
                    last = now
                    say("compile", f"{compiled} objects compiled ({(now - start) / 60:.1f} min)")

    if _run_logged(_make(kernel, "bzImage", "modules"), kernel.log, on_line) != 0:
        raise _fail(kernel, "the kernel build failed")
    say("compile", f"{compiled} objects compiled; {kernel.image}")

    if VIRTME_PREP.is_file():
        with open(kernel.log, "a") as f:
            r = subprocess.run(
                [str(VIRTME_PREP)], cwd=kernel.build, stdout=f, stderr=subprocess.STDOUT, check=False
            )
        if r.returncode != 0:
            raise _fail(kernel, "virtme-prep-kdir-mods failed")
    release = (kernel.build / "include" / "config" / "kernel.release").read_text().strip()
    seconds = time.monotonic() - start
    kernel.done.write_text(
        json.dumps(
            {
                "release": release,
                "source_version": kernel.version,
                "config_hash": kernel.config_hash,
                "objects": compiled,
                "seconds": round(seconds),
                "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
            },
            indent=2,
        )
        + "\n"
    )
    say("done", f"{release} in {seconds / 60:.1f} min; {kernel.build}")


@cli_main("python -m qemu_tests.debug_kernel")
def main(argv: list[str] | None = None) -> int:
    p = OneLineArgumentParser(prog="python -m qemu_tests.debug_kernel", description=__doc__.split("\n\n")[0])
    p.add_argument("--print", action="store_true", help="print the cached build tree (exit 3 when not built)")
    args = p.parse_args(argv)
    kernel = current()
    if args.print:
        if not kernel.is_built():
            print(f"debug kernel: not built ({kernel.root})", file=sys.stderr)
            return 3
        print(kernel.build)
        return 0
    try:
        ensure_built(kernel=kernel)
    except BuildError as e:
        print(f"debug kernel: {e}", file=sys.stderr)
        return 2
    print(kernel.build)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
