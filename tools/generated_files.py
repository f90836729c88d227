"""Write a generator's files, or check that the committed ones are current (``--check``).

Every generator under tools/ ends the same way: the text it made against the files in the tree.
``--check`` writes nothing and fails on a stale file (the tests and CI run it); otherwise only the
files that changed are written, so an unchanged tree stays untouched.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path


def stale(files: dict[Path, str]) -> Iterable[Path]:
    """The files whose committed text differs from ``files``' (missing ones included)."""
    for path, text in files.items():
        if not path.exists() or path.read_text() != text:
            yield path


def write_or_check(files: dict[Path, str], check: bool, root: Path, what: str, script: str) -> int:
    """0 when current (or written), 1 with one line on stderr when ``check`` finds a stale file."""
    bad = list(stale(files))
    if check:
        if bad:
            names = ", ".join(str(p.relative_to(root)) for p in bad)
            print(f"stale generated {what}: {names}; run {script}", file=sys.stderr)
            return 1
        return 0
    for path in bad:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[path])
        print(f"wrote {path.relative_to(root)}")
    return 0
