"""sparse, as new as a kernel tree's ``make C=1`` accepts.

A tree says which sparse it takes: ``scripts/checker-valid.sh`` (Linux 6.14 and later) asks it to
parse ``__typeof_unqual__``, and ``make C=1`` stops with "sparse is not available or not up to
date" when it cannot. Bookworm's sparse 0.6.4 cannot; sid's binary package needs glibc 2.38. So
when the machine's sparse is refused, sid's source package of sparse is fetched (on the sid list
of qemu_tests.sid_kernel) and built into ``~/.cache/vnpu/sparse/`` once: one ``make`` of about
15 s, needing only gcc and make. docs/kernel.md, "Upstream patch series", shows where it is used.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from qemu_tests import sid_kernel
from vnpu_common.cache import build_once, cache_root

PACKAGE = "sparse"
Say = Callable[[str], None]


class SparseUnavailable(RuntimeError):
    pass


def accepted(sparse: str, tree: Path) -> bool:
    """Whether ``tree``'s ``make C=1`` takes ``sparse`` (its own checker-valid.sh, when it has one)."""
    if shutil.which(sparse) is None:
        return False
    check = tree / "scripts" / "checker-valid.sh"
    if not check.is_file():  # older trees take any sparse
        return True
    r = subprocess.run(["sh", str(check), sparse], capture_output=True, text=True, check=False)
    return r.stdout.strip() == "1"


def cached_builds() -> list[Path]:
    """The sparse binaries built into the cache, newest source first."""
    return sorted((cache_root() / PACKAGE).glob("*/bin/sparse"), reverse=True)


def _build(orig: Path, into: Path) -> None:
    """Unpack sparse's source tarball and build the ``sparse`` program into ``into``/bin, atomically."""
    with tempfile.TemporaryDirectory(dir=into.parent, prefix=".build-") as tmp:
        with tarfile.open(orig) as tar:
            tar.extractall(tmp, filter="data")
        (src,) = [p for p in Path(tmp).iterdir() if p.is_dir()]
        # Only the checker: no LLVM back end, no GTK viewer, no sqlite indexer, no libxml2 c2xml.
        off = ["HAVE_LLVM=no", "HAVE_GTK=no", "HAVE_SQLITE=no", "HAVE_LIBXML=no"]
        r = subprocess.run(
            ["nice", "make", "-C", str(src), "-j2", *off, "sparse"],
            capture_output=True,
            text=True,
            check=False,
        )
        if r.returncode != 0:
            tail = (r.stdout + r.stderr).strip().splitlines()[-10:]
            raise SparseUnavailable(f"building sparse from {orig.name} failed: " + " | ".join(tail))
        staged = Path(tmp) / "out"
        (staged / "bin").mkdir(parents=True)
        shutil.copy2(src / "sparse", staged / "bin" / "sparse")
        staged.rename(into)


def build_from_sid(say: Say) -> Path:
    """sid's sparse, fetched as a source package and built once into the cache."""
    apt = sid_kernel.Apt()
    apt.refresh(lambda phase, msg: say(f"{phase}: {msg}"))
    with tempfile.TemporaryDirectory() as tmp:
        say(f"apt-get source --download-only {PACKAGE} (sid)")
        apt.fetch_source(PACKAGE, Path(tmp))
        origs = sorted(Path(tmp).glob(f"{PACKAGE}_*.orig.tar.*"))
        if not origs:
            raise SparseUnavailable(f"sid's {PACKAGE} source package has no orig tarball")
        version = origs[-1].name.split("_", 1)[1].split(".orig.tar.")[0]
        target = cache_root() / PACKAGE / version
        say(f"building sparse {version} into {target} (once, about 15 s)")
        build_once(target, lambda _: _build(origs[-1], target))
    return target / "bin" / "sparse"


def ensure(tree: Path, say: Say) -> str:
    """A sparse that ``tree`` accepts: the machine's, else one built into the cache, else sid's, built now."""
    for candidate in ("sparse", *map(str, cached_builds())):
        if accepted(candidate, tree):
            return candidate
    if shutil.which("sparse"):
        say(f"the machine's sparse is too old: {tree / 'scripts' / 'checker-valid.sh'} refuses it")
    try:
        built = build_from_sid(say)
    except (sid_kernel.PrepareError, OSError) as e:
        raise SparseUnavailable(f"{e}; or install a sparse that parses __typeof_unqual__") from e
    if not accepted(str(built), tree):
        raise SparseUnavailable(f"{built} is refused by {tree / 'scripts' / 'checker-valid.sh'} too")
    return str(built)
