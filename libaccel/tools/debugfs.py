"""``accel state``: vnpu.ko's debugfs files, parsed and pretty-printed.

The driver's files live in ``/sys/kernel/debug/accel/<PCI slot>/`` (``state``: device
registers and queue positions; ``counters``: live objects and totals; ``files``: one line
per open file). Their text is parsed generically, so a line the driver adds shows up
without a change here:

- ``name: value`` -> ``{"name": value}``;
- ``sq head 3 tail 3`` -> ``{"sq": {"head": 3, "tail": 3}}``; ``last seqno 5`` -> ``{"last_seqno": 5}``;
- a file whose lines are all ``key value key value ...`` (``files``) -> a list of rows;
- ``#`` lines are comments.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from libaccel import discovery
from libaccel.errors import NoDevice, from_errno
from libaccel.tools import decode
from vnpu_common import config

DEBUGFS: Path = config.DEBUGFS.get()
FILES = ("state", "counters", "files")
# Files that do work when read (doorbell_rtt times 256 device round trips): read on request only.
MEASUREMENTS = ("doorbell_rtt",)
_PARAMS = {p.name: p for p in decode.params()}
_PARAM_ALIASES = {"caps": "capabilities"}  # debugfs names that differ from the GET_PARAM names


def _value(text: str, raw: bool = False) -> int | str:
    if raw:
        return text
    try:
        return int(text, 0)
    except ValueError:
        return text


def _pairs(tokens: list[str], raw: bool = False) -> dict[str, int | str] | None:
    if len(tokens) % 2 or not tokens:
        return None
    keys = tokens[0::2]
    if not all(re.fullmatch(r"[A-Za-z_]\w*", k) for k in keys):
        return None
    return {k: _value(v, raw) for k, v in zip(keys, tokens[1::2], strict=True)}


def parse(text: str, raw: bool = False) -> dict[str, Any] | list[dict[str, Any]]:
    """One debugfs file's text as a dict (``key: value`` lines) or a list of rows (``files``).

    Values are integers where they parse as such, unless ``raw`` keeps the text as printed.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    rows = [_pairs(line.split(), raw) for line in lines]
    if rows and all(r is not None and ":" not in line for r, line in zip(rows, lines, strict=True)):
        first = {next(iter(r)) for r in rows if r}
        if len(first) == 1:
            return [r for r in rows if r is not None]
    out: dict[str, Any] = {}
    for line in lines:
        key, colon, value = line.partition(":")
        if colon and re.fullmatch(r"[A-Za-z_][\w ]*", key.strip()):
            out[key.strip().replace(" ", "_")] = _value(value.strip(), raw)
            continue
        name, *rest = line.split()
        pairs = _pairs(rest, raw)
        if pairs is not None and len(pairs) == 1:
            ((k, v),) = pairs.items()
            out[f"{name}_{k}"] = v
        elif pairs is not None:
            out[name] = pairs
        else:
            out[name] = " ".join(rest)
    return out


def device_dirs(device: str | None) -> list[Path]:
    """The debugfs directories of ``device`` (a node path), or of every vnpu device."""
    root = DEBUGFS / "accel"
    try:
        candidates = sorted(p for p in root.iterdir() if (p / "state").exists())
    except PermissionError:
        raise from_errno(errno.EACCES, f"read {root}", "debugfs is readable by root only") from None
    except FileNotFoundError:
        mounted = DEBUGFS.is_dir() and any(True for _ in DEBUGFS.iterdir())
        hint = (
            "no accel device in debugfs; is vnpu.ko loaded?"
            if mounted
            else f"debugfs is not mounted: mount -t debugfs none {DEBUGFS}"
        )
        raise NoDevice(errno.ENOENT, f"read {root}", hint) from None
    if device is None:
        return candidates
    slots = {d.node: d.pci_slot for d in discovery.list_devices()}
    slot = slots.get(device)
    chosen = [p for p in candidates if p.name == slot]
    if not chosen:
        raise NoDevice(errno.ENODEV, f"state of {device}", "not a vnpu node with a debugfs directory")
    return chosen


def knob_files(name: str) -> list[Path]:
    """The debugfs file ``name`` (a knob such as ``core_mask``) of each vnpu device that has it; none
    without debugfs (not mounted, not root) or on a vnpu.ko without that knob."""
    try:
        dirs = device_dirs(None)
    except OSError:
        return []
    return [d / name for d in dirs if (d / name).exists()]


def read_state(directory: Path, raw: bool = False) -> dict[str, Any]:
    """Every file of the directory, parsed (the driver's three first, in their order)."""
    out: dict[str, Any] = {"path": str(directory)}
    skip = (*FILES, *MEASUREMENTS)
    # Write-only files are knobs (fw_reload reloads the firmware), not state.
    others = sorted(
        p.name for p in directory.iterdir() if p.is_file() and p.name not in skip and p.stat().st_mode & 0o444
    )
    for name in [*FILES, *others]:
        try:
            out[name] = parse((directory / name).read_text(), raw)
        except OSError as e:
            out[name] = {"error": os.strerror(e.errno or errno.EIO)}
    for row in out.get("files", []) if isinstance(out.get("files"), list) else []:
        row["command"] = _comm(row.get("pid"))
    return out


def _comm(pid: object) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "-"


def _format_value(key: str, v: Any) -> str:
    if isinstance(v, dict):
        return " ".join(f"{k} {x}" for k, x in v.items())
    # Registers that mirror a GET_PARAM value are decoded the way `accel info` decodes them.
    param = _PARAMS.get(_PARAM_ALIASES.get(key, key))
    if param is not None and isinstance(v, str):
        try:
            value = int(v, 0)
        except ValueError:
            return v
        if param.enumerator == "DRM_VNPU_PARAM_CAPABILITIES":
            return f"{v} ({', '.join(decode.capability_names(value)) or 'none'})"
        text = decode.format_param(param, value)
        return v if text == v else f"{v} ({text})"
    return str(v)


def render(state: dict[str, Any]) -> str:
    lines = [f"vnpu debugfs: {state['path']}"]
    for name, content in state.items():
        if name == "path":
            continue
        lines.append("")
        lines.append(name)
        if not content:
            lines.append("  (none)")
            continue
        if isinstance(content, list):
            headers = list(dict.fromkeys(k for row in content for k in row))
            table = [[h.upper() for h in headers]] + [[str(r.get(h, "-")) for h in headers] for r in content]
            widths = [max(len(r[i]) for r in table) for i in range(len(headers))]
            lines += [
                "  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table
            ]
        else:
            width = max((len(k) for k in content), default=0)
            lines += [f"  {k.ljust(width)}  {_format_value(k, v)}" for k, v in content.items()]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    target = discovery.resolve(args.device) if args.device not in (None, "kernel") else None
    if target == discovery.SHIM:
        raise NoDevice(
            errno.ENODEV,
            "state",
            "the shim has no debugfs (it lives inside each process that opens it); run in the QEMU guest",
        )
    states = [read_state(d, raw=not args.json) for d in device_dirs(target)]
    if not states:
        raise NoDevice(errno.ENODEV, "state", "no vnpu device in debugfs; is vnpu.ko loaded?")
    if args.json:
        print(json.dumps(states if len(states) > 1 else states[0], indent=2))
    else:
        print("\n\n".join(render(s) for s in states))
    return 0


if __name__ == "__main__":
    from libaccel.tools.cli import main as cli_main

    sys.exit(cli_main(["state", *sys.argv[1:]]))
