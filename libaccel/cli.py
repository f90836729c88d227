"""``accel``: look at vnpu devices from the shell.

    accel list                       one line per vnpu device: node, PCI slot, driver, sysfs path
    accel info [--device PATH|shim]  every GET_PARAM value, the driver name and version

Errors are one line on stderr with a non-zero exit status.
"""

from __future__ import annotations

import argparse
import sys

from libaccel import Device
from libaccel.discovery import list_devices
from libaccel.errors import AccelError


def cmd_list(args: argparse.Namespace) -> int:
    devices = list_devices()
    for d in devices:
        print(d)
    if not devices:
        print(
            "accel: no vnpu devices (load vnpu.ko in the QEMU guest; or use --device shim)", file=sys.stderr
        )
        return 1
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    with Device.open(args.device) as dev:
        name, (major, minor, patch) = dev.version()
        print(f"device: {dev.path} ({dev.kind})")
        print(f"driver: {name} {major}.{minor}.{patch}")
        for key, value in dev.params.describe():
            print(f"{key}: {value}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="accel", description="Inspect vnpu NPU devices.")
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list vnpu devices").set_defaults(func=cmd_list)
    info = sub.add_parser("info", help="show a device's parameters")
    info.add_argument("--device", help="device node, 'kernel' or 'shim' (default: $VNPU_DEVICE, else first)")
    info.set_defaults(func=cmd_info)
    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except AccelError as e:
        print(f"accel: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
