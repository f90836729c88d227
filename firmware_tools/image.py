"""The repository's firmware: the committed image, its manifest and the development signing key.

The image format (encode, sign, check) is :mod:`uapi.firmware_format`, the contract with the device's
boot ROM; this module names the files ``vnpu-fw`` builds by default.
"""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from uapi.firmware_format import (
    DEFAULT_FW_VERSION,
    DEFAULT_IMAGE_PATH,
    FIRMWARE_DIR,
    FirmwareImage,
    format_fw_version,
    load_private_key,
)

# DEFAULT_IMAGE_PATH: the image the kernel requests as "vnpu/vnpu_fw.bin" (load it with
# firmware_class.path=<repo>/firmware, or install it with vnpu-fw install), built from the manifest
# beside it and signed with the development key.
DEFAULT_MANIFEST_PATH = DEFAULT_IMAGE_PATH.with_name("vnpu_fw.toml")
# The development key pair: published, so it proves nothing; the device trusts its public half
# (uapi.firmware_format.DEV_PUBLIC_KEY_PATH) unless told otherwise. The private half is in the
# repository only: the wheel leaves it out, so rebuilding the committed image needs a checkout.
DEV_PRIVATE_KEY_PATH = FIRMWARE_DIR / "keys" / "dev-ed25519.key"


def default_image() -> FirmwareImage:
    """The content of firmware/vnpu/vnpu_fw.bin: every opcode enabled, the device's limits."""
    return FirmwareImage(build_tag=f"vnpu-fw-{format_fw_version(DEFAULT_FW_VERSION)}")


def dev_private_key() -> Ed25519PrivateKey:
    """The development private key (firmware/keys/dev-ed25519.key): for the committed image and tests."""
    return load_private_key(DEV_PRIVATE_KEY_PATH)
