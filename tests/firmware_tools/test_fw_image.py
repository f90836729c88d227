"""Firmware image format: round trip, signing, every rejection, the committed image, manifests and the CLI."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from firmware_tools import fw_cli
from firmware_tools.image import (
    DEFAULT_IMAGE_PATH,
    DEFAULT_MANIFEST_PATH,
    DEV_PRIVATE_KEY_PATH,
    default_image,
    dev_private_key,
)
from firmware_tools.manifest import load_manifest
from uapi import hw_layout as hw
from uapi.firmware_format import (
    TLV_BUILD_TAG,
    TLV_LIMITS,
    TLV_OPCODES,
    FirmwareError,
    FirmwareImage,
    Limits,
    all_opcodes,
    assemble,
    build_image,
    dev_public_key,
    encode_payload,
    format_fw_version,
    load_public_key,
    parse_fw_version,
    parse_image,
    sign_image,
)
from uapi.isa import SPEC
from vnpu_common.cli import ExitCode

OPCODES = sorted(all_opcodes())
KEY = dev_private_key()


@settings(max_examples=40, deadline=None)
@given(
    fw_version=st.integers(0, 0xFFFF_FFFF),
    minor=st.integers(0, 0xFFFF),
    enabled=st.frozensets(st.sampled_from(OPCODES)),
    build_tag=st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=40),
    max_cmd_size=st.integers(1, hw.MAX_CMD_SIZE // 8).map(lambda n: n * 8),
    max_tensor_elements=st.integers(1, hw.MAX_TENSOR_ELEMENTS),
)
def test_round_trip(
    fw_version: int,
    minor: int,
    enabled: frozenset[int],
    build_tag: str,
    max_cmd_size: int,
    max_tensor_elements: int,
) -> None:
    img = FirmwareImage(
        fw_version=fw_version,
        isa_version=(SPEC.version_major << 16) | minor,
        enabled_opcodes=enabled,
        build_tag=build_tag,
        limits=Limits(max_cmd_size, max_tensor_elements),
    )
    data = build_image(img, KEY)
    assert len(data) % 4 == 0
    parsed = parse_image(data)
    assert parsed.image == img and parsed.signed and parsed.signature_checked
    assert parsed.digest == hashlib.sha256(data[:0x20] + data[64:-64]).digest()
    assert parsed.build_id == int.from_bytes(parsed.digest[:8], "big")


def test_default_image_is_committed_signed_and_current() -> None:
    img = default_image()
    assert img.enabled_opcodes == {i.opcode for i in SPEC.instructions}
    assert img.isa_version == SPEC.version and img.limits == Limits()
    manifest = load_manifest(DEFAULT_MANIFEST_PATH)
    assert manifest.image == img and manifest.key_path.resolve() == DEV_PRIVATE_KEY_PATH
    assert DEFAULT_IMAGE_PATH.read_bytes() == build_image(img, KEY), (
        "run: vnpu-fw build firmware/vnpu/vnpu_fw.toml -o firmware/vnpu/vnpu_fw.bin"
    )
    assert parse_image(DEFAULT_IMAGE_PATH.read_bytes()).signed
    assert fw_cli.main(["build", "--check"]) == 0


def test_dev_keys_are_a_pair_and_labelled() -> None:
    assert dev_private_key().public_key() == dev_public_key()
    for name in ("dev-ed25519.key", "dev-ed25519.pub"):
        assert (DEV_PRIVATE_KEY_PATH.parent / name).read_text().startswith("DEVELOPMENT-ONLY")
    assert "development" in (DEV_PRIVATE_KEY_PATH.parent / "README.md").read_text().lower()


def test_header_layout_matches_hw_layout() -> None:
    data = build_image(default_image(), KEY)
    payload = data[hw.FW_HEADER_SIZE : -hw.FW_SIGNATURE_SIZE]

    def u32(off: int) -> int:
        return struct.unpack_from("<I", data, off)[0]

    assert u32(hw.FWH_MAGIC) == hw.FW_MAGIC and data[:4] == b"VNFW"
    assert u32(hw.FWH_FORMAT_VERSION) == hw.FW_FORMAT_VERSION == 2
    assert u32(hw.FWH_FW_VERSION) == 0x010000
    assert u32(hw.FWH_ISA_VERSION) == SPEC.version
    assert u32(hw.FWH_HEADER_SIZE) == hw.FW_HEADER_SIZE
    assert u32(hw.FWH_PAYLOAD_SIZE) == len(payload)
    assert (
        data[hw.FWH_DIGEST : hw.FWH_DIGEST + 32] == hashlib.sha256(data[: hw.FWH_DIGEST] + payload).digest()
    )
    dev_public_key().verify(data[-64:], data[:-64])  # raises if wrong
    # The opcode bitmap is the first section: bit i of byte i // 8; then the limits.
    assert struct.unpack_from("<HH", payload, 0) == (TLV_OPCODES, 32)
    for op in range(256):
        assert bool(payload[4 + op // 8] >> (op % 8) & 1) == (SPEC.by_opcode(op) is not None)
    assert struct.unpack_from("<HHII", payload, 36) == (
        TLV_LIMITS,
        8,
        hw.MAX_CMD_SIZE,
        hw.MAX_TENSOR_ELEMENTS,
    )


# --- the rejection sweep: every byte flipped, every truncation ----------------------------

SMALL = build_image(FirmwareImage(enabled_opcodes=frozenset(OPCODES[:3]), build_tag=""), KEY)


def expected_reason(off: int, size: int = len(SMALL)) -> int:
    """The boot ROM's reason for ``SMALL`` with byte ``off`` flipped (checks run in the documented order)."""
    if off < 4:
        return hw.FW_REJECT_MAGIC
    if off < 8:
        return hw.FW_REJECT_VERSION
    if hw.FWH_HEADER_SIZE <= off < hw.FWH_HEADER_SIZE + 4 or 0x18 <= off < hw.FWH_DIGEST:
        return hw.FW_REJECT_HEADER
    if hw.FWH_PAYLOAD_SIZE <= off < hw.FWH_PAYLOAD_SIZE + 4:
        return hw.FW_REJECT_LENGTH
    if off < size - hw.FW_SIGNATURE_SIZE:
        return hw.FW_REJECT_DIGEST  # versions, the digest itself and the payload are all digested
    return hw.FW_REJECT_SIGNATURE


def flipped(off: int) -> bytes:
    b = bytearray(SMALL)
    b[off] ^= 0xFF
    return bytes(b)


def test_every_flipped_byte_is_rejected_with_its_reason() -> None:
    assert len(SMALL) == 64 + 36 + 12 + 64
    for off in range(len(SMALL)):
        with pytest.raises(FirmwareError) as e:
            parse_image(flipped(off))
        assert e.value.reason == expected_reason(off), (off, str(e.value))


def test_every_truncation_is_rejected_with_its_reason() -> None:
    for n in range(len(SMALL)):
        with pytest.raises(FirmwareError) as e:
            parse_image(SMALL[:n])
        want = hw.FW_REJECT_SIZE if n < hw.FW_HEADER_SIZE + hw.FW_SIGNATURE_SIZE else hw.FW_REJECT_LENGTH
        assert e.value.reason == want, (n, str(e.value))


def test_signature_checks() -> None:
    unsigned = build_image(default_image())
    with pytest.raises(FirmwareError, match="unsigned image") as e:
        parse_image(unsigned)
    assert e.value.reason == hw.FW_REJECT_SIGNATURE
    assert parse_image(unsigned, check_signature=False).signed is False
    assert parse_image(sign_image(unsigned, KEY)).signed
    other = Ed25519PrivateKey.generate()
    by_other = sign_image(unsigned, other)
    with pytest.raises(FirmwareError, match="does not verify") as e:
        parse_image(by_other)
    assert e.value.reason == hw.FW_REJECT_SIGNATURE
    assert parse_image(by_other, other.public_key()).signed
    # Signing is deterministic (Ed25519): the committed image can be checked byte for byte.
    assert sign_image(unsigned, KEY) == build_image(default_image(), KEY)


def _signed_payload(payload: bytes, isa_version: int = SPEC.version) -> bytes:
    return assemble(0x010000, isa_version, payload, KEY)


BITMAP = encode_payload(FirmwareImage())[:36]
LIMITS = encode_payload(FirmwareImage())[36:48]


@pytest.mark.parametrize(
    "data, reason, message",
    [
        (b"", hw.FW_REJECT_SIZE, "shorter than the 64-byte header"),
        (b"VNFW" + bytes(hw.FW_MAX_SIZE), hw.FW_REJECT_SIZE, "larger than the maximum"),
        (SMALL + bytes(4), hw.FW_REJECT_LENGTH, "payload size"),
        (_signed_payload(BITMAP + LIMITS, 2 << 16), hw.FW_REJECT_ISA, "ISA 2.0"),
        (_signed_payload(b""), hw.FW_REJECT_PAYLOAD, "no opcode bitmap"),
        (_signed_payload(BITMAP), hw.FW_REJECT_PAYLOAD, "no limits section"),
        (_signed_payload(b"\1\0"), hw.FW_REJECT_PAYLOAD, "truncated section header"),
        (_signed_payload(BITMAP + LIMITS + b"\7\0\0\0"), hw.FW_REJECT_PAYLOAD, "unknown section type 7"),
        (_signed_payload(BITMAP + BITMAP + LIMITS), hw.FW_REJECT_PAYLOAD, "second opcode bitmap"),
        (_signed_payload(BITMAP + LIMITS + LIMITS), hw.FW_REJECT_PAYLOAD, "second limits section"),
        (_signed_payload(b"\1\0\x10\0" + bytes(16) + LIMITS), hw.FW_REJECT_PAYLOAD, "bitmap is 16 bytes"),
        (_signed_payload(b"\1\0\x20\0" + bytes(31) + b"\x80" + LIMITS), hw.FW_REJECT_PAYLOAD, "0xff not in"),
        (
            _signed_payload(BITMAP + b"\3\0\x08\0" + struct.pack("<II", 4, 1)),
            hw.FW_REJECT_PAYLOAD,
            "max_cmd_size 4",
        ),
        (
            _signed_payload(BITMAP + b"\3\0\x08\0" + struct.pack("<II", 8, hw.MAX_TENSOR_ELEMENTS + 1)),
            hw.FW_REJECT_PAYLOAD,
            "max_tensor_elements",
        ),
        (_signed_payload(BITMAP + LIMITS + b"\2\0\5\0abcde"), hw.FW_REJECT_PAYLOAD, "overruns"),
        (_signed_payload(BITMAP + LIMITS + b"\2\0\3\0abcX"), hw.FW_REJECT_PAYLOAD, "non-zero padding"),
        (_signed_payload(BITMAP + LIMITS + b"\2\0\2\0\xff\xfe\0\0"), hw.FW_REJECT_PAYLOAD, "not UTF-8"),
        (
            _signed_payload(BITMAP + LIMITS + b"\2\0\1\0a\0\0\0" + b"\2\0\1\0b\0\0\0"),
            hw.FW_REJECT_PAYLOAD,
            "second build tag",
        ),
    ],
)
def test_rejects(data: bytes, reason: int, message: str) -> None:
    with pytest.raises(FirmwareError) as e:
        parse_image(data)
    assert message in str(e.value) and e.value.reason == reason
    assert isinstance(e.value, ValueError)


def test_build_rejects_bad_images() -> None:
    with pytest.raises(FirmwareError, match="not in the ISA"):
        build_image(FirmwareImage(enabled_opcodes=frozenset({0xFE})))
    with pytest.raises(FirmwareError, match="major"):
        build_image(FirmwareImage(isa_version=(SPEC.version_major + 1) << 16))
    with pytest.raises(FirmwareError, match="build tag"):
        build_image(FirmwareImage(build_tag="a\0b"))
    with pytest.raises(FirmwareError, match="max_cmd_size"):
        build_image(FirmwareImage(limits=Limits(max_cmd_size=hw.MAX_CMD_SIZE + 8)))


def test_versions() -> None:
    assert parse_fw_version("1.2.3") == 0x010203
    assert format_fw_version(0x010203) == "1.2.3"
    for bad in ("1.2", "a.b.c", "1.256.0", "65536.0.0"):
        with pytest.raises(FirmwareError):
            parse_fw_version(bad)


# --- manifests -----------------------------------------------------------------------------


def test_manifest(tmp_path: Path) -> None:
    m = tmp_path / "fw.toml"
    m.write_text(
        '[firmware]\nversion = "2.0.1"\nbuild_tag = "lab"\nsign_with = "k.pem"\n'
        '[opcodes]\nenable = ["NOP", "end", "FILL"]\n[limits]\nmax_cmd_size = 4096\n'
    )
    got = load_manifest(m)
    assert got.key_path == tmp_path / "k.pem"
    assert got.image == FirmwareImage(
        fw_version=0x020001,
        enabled_opcodes=frozenset(SPEC.by_name(n).opcode for n in ("NOP", "END", "FILL")),
        build_tag="lab",
        limits=Limits(max_cmd_size=4096),
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("[firmware]\n", "firmware.version is required"),
        ('[firmware]\nversion = "1.0"\n', "not MAJOR.MINOR.PATCH"),
        ('[firmware]\nversion = "1.0.0"\ncolour = 1\n', "unknown key firmware.colour"),
        ('[firmware]\nversion = "1.0.0"\n[extra]\n', "unknown table [extra]"),
        ('[firmware]\nversion = "1.0.0"\n[opcodes]\ndisable = ["JUMP"]\n', "unknown instruction 'JUMP'"),
        ('[firmware]\nversion = "1.0.0"\n[opcodes]\ndisable = []\nenable = []\n', "exclude each other"),
        ('[firmware]\nversion = "1.0.0"\n[limits]\nmax_cmd_size = "big"\n', "must be a int"),
        ("[firmware\n", "not TOML"),
    ],
)
def test_manifest_errors(tmp_path: Path, text: str, message: str) -> None:
    m = tmp_path / "fw.toml"
    m.write_text(text)
    with pytest.raises(FirmwareError) as e:
        load_manifest(m)
    assert message in str(e.value)


# --- the CLI -------------------------------------------------------------------------------


def test_cli_build_sign_inspect_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fw.bin"
    assert fw_cli.main(["build", "-o", str(out), "--version", "2.1.0", "--disable-op", "conv2d"]) == 0
    assert "unsigned" in capsys.readouterr().out
    assert fw_cli.main(["verify", str(out)]) == 1
    assert "rejected (bad signature): unsigned image" in capsys.readouterr().err
    assert fw_cli.main(["sign", str(out), "--key", str(DEV_PRIVATE_KEY_PATH)]) == 0
    parsed = parse_image(out.read_bytes())
    assert parsed.image.fw_version == 0x020100
    assert parsed.image.enabled_opcodes == all_opcodes() - {SPEC.by_name("CONV2D").opcode}
    assert parsed.image.build_tag == "vnpu-fw-2.1.0"
    capsys.readouterr()
    assert fw_cli.main(["verify", str(out), "--pubkey", str(DEV_PRIVATE_KEY_PATH.with_suffix(".pub"))]) == 0
    assert f"build id {parsed.build_id:016x}" in capsys.readouterr().out
    assert fw_cli.main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "disabled ops: 1: CONV2D" in text and "fw version:   2.1.0" in text and "valid for" in text
    assert fw_cli.main(["inspect", "--json", str(out)]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["build_id"] == f"{parsed.build_id:016x}" and rec["digest"] == parsed.digest.hex()
    assert rec["disabled_ops"] == ["CONV2D"] and rec["limits"]["max_cmd_size"] == hw.MAX_CMD_SIZE
    # Another key: inspect says INVALID, verify rejects.
    assert fw_cli.main(["keygen", str(tmp_path / "other")]) == 0
    other = tmp_path / "other.key"
    assert other.stat().st_mode & 0o777 == 0o600
    assert load_public_key(other) == load_public_key(tmp_path / "other.pub") != dev_public_key()
    assert fw_cli.main(["keygen", str(tmp_path / "other")]) == ExitCode.BAD_FILE  # never overwrites a key
    assert fw_cli.main(["inspect", str(out), "--pubkey", str(other)]) == 0
    assert "INVALID" in capsys.readouterr().out
    assert fw_cli.main(["verify", str(out), "--pubkey", str(other)]) == 1
    # --check against a different image fails.
    assert fw_cli.main(["build", "--check", str(out)]) == 1
    assert "stale" in capsys.readouterr().err


def test_cli_build_from_manifest(tmp_path: Path) -> None:
    out = tmp_path / "fw.bin"
    assert fw_cli.main(["build", str(DEFAULT_MANIFEST_PATH), "-o", str(out)]) == 0
    assert out.read_bytes() == DEFAULT_IMAGE_PATH.read_bytes()


def test_cli_install_puts_the_image_where_request_firmware_looks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vnpu-fw install: the package's image by default, verified first, under DIR/vnpu/vnpu_fw.bin."""
    assert fw_cli.main(["verify"]) == 0 and fw_cli.main(["inspect", "--json"]) == 0
    capsys.readouterr()
    assert fw_cli.main(["install", "--dest", str(tmp_path)]) == 0
    installed = tmp_path / "vnpu" / "vnpu_fw.bin"
    assert installed.read_bytes() == DEFAULT_IMAGE_PATH.read_bytes()
    assert installed.stat().st_mode & 0o777 == 0o644
    assert "vnpu/vnpu_fw.bin" in capsys.readouterr().out
    # An image the boot ROM would reject is not installed.
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"VNFW" + bytes(200))
    assert fw_cli.main(["install", str(bad), "--dest", str(tmp_path / "other")]) == 1
    assert not (tmp_path / "other").exists()
    assert capsys.readouterr().err.startswith("vnpu-fw: ")


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"VNFW" + bytes(200))
    notkey = tmp_path / "notkey.pem"
    notkey.write_text("hello\n")
    for argv, code in (
        (["verify", str(bad)], ExitCode.DIFFERENT),
        (["inspect", str(bad)], ExitCode.DIFFERENT),
        (["sign", str(bad), "--key", str(DEV_PRIVATE_KEY_PATH)], ExitCode.DIFFERENT),
        (["verify", str(tmp_path / "missing.bin")], ExitCode.BAD_FILE),
        (["verify", str(DEFAULT_IMAGE_PATH), "--pubkey", str(notkey)], ExitCode.BAD_FILE),
        (
            ["sign", str(DEFAULT_IMAGE_PATH), "--key", str(notkey), "-o", str(tmp_path / "x")],
            ExitCode.BAD_FILE,
        ),
        (["build", "-o", str(tmp_path / "x"), "--disable-op", "NOPE"], ExitCode.USAGE),
        (["build", "-o", str(tmp_path / "x"), "--version", "x"], ExitCode.USAGE),
        (["build", str(tmp_path / "missing.toml")], ExitCode.BAD_FILE),
        (["frobnicate"], ExitCode.USAGE),
    ):
        assert fw_cli.main(argv) == code, argv
        err = capsys.readouterr().err
        assert err.startswith("vnpu-fw: ") and err.count("\n") == 1, err


def test_build_tag_section_is_padded() -> None:
    data = build_image(FirmwareImage(build_tag="abc"))
    assert data[-72:-64] == struct.pack("<HH", TLV_BUILD_TAG, 3) + b"abc\0"
