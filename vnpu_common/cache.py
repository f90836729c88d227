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


def build_once(target: Path, build: Callable[[Path], object]) -> Path:
    """``target``, after ``build(target.parent)`` made it if it did not exist yet.

    One builder at a time: concurrent callers (test workers, a guest and its host sharing the cache)
    wait on a lock file in the directory and then find the target in place. ``build`` must create
    ``target`` atomically (write elsewhere, then rename), so a reader never sees half a file.
    """
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not target.exists():
                build(target.parent)
    return target


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
