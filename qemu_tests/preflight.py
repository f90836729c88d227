"""What the QEMU harness needs from the host, checked before it boots, and the Debian packages for it.

    python -m qemu_tests --check                       # one line per requirement, exit 0 or EXIT_MISSING
    python3 -m qemu_tests.preflight --apt-packages     # what run.sh installs (one package per line)
    python3 -m qemu_tests.preflight --apt-packages --kernel 6.12.117+deb12-rt-amd64   # with that kernel
    python3 -m qemu_tests.preflight --apt-packages --kernel 7.2   # with what fetching sid's 7.2 needs
    python3 -m qemu_tests.preflight --kernel-build-dir # KDIR of the kernel the harness boots

This module uses the standard library only: run.sh runs it with the system
``python3`` before the venv exists, and the module's Makefile asks it for
``KDIR``. The one list of Debian packages lives here (``debian_packages``),
so run.sh, the harness's install phase and the preflight's fix lines cannot
drift apart. docs/qemu_tests.md describes the checks and the kernel choice.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from qemu_tests import debug_kernel, sid_kernel
from vnpu_common import config as vnpu_config
from vnpu_common.cli import OneLineArgumentParser, cli_main

# The kernel series the project targets; within it, the newest generic
# (-amd64) build wins. -rt-amd64 is PREEMPT_RT, -cloud-amd64 has no DRM.
KERNEL_SERIES = (6, 12)
# A kernel release to use instead of the newest installed one, e.g. 6.12.107+deb12-amd64.
KERNEL_ENV = vnpu_config.KERNEL.name
# Exit code of `--check` (and of the harness) when a host requirement is missing:
# distinct from 1 (tests failed) and 2 (usage or harness errors).
EXIT_MISSING = 3

# Debian packages besides the kernel image and headers, and why each is needed.
BASE_PACKAGES = (
    "gcc",  # cffi builds (libteflon.so, the device model's MAC array)
    "libc6-dev",  # libc.a: the system-sleep guest's client is linked -static (qemu_tests/system_sleep.py)
    "make",  # the out-of-tree vnpu.ko build
    "python3-venv",  # run.sh's .venv
    "kmod",  # modprobe/insmod: the guest runs the host's binaries
    "qemu-system-x86",  # qemu-system-x86_64, under TCG
    "busybox-static",  # virtme-ng's initramfs for Debian's modular kernel
    "file",  # virtme-ng runs `file -L busybox` to check that it is static
    f"linux-source-{KERNEL_SERIES[0]}.{KERNEL_SERIES[1]}",  # checkpatch.pl (tests/kernel_style)
    "sparse",  # the upstream series' in-tree build, make C=1 (python -m tools.upstream --check-build)
    "unifdef",  # tests/tools/test_upstream.py checks the series' #ifdef resolution against it
)
PYTHON_DEV_PACKAGE = "python3-dev"  # Python.h, for cffi's embedding mode (libteflon.so)

_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)\+deb(\d+)-amd64$")
_IMAGE = re.compile(r"^linux-image-(?P<release>.+)-unsigned$")
# The names virtme-ng's mkinitramfs.find_busybox tries, in its order.
BUSYBOX_NAMES = ("busybox-static", "busybox.static", "busybox")


# --- the kernel ------------------------------------------------------------


def release_key(release: str) -> tuple[int, int, int, int] | None:
    """(6, 12, 117, 12) for a generic 6.12 Debian release such as 6.12.117+deb12-amd64, else None."""
    m = _RELEASE.match(release)
    if m is None:
        return None
    key = (int(m[1]), int(m[2]), int(m[3]), int(m[4]))
    return key if key[:2] == KERNEL_SERIES else None


def newest_release(releases: Iterable[str]) -> str | None:
    """The newest generic 6.12 release among ``releases`` (other series and flavours ignored)."""
    keyed = [(key, r) for r in releases if (key := release_key(r)) is not None]
    return max(keyed)[1] if keyed else None


def pick_kernel(package_names: Iterable[str]) -> str | None:
    """The newest ``linux-image-6.12.N+debM-amd64-unsigned`` whose ``linux-headers-...`` is also offered.

    Returns the kernel release (``6.12.N+debM-amd64``), or None.
    """
    names = set(package_names)
    releases = [
        m["release"]
        for n in names
        if (m := _IMAGE.match(n)) is not None and f"linux-headers-{m['release']}" in names
    ]
    return newest_release(releases)


def kernel_packages(release: str) -> tuple[str, str]:
    return (f"linux-image-{release}-unsigned", f"linux-headers-{release}")


def apt_package_names() -> list[str]:
    """The 6.12 kernel image and header package names apt knows (empty without apt lists)."""
    series = f"{KERNEL_SERIES[0]}.{KERNEL_SERIES[1]}."
    names: list[str] = []
    for prefix in ("linux-image-", "linux-headers-"):
        try:
            r = subprocess.run(
                ["apt-cache", "pkgnames", prefix + series], capture_output=True, text=True, check=False
            )
        except FileNotFoundError:
            return []
        names += r.stdout.split()
    return names


@dataclass(frozen=True)
class Kernel:
    """A kernel the harness can boot: its image and the build tree vnpu.ko is compiled against."""

    release: str
    image: Path
    build: Path
    debian: bool = True  # installed from apt (/boot, /lib/modules), else a user-built tree


# A kernel spec (``--kernel``, ``--matrix``, $VNPU_KERNEL) is a release or a path.
_RELEASE_SPEC = re.compile(r"^\d+\.\d+[0-9A-Za-z.+_~-]*$")
BZIMAGE = Path("arch/x86/boot/bzImage")  # where an x86 kernel build puts its image


def kernel_spec(text: str) -> str:
    """``text`` when it is a kernel spec: a release (``6.12.117+deb12-rt-amd64``), a series of Debian
    unstable (``7.2``, qemu_tests/sid_kernel.py), a path (has a ``/``) or ``debug`` (the debug
    kernel, qemu_tests/debug_kernel.py).

    Checks the form only: the files are the preflight's to look for.
    """
    if "/" in text or _RELEASE_SPEC.match(text) or text == debug_kernel.SPEC:
        return text
    raise ValueError(
        f"kernel {text!r} is neither a release (6.12.117+deb12-amd64) "
        f"nor a path (./linux, /src/linux/arch/x86/boot/bzImage) "
        f"nor {debug_kernel.SPEC!r} (the debug kernel) "
        f"nor a series of Debian {sid_kernel.SUITE} ({sid_kernel.CURRENT_SERIES})"
    )


def kernel_from_spec(spec: str, kdir: Path | None = None, host: Host | None = None) -> Kernel:
    """The kernel a spec names.

    - a release R: the installed Debian kernel, ``/boot/vmlinuz-R`` and ``/lib/modules/R/build``;
    - a directory: a kernel build tree (``make O=DIR``), booting ``DIR/arch/x86/boot/bzImage``;
    - a file: that image, built against ``kdir``, or against the build tree it sits in;
    - ``debug``: the cached debug kernel's build tree (built or not);
    - a series ``X.Y``: the newest kernel of that series from Debian unstable (sid_kernel), booting
      its image from the cache and built against its prepared source (prepared or not).

    Raises ValueError for a bad spec or an image without a build tree.
    """
    host = host or Host()
    kernel_spec(spec)
    name = ""  # a tree without include/config/kernel.release goes by its image's name
    if spec == debug_kernel.SPEC:
        if kdir is not None:
            raise ValueError("--kdir goes with an image path, not with the debug kernel")
        spec, name = str(debug_kernel.current().build), debug_kernel.SPEC
    if sid_kernel.is_series(spec):
        if kdir is not None:
            raise ValueError(f"--kdir goes with an image path, not with the series {spec}")
        return sid_kernel_of(spec)
    if "/" not in spec:
        if kdir is not None:
            raise ValueError(f"--kdir goes with an image path, not with the release {spec}")
        return host.kernel(spec)
    path = Path(spec).expanduser().absolute()
    if kdir is not None:
        image, build = (path / BZIMAGE if path.is_dir() else path), kdir.expanduser().absolute()
    elif path.is_dir() or not path.exists():
        image, build = path / BZIMAGE, path
    elif path.parts[-len(BZIMAGE.parts) :] == BZIMAGE.parts:
        image, build = path, path.parents[len(BZIMAGE.parts) - 1]
    else:
        raise ValueError(f"{path} is not in a kernel build tree: give the tree with --kdir DIR")
    release_file = build / "include" / "config" / "kernel.release"
    try:
        release = release_file.read_text().strip()
    except OSError:
        release = ""
    return Kernel(release or name or image.name, image, build, debian=False)


def sid_kernel_of(series: str) -> Kernel:
    """The kernel a series spec names, from the cache (sid_kernel.current): prepared or not yet."""
    found = sid_kernel.current(series)
    if found is None:  # nothing fetched yet: where the newest one will be, under the series' name
        return Kernel(
            series, sid_kernel.cache_root() / series / "vmlinuz", sid_kernel.cache_root() / series, False
        )
    return Kernel(found.release, found.image, found.source, debian=False)


@dataclass(frozen=True)
class Host:
    """Where the checks look. The defaults are this machine; tests pass a fake one."""

    root: Path = Path("/")
    path: str | None = None  # PATH for programs; None: the environment's
    python_include: Path = field(default_factory=lambda: Path(sysconfig.get_path("include")))
    venv_bin: Path = field(default_factory=lambda: Path(sys.executable).parent)
    apt_names: Callable[[], list[str]] = apt_package_names

    def kernel(self, release: str) -> Kernel:
        return Kernel(
            release,
            self.root / "boot" / f"vmlinuz-{release}",
            self.root / "lib" / "modules" / release / "build",
        )

    def which(self, name: str) -> str | None:
        return shutil.which(name, path=self.path)

    def which_sbin(self, name: str) -> str | None:
        """Also /usr/sbin and /sbin, which a non-root PATH often lacks."""
        sbin = os.pathsep.join(str(self.root / d) for d in ("usr/sbin", "sbin"))
        path = self.path if self.path is not None else os.environ.get("PATH", "")
        return shutil.which(name, path=f"{path}{os.pathsep}{sbin}")


def installed_releases(host: Host) -> list[str]:
    """Releases with both an image in /boot and a build tree in /lib/modules."""
    modules = host.root / "lib" / "modules"
    if not modules.is_dir():
        return []
    return sorted(
        d.name for d in modules.iterdir() if (d / "build").is_dir() and host.kernel(d.name).image.is_file()
    )


def select_kernel(
    host: Host | None = None, override: str | None = None, kdir: Path | None = None
) -> Kernel | None:
    """The kernel to boot: ``override``, else $VNPU_KERNEL, else the newest installed generic 6.12 kernel.

    An override is a kernel spec (kernel_from_spec) and is taken as is, even
    when its files are missing, so the check can say which file is missing.
    Raises ValueError for a bad spec.
    """
    host = host or Host()
    spec = override or vnpu_config.KERNEL.get()
    if spec:
        return kernel_from_spec(spec, kdir, host)
    release = newest_release(installed_releases(host))
    return host.kernel(release) if release else None


def debian_packages(
    host: Host | None = None, release: str | None = None, debug: bool = False, sid: bool = False
) -> list[str]:
    """Every Debian package the project needs: what run.sh and the harness's install phase install.

    The kernel is ``release``, else the newest one apt offers (see pick_kernel).
    ``debug``: also what building the debug kernel needs (CI does not build it).
    ``sid``: also what fetching and preparing a kernel of Debian unstable needs (sid_kernel).
    Raises LookupError when apt offers no 6.12 generic kernel with headers
    (typically: no apt lists yet; ``apt-get update`` first).
    """
    host = host or Host()
    release = release or pick_kernel(host.apt_names())
    if release is None:
        raise LookupError(
            "apt offers no linux-image-6.12.*-amd64-unsigned with matching linux-headers (run apt-get update)"
        )
    packages = [*BASE_PACKAGES, *kernel_packages(release)]
    if not (host.python_include / "Python.h").is_file():
        packages.append(PYTHON_DEV_PACKAGE)
    if debug:
        packages += [p for _, p in debug_kernel.BUILD_PACKAGES if p not in packages]
    if sid:
        packages += [p for _, p in sid_kernel.PREPARE_PACKAGES if p not in packages]
    return packages


# --- the checks ------------------------------------------------------------


@dataclass(frozen=True)
class Requirement:
    """One host requirement: whether it is met, what was found or is missing, and the fix."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    packages: tuple[str, ...] = ()  # the Debian packages the fix installs

    def line(self) -> str:
        status = "ok" if self.ok else "MISSING"
        text = f"{status:<8} {self.name}: {self.detail}"
        return text if self.ok or not self.fix else f"{text}; fix: {self.fix}"


def _apt(name: str, ok: bool, detail: str, *packages: str) -> Requirement:
    return Requirement(name, ok, detail, f"apt-get install {' '.join(packages)}", packages)


def is_static_elf(path: Path) -> bool:
    """True for an ELF executable without a program interpreter (statically linked or static-pie)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2:  # ELFCLASS64 only (amd64)
                return False
            order = "little" if head[5] == 1 else "big"
            phoff = int.from_bytes(head[32:40], order)
            phentsize = int.from_bytes(head[54:56], order)
            phnum = int.from_bytes(head[56:58], order)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return False
    pt_interp = 3
    types = [int.from_bytes(table[i : i + 4], order) for i in range(0, len(table), phentsize)]
    return len(types) == phnum and pt_interp not in types


def _kernel_config(kernel: Kernel) -> dict[str, str]:
    """The build tree's kernel config (include/config/auto.conf, else .config) as a dict."""
    for name in ("include/config/auto.conf", ".config"):
        path = kernel.build / name
        if path.is_file():
            config = {}
            for line in path.read_text(errors="replace").splitlines():
                key, sep, value = line.partition("=")
                if sep and key.startswith("CONFIG_"):
                    config[key] = value.strip().strip('"')
            return config
    return {}


def kernel_compiler_text(kernel: Kernel) -> str:
    """The compiler the kernel was built with (CONFIG_CC_VERSION_TEXT), '' when its tree does not say."""
    return _kernel_config(kernel).get("CONFIG_CC_VERSION_TEXT", "")


def compiler_package(compiler: str) -> str:
    """The Debian package of a compiler command: x86_64-linux-gnu-gcc-12 -> gcc-12."""
    m = re.search(r"(gcc|clang)-(\d+)$", compiler)
    return f"{m[1]}-{m[2]}" if m else compiler


def check_debug_build() -> list[Requirement]:
    """What building the debug kernel needs, and whether the cache already holds it."""
    kernel = debug_kernel.current()
    if kernel.is_built():
        return [Requirement("debug kernel", True, f"built: {kernel.root}")]
    reqs = []
    for what, package in debug_kernel.BUILD_PACKAGES:
        found = debug_kernel.locate(what)
        reqs.append(
            _apt(f"debug kernel build: {Path(what).name}", found is not None, found or f"no {what}", package)
        )
    reqs.append(
        Requirement(
            "debug kernel", True, f"not built yet: the run builds it first (20-60 min) in {kernel.root}"
        )
    )
    return reqs


def check_sid_prepare(series: str) -> list[Requirement]:
    """What fetching and preparing a kernel of Debian unstable needs, and whether the cache holds it."""
    reqs = []
    for what, package in sid_kernel.PREPARE_PACKAGES:
        found = sid_kernel.locate(what)
        reqs.append(
            _apt(f"{series} prepare: {Path(what).name}", found is not None, found or f"no {what}", package)
        )
    kernel = sid_kernel.current(series)
    if kernel is not None and kernel.is_prepared():
        reqs.append(Requirement(f"{series} kernel", True, f"{kernel.release} prepared: {kernel.root}"))
    else:
        reqs.append(
            Requirement(
                f"{series} kernel",
                True,
                f"not prepared yet: the run fetches the newest generic {series} kernel from Debian "
                f"{sid_kernel.SUITE} (about 290 MB) and prepares its source (1-4 min) "
                f"in {sid_kernel.cache_root()}",
            )
        )
    return reqs


def check_kernel(host: Host, override: str | None = None, kdir: Path | None = None) -> list[Requirement]:
    """Image, build tree, DRM accel support and the kernel's own compiler."""
    spec = override or vnpu_config.KERNEL.get() or ""
    if sid_kernel.is_series(spec):
        reqs = check_sid_prepare(spec)
        found = sid_kernel.current(spec)
        if found is None or not found.is_prepared():
            return reqs  # the tree's checks below need the tree: the run prepares it
        return reqs + _check_kernel_files(host, override, kdir)
    if spec == debug_kernel.SPEC:
        reqs = check_debug_build()
        if not debug_kernel.current().is_built():
            return reqs  # the tree's checks below need the tree: the build makes it as the fragment says
        return reqs + _check_kernel_files(host, override, kdir)
    return _check_kernel_files(host, override, kdir)


def _check_kernel_files(host: Host, override: str | None, kdir: Path | None) -> list[Requirement]:
    try:
        kernel = select_kernel(host, override, kdir)
    except ValueError as e:
        return [Requirement("kernel", False, str(e))]
    if kernel is None:
        release = pick_kernel(host.apt_names()) or "6.12.N+deb12-amd64"
        return [
            _apt(
                "kernel",
                False,
                f"no generic 6.12 kernel with headers installed (/boot/vmlinuz-R and /lib/modules/R/build; "
                f"or set {KERNEL_ENV}=R)",
                *kernel_packages(release),
            )
        ]
    if kernel.debian:
        image, headers = kernel_packages(kernel.release)
        reqs = [
            _apt("kernel image", kernel.image.is_file(), str(kernel.image), image),
            _apt("kernel headers", kernel.build.is_dir(), str(kernel.build), headers),
        ]
    else:
        reqs = [
            Requirement(
                "kernel image",
                kernel.image.is_file(),
                str(kernel.image),
                "build it (make bzImage) or name the image",
            ),
            Requirement(
                "kernel build tree",
                (kernel.build / "Makefile").is_file(),
                str(kernel.build),
                "name the tree the image was built in (--kdir DIR, after make modules_prepare)",
            ),
        ]
    if not kernel.build.is_dir():
        return reqs
    config = _kernel_config(kernel)
    if config.get("CONFIG_DRM_ACCEL") != "y":
        reqs.append(
            Requirement(
                "kernel config",
                False,
                f"{kernel.release} has no CONFIG_DRM_ACCEL=y (the -cloud flavour has no DRM)",
                f"use a generic -amd64 kernel ({KERNEL_ENV})" if kernel.debian else "enable CONFIG_DRM_ACCEL",
            )
        )
    version_text = config.get("CONFIG_CC_VERSION_TEXT", "")
    if not version_text:
        reqs.append(Requirement("kernel compiler", False, f"no CONFIG_CC_VERSION_TEXT in {kernel.build}"))
        return reqs
    compiler = version_text.split()[0]
    found = host.which(compiler)
    reqs.append(
        _apt(
            "kernel compiler",
            found is not None,
            found or f"{compiler} ({version_text})",
            compiler_package(compiler),
        )
    )
    return reqs


def check_host(
    host: Host | None = None, guest_ram: int = 1 << 30, kernel: str | None = None, kdir: Path | None = None
) -> list[Requirement]:
    """Every host requirement of the harness, in the order a reader fixes them."""
    host = host or Host()
    reqs: list[Requirement] = []
    qemu = host.which("qemu-system-x86_64")
    reqs.append(_apt("qemu", qemu is not None, qemu or "qemu-system-x86_64 not on PATH", "qemu-system-x86"))
    # KVM or TCG is the harness's choice (qemu_tests.accel, --accel): its --check adds that line here.

    busybox = next((p for n in BUSYBOX_NAMES if (p := host.which_sbin(n))), None)
    if busybox is None:
        reqs.append(
            _apt(
                "busybox",
                False,
                "no busybox (virtme-ng builds the guest's initramfs with it)",
                "busybox-static",
            )
        )
    else:
        static = is_static_elf(Path(busybox))
        detail = busybox if static else f"{busybox} is dynamically linked; virtme-ng needs a static one"
        reqs.append(_apt("busybox", static, detail, "busybox-static"))
    file_cmd = host.which("file")
    reqs.append(
        _apt("file", file_cmd is not None, file_cmd or "no `file` (virtme-ng checks busybox with it)", "file")
    )

    reqs += check_kernel(host, kernel, kdir)
    make = host.which("make")
    reqs.append(_apt("make", make is not None, make or "make not on PATH", "make"))
    modprobe = host.which_sbin("modprobe")
    reqs.append(
        _apt("kmod", modprobe is not None, modprobe or "no modprobe (the guest runs the host's)", "kmod")
    )

    python_h = host.python_include / "Python.h"
    reqs.append(_apt("python headers", python_h.is_file(), str(python_h), PYTHON_DEV_PACKAGE))

    shm = host.root / "dev" / "shm"
    need = f"{guest_ram >> 20} MiB for the guest RAM file"
    try:
        free = shutil.disk_usage(shm).free
    except OSError:
        reqs.append(Requirement("/dev/shm", False, f"{shm} missing; {need}", "mount -t tmpfs tmpfs /dev/shm"))
    else:
        ok = free >= guest_ram
        fix = "" if ok else "mount -o remount,size=2G /dev/shm (a container: docker run --shm-size=2g)"
        reqs.append(Requirement("/dev/shm", ok, f"{free >> 20} MiB free, {need}", fix))

    vng = host.venv_bin / "vng"
    ok = vng.is_file() and (host.venv_bin / "virtme-run").is_file()
    reqs.append(
        Requirement("virtme-ng", ok, str(vng), "" if ok else f"{host.venv_bin / 'pip'} install virtme-ng")
    )
    return reqs


def report(reqs: Sequence[Requirement], out: TextIO | None = None, only_missing: bool = False) -> int:
    """Print the lines; EXIT_MISSING when something is missing, else 0."""
    for r in reqs:
        if not (only_missing and r.ok):
            print(f"preflight: {r.line()}", file=out or sys.stdout)
    return 0 if all(r.ok for r in reqs) else EXIT_MISSING


def _debian_release(text: str) -> str:
    try:
        kernel_spec(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if text == debug_kernel.SPEC or sid_kernel.is_series(text):
        return text
    if "/" in text:
        raise argparse.ArgumentTypeError(f"{text} is a path; apt installs releases (6.12.117+deb12-rt-amd64)")
    return text


@cli_main("python3 -m qemu_tests.preflight")
def main(argv: list[str] | None = None) -> int:
    p = OneLineArgumentParser(prog="python3 -m qemu_tests.preflight", description=__doc__.split("\n\n")[0])
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--apt-packages", action="store_true", help="print the Debian packages to install")
    what.add_argument("--kernel-build-dir", action="store_true", help="print the chosen kernel's build tree")
    p.add_argument(
        "--kernel",
        metavar="RELEASE",
        type=_debian_release,
        help="with --apt-packages: this Debian kernel instead of the newest one apt offers; "
        f"{debug_kernel.SPEC!r}: the newest one plus what the debug kernel's build needs; "
        f"a series of Debian {sid_kernel.SUITE} ({sid_kernel.CURRENT_SERIES}): the newest one plus what "
        "fetching and preparing that kernel needs",
    )
    args = p.parse_args(argv)
    if args.apt_packages:
        try:
            debug = args.kernel == debug_kernel.SPEC
            sid = args.kernel is not None and sid_kernel.is_series(args.kernel)
            release = None if debug or sid else args.kernel
            print("\n".join(debian_packages(release=release, debug=debug, sid=sid)))
        except LookupError as e:
            print(f"preflight: {e}", file=sys.stderr)
            return EXIT_MISSING
        return 0
    try:
        kernel = select_kernel()
    except ValueError as e:
        print(f"preflight: {e} (${KERNEL_ENV})", file=sys.stderr)
        return EXIT_MISSING
    if kernel is None:
        print("preflight: no generic 6.12 kernel with headers installed", file=sys.stderr)
        return EXIT_MISSING
    print(kernel.build)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
