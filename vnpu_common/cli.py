"""The command-line conventions of the project's CLIs: one-line errors, one table of exit codes,
``--version``, and the words for a file that cannot be read or written.

Every CLI (the console scripts and the documented ``python -m`` commands) wraps its ``main`` in
:func:`cli_main`, which checks the ``VNPU_*`` environment first and turns a user's mistake
(:class:`CliError`, :class:`vnpu_common.config.ConfigError`, a file that cannot be used) into
``PROG: message`` on one line and an :class:`ExitCode`; docs/tools.md shows :func:`exit_code_table`
(tests/tools/test_cli_conventions.py compares the two, and runs every CLI with a bad variable).
"""

from __future__ import annotations

import argparse
import errno
import functools
import os
import sys
import tomllib
from collections.abc import Callable, Sequence
from enum import IntEnum
from importlib import metadata
from pathlib import Path
from typing import NoReturn

from vnpu_common import config


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


class CliError(Exception):
    """A user's mistake a CLI reports as one line (the message) and ends with ``code``."""

    code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str, code: ExitCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class CommandLineError(CliError):
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


# --- main ------------------------------------------------------------------------------------------
#: (exit code, message or None to print nothing) for an exception a CLI knows, else None.
Translate = Callable[[Exception], "tuple[int, str | None] | None"]
Main = Callable[[Sequence[str] | None], int]
# Options that only ask about the tool: answered whatever the environment holds.
_ABOUT_ITSELF = frozenset({"-h", "--help", "--version"})


def user_error(e: Exception, translate: Translate | None = None) -> tuple[int, str | None] | None:
    """The exit code and one-line message of a user's mistake, or None for a bug (left to raise)."""
    if translate is not None and (known := translate(e)) is not None:
        return known
    if isinstance(e, CliError):
        return e.code, str(e)
    if isinstance(e, config.ConfigError):
        return ExitCode.USAGE, str(e)
    if isinstance(e, OSError) and e.filename is not None:
        # A file no check foresaw (each names its own): still one line, never a traceback.
        return ExitCode.BAD_FILE, f"{e.filename}: {os_error_words(e)}"
    return None


def say_error(prog: str, message: str) -> None:
    """``PROG: message`` on stderr, one line (a message that names the program already keeps its own
    start: ``accel bo create: ...``)."""
    line = "; ".join(part.strip() for part in message.splitlines() if part.strip())
    if not (line.startswith(f"{prog}:") or line.startswith(f"{prog} ")):
        line = f"{prog}: {line}"
    print(line, file=sys.stderr)


def cli_main(prog: str, translate: Translate | None = None) -> Callable[[Main], Main]:
    """Wrap a CLI's ``main(argv) -> exit code``: the ``VNPU_*`` variables are checked before it runs
    (:func:`vnpu_common.config.check_environment`), a user's mistake it raises (see
    :func:`user_error`; ``translate`` for the CLI's own exceptions) is one line and its
    :class:`ExitCode`, Ctrl-C is 130 and a closed output pipe 141, quietly."""

    def decorate(main: Main) -> Main:
        @functools.wraps(main)
        def wrapped(argv: Sequence[str] | None = None) -> int:
            args = sys.argv[1:] if argv is None else argv
            try:
                if not _ABOUT_ITSELF.intersection(args):
                    config.check_environment()
                return int(main(argv))
            except KeyboardInterrupt:
                return ExitCode.INTERRUPTED
            except BrokenPipeError:
                # The reader went away (accel ... | head): stop quietly, as cat does; Python
                # flushes stdout at exit, so let it flush into nothing.
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115
                return ExitCode.BROKEN_PIPE
            except Exception as e:
                known = user_error(e, translate)
                if known is None:
                    raise
                code, message = known
                if message:
                    say_error(prog, message)
                return code

        return wrapped

    return decorate
