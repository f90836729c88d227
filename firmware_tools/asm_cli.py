"""``vnpu-asm``: assemble and disassemble vnpu command streams.

    vnpu-asm asm IN.s -o OUT.bin [--fragment] [-D NAME=VALUE ...]   (IN.s may be - for stdin)
    vnpu-asm disasm IN.bin [--region NAME=VA:SIZE ...] [--no-annotate]
        prints source text with byte offsets and the tensors each instruction uses; for a
        broken stream, the valid prefix, then the error

``-D`` defines a symbol (``va=NAME+0x40`` in the source); ``--region`` names an address
range, so the disassembly prints ``va=NAME+0x40`` back. Errors are one line on stderr; the
exit codes are :class:`vnpu_common.cli.ExitCode`'s (docs/tools.md): 2 a bad option, 4 an input
that cannot be read or assembled (``FILE:LINE:COLUMN: message`` for source errors), a broken
stream, or an output path that cannot be written (checked before assembling).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from uapi.isa import IsaError
from vnpu_common.cli import (
    CliError,
    ExitCode,
    OneLineArgumentParser,
    add_version,
    cli_main,
    os_error_words,
    output_path_problem,
)

from .asm import AsmError, assemble, disassemble_prefix


def _pairs(items: list[str], what: str) -> list[tuple[str, str]]:
    out = []
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name or not value:
            raise ValueError(f"{what} {item!r}: expected NAME=VALUE")
        out.append((name, value))
    return out


def _symbols(items: list[str]) -> dict[str, int]:
    try:
        return {name: int(value, 0) for name, value in _pairs(items, "-D")}
    except ValueError as e:
        raise UsageError(str(e)) from None


def _regions(items: list[str]) -> dict[str, tuple[int, int]]:
    out = {}
    try:
        for name, value in _pairs(items, "--region"):
            va, colon, size = value.partition(":")
            if not colon:
                raise ValueError(f"--region {name}={value}: expected NAME=VA:SIZE")
            out[name] = (int(va, 0), int(size, 0))
    except ValueError as e:
        raise UsageError(str(e)) from None
    return out


class UsageError(CliError):
    """A bad option value (reported without a file name)."""


class BadFile(CliError):
    """A file that cannot be read or written; the message names it."""

    code = ExitCode.BAD_FILE


def _read(path: str, binary: bool) -> str | bytes:
    try:
        if path == "-":
            return sys.stdin.buffer.read() if binary else sys.stdin.read()
        return Path(path).read_bytes() if binary else Path(path).read_text()
    except OSError as e:
        raise BadFile(f"cannot read {path}: {os_error_words(e)}") from None
    except UnicodeDecodeError:
        raise BadFile(f"{path}: not a text file (assemble source text; disassemble a .bin)") from None


class _Parser(OneLineArgumentParser):
    usage_error = UsageError


def cmd_asm(args: argparse.Namespace) -> int:
    symbols = _symbols(args.define)
    if problem := output_path_problem(args.output):
        raise BadFile(f"-o: {problem}")
    text = _read(args.input, binary=False)
    data = assemble(text, require_end=not args.fragment, symbols=symbols)
    try:
        Path(args.output).write_bytes(data)
    except OSError as e:
        raise BadFile(f"cannot write {args.output}: {os_error_words(e)}") from None
    print(f"wrote {args.output} ({len(data)} bytes)")
    return 0


def cmd_disasm(args: argparse.Namespace) -> int:
    # Print every instruction that decodes, then the first problem: a broken stream is
    # exactly when a driver developer needs to see it.
    regions = _regions(args.region)
    text, error = disassemble_prefix(_read(args.input, binary=True), regions, annotate=not args.no_annotate)
    sys.stdout.write(text)
    if error is not None:
        raise error
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="vnpu-asm", description="Assemble and disassemble vnpu command streams.")
    add_version(ap)
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    a = sub.add_parser("asm", help="assemble source text into a command stream")
    a.add_argument("input", help="source file, or - for stdin")
    a.add_argument("-o", "--output", required=True, help="output binary")
    a.add_argument("--fragment", action="store_true", help="allow a stream that does not end with END")
    a.add_argument(
        "-D", "--define", action="append", default=[], metavar="NAME=VALUE", help="define a symbol"
    )
    a.set_defaults(func=cmd_asm)
    d = sub.add_parser("disasm", help="disassemble a command stream")
    d.add_argument("input", help="binary command stream")
    d.add_argument(
        "--region",
        action="append",
        default=[],
        metavar="NAME=VA:SIZE",
        help="print addresses in [VA, VA+SIZE) as NAME+offset",
    )
    d.add_argument("--no-annotate", action="store_true", help="no tensor notes in the comments")
    d.set_defaults(func=cmd_disasm)
    return ap


@cli_main("vnpu-asm")
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except AsmError as e:
        where = f"{args.input}:{e.line}:{e.column or 1}" if e.line is not None else args.input
        raise BadFile(f"{where}: {e.message}") from None
    except IsaError as e:
        raise BadFile(f"{args.input}: {e}") from None


if __name__ == "__main__":
    sys.exit(main())
