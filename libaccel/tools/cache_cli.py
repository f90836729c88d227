"""``accel cache``: what the stack keeps in its cache directory, and clearing it.

Everything the stack builds or downloads on first use lives under one root
(:func:`vnpu_common.cache.cache_root`: ``$VNPU_CACHE_DIR``, else ``$XDG_CACHE_HOME/vnpu``, else
``~/.cache/vnpu``). ``accel cache`` lists its entries with their size and what they are;
``accel cache --clear`` removes what the stack makes again by itself when it needs it (builds, the
compile cache), and keeps the QEMU harness's kernels and downloads unless they are named.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from vnpu_common.cache import cache_root
from vnpu_common.cli import ExitCode, os_error_words

#: Entry name (or prefix, ending in "-") -> (what it is, rebuilt by itself when removed).
KINDS: dict[str, tuple[str, bool]] = {
    "compile": ("the compile cache: compiled partitions and placements, by model", True),
    "teflon-": ("a build of libteflon.so (one per source version)", True),
    "mac-array-": ("a build of the MAC array's C kernels (one per source version)", True),
    "trace-": ("a build of accel trace's ioctl interposer", True),
    "ort-ep-": ("a build of the onnxruntime execution provider library", True),
    "litert-": ("a build of the LiteRT compiler plugin and dispatch library", True),
    "accel": ("the QEMU harness's answers about KVM on this host", True),
    "checkpatch": ("the kernel's checkpatch.pl, unpacked for the style tests", True),
    "kernels": ("kernels the QEMU harness built (the debug kernel: an hour to rebuild)", False),
    "sid": ("Debian unstable's 7.2 kernel, fetched for --kernel 7.2", False),
    "upstream": ("the kernel tree tools.upstream applies its series to", False),
}


@dataclass(frozen=True)
class CacheEntry:
    name: str
    bytes: int
    what: str
    rebuilt: bool  # the stack makes it again by itself when it is gone


def _kind(name: str) -> tuple[str, bool]:
    for key, kind in KINDS.items():
        if name == key or (key.endswith("-") and name.startswith(key)):
            return kind
    return ("not the stack's (left alone by --clear)", False)


def _size(path: Path) -> int:
    if path.is_symlink() or not path.is_dir():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if not p.is_symlink() and p.is_file())


def entries(root: Path) -> list[CacheEntry]:
    """The cache's entries (hidden files, such as lock files, left out), by name."""
    if not root.is_dir():
        return []
    out = []
    for path in sorted(root.iterdir()):
        if path.name.startswith("."):
            continue
        what, rebuilt = _kind(path.name)
        out.append(CacheEntry(path.name, _size(path), what, rebuilt))
    return out


def human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def add_cache_command(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "cache",
        help="what the stack keeps in its cache directory (builds, compiled models, kernels); --clear",
        description="List the cache directory's entries, or remove them. Example: accel cache --clear",
    )
    p.add_argument(
        "--clear",
        nargs="*",
        metavar="NAME",
        help="remove these entries; with no NAME, every entry the stack rebuilds by itself",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def cmd_cache(args: argparse.Namespace) -> int:
    root = cache_root()
    found = entries(root)
    if args.clear is None:
        if args.json:
            print(json.dumps({"root": str(root), "entries": [asdict(e) for e in found]}, indent=1))
            return ExitCode.OK
        print(f"cache: {root} ({human(sum(e.bytes for e in found))} in {len(found)} entries)")
        width = max((len(e.name) for e in found), default=0)
        for e in found:
            print(f"  {e.name:<{width}}  {human(e.bytes):>10}  {e.what}")
        return ExitCode.OK
    by_name = {e.name: e for e in found}
    unknown = [n for n in args.clear if n not in by_name]
    if unknown:
        print(f"accel: cache: no entry {unknown[0]!r} in {root} (accel cache lists them)", file=sys.stderr)
        return ExitCode.USAGE
    chosen = [by_name[n] for n in args.clear] if args.clear else [e for e in found if e.rebuilt]
    freed = 0
    for e in chosen:
        path = root / e.name
        try:
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        except OSError as err:
            print(f"accel: cache: cannot remove {path}: {os_error_words(err)}", file=sys.stderr)
            return ExitCode.BAD_FILE
        freed += e.bytes
    kept = [e.name for e in found if e not in chosen]
    print(
        f"cache: removed {len(chosen)} entries ({human(freed)})"
        + (f"; kept {', '.join(kept)}" if kept else "")
    )
    return ExitCode.OK
