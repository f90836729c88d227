"""The shell and Python blocks of README.md and docs/*.md, and how to run them (docs/contributing.md).

A fenced block's info string names its language and, optionally, a file: ```` ```asm add.s ````
is written as ``add.s`` into the working directory before the blocks after it run. A block in
:data:`RUNNABLE` runs unless the line before its fence is a marker::

    <!-- docs-run: guest REASON -->   runs in the QEMU guest (tests/kernel/test_docs_guest.py)
    <!-- docs-run: slow REASON -->    runs only with --docs-slow (minutes, or a build)
    <!-- docs-run: skip REASON -->    never runs (root, system packages, a QEMU boot, a fragment)

Every marker needs a reason; a marked block is still checked for syntax. A ``console`` block is
``$ COMMAND`` lines (a trailing backslash continues one) and the output they print; ``[exit N]``
after a command's output is the exit code it must have, otherwise it must exit 0.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNNABLE = frozenset({"sh", "bash", "shell", "console", "python"})
KINDS = frozenset({"guest", "slow", "skip"})
# An opening fence, indented inside a list item or not; its info string holds no backtick.
FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^`]*)$")
CLOSE = re.compile(r"^ *```\s*$")
MARKER = re.compile(r"^<!--\s*docs-run:\s*(?P<kind>\S+)\s*(?P<reason>.*?)\s*-->\s*$")
EXIT = re.compile(r"^\[exit (\d+)\]$")
# One block's time limit: the longest host blocks build libteflon.so or a wheel's worth of C
# into a cold cache; anything longer is marked slow.
TIMEOUT = 180.0
SLOW_TIMEOUT = 1200.0  # a block marked slow: a benchmark, a long fuzzing run


@dataclass(frozen=True)
class Block:
    doc: str  # relative to the repository: README.md, docs/tools.md
    line: int  # the opening fence's line, from 1
    lang: str
    filename: str | None  # the info string's second word: the block is that file's content
    text: str
    kind: str | None  # None: runs on the host; else a marker's kind (possibly unknown)
    reason: str

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def runnable(self) -> bool:
        return self.lang in RUNNABLE


def documents(root: Path = REPO) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def parse(path: Path, root: Path = REPO) -> list[Block]:
    """Every fenced block of one Markdown file, in order; ValueError on a fence that never closes."""
    lines = path.read_text().split("\n")
    doc = str(path.relative_to(root))
    blocks = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        words = m["info"].split()
        indent = len(m["indent"])
        end = next((j for j in range(i + 1, len(lines)) if CLOSE.match(lines[j])), None)
        if end is None:
            raise ValueError(f"{doc}:{i + 1}: the fence never closes")
        marker = MARKER.match(lines[i - 1].strip()) if i else None
        blocks.append(
            Block(
                doc=doc,
                line=i + 1,
                lang=words[0] if words else "",
                filename=words[1] if len(words) > 1 else None,
                text="\n".join(line[indent:] for line in lines[i + 1 : end]) + "\n",
                kind=marker["kind"] if marker else None,
                reason=marker["reason"] if marker else "",
            )
        )
        i = end + 1
    return blocks


def all_blocks(root: Path = REPO) -> list[Block]:
    return [b for path in documents(root) for b in parse(path, root)]


def marker_problem(block: Block) -> str | None:
    """What is wrong with a block's marker or language, or None."""
    if not block.lang:
        return f"{block.where}: a fence with no language (sh, console, python, ... or text for output)"
    if block.kind is None:
        return None
    if block.kind not in KINDS:
        return f"{block.where}: unknown docs-run kind {block.kind!r} (one of {', '.join(sorted(KINDS))})"
    if not block.reason:
        return f"{block.where}: docs-run: {block.kind} needs a reason"
    if not block.runnable:
        return f"{block.where}: a docs-run marker on a {block.lang} block, which never runs"
    return None


@dataclass(frozen=True)
class Command:
    text: str
    line: int  # in the Markdown file
    exit_code: int


def console_commands(block: Block) -> list[Command]:
    """A console block's commands with the exit code each must have."""
    commands: list[Command] = []
    lines = block.text.rstrip("\n").split("\n")
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            m = EXIT.match(lines[i].strip())
            if m and commands:
                commands[-1] = Command(commands[-1].text, commands[-1].line, int(m.group(1)))
            i += 1
            continue
        start = i
        parts = [lines[i][2:]]
        while parts[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            parts.append(lines[i])
        commands.append(Command("\n".join(parts), block.line + 1 + start, 0))
        i += 1
    return commands


def shell_script(block: Block) -> str:
    """The bash script that runs a sh or console block and fails on the first wrong exit code."""
    if block.lang != "console":
        return "set -e\n" + block.text
    out = []
    for cmd in console_commands(block):
        where = shlex.quote(f"docs-run: {block.doc}:{cmd.line}: exit ")
        says = shlex.quote(f", the block says {cmd.exit_code}: {cmd.text.split(chr(10))[0]}")
        check = f"if [ $rc -ne {cmd.exit_code} ]; then echo {where}$rc{says} >&2; exit 1; fi"
        out.append(f"{cmd.text}\nrc=$?\n{check}\n")
    return "".join(out)


def syntax_problem(block: Block) -> str | None:
    """A block's syntax error (bash -n, compile()), or None."""
    if block.lang == "python":
        try:
            ast.parse(block.text, block.where)
        except SyntaxError as e:
            return f"{block.where}: {e}"
        return None
    if block.lang == "console" and not console_commands(block):
        return f"{block.where}: a console block with no '$ ' command"
    script = shell_script(block)
    proc = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, check=False)
    return f"{block.where}: bash -n: {proc.stderr.strip()}" if proc.returncode else None


def workdir(path: Path, root: Path = REPO) -> Path:
    """Make ``path`` a working directory that looks like the checkout to the docs' commands: its
    data directories (``tests/``, ``firmware/``, ...) as links into it, its Python packages not
    (they come from PYTHONPATH), ``build/`` its own, and a ``.venv/bin`` of wrappers that run the
    test's venv. What a block writes lands here.

    Nothing may make Python see another path for the checkout or the venv: libteflon.so's cache
    key holds both (delegate_teflon.build), so a link to the venv (sys.prefix would be the link)
    would build the delegate again for every directory, and miss the guest's read-only cache."""
    path.mkdir(parents=True, exist_ok=True)
    names = {p.split("/")[0] for p in _git(root, "ls-files").split("\n") if p}
    for name in sorted(names):
        if (root / name / "__init__.py").exists():
            continue
        (path / name).symlink_to(root / name)
    venv = Path(sys.prefix)
    bin_dir = path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for exe in sorted((venv / "bin").iterdir()):
        if exe.name.startswith("activate") or not os.access(exe, os.X_OK):
            (bin_dir / exe.name).symlink_to(exe)
            continue
        (bin_dir / exe.name).write_text(f'#!/bin/sh\nexec {shlex.quote(str(exe))} "$@"\n')
        (bin_dir / exe.name).chmod(0o755)
    return path


def clean_env(cwd: Path, root: Path = REPO) -> dict[str, str]:
    """The environment a reader's shell has after ``source .venv/bin/activate``, and nothing else
    of the test's: the cache location passes through, so the builds in it are reused."""
    env = {
        "PATH": f"{cwd / '.venv' / 'bin'}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "VIRTUAL_ENV": sys.prefix,
        "PYTHONPATH": str(root),
    }
    for name in ("VNPU_CACHE_DIR", "XDG_CACHE_HOME", "TMPDIR"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env


@dataclass(frozen=True)
class Outcome:
    block: Block
    returncode: int | None  # None: it timed out
    output: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def describe(self) -> str:
        what = "timed out" if self.returncode is None else f"exit {self.returncode}"
        tail = "\n".join(self.output.strip().split("\n")[-15:])
        return f"{self.block.where} ({self.block.lang}): {what}\n{tail}"


def run_block(block: Block, cwd: Path, env: dict[str, str], timeout: float = TIMEOUT) -> Outcome:
    """Run one block in ``cwd``: a named block is written there first (and a named Python block
    then runs as that file)."""
    if block.filename:
        (cwd / block.filename).write_text(block.text)
    if block.lang == "python":
        argv = [sys.executable, block.filename] if block.filename else [sys.executable, "-c", block.text]
    else:
        argv = ["bash", "-c", shell_script(block)]
    # Its own session, so that a timeout ends the block's children too.
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return Outcome(block, None, out)
    return Outcome(block, proc.returncode, out)


def run_document(
    blocks: list[Block], cwd: Path, kinds: frozenset[str | None], timeout: float = TIMEOUT
) -> list[Outcome]:
    """Run a document's blocks in order in one working directory: the ones whose kind is in
    ``kinds``, each within ``timeout`` seconds, and write every named block that does not run (a
    file the later blocks read)."""
    env = clean_env(cwd)
    outcomes = []
    for block in blocks:
        if not block.runnable:
            if block.filename:
                (cwd / block.filename).write_text(block.text)
            continue
        if block.kind in kinds:
            outcomes.append(
                run_block(block, cwd, env, max(timeout, SLOW_TIMEOUT) if block.kind == "slow" else timeout)
            )
        elif block.filename:
            (cwd / block.filename).write_text(block.text)
    return outcomes


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def git_status(root: Path = REPO) -> str:
    """``git status --porcelain`` of the checkout (ignored files, such as build/, not included)."""
    return _git(root, "status", "--porcelain", "--untracked-files=all")
