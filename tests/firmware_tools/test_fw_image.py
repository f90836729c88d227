"""Firmware image format: round trip, every rejection, the committed default image and the CLI."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from device_model import hw_layout as hw
from firmware_tools import fw_cli
from firmware_tools.image import (
    DEFAULT_IMAGE_PATH,
    TLV_BUILD_ID,
    TLV_OPCODES,
    FirmwareError,
    FirmwareImage,
    all_opcodes,
    build_image,
    default_image,
    format_fw_version,
    parse_fw_version,
    parse_image,
)
from uapi.isa import SPEC

OPCODES = sorted(all_opcodes())


@given(
    fw_version=st.integers(0, 0xFFFF_FFFF),
    minor=st.integers(0, 0xFFFF),
    enabled=st.frozensets(st.sampled_from(OPCODES)),
    build_id=st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=40),
)
def test_round_trip(fw_version: int, minor: int, enabled: frozenset[int], build_id: str) -> None:
    img = FirmwareImage(
        fw_version=fw_version,
        isa_version=(SPEC.version_major << 16) | minor,
        enabled_opcodes=enabled,
        build_id=build_id,
    )
    data = build_image(img)
    assert len(data) % 4 == 0
    assert parse_image(data) == img


def test_default_image_enables_everything_and_is_committed() -> None:
    img = default_image()
    assert img.enabled_opcodes == {i.opcode for i in SPEC.instructions}
    assert img.isa_version == SPEC.version
    assert DEFAULT_IMAGE_PATH.read_bytes() == build_image(img), (
        "run: vnpu-fw build -o firmware/vnpu/vnpu_fw.bin"
    )
    assert fw_cli.main(["build", "--check"]) == 0


def test_header_layout_matches_hw_layout() -> None:
    data = build_image(default_image())
    payload = data[hw.FW_HEADER_SIZE :]

    def u32(off: int) -> int:
        return struct.unpack_from("<I", data, off)[0]

    assert u32(hw.FWH_MAGIC) == hw.FW_MAGIC and data[:4] == b"VNFW"
    assert u32(hw.FWH_FORMAT_VERSION) == hw.FW_FORMAT_VERSION
    assert u32(hw.FWH_FW_VERSION) == 0x010000
    assert u32(hw.FWH_ISA_VERSION) == SPEC.version
    assert u32(hw.FWH_HEADER_SIZE) == hw.FW_HEADER_SIZE
    assert u32(hw.FWH_PAYLOAD_SIZE) == len(payload)
    assert u32(hw.FWH_PAYLOAD_CRC32) == zlib.crc32(payload)
    # The opcode bitmap is the first record: bit i of byte i // 8.
    assert struct.unpack_from("<HH", payload, 0) == (TLV_OPCODES, 32)
    for op in range(256):
        assert bool(payload[4 + op // 8] >> (op % 8) & 1) == (SPEC.by_opcode(op) is not None)


def _reheader(data: bytes, payload: bytes) -> bytes:
    """``data``'s header with the payload size and CRC fixed up for ``payload``."""
    h = bytearray(data[: hw.FW_HEADER_SIZE])
    struct.pack_into("<II", h, hw.FWH_PAYLOAD_SIZE, len(payload), zlib.crc32(payload))
    return bytes(h) + payload


def _patch(data: bytes, off: int, value: int) -> bytes:
    b = bytearray(data)
    struct.pack_into("<I", b, off, value)
    return bytes(b)


GOOD = build_image(FirmwareImage(build_id="x"))
BITMAP = GOOD[hw.FW_HEADER_SIZE : hw.FW_HEADER_SIZE + 36]


@pytest.mark.parametrize(
    "data, message",
    [
        (GOOD[:63], "shorter than the 64-byte header"),
        (b"", "shorter than the 64-byte header"),
        (_patch(GOOD, hw.FWH_MAGIC, 0x12345678), "bad magic"),
        (_patch(GOOD, hw.FWH_FORMAT_VERSION, 2), "format version 2"),
        (_patch(GOOD, hw.FWH_HEADER_SIZE, 32), "header size 32"),
        (_patch(GOOD, 0x3C, 1), "reserved header byte 0x3c"),
        (_patch(GOOD, 0x1C, 0x100), "reserved header byte 0x1d"),
        (GOOD + b"\0\0\0\0", "payload size"),
        (GOOD[:-4], "payload size"),
        (_patch(GOOD, hw.FWH_PAYLOAD_CRC32, 0), "CRC-32"),
        (GOOD[:-1] + b"y", "CRC-32"),
        (
            _patch(_patch(GOOD, hw.FWH_ISA_VERSION, 2 << 16), hw.FWH_PAYLOAD_CRC32, zlib.crc32(GOOD[64:])),
            "ISA",
        ),
        (_reheader(GOOD, b""), "no opcode bitmap"),
        (_reheader(GOOD, b"\1\0"), "truncated record header"),
        (_reheader(GOOD, BITMAP + b"\3\0\0\0"), "unknown record type 3"),
        (_reheader(GOOD, BITMAP + BITMAP), "second opcode bitmap"),
        (_reheader(GOOD, b"\1\0\x10\0" + bytes(16)), "opcode bitmap is 16 bytes"),
        (_reheader(GOOD, b"\1\0\x20\0" + bytes(31) + b"\x80"), "opcode(s) 0xff not in the ISA"),
        (_reheader(GOOD, BITMAP + b"\2\0\5\0abcde"), "overruns"),
        (_reheader(GOOD, BITMAP + b"\2\0\3\0abcX"), "non-zero padding"),
        (_reheader(GOOD, BITMAP + b"\2\0\2\0\xff\xfe\0\0"), "not UTF-8"),
        (_reheader(GOOD, BITMAP + b"\2\0\1\0a\0\0\0" + b"\2\0\1\0b\0\0\0"), "second build id"),
        (b"VNFW" + bytes(hw.FW_MAX_SIZE), "larger than the maximum"),
    ],
)
def test_rejects(data: bytes, message: str) -> None:
    with pytest.raises(FirmwareError) as e:
        parse_image(data)
    assert message in str(e.value)
    assert isinstance(e.value, ValueError)


def test_build_rejects_bad_images() -> None:
    with pytest.raises(FirmwareError, match="not in the ISA"):
        build_image(FirmwareImage(enabled_opcodes=frozenset({0xFE})))
    with pytest.raises(FirmwareError, match="major"):
        build_image(FirmwareImage(isa_version=(SPEC.version_major + 1) << 16))
    with pytest.raises(FirmwareError, match="build id"):
        build_image(FirmwareImage(build_id="a\0b"))


def test_versions() -> None:
    assert parse_fw_version("1.2.3") == 0x010203
    assert format_fw_version(0x010203) == "1.2.3"
    for bad in ("1.2", "a.b.c", "1.256.0", "65536.0.0"):
        with pytest.raises(FirmwareError):
            parse_fw_version(bad)


def test_cli_build_inspect_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fw.bin"
    assert fw_cli.main(["build", "-o", str(out), "--version", "2.1.0", "--disable-op", "conv2d"]) == 0
    img = parse_image(out.read_bytes())
    assert img.fw_version == 0x020100
    assert img.enabled_opcodes == all_opcodes() - {SPEC.by_name("CONV2D").opcode}
    assert img.build_id == "vnpu-fw-2.1.0"
    assert fw_cli.main(["verify", str(out)]) == 0
    assert fw_cli.main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "disabled ops: 1: CONV2D" in text and "fw version:   2.1.0" in text
    # --check against a different image fails.
    assert fw_cli.main(["build", "--check", str(out)]) == 1
    assert "stale" in capsys.readouterr().err


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"VNFW" + bytes(60))
    for argv in (
        ["verify", str(bad)],
        ["inspect", str(bad)],
        ["verify", str(tmp_path / "missing.bin")],
        ["build", "-o", str(tmp_path / "x"), "--disable-op", "NOPE"],
        ["build", "-o", str(tmp_path / "x"), "--version", "x"],
    ):
        assert fw_cli.main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith("vnpu-fw: ") and err.count("\n") == 1, err


def test_build_id_record_is_padded() -> None:
    data = build_image(FirmwareImage(build_id="abc"))
    assert data[-8:] == struct.pack("<HH", TLV_BUILD_ID, 3) + b"abc\0"
