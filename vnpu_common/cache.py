"""The project's cache directory, and building a file into it once.

What is built on first use (libteflon.so, the device model's MAC array), the compile cache and the
tests' tool checkouts live under one root: ``$VNPU_CACHE_DIR``, else ``$XDG_CACHE_HOME/vnpu``, else
``~/.cache/vnpu``. A build goes into a directory named by a hash of its inputs, so an edit rebuilds
and hosts sharing the cache share the build.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from vnpu_common import config

ENV = config.CACHE_DIR.name

__all__ = ["ENV", "build_once", "cache_root", "content_hash", "publish"]


def cache_root() -> Path:
    """``$VNPU_CACHE_DIR``, else ``$XDG_CACHE_HOME/vnpu``, else ``~/.cache/vnpu``."""
    root = config.CACHE_DIR.get()
    if root is not None:
        return root
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vnpu"


def build_once(target: Path, build: Callable[[Path], object], announce: str | None = None) -> Path:
    """``target``, after ``build(target.parent)`` made it if it did not exist yet.

    One builder at a time: concurrent callers (test workers, a guest and its host sharing the cache)
    wait on a lock file in the directory and then find the target in place. ``build`` must create
    ``target`` atomically (write elsewhere, then rename), so a reader never sees half a file.
    ``announce`` (``"the MAC array for this CPU (once, ~10 s)"``): when this call really builds, or
    waits for another builder, one line on stderr says so, and one more when it is done; a cached
    target prints nothing.
    """
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / ".lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if announce:
                    _say(f"waiting for another process building {_what(announce)}")
                fcntl.flock(lock, fcntl.LOCK_EX)
            if not target.exists():
                t0 = time.monotonic()
                if announce:
                    _say(f"building {announce}\u2026")
                build(target.parent)
                if announce:
                    _say(f"built {_what(announce)} in {time.monotonic() - t0:.1f} s: {target}")
    return target


def _what(announce: str) -> str:
    """``"the MAC array for this CPU (once, ~10 s)"`` without its parenthesis."""
    return announce.split(" (")[0]


def _say(line: str) -> None:
    print(f"vnpu: {line}", file=sys.stderr, flush=True)


def content_hash(parts: Iterable[str | bytes]) -> str:
    """A build key: 16 hex digits of SHA-256 over ``parts`` (each ended by a NUL)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


def publish(built: Path, target: Path) -> Path:
    """Copy ``built`` to ``target`` atomically: a concurrent loader never sees a half-written file."""
    staged = target.parent / f".{target.name}.{os.getpid()}"
    shutil.copy2(built, staged)
    os.replace(staged, target)
    return target
