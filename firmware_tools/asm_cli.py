"""``vnpu-asm``: assemble and disassemble vnpu command streams.

    vnpu-asm asm IN.s -o OUT.bin [--fragment]   (IN.s may be - for stdin)
    vnpu-asm disasm IN.bin                      (prints source text with byte offsets; for a
                                                 broken stream, the valid prefix, then the error)

Bad input gives a one-line error on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from uapi.isa import IsaError

from .asm import AsmError, assemble, disassemble_prefix


def cmd_asm(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.input == "-" else Path(args.input).read_text()
    data = assemble(text, require_end=not args.fragment)
    Path(args.output).write_bytes(data)
    print(f"wrote {args.output} ({len(data)} bytes)")
    return 0


def cmd_disasm(args: argparse.Namespace) -> int:
    # Print every instruction that decodes, then the first problem: a broken stream is
    # exactly when a driver developer needs to see it.
    text, error = disassemble_prefix(Path(args.input).read_bytes())
    sys.stdout.write(text)
    if error is not None:
        raise error
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="vnpu-asm", description="Assemble and disassemble vnpu command streams."
    )
    sub = ap.add_subparsers(dest="command", required=True)
    a = sub.add_parser("asm", help="assemble source text into a command stream")
    a.add_argument("input", help="source file, or - for stdin")
    a.add_argument("-o", "--output", required=True, help="output binary")
    a.add_argument("--fragment", action="store_true", help="allow a stream that does not end with END")
    a.set_defaults(func=cmd_asm)
    d = sub.add_parser("disasm", help="disassemble a command stream")
    d.add_argument("input", help="binary command stream")
    d.set_defaults(func=cmd_disasm)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (AsmError, IsaError) as e:
        print(f"vnpu-asm: {args.input}: {e}", file=sys.stderr)
    except (OSError, UnicodeDecodeError) as e:
        print(f"vnpu-asm: {args.input}: {getattr(e, 'strerror', None) or e}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
