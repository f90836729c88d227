"""Firmware manifests: the TOML file ``vnpu-fw build`` turns into an image.

    [firmware]
    version = "1.0.0"                  # MAJOR.MINOR.PATCH (required)
    isa = "1.1"                        # the ISA it implements (default: the device's)
    build_tag = "vnpu-fw-1.0.0"        # free text (default: vnpu-fw-VERSION)
    sign_with = "../keys/dev-ed25519.key"  # private key, relative to the manifest (default: unsigned)

    [opcodes]
    disable = ["CONV2D"]               # or enable = [...]: exactly these (default: all)

    [limits]                           # default: the device's ceilings
    max_cmd_size = 16777216
    max_tensor_elements = 268435456

Every key is checked: an unknown table or key, a wrong type or an unknown instruction
name is a :class:`~uapi.firmware_format.FirmwareError` naming it.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uapi.firmware_format import (
    FirmwareError,
    FirmwareImage,
    Limits,
    all_opcodes,
    format_fw_version,
    parse_fw_version,
    parse_isa_version,
)
from uapi.isa import SPEC, IsaError

_KEYS = {
    "firmware": {"version": str, "isa": str, "build_tag": str, "sign_with": str},
    "opcodes": {"disable": list, "enable": list},
    "limits": {"max_cmd_size": int, "max_tensor_elements": int},
}


@dataclass(frozen=True)
class Manifest:
    image: FirmwareImage
    key_path: Path | None  # the signing key, resolved against the manifest's directory


def _opcode(where: str, name: object) -> int:
    if not isinstance(name, str):
        raise FirmwareError(f"{where}: {name!r} is not an instruction name")
    try:
        return SPEC.by_name(name.upper()).opcode
    except IsaError:
        raise FirmwareError(f"{where}: unknown instruction {name!r}") from None


def _checked(path: Path, doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    for table, body in doc.items():
        if table not in _KEYS or not isinstance(body, dict):
            raise FirmwareError(f"{path}: unknown table [{table}] (known: {', '.join(_KEYS)})")
        for key, value in body.items():
            want = _KEYS[table].get(key)
            if want is None:
                raise FirmwareError(f"{path}: unknown key {table}.{key}")
            if not isinstance(value, want) or isinstance(value, bool):
                raise FirmwareError(f"{path}: {table}.{key} must be a {want.__name__}")
    return {t: doc.get(t, {}) for t in _KEYS}


def load_manifest(path: str | Path) -> Manifest:
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as e:
        raise FirmwareError(f"{path}: cannot read the manifest: {e.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise FirmwareError(f"{path}: not TOML: {e}") from None
    t = _checked(path, doc)
    fw, ops, lim = t["firmware"], t["opcodes"], t["limits"]
    if "version" not in fw:
        raise FirmwareError(f"{path}: firmware.version is required")
    version = parse_fw_version(fw["version"])
    if "enable" in ops and "disable" in ops:
        raise FirmwareError(f"{path}: opcodes.enable and opcodes.disable exclude each other")
    if "enable" in ops:
        enabled = {_opcode(f"{path}: opcodes.enable", n) for n in ops["enable"]}
    else:
        enabled = set(all_opcodes()) - {
            _opcode(f"{path}: opcodes.disable", n) for n in ops.get("disable", [])
        }
    image = FirmwareImage(
        fw_version=version,
        isa_version=parse_isa_version(fw["isa"]) if "isa" in fw else SPEC.version,
        enabled_opcodes=frozenset(enabled),
        build_tag=fw.get("build_tag", f"vnpu-fw-{format_fw_version(version)}"),
        limits=Limits(**lim),
    )
    key = (path.parent / fw["sign_with"]) if "sign_with" in fw else None
    return Manifest(image, key)
