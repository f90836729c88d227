"""``vnpu-fw``: build, inspect and verify vnpu firmware images.

    vnpu-fw build [-o PATH] [--version X.Y.Z] [--disable-op NAME]... [--build-id ID]
    vnpu-fw build --check [PATH]    exit 1 unless PATH (default: the committed image) is current
    vnpu-fw inspect PATH
    vnpu-fw verify PATH

Bad input gives a one-line error on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from uapi.isa import SPEC, IsaError

from .image import (
    DEFAULT_IMAGE_PATH,
    FirmwareError,
    FirmwareImage,
    all_opcodes,
    build_image,
    default_image,
    format_fw_version,
    parse_fw_version,
    parse_image,
)


def _image_from_args(args: argparse.Namespace) -> FirmwareImage:
    img = default_image()
    fw_version = parse_fw_version(args.version) if args.version else img.fw_version
    build_id = args.build_id if args.build_id is not None else f"vnpu-fw-{format_fw_version(fw_version)}"
    enabled = set(all_opcodes())
    for name in args.disable_op:
        try:
            enabled.discard(SPEC.by_name(name.upper()).opcode)
        except IsaError:
            raise FirmwareError(f"--disable-op: unknown instruction {name!r}") from None
    return FirmwareImage(
        fw_version=fw_version,
        isa_version=img.isa_version,
        enabled_opcodes=frozenset(enabled),
        build_id=build_id,
    )


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise FirmwareError(f"cannot read: {e.strerror}") from None


def cmd_build(args: argparse.Namespace) -> int:
    data = build_image(_image_from_args(args))
    if args.check is not None:
        path = Path(args.check)
        if not path.exists() or path.read_bytes() != data:
            print(
                f"vnpu-fw: {path} is stale or missing; rebuild it with: vnpu-fw build -o {path}",
                file=sys.stderr,
            )
            return 1
        print(f"{path}: current")
        return 0
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    print(f"wrote {out} ({len(data)} bytes)")
    return 0


def describe(img: FirmwareImage, size: int) -> str:
    enabled = [i for i in SPEC.instructions if i.opcode in img.enabled_opcodes]
    disabled = [i for i in SPEC.instructions if i.opcode not in img.enabled_opcodes]
    lines = [
        f"size:         {size} bytes",
        f"fw version:   {img.fw_version_str} ({img.fw_version:#010x})",
        f"ISA version:  {img.isa_version_str} ({img.isa_version:#010x})",
        f"build id:     {img.build_id or '(none)'}",
        f"enabled ops:  {len(enabled)}: " + " ".join(i.name for i in enabled),
        f"disabled ops: {len(disabled)}: " + (" ".join(i.name for i in disabled) or "(none)"),
    ]
    return "\n".join(lines)


def cmd_inspect(args: argparse.Namespace) -> int:
    data = _read(args.path)
    print(describe(parse_image(data), len(data)))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    img = parse_image(_read(args.path))
    print(
        f"{args.path}: OK, firmware {img.fw_version_str}, ISA {img.isa_version_str}, "
        f"{len(img.enabled_opcodes)} opcodes enabled"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="vnpu-fw", description="Build, inspect and verify vnpu firmware images."
    )
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build an image")
    b.add_argument("-o", "--output", default="vnpu_fw.bin", help="output path (default: %(default)s)")
    b.add_argument("--version", help="firmware version MAJOR.MINOR.PATCH (default: 1.0.0)")
    b.add_argument("--disable-op", action="append", default=[], metavar="NAME", help="disable an instruction")
    b.add_argument("--build-id", help="build identifier (default: vnpu-fw-VERSION)")
    b.add_argument(
        "--check",
        nargs="?",
        const=str(DEFAULT_IMAGE_PATH),
        metavar="PATH",
        help="write nothing; exit 1 unless PATH (default: the committed image) equals the built image",
    )
    b.set_defaults(func=cmd_build)
    i = sub.add_parser("inspect", help="print an image's header and payload")
    i.add_argument("path")
    i.set_defaults(func=cmd_inspect)
    v = sub.add_parser("verify", help="check an image; exit 1 if it is invalid")
    v.add_argument("path")
    v.set_defaults(func=cmd_verify)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except FirmwareError as e:
        where = f"{args.path}: " if getattr(args, "path", None) else ""
        print(f"vnpu-fw: {where}{e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
