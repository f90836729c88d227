#!/usr/bin/env python3
"""Ship the uapi headers as userspace sees them, the way the kernel's ``make headers_install`` does.

The kernel's own uapi headers (``include/uapi/``) carry kernel-only markup: ``__user``,
``#if defined(__KERNEL__)`` blocks, ``_UAPI`` guard prefixes. ``make headers_install``
runs ``scripts/headers_install.sh`` over them: a few ``sed`` rewrites, then
``unifdef -U__KERNEL__ -D__EXPORTED_HEADERS__``. This module is that script in Python, so the
headers under ``uapi/drm/`` are what ``#include <drm/vnpu_accel.h>`` with ``-Iuapi`` should find:

- ``drm.h`` and ``drm_mode.h`` are vendored from a kernel tree's ``include/uapi/drm/`` through
  :func:`headers_install` (``--from``);
- the project's own headers (``vnpu_accel.h``, ``vnpu_isa.h``) are written installable:
  :func:`headers_install` must leave them unchanged.

Usage:
  python tools/headers_install.py [--from KERNEL_TREE]   re-vendor drm.h and drm_mode.h
  python tools/headers_install.py --check                exit 1 naming every header under
                                                        uapi/drm that headers_install would change

KERNEL_TREE defaults to the newest ``/usr/src/linux-headers-*-common`` (Debian's kernel
headers carry ``include/uapi``). ``tests/uapi/test_headers_install.py`` runs ``--check``,
compares this module with the kernel's own ``scripts/headers_install.sh`` where a kernel
source tree is at hand, and compiles the plain include.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADER_DIR = ROOT / "uapi" / "drm"
VENDORED = ("drm.h", "drm_mode.h")
KERNEL_TREES = "/usr/src/linux-headers-*-common"

# scripts/headers_install.sh's sed program (sed -E works line by line, so [[:space:]] never
# matches a newline; the same holds here because the rules run on one line at a time).
_SP = r"[ \t\v\f\r]"
_SED_RULES: list[tuple[re.Pattern[str], str, int]] = [
    (re.compile(rf"([ \t\v\f\r(])(__user|__force|__iomem){_SP}"), r"\1", 0),
    (re.compile(rf"__attribute_const__({_SP}|$)"), r"\1", 0),
    (re.compile(r"^#include <linux/compiler(|_types).h>"), "", 0),
    (re.compile(r"(^|[^a-zA-Z0-9])__packed([^a-zA-Z0-9_]|$)"), r"\1__attribute__((packed))\2", 0),
    (re.compile(rf"(^|[ \t\v\f\r(])(inline|asm|volatile)({_SP}|[(]|$)"), r"\1__\2__\3", 0),
    (re.compile(rf"#(ifndef|define|endif{_SP}*/[*]){_SP}*_UAPI"), r"#\1 ", 1),
]

# unifdef -U__KERNEL__ -D__EXPORTED_HEADERS__
SYMBOLS = {"__KERNEL__": False, "__EXPORTED_HEADERS__": True}
_DIRECTIVE = re.compile(r"^(\s*#\s*)(if|ifdef|ifndef|elif|else|endif)\b(.*)$")
_DEFINED = re.compile(r"^\s*(!?)\s*(?:defined\s*\(\s*(\w+)\s*\)|defined\s+(\w+)|(\w+))\s*(?:/\*.*\*/)?\s*$")


class UnsupportedConditional(ValueError):
    """A conditional on a resolved symbol that this unifdef cannot simplify."""


def _sed(line: str) -> str:
    for pattern, repl, count in _SED_RULES:
        line = pattern.sub(repl, line, count=count)
    return line


def _value(keyword: str, expr: str) -> bool | None:
    """True/False for a condition on a resolved symbol, None when it is to be kept as it is."""
    if keyword in ("ifdef", "ifndef"):
        sym = expr.split()[0] if expr.split() else ""
        if sym not in SYMBOLS:
            return None
        return SYMBOLS[sym] == (keyword == "ifdef")
    if not any(re.search(rf"\b{s}\b", expr) for s in SYMBOLS):
        return None
    m = _DEFINED.match(expr)
    if m is None:
        raise UnsupportedConditional(f"#{keyword}{expr}")
    negate, sym = m.group(1) == "!", m.group(2) or m.group(3) or m.group(4)
    if sym not in SYMBOLS:
        raise UnsupportedConditional(f"#{keyword}{expr}")
    return SYMBOLS[sym] != negate


def _unifdef(lines: list[str]) -> list[str]:
    """scripts/unifdef's output for chains that test only the resolved symbols or only others."""
    out: list[str] = []
    # Per open conditional: (emitting: the enclosing text is kept, state), where state is
    # "pending" (no branch taken, no directive written), "open" (a kept #if written),
    # "taken" (a true branch was emitted bare), "closed" (a true branch was written after #if).
    stack: list[list] = []
    active = True  # the current line is kept
    for line in lines:
        m = _DIRECTIVE.match(line)
        if m is None:
            if active:
                out.append(line)
            continue
        _, keyword, expr = m.groups()
        if keyword in ("if", "ifdef", "ifndef"):
            value = _value(keyword, expr) if active else None
            frame = [active, "pending", False]  # enclosing-active, state, branch-active
            stack.append(frame)
            _branch(frame, value, line, keyword, out, first=True)
        elif keyword in ("elif", "else"):
            if not stack:
                raise UnsupportedConditional(f"#{keyword} without #if")
            frame = stack[-1]
            value = True if keyword == "else" else (_value("if", expr) if frame[0] else None)
            _branch(frame, value, line, keyword, out, first=False)
        else:  # endif
            if not stack:
                raise UnsupportedConditional("#endif without #if")
            frame = stack.pop()
            if frame[0] and frame[1] in ("open", "closed"):
                out.append(line)
        active = stack[-1][2] if stack else True
    if stack:
        raise UnsupportedConditional("unterminated #if")
    return out


def _branch(frame: list, value: bool | None, line: str, keyword: str, out: list[str], first: bool) -> None:
    enclosing, state = frame[0], frame[1]
    if not enclosing or state in ("taken", "closed"):
        frame[2] = False  # an earlier branch was taken: the rest of the chain goes
        return
    if value is False:
        frame[2] = False
        return
    if value is True:
        frame[2] = True
        if state == "pending":
            frame[1] = "taken"  # the branch's text stands alone
            return
        if keyword != "else":
            # unifdef rewrites such an #elif into an #else; no header here needs it.
            raise UnsupportedConditional(line)
        out.append(line)
        frame[1] = "closed"
        return
    frame[2] = True
    if state == "pending" and not first:
        # The chain's earlier branches went: this #elif opens it. unifdef overwrites the
        # keyword in place ("elif" -> "if  "), keeping the line's length.
        line = line.replace("elif", "if  ", 1)
    out.append(line)
    frame[1] = "open"


def headers_install(text: str) -> str:
    """What scripts/headers_install.sh writes for a header with this text."""
    lines = [_sed(line) for line in text.split("\n")]
    return "\n".join(_unifdef(lines))


def _newest_kernel_tree() -> Path | None:
    trees = sorted(Path("/").glob(KERNEL_TREES.lstrip("/")), key=lambda p: _version_key(p.name))
    return trees[-1] if trees else None


def _version_key(name: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", name)]


def check() -> list[str]:
    """Headers under uapi/drm that headers_install would change."""
    return [p.name for p in sorted(HEADER_DIR.glob("*.h")) if headers_install(p.read_text()) != p.read_text()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a header is not installable")
    ap.add_argument("--from", dest="tree", type=Path, help=f"kernel tree to vendor from ({KERNEL_TREES})")
    args = ap.parse_args(argv)
    if args.check:
        stale = check()
        for name in stale:
            print(f"uapi/drm/{name}: not what headers_install makes; run python tools/headers_install.py")
        return 1 if stale else 0
    tree = args.tree or _newest_kernel_tree()
    if tree is None:
        print(f"no kernel tree ({KERNEL_TREES}); pass --from", file=sys.stderr)
        return 2
    for name in VENDORED:
        src = tree / "include" / "uapi" / "drm" / name
        (HEADER_DIR / name).write_text(headers_install(src.read_text()))
        print(f"uapi/drm/{name} <- {src}")
    stale = check()
    for name in stale:
        print(f"uapi/drm/{name}: not installable as written; fix it by hand", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
