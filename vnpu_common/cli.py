"""The command-line conventions of the project's CLIs: one-line errors, one table of exit codes,
``--version``, and the words for a file that cannot be read or written.

Every CLI (``accel``, ``vnpu-fw``, ``vnpu-asm``, ``python -m delegate_teflon.run``) exits with an
:class:`ExitCode`; docs/tools.md shows :func:`exit_code_table` (tests/tools/test_cli_conventions.py
compares the two).
"""

from __future__ import annotations

import argparse
import errno
import os
import tomllib
from enum import IntEnum
from importlib import metadata
from pathlib import Path
from typing import NoReturn


class ExitCode(IntEnum):
    """The exit status of every CLI of the project."""

    OK = 0
    DIFFERENT = 1
    USAGE = 2
    JOB_FAILED = 3
    BAD_FILE = 4
    DEVICE = 5
    INTERRUPTED = 130
    BROKEN_PIPE = 141


#: What each exit code means, as docs/tools.md's table says it.
EXIT_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "success",
    ExitCode.DIFFERENT: "the tool ran and the answer is no: outputs differ from the reference "
    "(`accel run --compare`, `python -m delegate_teflon.run`), a firmware image is rejected or stale "
    "(`vnpu-fw verify`, `install`, `build --check`)",
    ExitCode.USAGE: "a bad command line: an unknown command or option, a missing or out-of-range value, "
    "a process `accel trace -p` may not attach to",
    ExitCode.JOB_FAILED: "the job ran and failed (its status is printed), or a wait timed out",
    ExitCode.BAD_FILE: "a file named on the command line cannot be read, written or used: a model, an "
    "input, a command stream or its source (`FILE:LINE:COLUMN`), a coredump, an image, a key, an output path",
    ExitCode.DEVICE: "no device, a device that cannot be opened, or an ioctl that failed (the message names "
    "the ioctl, the errno and what it means there)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
    ExitCode.BROKEN_PIPE: "the output pipe closed early (`accel coredump` into `head`): SIGPIPE's status",
}


def exit_code_table() -> str:
    """The Markdown table of :class:`ExitCode`, as docs/tools.md carries it."""
    rows = ["| exit code | meaning |", "|---|---|"]
    rows += [f"| {code.value} | {EXIT_MEANINGS[code]} |" for code in ExitCode]
    return "\n".join(rows)


class CommandLineError(Exception):
    """A command line argparse refused; the message is one line."""


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse that raises :attr:`usage_error` (one line) instead of printing usage and exiting.

    A CLI subclasses it to raise its own usage exception, and passes the subclass as the
    subparsers' ``parser_class`` too; its ``main`` prints the message and returns 2. An argument's
    own newline is shown as ``\\n`` so the message stays on its line."""

    usage_error: type[Exception] = CommandLineError
    prefix_prog = False  # start the message with the (sub)command's name: "accel bo create: ..."

    def error(self, message: str) -> NoReturn:
        one_line = message.replace("\n", "\\n")
        raise self.usage_error(f"{self.prog}: {one_line}" if self.prefix_prog else one_line)


# --- --version -----------------------------------------------------------------------------------
_PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def package_version() -> str:
    """The stack's version: pyproject.toml's in a checkout (the code that runs), else the installed
    distribution's (a wheel carries no pyproject.toml)."""
    try:
        project = tomllib.loads(_PYPROJECT.read_text())["project"]
        if project["name"] == "vnpu":  # not another package's file beside ours in site-packages
            return project["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        pass
    try:
        return metadata.version("vnpu")
    except metadata.PackageNotFoundError:
        return "unknown"


def add_version(parser: argparse.ArgumentParser) -> None:
    """``--version``: print ``PROG VERSION`` and exit 0."""
    parser.add_argument("--version", action="version", version=f"{parser.prog} {package_version()}")


# --- argument values -----------------------------------------------------------------------------
def non_negative_int(text: str) -> int:
    """An argparse ``type``: a count such as ``--runs`` (0 or more)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; give 0 or more")
    return value


def positive_float(text: str) -> float:
    """An argparse ``type``: a duration in seconds such as ``--timeout`` (more than 0)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


# --- files -----------------------------------------------------------------------------------------
_ERRNO_WORDS = {
    errno.ENOENT: "no such file or directory",
    errno.EISDIR: "is a directory, not a file",
    errno.ENOTDIR: "a part of the path is not a directory",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "the file system is read-only",
    errno.ENOSPC: "no space left on the device",
}


def os_error_words(e: OSError) -> str:
    """What an OSError says, without Python's ``[Errno N]`` and the repeated path."""
    if e.errno in _ERRNO_WORDS:
        return _ERRNO_WORDS[e.errno]
    return (e.strerror or str(e)).lower()


def output_path_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be written as a new or replaced file (checked before the work that fills
    it, so a long run does not end in a failed write), or None."""
    p = Path(path)
    if p.is_dir():
        return f"{p} is a directory; give a file name in it (such as {p / 'out'})"
    parent = p.parent
    if not parent.is_dir():
        return f"cannot write {p}: no such directory {parent}; create it first"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot write {p}: no permission to write in {parent}"
    if p.exists() and not os.access(p, os.W_OK):
        return f"cannot write {p}: the file is read-only"
    return None
