"""vnpu.ko as an upstream patch series: ``git format-patch`` output for a Linux tree.

    python -m tools.upstream [--out DIR] [--base-tree SRC]  write the series (build/upstream-series)
    python -m tools.upstream --check-build [--out DIR]      write it and prove it in a full 6.12 tree

The series is made in a temporary git repository: a base commit holding the files of the
base tree that the series changes, then one commit per patch, then ``git format-patch
--cover-letter``. The base is ``--base-tree`` (a kernel source tree), else the Linux 7.2 tree
``python -m qemu_tests.sid_kernel 7.2`` prepares. The patches, in order:

1. ``accel/vnpu: Add the uapi headers``: ``uapi/drm/vnpu_accel.h`` (and every other
   project header the driver includes, ``vnpu_isa.h``) as ``include/uapi/drm/``.
2. The driver, ``drivers/accel/vnpu/``, in the steps of ``DRIVER_PARTS`` (one concern each):
   every ``.c``/``.h`` of ``kernel/drivers_accel_stub/`` in exactly one of them, its ``Kconfig``
   in the first, and an in-tree ``Makefile`` made from ``Kbuild``'s object list (not the
   out-of-tree ``Makefile``) that each step extends with the objects it adds. In tree the uapi headers are
   ``<drm/NAME>``: ``#include "NAME"`` becomes ``#include <drm/NAME>``, moved into the file's
   ``<drm/...>`` block. ``Kbuild`` probes the tree's headers for the APIs that differ between
   kernels (``$(call vnpu_probe,HEADER,'LINE',MACRO)``: ``VNPU_SCHED_INIT_ARGS``,
   ``VNPU_SCHED_STAT_NO_HANG``, ``VNPU_IMPORT_NS_STRING``, ...); the series
   carries the one form that fits the base (the same probes on its headers, read from
   ``Kbuild``, or ``--sched-init`` and ``--probe MACRO=y|n``): each ``#ifdef`` block is
   resolved, and the comment sentence naming the macro is dropped.
3. ``accel/vnpu: Hook the driver into the build``: ``source "drivers/accel/vnpu/Kconfig"`` in
   ``drivers/accel/Kconfig`` and ``obj-$(CONFIG_DRM_ACCEL_VNPU) += vnpu/`` in
   ``drivers/accel/Makefile``, in alphabetical order among the other drivers.
4. ``accel/vnpu: Add documentation``: ``Documentation/accel/vnpu/`` (an overview with the module
   parameters read from the sources, the uapi and the driver internals through ``..
   kernel-doc::``), listed in ``Documentation/accel/index.rst``'s toctree.
5. ``MAINTAINERS: Add the vnpu accel driver``: the ``DRM ACCEL DRIVER FOR VNPU`` entry, sorted
   into MAINTAINERS.

Every patch is signed off by ``--signoff "Name <email>"``, else git's ``user.name`` and
``user.email``, else ``vnpu maintainers <vnpu@lists.example.org>``. The same identity is the
patches' author (checkpatch wants author and sign-off to agree) and the MAINTAINERS ``M:``
line unless ``--maintainer`` says otherwise. ``--tree-url`` adds a ``T: git URL`` line.
Commit dates are the project checkout's last commit's, so a checkout always makes the same
series.

``--check-build [SERIES]`` is the heavy check (about 15 min the first time on 2 cores, a few
after), in a full Debian kernel tree: ``7.2`` (the default, sid's linux-source-7.2 with the config
and ``Module.symvers`` of the 7.2 kernel qemu_tests boots) or ``6.12`` (bookworm's
linux-source-6.12 with ``/boot/config-<newest 6.12 generic>``). It unpacks the source into
``~/.cache/vnpu/upstream/`` once, commits it to git, then each time resets that tree, makes the
series against it, ``git am``s it, runs checkpatch (``--strict``, from the tree) on every patch
and ``kernel-doc -none -Wall`` on every file the documentation pulls in, configures the tree
with the kernel's config plus ``CONFIG_DRM_ACCEL_VNPU=m`` (``make olddefconfig
modules_prepare``), and builds the driver with ``make W=1 C=1 M=drivers/accel/vnpu`` (sparse: the
machine's, or sid's built by tools/sparse_checker.py when the tree refuses it), then runs the
tree's coccinelle scripts over it (``make coccicheck MODE=report``).
Any warning fails it. tests/tools/test_upstream.py is the fast check; docs/kernel.md, "Upstream
patch series", shows both.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from vnpu_common.cli import OneLineArgumentParser, cli_main

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the project's packages
    sys.path.insert(0, str(ROOT))

from qemu_tests import debug_kernel, preflight  # noqa: E402
from tools import sparse_checker  # noqa: E402
from tools.headers_install import VENDORED  # noqa: E402
from vnpu_common.cache import cache_root  # noqa: E402

DRIVER_DIR = ROOT / "kernel" / "drivers_accel_stub"
DEFAULT_OUT = ROOT / "build" / "upstream-series"  # ignored by git, like every default output
UAPI_DIR = ROOT / "uapi" / "drm"
SOURCE_TARBALL = debug_kernel.SOURCE_TARBALL
SOURCE_TOP = debug_kernel.SOURCE_PACKAGE  # the tarball's top directory

NAME = "vnpu"
SYMBOL = "DRM_ACCEL_VNPU"
IN_TREE_DIR = "drivers/accel/vnpu"
UAPI_TREE_DIR = "include/uapi/drm"
DOC_DIR = "Documentation/accel/vnpu"
SCHED_MACRO = "VNPU_SCHED_INIT_ARGS"
SCHED_HEADER = "include/drm/gpu_scheduler.h"
KBUILD = DRIVER_DIR / "Kbuild"
# Kbuild's API probes: $(call vnpu_probe,HEADER,'LINE',MACRO) defines MACRO when HEADER has LINE.
_PROBE = re.compile(r"\$\(call vnpu_probe,([^,]+),'([^']*)',(\w+)\)")
MAINTAINERS_SECTION = "DRM ACCEL DRIVER FOR VNPU"
MAILING_LIST = "dri-devel@lists.freedesktop.org"
# A role address of the project's own: used when neither --signoff nor git's identity is set.
ROLE_IDENTITY = "vnpu maintainers <vnpu@lists.example.org>"


@dataclass(frozen=True)
class Probe:
    """One of Kbuild's API probes: ``macro`` is defined when the tree's ``header`` has ``line``."""

    header: str
    line: str
    macro: str


def kbuild_probes(kbuild: str) -> list[Probe]:
    """The API probes of a Kbuild file, in order (the one copy of them: Kbuild's)."""
    return [Probe(m[1].strip(), m[2], m[3]) for m in _PROBE.finditer(kbuild)]


PROBES = kbuild_probes(KBUILD.read_text())
# The files of the base tree that the series changes (or needs to read).
BASE_FILES = tuple(
    dict.fromkeys(
        [
            "Makefile",  # only read: the tree's version, for the cover letter
            "MAINTAINERS",
            "drivers/accel/Kconfig",
            "drivers/accel/Makefile",
            "Documentation/accel/index.rst",
            *(p.header for p in PROBES),  # only read: which form of each API the tree has
        ]
    )
)

Say = Callable[[str], None]


@dataclass(frozen=True)
class DriverPart:
    """One patch of the driver: the files it adds (the in-tree Makefile builds those added so far)."""

    subject: str
    files: tuple[str, ...]
    body: str
    sched: bool = False  # says which drm_sched_init() form the tree takes


# The driver in reviewable steps, each a concern of docs/kernel.md's file table. The driver is not
# built before the hook patch, so every step of the series builds.
DRIVER_PARTS = (
    DriverPart(
        "accel/vnpu: Add the PCI driver and the device's control interface",
        ("vnpu_drv.c", "vnpu_drv.h", "vnpu_hw.h", "vnpu_limits.h", "vnpu_io.c", "vnpu_io.h", "vnpu_fw.c"),
        """
Add the DRM accel driver for vnpu, an NPU emulated behind QEMU's
ivshmem-doorbell PCI device. The device's registers and rings live in
BAR2, the doorbell in BAR0, and completions arrive as MSI-X interrupts.

Probe checks BAR2's identification block before writing anything (the
PCI id is every ivshmem-doorbell function's), requests the interrupts
disabled until the queues are ready, powers the NPU on and boots the
signed firmware image loaded with request_firmware(). A control command
the device answers outside its contract is -EIO. Remove quiesces the
device (bus mastering off) before anything it may read is freed.
""",
    ),
    DriverPart(
        "accel/vnpu: Add buffer objects and per-file device address spaces",
        ("vnpu_gem.c", "vnpu_gem.h", "vnpu_mmu.c"),
        """
Buffer objects are GEM shmem objects, pinned and mapped into per-file
device page tables at creation, read-only for the device when asked, with
an unmapped guard page after each. dma-buf imports carry the strictest of
their exporter's access rights. So a job can touch only its own file's
memory.
""",
    ),
    DriverPart(
        "accel/vnpu: Add job submission and command-stream validation",
        ("vnpu_submit.c", "vnpu_validate.c", "vnpu_isa_table.h", "vnpu_cmdbuf.c", "vnpu_cmdbuf.h"),
        """
SUBMIT copies each command stream into a kernel buffer the user cannot
map, validates the copy against the instruction set and the job's buffer
list, and queues the jobs all or nothing; syncobjs carry the fences in
and out, and the buffers' reservations order jobs that share them.
""",
    ),
    DriverPart(
        "accel/vnpu: Add the scheduler back end, timeouts and core reset",
        ("vnpu_job.c", "vnpu_job.h", "vnpu_reset.c"),
        """
Jobs run on a DRM scheduler per NPU core, fed from one submission and one
completion ring. A per-core watchdog fails a job that runs longer than
the timeout with -ETIMEDOUT and resets only its core; the other jobs on
that core are written to the queue again. A reset the device does not
answer wedges it. Closing a file cancels its jobs without waiting.
""",
        sched=True,
    ),
    DriverPart(
        "accel/vnpu: Add runtime and system power management",
        ("vnpu_pm.c", "vnpu_pm.h"),
        """
Every job holds a runtime PM reference; the NPU is powered off after the
autosuspend delay once the last job is gone, and resumes from the
firmware copy the driver keeps. System sleep waits for the jobs on the
device and keeps the queued ones for the resume.
""",
    ),
    DriverPart(
        "accel/vnpu: Add devcoredump and debugfs",
        ("vnpu_coredump.c", "vnpu_coredump.h", "vnpu_debugfs.c"),
        """
A job that faults or times out leaves a devcoredump of the device's state
and its command stream. debugfs shows the device's state and counters and
takes the job timeout, the cores new jobs may use and a firmware reload.
""",
    ),
)
SCHED_SENTENCE = """
drm_sched_init() is called with {form}, as this tree's scheduler takes.
"""


def _sched_form(sched_args: bool) -> str:
    return "struct drm_sched_init_args" if sched_args else "positional arguments"


def _say(msg: str) -> None:
    print(f"upstream: {msg}", file=sys.stderr, flush=True)


class SeriesError(RuntimeError):
    """The series cannot be made as asked; the message says why."""


# --- the sources -------------------------------------------------------------


def project_uapi_headers() -> list[Path]:
    """The project's own uapi headers (uapi/drm/ less the ones vendored from the kernel)."""
    return sorted(p for p in UAPI_DIR.glob("*.h") if p.name not in VENDORED)


def driver_sources() -> list[Path]:
    """Every .c and .h of the driver (hand-written and generated), not Kbuild's products."""
    return sorted(
        p
        for p in DRIVER_DIR.iterdir()
        if p.is_file() and p.suffix in (".c", ".h") and not p.name.startswith(".") and ".mod." not in p.name
    )


_QUOTED_INCLUDE = re.compile(r'^#include "(?P<name>[^"]+)"\s*$')
_ANGLE_DRM_INCLUDE = re.compile(r"^#include <drm/[^>]+>\s*$")


def included_uapi_headers(texts: Iterable[str], names: Iterable[str]) -> set[str]:
    """Which of the headers ``names`` the sources include with ``#include "NAME"``."""
    wanted = set(names)
    found = set()
    for text in texts:
        for line in text.split("\n"):
            m = _QUOTED_INCLUDE.match(line)
            if m and m["name"] in wanted:
                found.add(m["name"])
    return found


def rewrite_uapi_includes(text: str, names: Iterable[str]) -> str:
    """``#include "NAME"`` as ``#include <drm/NAME>`` for each uapi header NAME.

    The new line joins the file's block of ``<drm/...>`` includes (in sorted place) when that
    block is the one just before the quoted includes; a quoted block left empty goes with
    its blank line. Without such a block the line is rewritten where it stands.
    """
    wanted = set(names)
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _QUOTED_INCLUDE.match(lines[i])
        if not m or m["name"] not in wanted:
            i += 1
            continue
        new = f"#include <drm/{m['name']}>"
        # The quoted block this line is in, and the blank line before it.
        start = i
        while start > 0 and lines[start - 1].startswith('#include "'):
            start -= 1
        blank = start - 1
        if blank >= 1 and lines[blank] == "" and _ANGLE_DRM_INCLUDE.match(lines[blank - 1]):
            del lines[i]
            drm_end = blank  # one past the drm block
            drm_start = drm_end - 1
            while drm_start > 0 and _ANGLE_DRM_INCLUDE.match(lines[drm_start - 1]):
                drm_start -= 1
            pos = drm_start
            while pos < drm_end and lines[pos] < new:
                pos += 1
            lines.insert(pos, new)
            blank += 1
            # The quoted block is empty when the blank line is followed by no quoted include.
            after = lines[blank + 1] if blank + 1 < len(lines) else ""
            if not after.startswith('#include "'):
                del lines[blank]
            i = blank
        else:
            lines[i] = new
            i += 1
    return "\n".join(lines)


class UnsupportedConditional(SeriesError):
    """A conditional on the macro that the resolver does not simplify (#elif, an expression)."""


_DIRECTIVE = re.compile(r"^\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)$")


def _macro_test(keyword: str, rest: str, macro: str) -> bool | None:
    """For ``#if``/``#ifdef``/``#ifndef``: True when it tests that ``macro`` is defined,
    False when it tests that it is not, None when it does not name ``macro``."""
    expr = re.sub(r"/\*.*?\*/|//.*$", "", rest).strip()
    if not re.search(rf"\b{macro}\b", expr):
        return None
    if keyword in ("ifdef", "ifndef"):
        if expr != macro:
            raise UnsupportedConditional(f"#{keyword} {rest.strip()}")
        return keyword == "ifdef"
    m = re.fullmatch(rf"(!?)\s*(?:defined\s*\(\s*{macro}\s*\)|defined\s+{macro}|{macro})", expr)
    if m is None:
        raise UnsupportedConditional(f"#if {rest.strip()}")
    return m[1] != "!"


@dataclass
class _Frame:
    ours: bool  # a conditional on the macro: its directives go, one branch stays
    keep: bool = True  # for ours: the current branch is kept


def resolve_macro(text: str, macro: str, defined: bool, spacing: bool = False) -> str:
    """``text`` with every conditional on ``macro`` resolved as ``unifdef -D``/``-U`` does.

    Handles ``#ifdef``, ``#ifndef``, ``#if [!]defined(M)`` and ``#if M`` with ``#else``,
    nested in or around other conditionals (which stay as they are); ``#elif`` in a chain on
    the macro, or the macro inside a larger expression, raise UnsupportedConditional.

    ``spacing``: where a dropped directive stood between a declaration and a statement, a
    blank line takes its place (kernel style: a blank line after the declarations); where a
    dropped block stood between two blank lines, one of them goes.
    """
    out: list[str] = []
    stack: list[_Frame] = []
    dropped: list[int] = []  # len(out) when a directive on the macro was dropped

    def visible() -> bool:
        return all(f.keep for f in stack if f.ours)

    for line in text.split("\n"):
        m = _DIRECTIVE.match(line)
        if m is None:
            if visible():
                out.append(line)
            continue
        keyword, rest = m[1], m[2]
        if keyword in ("if", "ifdef", "ifndef"):
            test = _macro_test(keyword, rest, macro)
            if test is None:
                if visible():
                    out.append(line)
                stack.append(_Frame(ours=False))
            else:
                stack.append(_Frame(ours=True, keep=(test == defined)))
                dropped.append(len(out))
            continue
        if not stack:
            raise UnsupportedConditional(f"#{keyword} without #if")
        top = stack[-1]
        if keyword == "elif":
            if top.ours or re.search(rf"\b{macro}\b", rest):
                raise UnsupportedConditional(f"#elif {rest.strip()} in a chain on {macro}")
            if visible():
                out.append(line)
        elif keyword == "else":
            if top.ours:
                top.keep = not top.keep
                dropped.append(len(out))
            elif visible():
                out.append(line)
        else:  # endif
            stack.pop()
            if top.ours:
                dropped.append(len(out))
            elif visible():
                out.append(line)
    if stack:
        raise UnsupportedConditional("unterminated #if")
    if spacing:
        for pos in sorted(set(dropped), reverse=True):
            if 0 < pos < len(out) and _is_declaration(out[pos - 1]) and _is_statement(out[pos]):
                out.insert(pos, "")
            elif 0 < pos < len(out) and out[pos - 1] == "" and out[pos] == "":
                del out[pos]  # a dropped block between blank lines: one blank line stays
    return "\n".join(out)


# A local declaration, as checkpatch tells them: type words, a name, maybe an initializer.
_DECLARATION = re.compile(
    r"^\t+(?:(?:const|static|volatile|unsigned|signed|struct|enum|union)\s+)*\w+"
    r"(?:\s+|\s*\*+\s*)(?:const\s+)?\w+(?:\[[^\]]*\])?\s*(?:=.*|;)$"
)


def _is_declaration(line: str) -> bool:
    return _DECLARATION.match(line) is not None and not line.lstrip().startswith("return ")


def _is_statement(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith(("}", "#", "/*", "*")) and not _is_declaration(line)


_COMMENT_BODY = re.compile(r"^\s*\* ?(?P<text>.*)$")


def drop_comment_sentences(text: str, word: str) -> str:
    """``text`` without the comment sentences that name ``word``.

    A sentence is whole comment lines: from a line that follows the comment's opening, an
    empty comment line or a line ending in '.' or ':', to the next line ending in '.'. A
    mention that does not fill whole lines raises SeriesError.
    """
    lines = text.split("\n")
    out_of: set[int] = set()
    for k, line in enumerate(lines):
        if word not in line or _DIRECTIVE.match(line):
            continue
        if _COMMENT_BODY.match(line) is None:
            continue  # code: the caller's final check reports it
        start = k
        while start > 0:
            prev = lines[start - 1].rstrip()
            body = _COMMENT_BODY.match(prev)
            if prev.endswith("/*") or body is None or body["text"] == "" or prev.endswith((".", ":")):
                break
            start -= 1
        end = k
        while not lines[end].rstrip().endswith(".") and end + 1 < len(lines):
            nxt = _COMMENT_BODY.match(lines[end + 1])
            if nxt is None or lines[end + 1].strip().startswith("*/"):
                break
            end += 1
        first = _COMMENT_BODY.match(lines[start])
        if (
            not lines[end].rstrip().endswith(".")
            or first is None
            or not first["text"][:1].isalnum()
            or ". " in " ".join(lines[start : end + 1])
        ):
            raise SeriesError(f"cannot drop the comment's mention of {word} cleanly: {line.strip()!r}")
        out_of.update(range(start, end + 1))
    return "\n".join(line for i, line in enumerate(lines) if i not in out_of)


def driver_file(text: str, uapi_names: Iterable[str], macros: dict[str, bool]) -> str:
    """A driver source as it goes in tree: each probe macro's conditionals resolved as ``macros`` say."""
    text = rewrite_uapi_includes(text, uapi_names)
    for macro, defined in macros.items():
        if macro in text:
            text = resolve_macro(text, macro, defined, spacing=True)
            text = drop_comment_sentences(text, macro)
            if macro in text:
                raise SeriesError(f"{macro} still named after resolving its conditionals")
    return text


def _logical_lines(text: str) -> list[str]:
    """Make lines with their backslash continuations joined (newlines kept)."""
    out: list[str] = []
    cur = ""
    for line in text.split("\n"):
        cur = f"{cur}\n{line}" if cur else line
        if not line.endswith("\\"):
            out.append(cur)
            cur = ""
    if cur:
        out.append(cur)
    return out


def in_tree_makefile(kbuild: str, sources: Iterable[str]) -> str:
    """drivers/accel/vnpu/Makefile for ``sources`` (the driver's files a patch has added so far): the
    module's obj line and the objects of Kbuild's ``vnpu-y`` list that those sources build."""
    spdx = kbuild.split("\n", 1)[0]
    if "SPDX-License-Identifier" not in spdx:
        raise SeriesError("Kbuild does not start with an SPDX line")
    lists = [ln for ln in _logical_lines(kbuild) if re.match(rf"^{NAME}-y\s*:?=", ln)]
    if not lists:
        raise SeriesError(f"Kbuild has no {NAME}-y object list")
    objects = re.findall(r"(\w+)\.o\b", " ".join(lists))
    sources = list(sources)
    missing = sorted(s for s in sources if s.endswith(".c") and s[:-2] not in objects)
    if missing:
        raise SeriesError(f"Kbuild's object lists leave out {', '.join(missing)}")
    present = [f"{o}.o" for o in objects if f"{o}.c" in sources]
    listing = " \\\n".join([f"{NAME}-y :=", *(f"\t{o}" for o in present)])
    return "\n".join([spdx, "", f"obj-$(CONFIG_{SYMBOL}) := {NAME}.o", "", listing, ""])


def has_kernel_doc(text: str) -> bool:
    """Whether a source has a kernel-doc comment (``/**`` then a line naming what it documents)."""
    return re.search(r"^/\*\*\s*\n \* (DOC:|\w)", text, re.M) is not None


# --- the base tree's files -------------------------------------------------


def tree_version(base: Path) -> str | None:
    """VERSION.PATCHLEVEL.SUBLEVEL from the tree's top Makefile."""
    try:
        text = (base / "Makefile").read_text()
    except OSError:
        return None
    parts = [re.search(rf"^{k}\s*=\s*(\d+)", text, re.M) for k in ("VERSION", "PATCHLEVEL", "SUBLEVEL")]
    return ".".join(m[1] for m in parts) if all(parts) else None


def sched_init_takes_args(gpu_scheduler_h: str) -> bool:
    """Whether this tree's drm_sched_init() takes a struct drm_sched_init_args."""
    (probe,) = [p for p in PROBES if p.macro == SCHED_MACRO]
    return probe.line in gpu_scheduler_h


def probe_macros(base: Path, overrides: dict[str, bool]) -> dict[str, bool]:
    """Each probe macro, defined or not for the tree ``base`` (as Kbuild's ``grep -F`` finds), unless
    ``overrides`` says."""
    macros = {}
    for probe in PROBES:
        if probe.macro in overrides:
            macros[probe.macro] = overrides[probe.macro]
            continue
        header = base / probe.header
        if not header.is_file():
            how = "--sched-init" if probe.macro == SCHED_MACRO else f"--probe {probe.macro}=y|n"
            raise SeriesError(f"{header} missing: cannot tell whether {probe.macro} holds (pass {how})")
        macros[probe.macro] = probe.line in header.read_text(errors="replace")
    return macros


def _insert_sorted(lines: list[str], new: str, matches: Callable[[str], bool]) -> list[str]:
    """``lines`` with ``new`` placed among the consecutive run of lines ``matches`` accepts,
    before the first that sorts after it."""
    idx = [i for i, ln in enumerate(lines) if matches(ln)]
    if not idx:
        raise SeriesError(f"nowhere to add {new.strip()!r}")
    if new in lines:
        raise SeriesError(f"{new.strip()!r} is already there")
    pos = next((i for i in idx if lines[i] > new), idx[-1] + 1)
    return [*lines[:pos], new, *lines[pos:]]


def hook_kconfig(text: str) -> str:
    """drivers/accel/Kconfig with the driver's Kconfig sourced among the others."""
    lines = text.split("\n")
    new = f'source "{IN_TREE_DIR}/Kconfig"'
    return "\n".join(_insert_sorted(lines, new, lambda ln: ln.startswith('source "drivers/accel/')))


def _expand_width(text: str) -> int:
    return len(text.expandtabs(8))


def hook_makefile(text: str) -> str:
    """drivers/accel/Makefile with ``obj-$(CONFIG_DRM_ACCEL_VNPU) += vnpu/``, aligned as the others."""
    lines = text.split("\n")
    pattern = re.compile(r"^(obj-\$\(CONFIG_\w+\))(\s*)\+=\s*\S+/$")
    others = [m for ln in lines if (m := pattern.match(ln))]
    if not others:
        raise SeriesError("drivers/accel/Makefile has no obj-$(CONFIG_...) += DIR/ line")
    column = max(_expand_width(m[1] + m[2]) for m in others)
    head = f"obj-$(CONFIG_{SYMBOL})"
    pad = ""
    while _expand_width(head + pad) < column:
        pad += "\t"
    if not pad:
        pad = " "
    new = f"{head}{pad}+= {NAME}/"
    return "\n".join(_insert_sorted(lines, new, lambda ln: pattern.match(ln) is not None))


def hook_doc_index(text: str) -> str:
    """Documentation/accel/index.rst with vnpu/index in its toctree, after the other drivers."""
    lines = text.split("\n")
    try:
        start = next(i for i, ln in enumerate(lines) if ln.strip() == ".. toctree::")
    except StopIteration:
        raise SeriesError("Documentation/accel/index.rst has no toctree") from None
    entries: list[int] = []
    indent = "   "
    for i in range(start + 1, len(lines)):
        ln = lines[i]
        if ln.strip() == "" or ln.strip().startswith(":"):
            continue
        if not ln.startswith(" "):
            break
        indent = ln[: len(ln) - len(ln.lstrip())]
        entries.append(i)
    if not entries:
        raise SeriesError("Documentation/accel/index.rst's toctree is empty")
    new = f"{indent}{NAME}/index"
    drivers = [i for i in entries if lines[i].strip().endswith("/index")]
    pos = next((i for i in drivers if lines[i] > new), (drivers or entries)[-1] + 1)
    return "\n".join([*lines[:pos], new, *lines[pos:]])


def maintainers_entry(maintainer: str, tree_url: str | None, files: Iterable[str]) -> list[str]:
    entry = [MAINTAINERS_SECTION, f"M:\t{maintainer}", f"L:\t{MAILING_LIST}", "S:\tMaintained"]
    if tree_url:
        entry.append(f"T:\tgit {tree_url}")
    entry += [f"F:\t{f}" for f in sorted(files)]
    return entry


def _section_key(title: str) -> str:
    """scripts/parse-maintainers.pl's order: upper case, THE REST last."""
    return title.upper().replace("THE REST", "ZZZZZZ")


def _longest_sorted_run(keys: list[str]) -> list[int]:
    """Indices of a longest strictly increasing subsequence of ``keys`` (patience sorting)."""
    tails: list[int] = []  # tails[k]: index of the smallest last key of a run of length k + 1
    prev: list[int] = [-1] * len(keys)
    for i, k in enumerate(keys):
        lo, hi = 0, len(tails)
        while lo < hi:
            mid = (lo + hi) // 2
            if keys[tails[mid]] < k:
                lo = mid + 1
            else:
                hi = mid
        prev[i] = tails[lo - 1] if lo else -1
        if lo == len(tails):
            tails.append(i)
        else:
            tails[lo] = i
    run: list[int] = []
    i = tails[-1] if tails else -1
    while i >= 0:
        run.append(i)
        i = prev[i]
    return run[::-1]


def hook_maintainers(text: str, entry: list[str]) -> str:
    """MAINTAINERS with ``entry`` (title line first) before the first section that sorts after it."""
    lines = text.split("\n")
    # Sections start after the line of dashes under "Maintainers List".
    try:
        first = next(i for i, ln in enumerate(lines) if ln.startswith("Maintainers List")) + 2
    except StopIteration:
        first = 0
    titles = [
        i
        for i in range(max(first, 1), len(lines) - 1)
        if lines[i]
        and not lines[i][0].isspace()
        and lines[i - 1] == ""
        and re.match(r"^[A-Z]:\t", lines[i + 1])
    ]
    if not titles:
        raise SeriesError("MAINTAINERS has no sections")
    if any(lines[i] == entry[0] for i in titles):
        raise SeriesError(f"MAINTAINERS already has {entry[0]}")
    # MAINTAINERS is sorted with a few exceptions: place the entry among the sections that
    # form the longest sorted run, so a section out of place does not pull it along.
    key = _section_key(entry[0])
    backbone = _longest_sorted_run([_section_key(lines[i]) for i in titles])
    after = [titles[n] for n in backbone if _section_key(lines[titles[n]]) > key]
    if not after:
        raise SeriesError("no MAINTAINERS section sorts after the new entry")
    pos = after[0]
    return "\n".join([*lines[:pos], *entry, "", *lines[pos:]])


# --- the documentation -------------------------------------------------------


def _rst_title(text: str) -> list[str]:
    bar = "=" * (len(text) + 2)
    return [bar, f" {text}", bar]


def _rst_section(text: str, char: str = "=") -> list[str]:
    return [text, char * len(text)]


def module_parameters(texts: Iterable[str]) -> list[tuple[str, str]]:
    """(name, description) of every module parameter, from module_param*() and MODULE_PARM_DESC()."""
    params: list[tuple[str, str]] = []
    for text in texts:
        names = re.findall(r"^module_param(?:_named)?\(\s*(\w+)", text, re.M)
        for name in names:
            m = re.search(rf"MODULE_PARM_DESC\(\s*{name}\s*,((?:\s*\"(?:[^\"\\]|\\.)*\")+)\s*\)", text)
            desc = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m[1])) if m else ""
            params.append((name, desc))
    return params


def firmware_name(texts: Iterable[str]) -> str | None:
    for text in texts:
        m = re.search(r'^#define VNPU_FW_NAME\s+"([^"]+)"', text, re.M)
        if m:
            return m[1]
    return None


def doc_pages(uapi_files: list[str], driver_files: dict[str, str]) -> dict[str, str]:
    """Documentation/accel/vnpu/*.rst: path -> text."""
    spdx = ".. SPDX-License-Identifier: GPL-2.0-only"
    sources = list(driver_files.values())
    params = module_parameters(sources)
    fw = firmware_name(sources)
    index = [
        spdx,
        "",
        *_rst_title("accel/vnpu NPU driver"),
        "",
        "The accel/vnpu driver supports vnpu, a neural processing unit (NPU) that",
        "the vnpu device model emulates behind QEMU's ivshmem-doorbell PCI device",
        "(1af4:1110). The driver exposes it as ``/dev/accel/accelN``.",
        "",
        "Each open file gets its own device address space: buffer objects are GEM",
        "shmem objects, pinned and mapped into per-file device page tables by",
        "DRM_IOCTL_VNPU_BO_CREATE, so a job reaches only the memory of its own file.",
        "DRM_IOCTL_VNPU_SUBMIT copies each job's command stream into a buffer the",
        "user cannot map, validates the copy against the ISA and the job's buffer",
        "list, and queues it on a DRM scheduler (one per NPU core) with syncobj",
        "fences in and out. A job that runs past the timeout fails with",
        "-ETIMEDOUT and its core is reset; the other jobs on that core are queued",
        "again, unharmed. A job that faults or times out leaves a devcoredump.",
        "",
    ]
    if fw:
        index += [
            f"The device boots a signed firmware image, ``{fw}``, loaded with",
            "request_firmware() at probe.",
            "",
        ]
    index += [
        "Per-file usage statistics (``drm-engine-npu``, memory, ``vnpu-jobs``, ``vnpu-jobs-core<i>``)",
        "are in fdinfo (Documentation/gpu/drm-usage-stats.rst); device state and counters",
        "are in debugfs.",
        "",
    ]
    if params:
        index += [*_rst_section("Module parameters"), ""]
        for name, desc in params:
            desc = desc if not desc or desc.endswith(".") else desc + "."
            index += [
                f"``{name}``",
                *textwrap.wrap(desc, 76, initial_indent="  ", subsequent_indent="  "),
                "",
            ]
    index += [".. toctree::", "", "   uapi", "   internals", ""]
    uapi = [spdx, "", *_rst_title("Userspace API"), ""]
    for path in uapi_files:
        uapi += [f".. kernel-doc:: {path}", ""]
    internals = [spdx, "", *_rst_title("Driver internals"), ""]
    for path, text in sorted(driver_files.items()):
        if has_kernel_doc(text):
            internals += [*_rst_section(Path(path).name, "-"), "", f".. kernel-doc:: {path}", ""]
    return {
        f"{DOC_DIR}/index.rst": "\n".join(index),
        f"{DOC_DIR}/uapi.rst": "\n".join(uapi),
        f"{DOC_DIR}/internals.rst": "\n".join(internals),
    }


def kernel_doc_sources(pages: dict[str, str]) -> list[str]:
    """The tree paths the pages pull kernel-doc from."""
    return [m for text in pages.values() for m in re.findall(r"^\.\. kernel-doc:: (\S+)", text, re.M)]


# --- the series ----------------------------------------------------------------


@dataclass
class Patch:
    subject: str
    body: str
    files: dict[str, str] = field(default_factory=dict)  # tree path -> new text


def _ioctls(header: str) -> list[str]:
    return re.findall(r"^#define (DRM_IOCTL_VNPU_\w+)", header, re.M)


def _wrap(text: str, width: int = 72) -> str:
    """Paragraphs (blank-line separated) wrapped at ``width``; lines starting with '-' stay items."""
    out = []
    for para in text.strip().split("\n\n"):
        if para.lstrip().startswith("- "):
            items = re.split(r"\n(?=- )", para)
            out.append(
                "\n".join(
                    textwrap.fill(it, width, subsequent_indent="  ") for it in (i.strip() for i in items)
                )
            )
        else:
            out.append(textwrap.fill(" ".join(para.split()), width))
    return "\n\n".join(out)


@dataclass(frozen=True)
class Options:
    signoff: str
    maintainer: str
    tree_url: str | None = None
    sched_args: bool | None = None  # None: from the base tree
    probes: dict[str, bool] = field(default_factory=dict)  # other probe macros; missing: from the tree

    def overrides(self) -> dict[str, bool]:
        extra = {} if self.sched_args is None else {SCHED_MACRO: self.sched_args}
        return {**self.probes, **extra}


def plan(base: Path, opts: Options) -> tuple[list[Patch], dict[str, bool]]:
    """The patches for base tree ``base`` and each probe macro's value for it."""
    macros = probe_macros(base, opts.overrides())
    sched_args = macros[SCHED_MACRO]

    sources = driver_sources()
    texts = {p.name: p.read_text() for p in sources}
    uapi_all = {p.name: p for p in project_uapi_headers()}
    wanted = included_uapi_headers(texts.values(), uapi_all)
    if "vnpu_accel.h" not in wanted:
        raise SeriesError('the driver does not #include "vnpu_accel.h"')
    uapi = {f"{UAPI_TREE_DIR}/{n}": uapi_all[n].read_text() for n in sorted(wanted)}
    driver = {f"{IN_TREE_DIR}/{n}": driver_file(t, wanted, macros) for n, t in texts.items()}
    parted = [n for part in DRIVER_PARTS for n in part.files]
    if sorted(parted) != sorted(texts):
        left, unknown = sorted(set(texts) - set(parted)), sorted(set(parted) - set(texts))
        raise SeriesError(
            f"DRIVER_PARTS leave out {left or 'nothing'} and name {unknown or 'nothing'} unknown"
        )

    headers = ", ".join(f"<drm/{Path(p).name}>" for p in uapi)
    ioctls = _ioctls(uapi[f"{UAPI_TREE_DIR}/vnpu_accel.h"])
    p1 = Patch(
        "accel/vnpu: Add the uapi headers",
        _wrap(
            f"""
vnpu is an NPU that the vnpu device model emulates behind QEMU's
ivshmem-doorbell PCI device (1af4:1110). Add its userspace interface:
{headers}.

vnpu_accel.h is the ioctl ABI of the accel driver: {", ".join(ioctls)}.
Every file has its own device address space; buffer objects are mapped
into it at creation, and a job names memory by device address only.
Structs are padded to 64 bits, pointers are __u64, reserved fields and
undefined flags must be zero, and timeouts are absolute.
"""
            + (
                """
vnpu_isa.h describes the command-stream format the NPU executes: the
instruction header, opcodes, operand structs, data types and flags. The
driver validates every job's stream against it before queueing.
"""
                if f"{UAPI_TREE_DIR}/vnpu_isa.h" in uapi
                else ""
            )
        ),
        uapi,
    )
    kbuild = (DRIVER_DIR / "Kbuild").read_text()
    kconfig = (DRIVER_DIR / "Kconfig").read_text()
    driver_patches, present = [], []
    for part in DRIVER_PARTS:
        files = {f"{IN_TREE_DIR}/{n}": driver[f"{IN_TREE_DIR}/{n}"] for n in part.files}
        if part is DRIVER_PARTS[0]:
            files[f"{IN_TREE_DIR}/Kconfig"] = kconfig
        present += part.files
        files[f"{IN_TREE_DIR}/Makefile"] = in_tree_makefile(kbuild, present)
        body = part.body + (SCHED_SENTENCE.format(form=_sched_form(sched_args)) if part.sched else "")
        driver_patches.append(Patch(part.subject, _wrap(body), files))
    p3 = Patch(
        "accel/vnpu: Hook the driver into the build",
        _wrap(
            f"""
Source drivers/accel/vnpu/Kconfig from drivers/accel/Kconfig and build
drivers/accel/vnpu/ when CONFIG_{SYMBOL} is set.
"""
        ),
        {
            "drivers/accel/Kconfig": hook_kconfig((base / "drivers/accel/Kconfig").read_text()),
            "drivers/accel/Makefile": hook_makefile((base / "drivers/accel/Makefile").read_text()),
        },
    )
    driver_docs = {p: t for p, t in driver.items() if p.endswith((".c", ".h"))}
    pages = doc_pages(list(uapi), driver_docs)
    p4 = Patch(
        "accel/vnpu: Add documentation",
        _wrap(
            """
Describe the vnpu driver and its module parameters, and pull the uapi
headers' and the driver's kernel-doc into Documentation/accel/vnpu/.
List it in the accel documentation's toctree.
"""
        ),
        {
            **pages,
            "Documentation/accel/index.rst": hook_doc_index(
                (base / "Documentation/accel/index.rst").read_text()
            ),
        },
    )
    entry = maintainers_entry(opts.maintainer, opts.tree_url, [f"{DOC_DIR}/", f"{IN_TREE_DIR}/", *uapi])
    p5 = Patch(
        "MAINTAINERS: Add the vnpu accel driver",
        _wrap("Add the entry for the vnpu accel driver, its uapi headers and its documentation."),
        {"MAINTAINERS": hook_maintainers((base / "MAINTAINERS").read_text(), entry)},
    )
    return [p1, *driver_patches, p3, p4, p5], macros


def _git(repo: Path, *args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> str:
    r = subprocess.run(
        ["git", "-C", str(repo), *args], input=stdin, capture_output=True, text=True, env=env, check=False
    )
    if r.returncode != 0:
        raise SeriesError(f"git {' '.join(args)}: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


def parse_identity(text: str) -> tuple[str, str]:
    m = re.fullmatch(r"\s*([^<>]+?)\s*<([^<>@\s]+@[^<>\s]+)>\s*", text)
    if m is None:
        raise argparse.ArgumentTypeError(f"{text!r}: expected 'Name <email>'")
    return m[1], m[2]


def default_identity() -> str:
    """git's user.name and user.email (as the project checkout sees them), else the role address."""

    def get(key: str) -> str:
        r = subprocess.run(["git", "-C", str(ROOT), "config", key], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""

    name, email = get("user.name"), get("user.email")
    return f"{name} <{email}>" if name and email else ROLE_IDENTITY


def _project_date() -> str:
    r = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%cI"], capture_output=True, text=True)
    return (
        r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else time.strftime("%Y-%m-%dT%H:%M:%S%z")
    )


def cover_letter(patches: list[Patch], sched_args: bool, base_desc: str) -> str:
    form = "struct drm_sched_init_args" if sched_args else "positional arguments"
    return (
        "accel/vnpu: Add a driver for the vnpu NPU\n\n"
        + _wrap(
            f"""
This series adds vnpu, a DRM accel driver for an NPU that an open device
model emulates behind QEMU's ivshmem-doorbell PCI device. Userspace
reaches it through /dev/accel/accelN: buffer objects in per-file device
address spaces, validated command-stream jobs on a DRM scheduler per
core, syncobj fences, reset on timeout, devcoredump and fdinfo usage
stats.

Made against {base_desc}; drm_sched_init() is called with {form}.
"""
        )
        + "\n"
    )


def write_series(
    out: Path,
    base: Path,
    opts: Options,
    say: Say = _say,
    subject_prefix: str = "PATCH",
    base_desc: str = "",
    upstream_commit: str | None = None,
) -> list[Path]:
    """Write the series into ``out`` (its old *.patch files go); the patch paths, cover letter first.

    ``upstream_commit``: the upstream commit ``base`` is, for the cover letter's ``base-commit:`` line."""
    patches, macros = plan(base, opts)
    sched_args = macros[SCHED_MACRO]
    if not base_desc:
        version = tree_version(base)
        base_desc = f"Linux {version}" if version else "the base tree"
    say(f"drm_sched_init() form: {'struct drm_sched_init_args' if sched_args else 'positional'}")
    say("the base tree's APIs: " + ", ".join(f"{m} {'yes' if v else 'no'}" for m, v in macros.items()))
    name, email = parse_identity(opts.signoff)
    date = _project_date()
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_DATE": date,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    with tempfile.TemporaryDirectory(prefix="vnpu-upstream-") as tmp:
        repo = Path(tmp)
        _git(repo, "init", "-q", "-b", "vnpu", env=env)
        _git(repo, "config", "core.autocrlf", "false", env=env)
        for rel in BASE_FILES:
            src = base / rel
            if src.is_file():
                dst = repo / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
        _git(repo, "add", "-A", env=env)
        _git(repo, "commit", "-q", "--allow-empty", "-m", "base", env=env)
        base_commit = _git(repo, "rev-parse", "HEAD", env=env).strip()
        for patch in patches:
            for rel, text in patch.files.items():
                dst = repo / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_text(text if text.endswith("\n") else text + "\n")
            _git(repo, "add", "--", *patch.files, env=env)
            msg = f"{patch.subject}\n\n{patch.body}\n\nSigned-off-by: {name} <{email}>\n"
            _git(repo, "commit", "-q", "-F", "-", env=env, stdin=msg)
            say(f"patch: {patch.subject} ({len(patch.files)} files)")
        _git(repo, "config", "branch.vnpu.description", cover_letter(patches, sched_args, base_desc), env=env)
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("*.patch"):
            old.unlink()
        listing = _git(
            repo,
            "format-patch",
            "--cover-letter",
            "--cover-from-description=subject",
            f"--subject-prefix={subject_prefix}",
            "--no-signature",
            "-o",
            str(out.resolve()),
            f"{base_commit}..vnpu",
            env=env,
        )
    paths = [Path(p) for p in listing.split()]
    if upstream_commit:
        # What git format-patch --base writes; the series' own base commit is a synthetic one.
        with open(paths[0], "a") as cover:
            cover.write(f"\nbase-commit: {upstream_commit}\n")
        say(f"base-commit: {upstream_commit}")
    say(f"{len(paths)} files in {out}")
    return paths


def base_commit_of(base: Path) -> str | None:
    """The base tree's HEAD commit when it is a git checkout (a Linux clone), else None: a
    distribution's source tarball has no upstream commit to name."""
    if not (base / ".git").exists():
        return None
    r = subprocess.run(["git", "-C", str(base), "rev-parse", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


# --- the default base: the files the series touches, from linux-source-6.12 ---------


def _safe(version: str) -> str:
    return re.sub(r"[^\w.+-]", "_", version)


BASE_SERIES = "7.2"  # the kernel the series is for


def default_base(say: Say = _say) -> tuple[Path, str]:
    """The prepared Linux 7.2 tree of Debian sid (python -m qemu_tests.sid_kernel 7.2) and its name."""
    from qemu_tests import sid_kernel

    prepared = sid_kernel.prepared_releases(BASE_SERIES)
    if not prepared:
        raise SeriesError(
            f"no Linux {BASE_SERIES} tree: run python -m qemu_tests.sid_kernel {BASE_SERIES}"
            " (or pass --base-tree)"
        )
    kernel = sid_kernel.SidKernel(prepared[-1], BASE_SERIES)
    return kernel.source, f"Debian's linux-source-{BASE_SERIES} (Linux {tree_version(kernel.source)})"


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# --- the checks --------------------------------------------------------------------

# checkpatch's one warning a series may keep: a patch that adds files without touching
# MAINTAINERS (the entry comes in the last patch).
ALLOWED_CHECKPATCH = ("FILE_PATH_CHANGES",)
_CHECKPATCH_FINDING = re.compile(r"\b(ERROR|WARNING|CHECK):(\w+):")


def checkpatch_findings(output: str) -> list[str]:
    """checkpatch --show-types findings other than the allowed ones."""
    return [m[0] for m in _CHECKPATCH_FINDING.finditer(output) if m[2] not in ALLOWED_CHECKPATCH]


def run_checkpatch(checkpatch: Path, patches: list[Path], cwd: Path | None = None) -> tuple[str, list[str]]:
    """checkpatch --strict on the patches (``--no-tree`` unless ``cwd`` is a kernel tree)."""
    args = ["perl", str(checkpatch), "--strict", "--show-types", "--no-summary", "--terse"]
    if cwd is None:
        args.append("--no-tree")
    r = subprocess.run([*args, *map(str, patches)], capture_output=True, text=True, cwd=cwd, check=False)
    out = r.stdout + r.stderr
    return out, checkpatch_findings(out)


def run_kernel_doc(kernel_doc: Path, files: list[Path]) -> str:
    """``kernel-doc -none -Wall`` over ``files``: its warnings (empty when clean)."""
    r = subprocess.run(
        ["perl", str(kernel_doc), "-none", "-Wall", *map(str, files)], capture_output=True, text=True
    )
    return (r.stdout + r.stderr).strip() + ("" if r.returncode == 0 else f"\n(exit {r.returncode})")


# --- the heavy check: the series in a full linux-source-6.12 tree -------------------

BUILD_WARNING = re.compile(r"(?i)\b(warning|error)\b:")
JOBS = 2


def newest_debian_config() -> Path | None:
    """/boot/config-R for the newest installed generic 6.12 Debian kernel R."""
    configs = {p.name.removeprefix("config-"): p for p in Path("/boot").glob("config-6.12.*")}
    release = preflight.newest_release(configs)
    return configs[release] if release else None


def _run(cmd: list[str], log: Path, cwd: Path | None = None) -> tuple[int, str]:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, errors="replace", check=False)
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r.returncode, r.stdout + r.stderr


def _nice(cmd: list[str]) -> list[str]:
    return ["nice", "-n", "10", *cmd]


class CheckFailed(RuntimeError):
    pass


@dataclass(frozen=True)
class CheckBase:
    """A distribution's full kernel source for the heavy check, with the config and exported
    symbols of the kernel it packages."""

    package: str  # the source package, e.g. linux-source-7.2
    version: str  # its version (the cache key)
    config: Path  # the packaged kernel's .config
    symvers: Path  # its Module.symvers (modpost checks the module against it)
    # The source tarball: already on the machine, or fetched into the directory given.
    tarball: Callable[[Path, Say], Path]

    @property
    def desc(self) -> str:
        return f"Debian's {self.package} {self.version}"


def bookworm_base() -> CheckBase:
    """linux-source-6.12 with /boot's newest generic 6.12 config (bookworm's own packages)."""
    config = newest_debian_config()
    if config is None:
        raise CheckFailed("no /boot/config-6.12.*-amd64: install a Debian 6.12 generic kernel")
    headers = Path("/usr/src") / f"linux-headers-{config.name.removeprefix('config-')}"
    return CheckBase(
        package=debug_kernel.SOURCE_PACKAGE,
        version=debug_kernel.source_version() or "unknown",
        config=config,
        symvers=headers / "Module.symvers",
        tarball=lambda _into, _say: SOURCE_TARBALL,
    )


def sid_base(series: str, say: Say) -> CheckBase:
    """sid's linux-source-SERIES, with the config and symbols of the kernel qemu_tests boots on it."""
    from qemu_tests import sid_kernel

    try:
        kernel = sid_kernel.ensure_prepared(series, lambda phase, msg: say(f"{phase}: {msg}"))
    except sid_kernel.PrepareError as e:
        raise CheckFailed(str(e)) from e
    headers = kernel.files / "usr" / "src" / f"linux-headers-{kernel.release}"
    package = sid_kernel.packages(kernel.release, series)["source"]

    def fetch(into: Path, say: Say) -> Path:
        # The prepared kernel keeps its unpacked, configured tree, not the tarball: fetch it again.
        debs = into / "debs"
        try:
            sid_kernel.Apt().download([package], debs, lambda phase, msg: say(f"{phase}: {msg}"))
        except sid_kernel.PrepareError as e:
            raise CheckFailed(str(e)) from e
        (deb,) = debs.glob(f"{package}_*.deb")
        rc, _ = _run(["dpkg-deb", "-x", str(deb), str(debs)], into / "unpack.log")
        if rc:
            raise CheckFailed(f"dpkg-deb -x {deb.name} failed; see {into / 'unpack.log'}")
        return debs / "usr" / "src" / f"{package}.tar.xz"

    return CheckBase(
        package=package,
        version=kernel.release,
        config=headers / ".config",
        symvers=headers / "Module.symvers",
        tarball=fetch,
    )


def ensure_tree(root: Path, base: CheckBase, say: Say) -> Path:
    """The full source, unpacked and committed (tag ``base``) once."""
    tree = root / "tree"
    if (root / "tree.json").is_file():
        return tree
    log = root / "unpack.log"
    tarball = base.tarball(root, say)
    say(f"unpacking {tarball} into {tree} (once)")
    shutil.rmtree(tree, ignore_errors=True)
    partial = root / "tree.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    t0 = time.monotonic()
    rc, _ = _run(_nice(["tar", "-xJf", str(tarball), "-C", str(partial), "--strip-components=1"]), log)
    if rc:
        raise CheckFailed(f"unpacking failed; see {log}")
    shutil.rmtree(root / "debs", ignore_errors=True)  # a fetched tarball is not kept
    say(f"unpacked in {time.monotonic() - t0:.0f}s; committing it to git (once)")
    t0 = time.monotonic()
    git = [
        "git",
        "-C",
        str(partial),
        "-c",
        "core.looseCompression=1",
        "-c",
        "user.name=base",
        "-c",
        "user.email=base@localhost",
    ]
    for args in (
        ["init", "-q"],
        ["add", "-A", "-f"],
        ["commit", "-q", "-m", base.package],
        ["tag", "base"],
    ):
        rc, _ = _run(_nice([*git, *args]), log)
        if rc:
            raise CheckFailed(f"git {args[0]} failed; see {log}")
    say(f"committed in {time.monotonic() - t0:.0f}s")
    partial.rename(tree)
    record = {"package": base.package, "source_version": base.version}
    (root / "tree.json").write_text(json.dumps(record) + "\n")
    return tree


CHECK_SERIES = ("6.12", BASE_SERIES)  # the kernels --check-build can build the series in


def check_build(out: Path, opts: Options, say: Say = _say, series: str = BASE_SERIES) -> int:
    """The heavy check; 0 when the series applies, is checkpatch/kernel-doc clean and builds warning-free."""
    tools = (("git", "git"), ("spatch", "coccinelle"), ("dpkg-deb", "dpkg"))
    missing = [*debug_kernel.missing_requirements(), *((w, p) for w, p in tools if shutil.which(w) is None)]
    if missing:
        pkgs = " ".join(sorted({p for _, p in missing}))
        say(f"missing: {', '.join(w for w, _ in missing)}; fix: apt-get install {pkgs}")
        return 3
    start = time.monotonic()
    try:
        base = bookworm_base() if series == "6.12" else sid_base(series, say)
    except CheckFailed as e:
        say(f"FAILED: {e}")
        return 3
    root = cache_root() / "upstream" / f"{base.package}-{_safe(base.version)}"
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / ".lock"):
        out.mkdir(parents=True, exist_ok=True)
        log = out / "check-build.log"
        log.write_text("")
        try:
            tree = ensure_tree(root, base, say)
            sparse = sparse_checker.ensure(tree, say)
            say(f"sparse: {sparse}")
            return _check_in_tree(tree, out, opts, base, sparse, log, say, start)
        except (CheckFailed, SeriesError, sparse_checker.SparseUnavailable) as e:
            say(f"FAILED: {e}")
            return 1


def _check_in_tree(
    tree: Path, out: Path, opts: Options, base: CheckBase, sparse: str, log: Path, say: Say, start: float
) -> int:
    config = base.config
    git = ["git", "-C", str(tree), "-c", "user.name=check", "-c", "user.email=check@localhost"]
    # Back to the pristine source, keeping the build products outside the driver's directories.
    for args in (
        ["am", "--abort"],
        ["checkout", "-q", "-f", "--detach", "base"],
        ["clean", "-fdxq", "--", IN_TREE_DIR, DOC_DIR],
    ):
        rc, text = _run([*git, *args], log)
        if rc and args[0] != "am":
            raise CheckFailed(f"git {' '.join(args)}: {text.strip()}")
    paths = write_series(out, tree, opts, say, base_desc=base.desc)
    patches = [p for p in paths if not p.name.startswith("0000-")]
    rc, text = _run([*git, "am", "-q", *map(str, patches)], log)
    if rc:
        raise CheckFailed(f"git am failed:\n{text.strip()}")
    say(f"git am: {len(patches)} patches applied")

    failures: list[str] = []
    cp_out, findings = run_checkpatch(tree / "scripts" / "checkpatch.pl", paths[1:], cwd=tree)
    with open(log, "a") as f:
        f.write(f"$ checkpatch.pl --strict (in tree)\n{cp_out}")
    say(f"checkpatch --strict: {len(findings)} findings beyond {', '.join(ALLOWED_CHECKPATCH)}")
    failures += [f"checkpatch: {x}" for x in findings]
    pages = {p.relative_to(tree).as_posix(): p.read_text() for p in (tree / DOC_DIR).glob("*.rst")}
    doc_files = [tree / p for p in kernel_doc_sources(pages)]
    kd = run_kernel_doc(tree / "scripts" / "kernel-doc", doc_files)
    say(f"kernel-doc -none -Wall on {len(doc_files)} files: {'clean' if not kd else 'warnings'}")
    if kd:
        failures.append(f"kernel-doc:\n{kd}")

    # Configure: Debian's config plus the driver as a module. olddefconfig only when the inputs changed.
    desired = config.read_text() + f"CONFIG_{SYMBOL}=m\n"
    stamp = tree / ".vnpu-config-input"
    kconfig_now = (tree / IN_TREE_DIR / "Kconfig").read_text()
    fingerprint = desired + "\0" + kconfig_now
    make = _nice(["make", "-C", str(tree), f"-j{JOBS}"])
    if (
        not stamp.is_file()
        or stamp.read_text() != fingerprint
        or not (tree / "include/generated/autoconf.h").is_file()
    ):
        say(f"configuring: {config} + CONFIG_{SYMBOL}=m; make olddefconfig")
        (tree / ".config").write_text(desired)
        rc, text = _run([*make, "olddefconfig"], log)
        if rc:
            raise CheckFailed(f"make olddefconfig failed; see {log}")
        stamp.write_text(fingerprint)
    got = debug_kernel.parse_config((tree / ".config").read_text()).get(f"CONFIG_{SYMBOL}")
    if got != "m":
        raise CheckFailed(f"CONFIG_{SYMBOL} is {got or 'unset'} after olddefconfig (its dependencies?)")
    say("make modules_prepare")
    t0 = time.monotonic()
    rc, text = _run([*make, "modules_prepare"], log)
    if rc:
        raise CheckFailed(f"make modules_prepare failed; see {log}")
    say(f"modules_prepare: {time.monotonic() - t0:.0f}s")
    # The exported symbols of the kernel the config comes from: modpost checks the module against them.
    if base.symvers.is_file():
        shutil.copyfile(base.symvers, tree / "Module.symvers")
    say(f"make W=1 C=1 M={IN_TREE_DIR} (sparse)")
    t0 = time.monotonic()
    rc, text = _run([*make, "W=1", "C=1", f"CHECK={sparse}", f"M={IN_TREE_DIR}", "modules"], log)
    warnings = [ln for ln in text.splitlines() if BUILD_WARNING.search(ln)]
    say(f"build: exit {rc}, {len(warnings)} warnings, {time.monotonic() - t0:.0f}s")
    if rc:
        failures.append(f"the build failed (exit {rc}); see {log}")
    failures += [f"build: {w}" for w in warnings]
    if not (tree / IN_TREE_DIR / f"{NAME}.ko").is_file() and not rc:
        failures.append(f"no {NAME}.ko was built")
    failures += [f"coccinelle: {r}" for r in _coccicheck(make, log, say)]
    for line in failures:
        print(line, file=sys.stderr)
    verdict = "FAILED" if failures else "passed"
    say(f"{verdict} in {time.monotonic() - start:.0f}s; log {log}")
    return 1 if failures else 0


def coccinelle_reports(output: str) -> list[str]:
    """The report lines ``make coccicheck MODE=report`` printed about the driver's files."""
    return [ln for ln in output.splitlines() if ln.startswith(f"{IN_TREE_DIR}/")]


def _coccicheck(make: list[str], log: Path, say: Say) -> list[str]:
    """Every script of the tree's scripts/coccinelle over the driver, in report mode."""
    say(f"make coccicheck MODE=report M={IN_TREE_DIR}")
    t0 = time.monotonic()
    rc, text = _run([*make, "coccicheck", "MODE=report", f"J={JOBS}", f"M={IN_TREE_DIR}"], log)
    reports = coccinelle_reports(text)
    say(f"coccicheck: exit {rc}, {len(reports)} reports, {time.monotonic() - t0:.0f}s")
    return reports if not rc else [*reports, f"make coccicheck failed (exit {rc}); see {log}"]


# --- the command ---------------------------------------------------------------


def _sched_init(text: str) -> bool:
    if text not in ("args", "positional"):
        raise argparse.ArgumentTypeError("args or positional")
    return text == "args"


def _probe(text: str) -> tuple[str, bool]:
    macro, _, value = text.partition("=")
    if macro not in {p.macro for p in PROBES} or value not in ("y", "n"):
        names = ", ".join(p.macro for p in PROBES)
        raise argparse.ArgumentTypeError(f"MACRO=y or MACRO=n, MACRO one of Kbuild's probes: {names}")
    return macro, value == "y"


def build_parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(prog="python -m tools.upstream", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="the .patch files' directory (default build/upstream-series)",
    )
    p.add_argument(
        "--base-tree", type=Path, help="the kernel tree the series is for (default: the prepared 7.2 tree)"
    )
    p.add_argument(
        "--signoff", help="'Name <email>' (default: git's user.name/user.email, else a role address)"
    )
    p.add_argument("--maintainer", help="MAINTAINERS M: line, 'Name <email>' (default: the signoff)")
    p.add_argument("--tree-url", help="MAINTAINERS T: git URL (default: no T: line)")
    p.add_argument(
        "--sched-init",
        type=_sched_init,
        help="drm_sched_init() form: args or positional (default: from the base tree)",
    )
    p.add_argument(
        "--probe",
        type=_probe,
        action="append",
        default=[],
        metavar="MACRO=y|n",
        help="resolve one of Kbuild's API probes (VNPU_*) so, whatever the base tree has; may be repeated",
    )
    p.add_argument("--subject-prefix", default="PATCH")
    p.add_argument(
        "--check-build",
        nargs="?",
        const=BASE_SERIES,
        choices=CHECK_SERIES,
        metavar="SERIES",
        help=f"the heavy check in a full Debian kernel tree: {' or '.join(CHECK_SERIES)} "
        f"(default {BASE_SERIES}, the series' base)",
    )
    return p


@cli_main("python -m tools.upstream")
def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    signoff = args.signoff or default_identity()
    maintainer = args.maintainer or signoff
    for ident in (signoff, maintainer):
        try:
            parse_identity(ident)
        except argparse.ArgumentTypeError as e:
            p.error(str(e))
    opts = Options(
        signoff=signoff,
        maintainer=maintainer,
        tree_url=args.tree_url,
        sched_args=args.sched_init,
        probes=dict(args.probe),
    )
    out = args.out
    if args.check_build:
        if args.base_tree:
            p.error("--check-build makes its own tree from Debian's kernel source; drop --base-tree")
        return check_build(out, opts, series=args.check_build)
    try:
        if args.base_tree:
            if not args.base_tree.is_dir():
                p.error(f"{args.base_tree}: not a directory")
            base, desc, commit = args.base_tree, "", base_commit_of(args.base_tree)
        else:
            (base, desc), commit = default_base(), None
        write_series(
            out, base, opts, subject_prefix=args.subject_prefix, base_desc=desc, upstream_commit=commit
        )
    except SeriesError as e:
        _say(f"error: {e}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
