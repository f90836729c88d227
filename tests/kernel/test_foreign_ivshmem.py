"""vnpu.ko binds only the NPU: a second ivshmem-doorbell whose server is not the NPU is refused.

The harness always adds that device (qemu_tests/foreign_ivshmem.py): its shared memory holds
a known pattern. Probe must refuse it with -ENODEV and one kernel-log line, write nothing
into its shared memory, and leave /dev/accel/accel0 the NPU's.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
from pathlib import Path

import pytest
from kernel_helpers import dmesg

from qemu_tests import foreign_ivshmem
from qemu_tests.guest_run import PCI_DEVICE, PCI_VENDOR

PCI_DEVICES = Path("/sys/bus/pci/devices")
DRIVER = Path("/sys/bus/pci/drivers/vnpu")


def _npu() -> str:
    """The PCI address behind /dev/accel/accel0."""
    return Path("/sys/class/accel/accel0/device").resolve().name


def _foreign() -> Path:
    """The ivshmem-doorbell function that is not the NPU (the test skips if the guest has none)."""
    found = [
        d
        for d in sorted(PCI_DEVICES.iterdir())
        if (d / "vendor").read_text().strip() == PCI_VENDOR
        and (d / "device").read_text().strip() == PCI_DEVICE
        and d.name != _npu()
    ]
    if not found:
        pytest.skip("no second ivshmem-doorbell device (the QEMU harness adds one)")
    assert len(found) == 1, found
    return found[0]


def _shared_memory(dev: Path) -> bytes:
    """BAR2 of ``dev``, read through sysfs (memory decoding on, as probe's pci_enable_device left it)."""
    command = struct.unpack("<H", (dev / "config").read_bytes()[4:6])[0]
    assert command & 0x2, f"memory decoding is off on {dev.name}: BAR2 reads would not reach the memory"
    with (
        open(dev / "resource2", "rb") as f,
        mmap.mmap(f.fileno(), foreign_ivshmem.SIZE, prot=mmap.PROT_READ) as m,
    ):
        return m[:]


def _lines_about(log: str, address: str) -> list[str]:
    return [line for line in log.splitlines() if f"vnpu {address}:" in line]


def test_boot_probe_left_it_alone(dev) -> None:
    foreign = _foreign()
    assert not (foreign / "driver").exists(), "vnpu.ko (or another driver) is bound to the foreign device"
    # accel0 is the NPU: the device model answers GET_PARAM with the NPU's identity.
    assert (PCI_DEVICES / _npu() / "driver").resolve().name == "vnpu"
    assert dev.params.device_id == 1
    # Every probe of it (one per insmod) logged exactly its one refusal line.
    lines = _lines_about(dmesg(), foreign.name)
    assert lines and all("not a vnpu NPU: BAR2 magic" in line for line in lines), lines
    assert _shared_memory(foreign) == foreign_ivshmem.pattern()


def test_bind_is_refused_with_enodev_one_line_and_no_write() -> None:
    foreign = _foreign()
    before = dmesg().splitlines()
    # One write(2), one probe: a buffered file would write again when it closes after the error.
    fd = os.open(DRIVER / "bind", os.O_WRONLY)
    try:
        with pytest.raises(OSError) as e:
            os.write(fd, foreign.name.encode())
    finally:
        os.close(fd)
    assert e.value.errno == errno.ENODEV
    new = dmesg().splitlines()[len(before) :]
    assert len(new) == 1, new
    magic = int.from_bytes(foreign_ivshmem.pattern()[:4], "little")
    assert new[0].endswith(f"vnpu {foreign.name}: [drm] not a vnpu NPU: BAR2 magic {magic:#x}"), new
    assert not (foreign / "driver").exists()
    assert _shared_memory(foreign) == foreign_ivshmem.pattern()
