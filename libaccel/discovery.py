"""Finding vnpu devices: udev's ``accel`` subsystem, filtered to PCI devices bound to vnpu.ko."""

from __future__ import annotations

import errno
import os
import stat
import sys
from dataclasses import dataclass

from libaccel.errors import NoDevice
from vnpu_common import config

DRIVER_NAME = "vnpu"
SHIM = "shim"
ENV_DEVICE = config.DEVICE.name
# Every tool's --device help: the rule of resolve().
DEVICE_HELP = (
    "node path, 'kernel' or 'shim' (default: $VNPU_DEVICE, else the first vnpu kernel device, else the shim)"
)
# The runtime-PM autosuspend delay (ms) of every accel device: the PCI device's standard attribute.
AUTOSUSPEND_GLOB = "/sys/class/accel/accel*/device/power/autosuspend_delay_ms"


@dataclass(frozen=True)
class AccelDevice:
    """One vnpu accel node."""

    node: str  # /dev/accel/accelN
    sys_path: str  # /sys/devices/.../accel/accelN
    pci_slot: str  # e.g. 0000:00:03.0
    driver: str = DRIVER_NAME

    def __str__(self) -> str:
        return f"{self.node}\t{self.pci_slot}\t{self.driver}\t{self.sys_path}"


def list_devices(driver: str = DRIVER_NAME) -> list[AccelDevice]:
    """Every accel node whose parent PCI device is bound to ``driver``, sorted by node name."""
    import pyudev  # imported here so the shim works where udev is absent

    try:
        context = pyudev.Context()
    except (ImportError, OSError):
        return []  # no libudev: no kernel devices
    found = []
    for dev in context.list_devices(subsystem="accel"):
        if dev.device_node is None:
            continue
        pci = dev.find_parent("pci")
        if pci is None or pci.driver != driver:
            continue
        found.append(
            AccelDevice(
                node=dev.device_node,
                sys_path=dev.sys_path,
                pci_slot=pci.properties.get("PCI_SLOT_NAME", pci.sys_name),
                driver=pci.driver,
            )
        )
    return sorted(found, key=lambda d: (len(d.node), d.node))


def resolve(which: str | None = None, quiet: bool = False) -> str:
    """What to open: ``"shim"`` or a device node path. The one device rule of every tool and the
    delegate:

    ``which`` (a tool's --device, the delegate's 'device' option) wins; else $VNPU_DEVICE; else the
    first vnpu kernel device if there is one, else the in-process shim, said in one line on stderr
    (once per process and choice; not with ``quiet``). ``"kernel"`` asks for the first kernel device:
    none is an error. A $VNPU_DEVICE that names no device node is reported as the variable's value,
    for the user who set it and forgot.
    """
    if which is None:
        which = config.DEVICE.get()
        if which not in (None, SHIM, "kernel"):
            _check_env_node(which)
    if which == SHIM:
        return SHIM
    if which not in (None, "kernel"):
        return which
    devices = list_devices()
    if devices:
        if which is None and not quiet:
            _notice(f"vnpu: using {devices[0].node}, the first vnpu kernel device")
        return devices[0].node
    if which is None:
        if not quiet:
            _notice("vnpu: using the in-process shim: no vnpu kernel device found")
        return SHIM
    raise NoDevice(
        errno.ENODEV,
        "open",
        "no vnpu device found under /sys/class/accel (is vnpu.ko loaded, in a QEMU guest with the "
        f"vnpu device?); to run without one, use the in-process shim: {ENV_DEVICE}=shim or --device shim",
    )


_noticed: set[str] = set()


def _notice(line: str) -> None:
    """The default device, said once per process (a tool that opens it twice says it once)."""
    if line not in _noticed:
        _noticed.add(line)
        print(f"{line} ({ENV_DEVICE} or a device option chooses another)", file=sys.stderr, flush=True)


def _check_env_node(value: str) -> None:
    try:
        mode = os.stat(value).st_mode
    except OSError:
        what = "names no file"
    else:
        if stat.S_ISCHR(mode):
            return
        what = "is a directory" if stat.S_ISDIR(mode) else "is not a device node"
    raise NoDevice(
        errno.ENODEV,
        f"open ${ENV_DEVICE}={value!r}",
        f"the environment variable {what}; set it to /dev/accel/accelN, 'kernel' or 'shim', or unset it",
    )
