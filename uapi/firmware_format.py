"""The vnpu firmware image format: encode, sign and check (the device's boot ROM checks with this
module, the firmware tools build with it).

Layout (all little-endian; offsets from ``uapi/hw_layout.py``)::

    0x00  u32  FW_MAGIC ("VNFW")
    0x04  u32  FW_FORMAT_VERSION (2)
    0x08  u32  firmware version, (major << 16) | (minor << 8) | patch
    0x0C  u32  ISA version the firmware implements, (major << 16) | minor
    0x10  u32  FW_HEADER_SIZE (64)
    0x14  u32  payload size in bytes
    0x18  ...  reserved up to 0x1F, zero
    0x20  32   SHA-256 of bytes 0x00..0x1F, then the payload
    0x40  payload: a sequence of TLV sections
    end   64   Ed25519 signature of everything before it (header and payload)

A TLV section is ``u16 type, u16 length, length bytes of data``, then zero bytes up
to a multiple of 4. Types:

- ``TLV_OPCODES`` (1), exactly once: a 32-byte bitmap; bit ``i`` (byte ``i // 8``,
  bit ``i % 8``) set means the firmware executes opcode ``i``. The device refuses a
  job using a disabled opcode with -EIO.
- ``TLV_BUILD_TAG`` (2), at most once: UTF-8 text naming the build.
- ``TLV_LIMITS`` (3), exactly once: ``u32 max_cmd_size, u32 max_tensor_elements``,
  at most the device's ceilings (``hw_layout.MAX_*``); the device fails a job over
  them with -EIO.

Every other type is rejected: a new section type needs a new FW_FORMAT_VERSION.
The image's **build id** is the first 8 bytes of its digest as a big-endian u64:
the device reports it, and GET_PARAM returns it. docs/firmware.md explains the format,
the keys and the tools.
"""

from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from uapi import hw_layout as hw
from uapi.isa import SPEC

TLV_OPCODES = 1
TLV_BUILD_TAG = 2
TLV_LIMITS = 3
TLV_HEADER_SIZE = 4
OPCODE_BITMAP_SIZE = 32  # 256 opcodes, one bit each
MAX_BUILD_TAG = 256
MIN_IMAGE_SIZE = hw.FW_HEADER_SIZE + hw.FW_SIGNATURE_SIZE

DEFAULT_FW_VERSION = (1 << 16) | (0 << 8) | 0
# The firmware tree, laid out as /lib/firmware is: this package's ``firmware`` directory (in a
# checkout a link to the repository's firmware/; the wheel carries the files). The kernel requests
# FIRMWARE_NAME from it (vnpu-fw install copies the image to /lib/firmware/FIRMWARE_NAME).
FIRMWARE_DIR = (Path(__file__).parent / "firmware").resolve()
FIRMWARE_NAME = "vnpu/vnpu_fw.bin"
# The default image: every opcode enabled, signed with the development key.
DEFAULT_IMAGE_PATH = FIRMWARE_DIR / FIRMWARE_NAME
# The device trusts the development key's public half unless told otherwise (vnpu-device-model
# --fw-pubkey); the key pair is published, so it proves nothing.
DEV_PUBLIC_KEY_PATH = FIRMWARE_DIR / "keys" / "dev-ed25519.pub"

_HEADER = struct.Struct("<6I")  # magic .. payload size; reserved, digest follow
_TLV = struct.Struct("<HH")
_LIMITS = struct.Struct("<II")


class FirmwareError(ValueError):
    """A malformed, unsigned or incompatible firmware image, or a bad key or manifest.

    ``reason`` is the ``hw_layout.FW_REJECT_*`` code the boot ROM reports for the
    image, or ``FW_REJECT_NONE`` for an error that is not about an image's bytes.
    """

    def __init__(self, message: str, reason: int = hw.FW_REJECT_NONE) -> None:
        super().__init__(message)
        self.reason = reason

    @property
    def reason_name(self) -> str:
        return hw.FW_REJECT_NAMES.get(self.reason, "unknown")


def pack_fw_version(major: int, minor: int, patch: int) -> int:
    if not (0 <= major <= 0xFFFF and 0 <= minor <= 0xFF and 0 <= patch <= 0xFF):
        raise FirmwareError(f"firmware version {major}.{minor}.{patch} out of range (65535.255.255 max)")
    return (major << 16) | (minor << 8) | patch


def parse_fw_version(text: str) -> int:
    """``"1.2.3"`` -> the packed u32 of the header."""
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", text.strip())
    if not m:
        raise FirmwareError(f"firmware version {text!r} is not MAJOR.MINOR.PATCH")
    return pack_fw_version(*(int(g) for g in m.groups()))


def parse_isa_version(text: str) -> int:
    """``"1.1"`` -> ``(major << 16) | minor``."""
    m = re.fullmatch(r"(\d+)\.(\d+)", text.strip())
    if not m or int(m[1]) > 0xFFFF or int(m[2]) > 0xFFFF:
        raise FirmwareError(f"ISA version {text!r} is not MAJOR.MINOR")
    return (int(m[1]) << 16) | int(m[2])


def format_fw_version(v: int) -> str:
    return f"{v >> 16}.{(v >> 8) & 0xFF}.{v & 0xFF}"


def format_isa_version(v: int) -> str:
    return f"{v >> 16}.{v & 0xFFFF}"


def all_opcodes() -> frozenset[int]:
    return frozenset(i.opcode for i in SPEC.instructions)


@dataclass(frozen=True)
class Limits:
    """The limits section: what the firmware accepts, at most the device's ceilings."""

    max_cmd_size: int = hw.MAX_CMD_SIZE  # bytes of one job's command stream
    max_tensor_elements: int = hw.MAX_TENSOR_ELEMENTS  # elements of one TENSOR

    def problem(self) -> str | None:
        """Why these limits are invalid, or None."""
        if not 8 <= self.max_cmd_size <= hw.MAX_CMD_SIZE or self.max_cmd_size % 8:
            return f"max_cmd_size {self.max_cmd_size} is not a multiple of 8 in [8, {hw.MAX_CMD_SIZE}]"
        if not 1 <= self.max_tensor_elements <= hw.MAX_TENSOR_ELEMENTS:
            return f"max_tensor_elements {self.max_tensor_elements} is not in [1, {hw.MAX_TENSOR_ELEMENTS}]"
        return None


@dataclass(frozen=True)
class FirmwareImage:
    """The content of a firmware image; ``build_image`` and ``parse_image`` convert it to and from bytes."""

    fw_version: int = DEFAULT_FW_VERSION  # (major << 16) | (minor << 8) | patch
    isa_version: int = SPEC.version  # (major << 16) | minor
    enabled_opcodes: frozenset[int] = field(default_factory=all_opcodes)
    build_tag: str = ""
    limits: Limits = field(default_factory=Limits)

    @property
    def fw_version_str(self) -> str:
        return format_fw_version(self.fw_version)

    @property
    def isa_version_str(self) -> str:
        return format_isa_version(self.isa_version)

    def opcode_enabled(self, opcode: int) -> bool:
        return opcode in self.enabled_opcodes


@dataclass(frozen=True)
class ParsedImage:
    """A checked image: its content, digest and signature."""

    image: FirmwareImage
    size: int
    digest: bytes  # SHA-256, as in the header
    signature: bytes  # Ed25519, all zero when unsigned
    signature_checked: bool  # False when parsed without a public key

    @property
    def build_id(self) -> int:
        return build_id_of(self.digest)

    @property
    def signed(self) -> bool:
        return any(self.signature)


def build_id_of(digest: bytes) -> int:
    """The build id (REG_FW_BUILD_ID, GET_PARAM): the digest's first 8 bytes, big-endian, so that its
    16 hex digits are the digest's first 16."""
    return int.from_bytes(digest[:8], "big")


def format_build_id(build_id: int) -> str:
    return f"{build_id:016x}"


# --- keys ---------------------------------------------------------------------------


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    """An Ed25519 private key from a PEM (PKCS#8) file."""
    data = _read_key(path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise FirmwareError(f"{path}: not an unencrypted PEM private key ({e})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise FirmwareError(f"{path}: a {type(key).__name__}, not an Ed25519 key")
    return key


def load_public_key(path: str | Path) -> Ed25519PublicKey:
    """An Ed25519 public key from a PEM file (a private key's file gives its public half)."""
    data = _read_key(path)
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError:
        return load_private_key(path).public_key()
    if not isinstance(key, Ed25519PublicKey):
        raise FirmwareError(f"{path}: a {type(key).__name__}, not an Ed25519 key")
    return key


def _read_key(path: str | Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise FirmwareError(f"{path}: cannot read the key: {e.strerror}") from None


# --- build and sign ------------------------------------------------------------------


def _tlv(type_: int, data: bytes) -> bytes:
    pad = -len(data) % 4
    return _TLV.pack(type_, len(data)) + data + bytes(pad)


def _check_image(img: FirmwareImage) -> None:
    if not 0 <= img.fw_version <= 0xFFFF_FFFF:
        raise FirmwareError(f"firmware version {img.fw_version:#x} does not fit in a u32")
    if img.isa_version >> 16 != SPEC.version_major or not 0 <= img.isa_version <= 0xFFFF_FFFF:
        raise FirmwareError(
            f"ISA version {format_isa_version(img.isa_version)} has major {img.isa_version >> 16}, "
            f"this ISA is {SPEC.version_major}.{SPEC.version_minor}"
        )
    unknown = sorted(op for op in img.enabled_opcodes if SPEC.by_opcode(op) is None)
    if unknown:
        raise FirmwareError(f"enabled opcode(s) {', '.join(f'{o:#04x}' for o in unknown)} are not in the ISA")
    if len(img.build_tag.encode()) > MAX_BUILD_TAG or "\0" in img.build_tag:
        raise FirmwareError(f"build tag must be at most {MAX_BUILD_TAG} bytes of UTF-8 without NUL")
    problem = img.limits.problem()
    if problem:
        raise FirmwareError(f"limits: {problem}")


def encode_payload(img: FirmwareImage) -> bytes:
    """The TLV sections of ``img`` (unchecked: tests build bad images with it)."""
    bitmap = bytearray(OPCODE_BITMAP_SIZE)
    for op in img.enabled_opcodes:
        bitmap[op // 8] |= 1 << (op % 8)
    payload = _tlv(TLV_OPCODES, bytes(bitmap))
    payload += _tlv(TLV_LIMITS, _LIMITS.pack(img.limits.max_cmd_size, img.limits.max_tensor_elements))
    if img.build_tag:
        payload += _tlv(TLV_BUILD_TAG, img.build_tag.encode())
    return payload


def assemble(
    fw_version: int, isa_version: int, payload: bytes, key: Ed25519PrivateKey | None = None
) -> bytes:
    """Header (with the digest) + ``payload`` + signature (zero without ``key``); nothing checked."""
    header = bytearray(hw.FW_HEADER_SIZE)
    _HEADER.pack_into(
        header,
        0,
        hw.FW_MAGIC,
        hw.FW_FORMAT_VERSION,
        fw_version,
        isa_version,
        hw.FW_HEADER_SIZE,
        len(payload),
    )
    header[hw.FWH_DIGEST : hw.FWH_DIGEST + hw.FW_DIGEST_SIZE] = _digest(header, payload)
    unsigned = bytes(header) + payload + bytes(hw.FW_SIGNATURE_SIZE)
    return sign_image(unsigned, key) if key is not None else unsigned


def build_image(img: FirmwareImage, key: Ed25519PrivateKey | None = None) -> bytes:
    """Encode ``img``; sign it with ``key``, else leave the signature zero (``sign_image`` later)."""
    _check_image(img)
    return assemble(img.fw_version, img.isa_version, encode_payload(img), key)


def sign_image(data: bytes, key: Ed25519PrivateKey) -> bytes:
    """``data`` with its signature replaced by one made with ``key``.

    Only the framing (size, magic, versions, lengths, digest) is checked: the content is the
    signer's business, and tests sign bad content to see the boot ROM reject it.
    """
    _check_frame(bytes(data))
    end = len(data) - hw.FW_SIGNATURE_SIZE
    return bytes(data[:end]) + key.sign(bytes(data[:end]))


def _digest(header: bytes | bytearray, payload: bytes) -> bytes:
    return hashlib.sha256(bytes(header[: hw.FWH_DIGEST]) + payload).digest()


# --- parse (the boot ROM's checks) -----------------------------------------------------


def _parse_payload(payload: bytes) -> tuple[frozenset[int], str, Limits]:
    opcodes: frozenset[int] | None = None
    build_tag: str | None = None
    limits: Limits | None = None
    pos = 0

    def bad(message: str) -> FirmwareError:
        return FirmwareError(f"malformed payload: {message}", hw.FW_REJECT_PAYLOAD)

    while pos < len(payload):
        where = hw.FW_HEADER_SIZE + pos
        if pos + TLV_HEADER_SIZE > len(payload):
            raise bad(f"truncated section header at byte {where}")
        type_, length = _TLV.unpack_from(payload, pos)
        data_end = pos + TLV_HEADER_SIZE + length
        end = data_end + (-length % 4)
        if end > len(payload):
            raise bad(f"section type {type_} at byte {where} overruns the payload")
        data = payload[pos + TLV_HEADER_SIZE : data_end]
        if any(payload[data_end:end]):
            raise bad(f"non-zero padding after section type {type_} at byte {where}")
        if type_ == TLV_OPCODES:
            if opcodes is not None:
                raise bad(f"second opcode bitmap at byte {where}")
            if length != OPCODE_BITMAP_SIZE:
                raise bad(f"opcode bitmap is {length} bytes, expected {OPCODE_BITMAP_SIZE}")
            opcodes = frozenset(i for i in range(8 * OPCODE_BITMAP_SIZE) if data[i // 8] >> (i % 8) & 1)
            unknown = sorted(op for op in opcodes if SPEC.by_opcode(op) is None)
            if unknown:
                raise bad(f"enables opcode(s) {', '.join(f'{o:#04x}' for o in unknown)} not in the ISA")
        elif type_ == TLV_LIMITS:
            if limits is not None:
                raise bad(f"second limits section at byte {where}")
            if length != _LIMITS.size:
                raise bad(f"limits section is {length} bytes, expected {_LIMITS.size}")
            limits = Limits(*_LIMITS.unpack(data))
            problem = limits.problem()
            if problem:
                raise bad(f"limits at byte {where}: {problem}")
        elif type_ == TLV_BUILD_TAG:
            if build_tag is not None:
                raise bad(f"second build tag at byte {where}")
            try:
                build_tag = data.decode("utf-8")
            except UnicodeDecodeError:
                raise bad(f"build tag at byte {where} is not UTF-8") from None
            if "\0" in build_tag or length > MAX_BUILD_TAG:
                raise bad(f"build tag at byte {where} has NUL or is longer than {MAX_BUILD_TAG} bytes")
        else:
            raise bad(f"unknown section type {type_} at byte {where}")
        pos = end
    if opcodes is None:
        raise bad("no opcode bitmap section")
    if limits is None:
        raise bad("no limits section")
    return opcodes, build_tag or "", limits


_DEV_KEY: list[Ed25519PublicKey] = []


def dev_public_key() -> Ed25519PublicKey:
    """The development public key (firmware/keys/dev-ed25519.pub), loaded once."""
    if not _DEV_KEY:
        _DEV_KEY.append(load_public_key(DEV_PUBLIC_KEY_PATH))
    return _DEV_KEY[0]


def _check_frame(data: bytes) -> tuple[int, int, bytes, bytes]:
    """The boot ROM's checks up to the digest; returns fw version, ISA version, payload and digest."""
    size = len(data)
    if size < MIN_IMAGE_SIZE:
        raise FirmwareError(
            f"image is {size} bytes, shorter than the {hw.FW_HEADER_SIZE}-byte header and "
            f"{hw.FW_SIGNATURE_SIZE}-byte signature",
            hw.FW_REJECT_SIZE,
        )
    if size > hw.FW_MAX_SIZE:
        raise FirmwareError(
            f"image is {size} bytes, larger than the maximum {hw.FW_MAX_SIZE}", hw.FW_REJECT_SIZE
        )
    magic, fmt, fw_version, isa_version, header_size, payload_size = _HEADER.unpack_from(data, 0)
    if magic != hw.FW_MAGIC:
        raise FirmwareError(
            f"bad magic {magic:#010x}, expected {hw.FW_MAGIC:#010x} ('VNFW')", hw.FW_REJECT_MAGIC
        )
    if fmt != hw.FW_FORMAT_VERSION:
        raise FirmwareError(
            f"unsupported format version {fmt}, expected {hw.FW_FORMAT_VERSION}", hw.FW_REJECT_VERSION
        )
    if header_size != hw.FW_HEADER_SIZE:
        raise FirmwareError(f"header size {header_size}, expected {hw.FW_HEADER_SIZE}", hw.FW_REJECT_HEADER)
    reserved = data[_HEADER.size : hw.FWH_DIGEST]
    if any(reserved):
        first = next(i for i, b in enumerate(reserved) if b) + _HEADER.size
        raise FirmwareError(
            f"reserved header byte {first:#x} is {data[first]:#04x}, not zero", hw.FW_REJECT_HEADER
        )
    actual = size - MIN_IMAGE_SIZE
    if payload_size != actual:
        raise FirmwareError(
            f"payload size {payload_size} in the header, but the image holds {actual} "
            f"(between the header and the signature)",
            hw.FW_REJECT_LENGTH,
        )
    end = hw.FW_HEADER_SIZE + payload_size
    payload = data[hw.FW_HEADER_SIZE : end]
    digest = data[hw.FWH_DIGEST : hw.FWH_DIGEST + hw.FW_DIGEST_SIZE]
    actual_digest = _digest(data, payload)
    if actual_digest != digest:
        raise FirmwareError(
            f"SHA-256 {actual_digest.hex()[:16]}... of header and payload does not match the header's "
            f"{digest.hex()[:16]}...",
            hw.FW_REJECT_DIGEST,
        )
    return fw_version, isa_version, payload, digest


def parse_image(
    data: bytes | bytearray | memoryview,
    pubkey: Ed25519PublicKey | None = None,
    *,
    check_signature: bool = True,
) -> ParsedImage:
    """Check and decode an image as the boot ROM does; raise :class:`FirmwareError` naming the first problem.

    The signature is checked against ``pubkey`` (default: the development key) unless
    ``check_signature`` is False.
    """
    data = bytes(data)
    size = len(data)
    fw_version, isa_version, payload, digest = _check_frame(data)
    end = hw.FW_HEADER_SIZE + len(payload)
    signature = data[end:]
    if check_signature:
        if not any(signature):
            raise FirmwareError(
                "unsigned image (the signature is zero); sign it: vnpu-fw sign --key KEY",
                hw.FW_REJECT_SIGNATURE,
            )
        try:
            (pubkey or dev_public_key()).verify(signature, data[:end])
        except InvalidSignature:
            raise FirmwareError(
                "Ed25519 signature does not verify with the trusted public key", hw.FW_REJECT_SIGNATURE
            ) from None
    if isa_version >> 16 != SPEC.version_major:
        raise FirmwareError(
            f"firmware implements ISA {format_isa_version(isa_version)}, "
            f"the device executes ISA {SPEC.version_major}.{SPEC.version_minor} (major differs)",
            hw.FW_REJECT_ISA,
        )
    opcodes, build_tag, limits = _parse_payload(payload)
    image = FirmwareImage(
        fw_version=fw_version,
        isa_version=isa_version,
        enabled_opcodes=opcodes,
        build_tag=build_tag,
        limits=limits,
    )
    return ParsedImage(image, size, digest, signature, check_signature)
