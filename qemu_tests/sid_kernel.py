"""The current kernel: Debian unstable's (sid) generic kernel, booted and built against on bookworm.

    python -m qemu_tests --kernel 7.2                  # fetch and prepare it once, then run the suite on it
    python -m qemu_tests.sid_kernel 7.2                # only fetch and prepare it (or say where it is)
    python -m qemu_tests.sid_kernel 7.2 --print        # the prepared build tree (exit 3 when not prepared)
    python -m qemu_tests.sid_kernel 7.2 --packages     # the sid packages it takes, one a line

A spec of the form ``X.Y`` (``7.2``) is the newest generic ``X.Y`` kernel that the suite
``sid`` of the machine's own Debian archive offers. Its headers package depends on
``gcc-16-for-host``, which bookworm lacks, so nothing from sid is installed: a separate apt
source list (never in /etc/apt) fetches the lists, ``apt-get download`` the packages and
``dpkg-deb -x`` unpacks them into the project's cache, ``~/.cache/vnpu/sid/``:

    apt/                  the sid source list, its package lists and apt's caches
    <release>/files/      the image (usr/lib/modules/R/vmlinuz) and its modules, depmod'ed,
                          which vng finds next to the image and gives the guest
    <release>/source/     linux-source-X.Y configured with the kernel's config for bookworm's
                          gcc (make olddefconfig modules_prepare KERNELRELEASE=R) and the
                          headers package's Module.symvers: vnpu.ko's KDIR
    <release>/prepare.log the make log
    <release>/done.json   written last: what was fetched and how long it took

This module uses the standard library only (the preflight imports it).
docs/kernel.md ("Linux 7.2 from Debian unstable") says why the tree is made this way.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from vnpu_common import cache
from vnpu_common.cli import OneLineArgumentParser, cli_main

SUITE = "sid"
# The series the matrix, CI and ./run.sh test run besides bookworm's 6.12.
CURRENT_SERIES = "7.2"
FALLBACK_ARCHIVE = "http://deb.debian.org/debian"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))
JOBS = 2
# sid's lists are fetched again when older than this: "the newest kernel" is at most a day old.
LISTS_MAX_AGE = 24 * 3600.0
# Host tools the fetch and the prepare need (program or file checked, bookworm package). pahole
# matters beyond BTF: without it Kconfig drops DEBUG_INFO_BTF_MODULES, which changes struct module.
PREPARE_PACKAGES: tuple[tuple[str, str], ...] = (
    ("apt-get", "apt"),
    ("dpkg-deb", "dpkg"),
    ("gcc", "gcc"),
    ("make", "make"),
    ("flex", "flex"),
    ("bison", "bison"),
    ("bc", "bc"),
    ("perl", "perl"),
    ("xz", "xz-utils"),
    ("pahole", "pahole"),
    ("depmod", "kmod"),
    ("/usr/include/libelf.h", "libelf-dev"),
    ("/usr/include/openssl/ssl.h", "libssl-dev"),
)
# Options whose value follows the toolchain, not the kernel: olddefconfig sets them for gcc-12 and
# bookworm's binutils, pahole and openssl. They change generated code, never a struct's layout.
TOOLCHAIN_OPTION = re.compile(
    r"^(CC_|GCC_|AS_|LD_|PAHOLE_|RUSTC_|BINDGEN_|CLANG_|TOOLS_SUPPORT_|OPENSSL_SUPPORTS_)|_VERSION(_TEXT)?$"
)
# Rust (rustc and bindgen) is missing on bookworm, so the prepared tree lacks every option that
# depends on it (Rust drivers, DRM panic's QR code): kconfig_rust_options finds them in the Kconfig
# files. Headers test them only around declarations of Rust-built functions.
_KCONFIG_ENTRY = re.compile(r"^(?:menu)?config (\w+)\s*$")
_KCONFIG_DEPENDS = re.compile(r"^\s*depends on (.*)$")
DONE = "done.json"

_SERIES_SPEC = re.compile(r"^(\d+)\.(\d+)$")
_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)\+deb(\d+)-amd64$")
_IMAGE = re.compile(r"^linux-image-(?P<release>.+)$")


class PrepareError(RuntimeError):
    """The kernel could not be fetched or prepared; the message says what to do."""


Say = Callable[[str, str], None]


def _print_say(phase: str, msg: str) -> None:
    print(f"sid kernel: {phase}: {msg}", flush=True)


# --- specs, packages and the source list -----------------------------------


def is_series(spec: str) -> bool:
    """True for a short spec ``X.Y`` (``7.2``): the newest generic kernel of that series in sid."""
    return _SERIES_SPEC.match(spec) is not None


def release_key(release: str, series: str) -> tuple[int, int, int, int] | None:
    """(7, 2, 13, 14) for a generic release of ``series`` (7.2.13+deb14-amd64), else None."""
    m = _RELEASE.match(release)
    if m is None or f"{m[1]}.{m[2]}" != series:
        return None
    return int(m[1]), int(m[2]), int(m[3]), int(m[4])


# The binary package kinds of one kernel release: linux-KIND-R (the source is per series).
PACKAGE_KINDS = ("image", "binary", "modules", "base", "headers")


def packages(release: str, series: str) -> dict[str, str]:
    """The sid packages one kernel takes, by what each gives."""
    return {
        "image": f"linux-binary-{release}",  # usr/lib/modules/R/vmlinuz
        "modules": f"linux-modules-{release}",  # drm, drm_shmem_helper, gpu-sched, ...
        "config": f"linux-base-{release}",  # usr/lib/modules/R/config
        "symvers": f"linux-headers-{release}",  # Module.symvers (only that: it needs gcc-16)
        "source": f"linux-source-{series}",  # the tree vnpu.ko is built against
    }


def pick_release(names: Iterable[str], series: str) -> str | None:
    """The newest generic release of ``series`` whose packages are all among ``names``."""
    offered = set(names)
    keyed = [
        (key, m["release"])
        for n in offered
        if (m := _IMAGE.match(n)) is not None
        and (key := release_key(m["release"], series)) is not None
        and set(packages(m["release"], series).values()) <= offered
    ]
    return max(keyed)[1] if keyed else None


def archive_uri(sources: Iterable[str]) -> str:
    """The Debian archive the machine's apt sources name (the first that is not the security
    archive), from one-line ``deb URI SUITE ...`` lists or deb822 ``.sources`` files."""
    for text in sources:
        for line in text.splitlines():
            words = line.split("#", 1)[0].split()
            if words[:1] == ["deb"]:
                uris = [w for w in words[1:] if not w.startswith("[") and "=" not in w and "]" not in w]
            elif words[:1] == ["URIs:"]:
                uris = words[1:]
            else:
                continue
            for uri in uris:
                if "://" in uri and "security" not in uri:
                    return uri.rstrip("/")
    return FALLBACK_ARCHIVE


def source_list(uri: str, keyring: str = KEYRING) -> str:
    """The apt source list for sid's main component of ``uri``: its binary packages, and its
    source packages (tools the kernel checks need newer than bookworm's are built from them)."""
    return "".join(f"{kind} [signed-by={keyring}] {uri} {SUITE} main\n" for kind in ("deb", "deb-src"))


def machine_sources() -> list[str]:
    """The texts of the machine's apt source lists."""
    files, directory = SOURCES
    paths = [files] if files.is_file() else []
    if directory.is_dir():
        paths += sorted(p for p in directory.iterdir() if p.suffix in (".list", ".sources"))
    texts = []
    for p in paths:
        try:
            texts.append(p.read_text(errors="replace"))
        except OSError:
            continue
    return texts


# --- the config ------------------------------------------------------------


def parse_config(text: str) -> dict[str, str]:
    """A .config as {option without CONFIG_: value}; ``# X is not set`` reads as 'n'."""
    values = {}
    for line in text.splitlines():
        if m := re.match(r"^CONFIG_(\w+)=(.*)$", line):
            values[m[1]] = m[2]
        elif m := re.match(r"^# CONFIG_(\w+) is not set$", line):
            values[m[1]] = "n"
    return values


def kconfig_depends(texts: Iterable[str]) -> dict[str, str]:
    """Each option's ``depends on`` expressions (joined), from Kconfig file texts."""
    depends: dict[str, str] = {}
    for text in texts:
        name = None
        for line in text.splitlines():
            if m := _KCONFIG_ENTRY.match(line):
                name = m[1]
                depends.setdefault(name, "")
            elif name is not None and (m := _KCONFIG_DEPENDS.match(line)):
                depends[name] += f" {m[1]}"
    return depends


def rust_options(depends: dict[str, str]) -> set[str]:
    """The options that depend on Rust, directly (RUST, RUST_* in their ``depends on``) or through
    another such option."""
    rust = {n for n in depends if n == "RUST" or n.startswith("RUST_")}
    while True:
        more = {
            n
            for n, expr in depends.items()
            if n not in rust and any(w in rust for w in re.findall(r"\w+", expr))
        }
        if not more:
            return rust
        rust |= more


def kconfig_rust_options(tree: Path) -> set[str]:
    return rust_options(kconfig_depends(p.read_text(errors="replace") for p in tree.rglob("Kconfig*")))


def config_differences(debian: dict[str, str], prepared: dict[str, str], rust: set[str]) -> list[str]:
    """Options the prepared tree sets otherwise than the kernel was built, beyond the toolchain's
    and those of ``rust`` (options that need Rust): any of them may change a struct vnpu.ko shares
    with the kernel."""
    keys = sorted(set(debian) | set(prepared))
    return [
        f"CONFIG_{k}: {debian.get(k, 'n')} -> {prepared.get(k, 'n')}"
        for k in keys
        if debian.get(k, "n") != prepared.get(k, "n") and not TOOLCHAIN_OPTION.search(k) and k not in rust
    ]


# --- the cache -------------------------------------------------------------


def cache_root() -> Path:
    return cache.cache_root() / SUITE


@dataclass(frozen=True)
class SidKernel:
    """One sid kernel in the cache: where its files go and what the harness boots and builds with."""

    release: str
    series: str

    @property
    def root(self) -> Path:
        return cache_root() / self.release

    @property
    def files(self) -> Path:
        return self.root / "files"

    @property
    def modules(self) -> Path:
        return self.files / "usr" / "lib" / "modules" / self.release

    @property
    def image(self) -> Path:
        return self.modules / "vmlinuz"

    @property
    def source(self) -> Path:
        return self.root / "source"

    @property
    def log(self) -> Path:
        return self.root / "prepare.log"

    @property
    def done(self) -> Path:
        return self.root / DONE

    def is_prepared(self) -> bool:
        return self.done.is_file() and self.image.is_file()


def prepared_releases(series: str) -> list[str]:
    """Releases of ``series`` prepared in the cache, oldest first."""
    root = cache_root()
    if not root.is_dir():
        return []
    found = [
        (key, d.name)
        for d in root.iterdir()
        if (key := release_key(d.name, series)) is not None and SidKernel(d.name, series).is_prepared()
    ]
    return [r for _, r in sorted(found)]


def current(series: str) -> SidKernel | None:
    """The kernel ``series`` means without the network: the newest prepared one, else the newest the
    cached sid lists offer (not prepared yet), else None."""
    prepared = prepared_releases(series)
    if prepared:
        return SidKernel(prepared[-1], series)
    release = pick_release(Apt().names(series), series) if Apt().has_lists() else None
    return SidKernel(release, series) if release else None


# --- apt, on the sid list only ---------------------------------------------


@dataclass(frozen=True)
class Apt:
    """apt-get and apt-cache on a source list of their own: the machine's apt state stays untouched."""

    root: Path = field(default_factory=lambda: cache_root() / "apt")

    def options(self) -> list[str]:
        return [
            "-o",
            f"Dir::Etc::sourcelist={self.root / 'sources.list'}",
            "-o",
            "Dir::Etc::sourceparts=-",
            "-o",
            f"Dir::State::Lists={self.root / 'lists'}",
            "-o",
            f"Dir::Cache={self.root / 'cache'}",
            "-o",
            f"APT::Sandbox::User={pwd.getpwuid(os.getuid()).pw_name}",
        ]

    def has_lists(self) -> bool:
        lists = self.root / "lists"
        return lists.is_dir() and any(lists.glob("*_Packages*"))

    def lists_age(self) -> float:
        """Seconds since the lists were fetched (infinite without lists)."""
        fetched = [p.stat().st_mtime for p in (self.root / "lists").glob("*_Packages*")]
        return time.time() - max(fetched) if fetched else float("inf")

    def update(self) -> None:
        (self.root / "lists" / "partial").mkdir(parents=True, exist_ok=True)
        (self.root / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        (self.root / "sources.list").write_text(source_list(archive_uri(machine_sources())))
        r = subprocess.run(
            ["apt-get", *self.options(), "update", "-q"], capture_output=True, text=True, check=False
        )
        if r.returncode != 0:
            raise PrepareError(
                f"apt-get update of {SUITE} failed (exit {r.returncode}): {r.stderr.strip()[-500:]}; "
                "check the network and the archive in /etc/apt"
            )

    def refresh(self, say: Say) -> None:
        """Fetch sid's lists when they are older than LISTS_MAX_AGE, or lack the source packages'."""
        age = self.lists_age()
        if age > LISTS_MAX_AGE or not any((self.root / "lists").glob("*_Sources*")):
            say("lists", f"apt-get update of {SUITE} ({self.root / 'sources.list'})")
            self.update()
        else:
            say("lists", f"{SUITE}'s lists from {age / 3600:.1f} h ago ({self.root / 'lists'})")

    def fetch_source(self, name: str, into: Path) -> None:
        """Download sid's source package ``name`` (its .dsc, orig and debian tarballs) into ``into``."""
        into.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(
            ["apt-get", *self.options(), "source", "--download-only", "-q", name],
            cwd=into,
            capture_output=True,
            text=True,
            check=False,
        )
        if r.returncode != 0:
            tail = r.stderr.strip()[-500:]
            raise PrepareError(f"apt-get source {name} failed (exit {r.returncode}): {tail}")

    def names(self, series: str) -> list[str]:
        """The package names of sid that a ``series`` kernel may take (one apt-cache run: each reads
        the whole list)."""
        r = subprocess.run(
            ["apt-cache", *self.options(), "pkgnames", "linux-"], capture_output=True, text=True, check=False
        )
        wanted = (*(f"linux-{kind}-{series}." for kind in PACKAGE_KINDS), f"linux-source-{series}")
        return [n for n in r.stdout.split() if n.startswith(wanted)]

    def download(self, names: list[str], into: Path, say: Say) -> None:
        into.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(
            ["apt-get", *self.options(), "download", *names],
            cwd=into,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        assert proc.stdout is not None
        tail = []
        for line in proc.stdout:
            tail = [*tail[-9:], line.rstrip()]
            if line.startswith("Get:"):  # "Get:1 URI sid/main amd64 NAME VERSION [SIZE]"
                words = line.split()
                say("download", " ".join(words[4:5] + words[-2:]))
        if proc.wait() != 0:
            raise PrepareError(f"apt-get download {' '.join(names)} failed: " + " | ".join(tail))


# --- fetch and prepare -----------------------------------------------------


def locate(what: str) -> str | None:
    """Where a prerequisite is: a file path as is, a program on PATH (or in /usr/sbin, /sbin)."""
    if what.startswith("/"):
        return what if Path(what).exists() else None
    return shutil.which(what) or shutil.which(what, path="/usr/sbin:/sbin")


def missing_requirements() -> list[tuple[str, str]]:
    """(what, package) for every prerequisite of the fetch and the prepare this host lacks."""
    return [(what, package) for what, package in PREPARE_PACKAGES if locate(what) is None]


def _run_logged(cmd: list[str], log: Path, cwd: Path | None = None) -> None:
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        r = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, check=False)
    if r.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise PrepareError("\n".join([f"{' '.join(cmd)} failed (exit {r.returncode}); log: {log}", *tail]))


def ensure_prepared(series: str, say: Say = _print_say, refresh: bool = True) -> SidKernel:
    """The newest ``series`` kernel of sid, fetched and prepared first when the cache lacks it.

    ``refresh``: fetch sid's lists first when they are older than LISTS_MAX_AGE (a few seconds);
    else the newest prepared kernel, without the network.
    """
    if not refresh:
        prepared = prepared_releases(series)
        if not prepared:
            raise PrepareError(
                f"no {series} kernel prepared in {cache_root()}: run without --no-install, "
                f"or python -m qemu_tests.sid_kernel {series}"
            )
        return SidKernel(prepared[-1], series)
    missing = missing_requirements()
    if missing:
        raise PrepareError(
            f"preparing the {series} kernel needs: "
            + ", ".join(w for w, _ in missing)
            + f"; fix: apt-get install {' '.join(sorted({p for _, p in missing}))}"
        )
    apt = Apt()
    apt.refresh(say)
    release = pick_release(apt.names(series), series)
    if release is None:
        raise PrepareError(f"{SUITE} offers no generic {series} kernel with all of its packages")
    kernel = SidKernel(release, series)
    if kernel.is_prepared():
        say("cache", f"{kernel.root} (prepared {json.loads(kernel.done.read_text()).get('finished', '?')})")
        return kernel
    cache.build_once(kernel.done, lambda _: _prepare(kernel, apt, say))
    return kernel


def _prepare(kernel: SidKernel, apt: Apt, say: Say) -> None:
    start = time.monotonic()
    names = packages(kernel.release, kernel.series)
    debs = kernel.root / "debs"
    shutil.rmtree(debs, ignore_errors=True)
    kernel.root.mkdir(parents=True, exist_ok=True)
    kernel.log.write_text("")
    say("download", f"{' '.join(names.values())} into {debs}")
    apt.download(list(names.values()), debs, say)
    size = sum(p.stat().st_size for p in debs.glob("*.deb"))
    downloaded = time.monotonic() - start
    say("download", f"{size / 1e6:.0f} MB in {downloaded:.0f}s")

    shutil.rmtree(kernel.files, ignore_errors=True)
    for what in ("image", "modules", "config", "symvers", "source"):
        (deb,) = debs.glob(f"{names[what]}_*.deb")
        _run_logged(["dpkg-deb", "-x", str(deb), str(kernel.files)], kernel.log)
    tarball = kernel.files / "usr" / "src" / f"{names['source']}.tar.xz"
    say("unpack", f"{tarball.name} -> {kernel.source}")
    shutil.rmtree(kernel.source, ignore_errors=True)
    partial = kernel.root / "source.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    _run_logged(["tar", "-xJf", str(tarball), "-C", str(partial), "--strip-components=1"], kernel.log)
    tarball.unlink()
    partial.rename(kernel.source)

    say("prepare", f"the kernel's config, make olddefconfig modules_prepare KERNELRELEASE={kernel.release}")
    headers = kernel.files / "usr" / "src" / f"linux-headers-{kernel.release}"
    # The headers' .config is the build's (the image's modules/R/config lacks the signing options).
    shutil.copy2(headers / ".config", kernel.source / ".config")
    make = ["nice", "make", "-C", str(kernel.source), f"-j{JOBS}", f"KERNELRELEASE={kernel.release}"]
    _run_logged([*make, "olddefconfig"], kernel.log)
    differences = config_differences(
        parse_config((headers / ".config").read_text()),
        parse_config((kernel.source / ".config").read_text()),
        kconfig_rust_options(kernel.source),
    )
    if differences:
        raise PrepareError(
            f"the prepared {kernel.release} config differs from the image's beyond the toolchain: "
            + "; ".join(differences)
            + " (a missing host tool? python -m qemu_tests --kernel "
            + f"{kernel.series} --check)"
        )
    _run_logged([*make, "modules_prepare"], kernel.log)
    shutil.copy2(headers / "Module.symvers", kernel.source / "Module.symvers")
    _run_logged(["depmod", "-b", str(kernel.files / "usr"), "-a", kernel.release], kernel.log)
    shutil.rmtree(debs)
    prepared = time.monotonic() - start - downloaded
    say("prepare", f"{kernel.source} in {prepared:.0f}s")
    done = {
        "release": kernel.release,
        "packages": list(names.values()),
        "download_bytes": size,
        "download_seconds": round(downloaded),
        "prepare_seconds": round(prepared),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    staged = kernel.root / f".{DONE}.{os.getpid()}"
    staged.write_text(json.dumps(done, indent=2) + "\n")
    os.replace(staged, kernel.done)


@cli_main("python -m qemu_tests.sid_kernel")
def main(argv: list[str] | None = None) -> int:
    p = OneLineArgumentParser(prog="python -m qemu_tests.sid_kernel", description=__doc__.split("\n\n")[0])
    p.add_argument("series", nargs="?", default=CURRENT_SERIES, help=f"X.Y (default {CURRENT_SERIES})")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--print", action="store_true", help="print the prepared build tree (exit 3 when not)")
    what.add_argument("--packages", action="store_true", help="print the sid packages of the newest kernel")
    args = p.parse_args(argv)
    if not is_series(args.series):
        p.error(f"{args.series!r} is not a series X.Y (e.g. {CURRENT_SERIES})")
    if args.print or args.packages:
        kernel = current(args.series)
        if kernel is None or (args.print and not kernel.is_prepared()):
            print(f"sid kernel: {args.series} not prepared ({cache_root()})", file=sys.stderr)
            return 3
        print(kernel.source if args.print else "\n".join(packages(kernel.release, kernel.series).values()))
        return 0
    try:
        kernel = ensure_prepared(args.series)
    except PrepareError as e:
        print(f"sid kernel: {e}", file=sys.stderr)
        return 2
    print(kernel.source)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
