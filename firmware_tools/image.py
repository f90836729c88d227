"""The vnpu firmware image: build and parse.

Layout (all little-endian; offsets from ``device_model/hw_layout.py``)::

    0x00  u32  FW_MAGIC ("VNFW")
    0x04  u32  FW_FORMAT_VERSION
    0x08  u32  firmware version, (major << 16) | (minor << 8) | patch
    0x0C  u32  ISA version the firmware implements, (major << 16) | minor
    0x10  u32  FW_HEADER_SIZE (64)
    0x14  u32  payload size in bytes
    0x18  u32  CRC-32 (zlib) of the payload
    0x1C  ...  reserved up to 0x3F, zero
    0x40  payload: a sequence of TLV records

A TLV record is ``u16 type, u16 length, length bytes of data``, then zero bytes up
to a multiple of 4. Types:

- ``TLV_OPCODES`` (1), exactly once: a 32-byte bitmap; bit ``i`` (byte ``i // 8``,
  bit ``i % 8``) set means the firmware executes opcode ``i``. The device refuses a
  job using a disabled opcode with -EIO.
- ``TLV_BUILD_ID`` (2), at most once: a UTF-8 build identifier.

Every other type is rejected: a new record type needs a new FW_FORMAT_VERSION.
docs/firmware.md explains the format and the tools.
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from device_model import hw_layout as hw
from uapi.isa import SPEC

TLV_OPCODES = 1
TLV_BUILD_ID = 2
TLV_HEADER_SIZE = 4
OPCODE_BITMAP_SIZE = 32  # 256 opcodes, one bit each
MAX_BUILD_ID = 256

DEFAULT_FW_VERSION = (1 << 16) | (0 << 8) | 0
# The image the kernel requests as "vnpu/vnpu_fw.bin" (load it with firmware_class.path=<repo>/firmware).
DEFAULT_IMAGE_PATH = Path(__file__).resolve().parent.parent / "firmware" / "vnpu" / "vnpu_fw.bin"

_HEADER = struct.Struct("<7I")  # magic .. payload_crc32; the reserved tail follows
_TLV = struct.Struct("<HH")


class FirmwareError(ValueError):
    """A malformed or incompatible firmware image; the message names the problem."""


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


def format_fw_version(v: int) -> str:
    return f"{v >> 16}.{(v >> 8) & 0xFF}.{v & 0xFF}"


def format_isa_version(v: int) -> str:
    return f"{v >> 16}.{v & 0xFFFF}"


def all_opcodes() -> frozenset[int]:
    return frozenset(i.opcode for i in SPEC.instructions)


@dataclass(frozen=True)
class FirmwareImage:
    """The content of a firmware image; ``build_image`` and ``parse_image`` convert it to and from bytes."""

    fw_version: int = DEFAULT_FW_VERSION  # (major << 16) | (minor << 8) | patch
    isa_version: int = SPEC.version  # (major << 16) | minor
    enabled_opcodes: frozenset[int] = field(default_factory=all_opcodes)
    build_id: str = ""

    @property
    def fw_version_str(self) -> str:
        return format_fw_version(self.fw_version)

    @property
    def isa_version_str(self) -> str:
        return format_isa_version(self.isa_version)

    def opcode_enabled(self, opcode: int) -> bool:
        return opcode in self.enabled_opcodes


def default_image() -> FirmwareImage:
    """The image committed at firmware/vnpu/vnpu_fw.bin: every opcode enabled, deterministic build id."""
    return FirmwareImage(build_id=f"vnpu-fw-{format_fw_version(DEFAULT_FW_VERSION)}")


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
    if len(img.build_id.encode()) > MAX_BUILD_ID or "\0" in img.build_id:
        raise FirmwareError(f"build id must be at most {MAX_BUILD_ID} bytes of UTF-8 without NUL")


def build_image(img: FirmwareImage) -> bytes:
    """Encode ``img`` as a firmware image (header + TLV payload)."""
    _check_image(img)
    bitmap = bytearray(OPCODE_BITMAP_SIZE)
    for op in img.enabled_opcodes:
        bitmap[op // 8] |= 1 << (op % 8)
    payload = _tlv(TLV_OPCODES, bytes(bitmap))
    if img.build_id:
        payload += _tlv(TLV_BUILD_ID, img.build_id.encode())
    header = bytearray(hw.FW_HEADER_SIZE)
    _HEADER.pack_into(
        header,
        0,
        hw.FW_MAGIC,
        hw.FW_FORMAT_VERSION,
        img.fw_version,
        img.isa_version,
        hw.FW_HEADER_SIZE,
        len(payload),
        zlib.crc32(payload),
    )
    return bytes(header) + payload


def _parse_payload(payload: bytes) -> tuple[frozenset[int], str]:
    opcodes: frozenset[int] | None = None
    build_id: str | None = None
    pos = 0
    while pos < len(payload):
        where = hw.FW_HEADER_SIZE + pos
        if pos + TLV_HEADER_SIZE > len(payload):
            raise FirmwareError(f"malformed payload: truncated record header at byte {where}")
        type_, length = _TLV.unpack_from(payload, pos)
        data_end = pos + TLV_HEADER_SIZE + length
        end = data_end + (-length % 4)
        if end > len(payload):
            raise FirmwareError(
                f"malformed payload: record type {type_} at byte {where} overruns the payload"
            )
        data = payload[pos + TLV_HEADER_SIZE : data_end]
        if any(payload[data_end:end]):
            raise FirmwareError(
                f"malformed payload: non-zero padding after record type {type_} at byte {where}"
            )
        if type_ == TLV_OPCODES:
            if opcodes is not None:
                raise FirmwareError(f"malformed payload: second opcode bitmap at byte {where}")
            if length != OPCODE_BITMAP_SIZE:
                raise FirmwareError(
                    f"malformed payload: opcode bitmap is {length} bytes, expected {OPCODE_BITMAP_SIZE}"
                )
            opcodes = frozenset(i for i in range(8 * OPCODE_BITMAP_SIZE) if data[i // 8] >> (i % 8) & 1)
            unknown = sorted(op for op in opcodes if SPEC.by_opcode(op) is None)
            if unknown:
                names = ", ".join(f"{o:#04x}" for o in unknown)
                raise FirmwareError(f"malformed payload: enables opcode(s) {names} not in the ISA")
        elif type_ == TLV_BUILD_ID:
            if build_id is not None:
                raise FirmwareError(f"malformed payload: second build id at byte {where}")
            try:
                build_id = data.decode("utf-8")
            except UnicodeDecodeError:
                raise FirmwareError(f"malformed payload: build id at byte {where} is not UTF-8") from None
            if "\0" in build_id or length > MAX_BUILD_ID:
                raise FirmwareError(f"malformed payload: build id at byte {where} has NUL or is too long")
        else:
            raise FirmwareError(f"malformed payload: unknown record type {type_} at byte {where}")
        pos = end
    if opcodes is None:
        raise FirmwareError("malformed payload: no opcode bitmap record")
    return opcodes, build_id or ""


def parse_image(data: bytes | bytearray | memoryview) -> FirmwareImage:
    """Check and decode a firmware image; raise :class:`FirmwareError` naming the first problem."""
    data = bytes(data)
    if len(data) < hw.FW_HEADER_SIZE:
        raise FirmwareError(f"image is {len(data)} bytes, shorter than the {hw.FW_HEADER_SIZE}-byte header")
    if len(data) > hw.FW_MAX_SIZE:
        raise FirmwareError(f"image is {len(data)} bytes, larger than the maximum {hw.FW_MAX_SIZE}")
    magic, fmt, fw_version, isa_version, header_size, payload_size, crc = _HEADER.unpack_from(data, 0)
    if magic != hw.FW_MAGIC:
        raise FirmwareError(f"bad magic {magic:#010x}, expected {hw.FW_MAGIC:#010x} ('VNFW')")
    if fmt != hw.FW_FORMAT_VERSION:
        raise FirmwareError(f"unsupported format version {fmt}, expected {hw.FW_FORMAT_VERSION}")
    if header_size != hw.FW_HEADER_SIZE:
        raise FirmwareError(f"header size {header_size}, expected {hw.FW_HEADER_SIZE}")
    reserved = data[_HEADER.size : hw.FW_HEADER_SIZE]
    if any(reserved):
        first = next(i for i, b in enumerate(reserved) if b) + _HEADER.size
        raise FirmwareError(f"reserved header byte {first:#x} is {data[first]:#04x}, not zero")
    actual = len(data) - hw.FW_HEADER_SIZE
    if payload_size != actual:
        raise FirmwareError(f"payload size {payload_size} in the header, but {actual} bytes follow it")
    payload = data[hw.FW_HEADER_SIZE :]
    if zlib.crc32(payload) != crc:
        raise FirmwareError(
            f"payload CRC-32 {zlib.crc32(payload):#010x} does not match the header's {crc:#010x}"
        )
    if isa_version >> 16 != SPEC.version_major:
        raise FirmwareError(
            f"firmware implements ISA {format_isa_version(isa_version)}, "
            f"the device executes ISA {SPEC.version_major}.{SPEC.version_minor} (major differs)"
        )
    opcodes, build_id = _parse_payload(payload)
    return FirmwareImage(
        fw_version=fw_version, isa_version=isa_version, enabled_opcodes=opcodes, build_id=build_id
    )
