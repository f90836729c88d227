"""``vnpu-fw``: build, sign, verify and inspect vnpu firmware images (docs/firmware.md).

    vnpu-fw build [MANIFEST] [-o PATH] [--key KEY] [--version X.Y.Z] [--disable-op NAME]... [--build-tag T]
    vnpu-fw build --check [PATH]    exit 1 unless PATH (default: the committed image) is current
    vnpu-fw sign IMAGE --key KEY [-o OUT]
    vnpu-fw verify [IMAGE] [--pubkey PEM]
    vnpu-fw inspect [IMAGE] [--pubkey PEM] [--json]
    vnpu-fw install [IMAGE] [--pubkey PEM] [--dest DIR]   verify, then copy to DIR/vnpu/vnpu_fw.bin
    vnpu-fw keygen NAME             write a new Ed25519 pair: NAME.key (private) and NAME.pub

IMAGE defaults to the image the package carries (the committed firmware/vnpu/vnpu_fw.bin);
``install`` puts it where the kernel's request_firmware() finds it (DIR: /lib/firmware).

Exit codes are :class:`vnpu_common.cli.ExitCode`'s (docs/tools.md): 0 success; 1 the image is
rejected (the reason is the boot ROM's) or stale; 2 a bad command line; 4 a file (image, manifest,
key, output) that cannot be read, written or used. Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from uapi import hw_layout as hw
from uapi.firmware_format import (
    DEV_PUBLIC_KEY_PATH,
    FIRMWARE_NAME,
    FirmwareError,
    FirmwareImage,
    ParsedImage,
    build_image,
    format_build_id,
    load_private_key,
    load_public_key,
    parse_fw_version,
    parse_image,
    sign_image,
)
from uapi.isa import SPEC, IsaError
from vnpu_common.cli import CliError, ExitCode, OneLineArgumentParser, add_version, cli_main, os_error_words

from .image import DEFAULT_IMAGE_PATH, DEFAULT_MANIFEST_PATH, default_image
from .manifest import load_manifest


class UsageError(CliError):
    """A bad command line (ExitCode.USAGE)."""


class BadFile(CliError):
    """A file that cannot be read, written or used: an image, a manifest, a key (ExitCode.BAD_FILE)."""

    code = ExitCode.BAD_FILE


def _image_from_args(args: argparse.Namespace) -> tuple[FirmwareImage, Path | None]:
    manifest = args.manifest
    if manifest is None and args.check is not None:
        manifest = str(DEFAULT_MANIFEST_PATH)
    if manifest is not None:
        try:
            m = load_manifest(manifest)
        except FirmwareError as e:
            raise BadFile(str(e)) from None
        img, key = m.image, m.key_path
    else:
        img, key = default_image(), None
    changes: dict[str, Any] = {}
    if args.version:
        try:
            changes["fw_version"] = parse_fw_version(args.version)
        except FirmwareError as e:
            raise UsageError(f"--version: {e}") from None
        if args.build_tag is None and manifest is None:
            changes["build_tag"] = f"vnpu-fw-{args.version}"
    if args.build_tag is not None:
        changes["build_tag"] = args.build_tag
    if args.disable_op:
        enabled = set(img.enabled_opcodes)
        for name in args.disable_op:
            try:
                enabled.discard(SPEC.by_name(name.upper()).opcode)
            except IsaError:
                raise UsageError(f"--disable-op: unknown instruction {name!r}") from None
        changes["enabled_opcodes"] = frozenset(enabled)
    if args.key is not None:
        key = Path(args.key)
    return dataclasses.replace(img, **changes), key


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise BadFile(f"cannot read {path}: {os_error_words(e)}") from None


def _private_key(path: Path | str):  # noqa: ANN202 - cryptography's key type
    try:
        return load_private_key(path)
    except FirmwareError as e:
        raise BadFile(str(e)) from None


def _public_key(path: str | None):  # noqa: ANN202
    try:
        return load_public_key(path or DEV_PUBLIC_KEY_PATH)
    except FirmwareError as e:
        raise BadFile(str(e)) from None


def _write(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except OSError as e:
        raise BadFile(f"cannot write {path}: {os_error_words(e)}") from None


def cmd_build(args: argparse.Namespace) -> int:
    img, key_path = _image_from_args(args)
    try:
        data = build_image(img, _private_key(key_path) if key_path else None)
    except FirmwareError as e:
        raise BadFile(str(e)) from None
    if args.check is not None:
        path = Path(args.check)
        if not path.exists() or path.read_bytes() != data:
            source = args.manifest or DEFAULT_MANIFEST_PATH
            print(
                f"vnpu-fw: {path} is stale or missing; rebuild it with: vnpu-fw build {source} -o {path}",
                file=sys.stderr,
            )
            return ExitCode.DIFFERENT
        print(f"{path}: current")
        return ExitCode.OK
    out = Path(args.output)
    _write(out, data)
    signed = "signed" if key_path else "unsigned: sign it with vnpu-fw sign --key KEY"
    print(f"wrote {out} ({len(data)} bytes, {signed})")
    return ExitCode.OK


def cmd_sign(args: argparse.Namespace) -> int:
    key = _private_key(args.key)
    data = _read(args.path)
    parse_image(data, check_signature=False)  # sign only what the boot ROM would run
    data = sign_image(data, key)
    out = Path(args.output or args.path)
    _write(out, data)
    print(f"signed {out} ({len(data)} bytes)")
    return ExitCode.OK


def cmd_keygen(args: argparse.Namespace) -> int:
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private, public = Path(f"{args.name}.key"), Path(f"{args.name}.pub")
    for path in (private, public):
        if path.exists():
            raise BadFile(f"{path} exists; not overwriting a key")
    _write(private, key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption()))
    private.chmod(0o600)  # the signing secret
    _write(public, key.public_key().public_bytes(ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo))
    print(f"wrote {private} (private: keep it secret) and {public}")
    return ExitCode.OK


def record(parsed: ParsedImage, signature: str) -> dict[str, Any]:
    """``inspect --json``: the image's fields, decoded."""
    img = parsed.image
    return {
        "size": parsed.size,
        "format_version": hw.FW_FORMAT_VERSION,
        "fw_version": img.fw_version_str,
        "fw_version_raw": img.fw_version,
        "isa_version": img.isa_version_str,
        "isa_version_raw": img.isa_version,
        "build_id": format_build_id(parsed.build_id),
        "build_tag": img.build_tag,
        "digest": parsed.digest.hex(),
        "signature": signature,
        "enabled_ops": [i.name for i in SPEC.instructions if i.opcode in img.enabled_opcodes],
        "disabled_ops": [i.name for i in SPEC.instructions if i.opcode not in img.enabled_opcodes],
        "limits": dataclasses.asdict(img.limits),
    }


def describe(rec: dict[str, Any]) -> str:
    lim = rec["limits"]
    lines = [
        f"size:         {rec['size']} bytes (format {rec['format_version']})",
        f"fw version:   {rec['fw_version']} ({rec['fw_version_raw']:#010x})",
        f"ISA version:  {rec['isa_version']} ({rec['isa_version_raw']:#010x})",
        f"build id:     {rec['build_id']}",
        f"build tag:    {rec['build_tag'] or '(none)'}",
        f"SHA-256:      {rec['digest']}",
        f"signature:    {rec['signature']}",
        f"limits:       max_cmd_size {lim['max_cmd_size']}, max_tensor_elements {lim['max_tensor_elements']}",
        f"enabled ops:  {len(rec['enabled_ops'])}: " + " ".join(rec["enabled_ops"]),
        f"disabled ops: {len(rec['disabled_ops'])}: " + (" ".join(rec["disabled_ops"]) or "(none)"),
    ]
    return "\n".join(lines)


def cmd_inspect(args: argparse.Namespace) -> int:
    data = _read(args.path)
    parsed = parse_image(data, check_signature=False)
    pubkey = _public_key(args.pubkey)
    if not parsed.signed:
        signature = "none (unsigned)"
    else:
        try:
            parse_image(data, pubkey)
            signature = f"Ed25519, valid for {args.pubkey or 'the development key'}"
        except FirmwareError as e:
            signature = f"Ed25519, INVALID for {args.pubkey or 'the development key'}"
            if e.reason != hw.FW_REJECT_SIGNATURE:
                raise
    rec = record(parsed, signature)
    print(json.dumps(rec, indent=2) if args.json else describe(rec))
    return ExitCode.OK


def cmd_verify(args: argparse.Namespace) -> int:
    parsed = parse_image(_read(args.path), _public_key(args.pubkey))
    img = parsed.image
    print(
        f"{args.path}: OK, firmware {img.fw_version_str}, ISA {img.isa_version_str}, build id "
        f"{format_build_id(parsed.build_id)}, {len(img.enabled_opcodes)} opcodes enabled, signature valid"
    )
    return ExitCode.OK


def cmd_install(args: argparse.Namespace) -> int:
    data = _read(args.path)
    parsed = parse_image(data, _public_key(args.pubkey))  # install only what the boot ROM accepts
    target = Path(args.dest) / FIRMWARE_NAME
    staged = target.with_name(f".{target.name}.{os.getpid()}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staged.write_bytes(data)
        staged.chmod(0o644)
        os.replace(staged, target)  # a concurrent request_firmware() never reads half a file
    except OSError as e:
        staged.unlink(missing_ok=True)
        raise BadFile(f"cannot write {target}: {os_error_words(e)}") from None
    img = parsed.image
    print(
        f"installed {target} (firmware {img.fw_version_str}, build id {format_build_id(parsed.build_id)}); "
        f"vnpu.ko requests it as {FIRMWARE_NAME}"
    )
    return ExitCode.OK


class _Parser(OneLineArgumentParser):
    usage_error = UsageError


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="vnpu-fw", description="Build, sign, verify and inspect vnpu firmware images.")
    add_version(ap)
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    b = sub.add_parser("build", help="build an image from a TOML manifest (default content without one)")
    b.add_argument("manifest", nargs="?", help="TOML manifest (docs/firmware.md)")
    b.add_argument("-o", "--output", default="vnpu_fw.bin", help="output path (default: %(default)s)")
    b.add_argument("--key", help="sign with this Ed25519 private key (PEM); overrides firmware.sign_with")
    b.add_argument("--version", help="firmware version MAJOR.MINOR.PATCH (default: the manifest's, or 1.0.0)")
    b.add_argument("--disable-op", action="append", default=[], metavar="NAME", help="disable an instruction")
    b.add_argument("--build-tag", help="build tag text (default: the manifest's, or vnpu-fw-VERSION)")
    b.add_argument(
        "--check",
        nargs="?",
        const=str(DEFAULT_IMAGE_PATH),
        metavar="PATH",
        help="write nothing; exit 1 unless PATH (default: the committed image, from the committed "
        "manifest) equals the built image",
    )
    b.set_defaults(func=cmd_build)
    s = sub.add_parser("sign", help="sign an image with an Ed25519 private key")
    s.add_argument("path", metavar="IMAGE")
    s.add_argument("--key", required=True, help="Ed25519 private key (PEM)")
    s.add_argument("-o", "--output", help="output path (default: sign IMAGE in place)")
    s.set_defaults(func=cmd_sign)
    default_image_help = f"firmware image (default: the package's, {DEFAULT_IMAGE_PATH})"
    i = sub.add_parser("inspect", help="print an image's header, sections and signature state")
    i.add_argument(
        "path", metavar="IMAGE", nargs="?", default=str(DEFAULT_IMAGE_PATH), help=default_image_help
    )
    i.add_argument("--pubkey", help="public key to check the signature with (default: the development key)")
    i.add_argument("--json", action="store_true", help="machine-readable output")
    i.set_defaults(func=cmd_inspect)
    v = sub.add_parser("verify", help="check an image as the boot ROM does; exit 1 if it is rejected")
    v.add_argument(
        "path", metavar="IMAGE", nargs="?", default=str(DEFAULT_IMAGE_PATH), help=default_image_help
    )
    v.add_argument("--pubkey", help="public key to check the signature with (default: the development key)")
    v.set_defaults(func=cmd_verify)
    n = sub.add_parser(
        "install", help=f"verify an image, then install it as DIR/{FIRMWARE_NAME} (exit 1 if it is rejected)"
    )
    n.add_argument(
        "path", metavar="IMAGE", nargs="?", default=str(DEFAULT_IMAGE_PATH), help=default_image_help
    )
    n.add_argument("--pubkey", help="public key to check the signature with (default: the development key)")
    n.add_argument(
        "--dest", default="/lib/firmware", metavar="DIR", help="firmware directory (default: %(default)s)"
    )
    n.set_defaults(func=cmd_install)
    k = sub.add_parser("keygen", help="write a new Ed25519 key pair, NAME.key and NAME.pub")
    k.add_argument("name", metavar="NAME")
    k.set_defaults(func=cmd_keygen)
    return ap


@cli_main("vnpu-fw")
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except FirmwareError as e:
        where = f"{args.path}: " if getattr(args, "path", None) else ""
        raise CliError(f"{where}rejected ({e.reason_name}): {e}", ExitCode.DIFFERENT) from None


if __name__ == "__main__":
    sys.exit(main())
