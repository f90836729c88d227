"""Helpers of the kernel-only tests: command streams, debugfs counters, the module's path.

Command streams are built with :func:`uapi.isa.encode`, the one encoder of the ISA.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from uapi.isa import SPEC, encode
from vnpu_common import config

REPO = Path(__file__).resolve().parents[2]
MODULE = REPO / config.MODULE.get()  # relative to the checkout unless absolute
DEBUGFS = Path("/sys/kernel/debug")
PCI_DRIVER = Path("/sys/bus/pci/drivers/vnpu")  # its bind and unbind files take a PCI address
BAD_DMESG = re.compile(
    r"WARNING:|BUG:|Oops|general protection fault|Call Trace:|UBSAN|KASAN|refcount_t:"
    r"|list_(add|del) corruption"
)
INT8 = SPEC.dtypes["INT8"].code
INT32 = SPEC.dtypes["INT32"].code


def insmod_command() -> list[str]:
    """insmod vnpu.ko with the parameters guest_run loaded it with (guest_run.module_params)."""
    return ["insmod", str(MODULE), *config.MODULE_PARAMS.get()]


def accel_nodes() -> list[str]:
    return sorted(glob.glob("/dev/accel/accel*"))


def npu_address() -> str:
    """The PCI address of the first vnpu device (accel0), as sysfs bind/unbind take it."""
    return Path("/sys/class/accel/accel0/device").resolve().name


def write_once(path: Path, text: str) -> None:
    """One write(2): a buffered file would write again when it closes after an error."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def holders() -> str:
    """Who keeps vnpu loaded: its refcount, debugfs's open files, processes with the node open or mapped."""
    lines = [f"refcnt {Path('/sys/module/vnpu/refcnt').read_text().strip()}"]
    for f in glob.glob("/sys/kernel/debug/accel/*/files") + glob.glob("/sys/kernel/debug/accel/*/counters"):
        lines.append(Path(f).read_text().strip())
    for pid in glob.glob("/proc/[0-9]*"):
        try:
            fds = [os.readlink(fd) for fd in glob.glob(f"{pid}/fd/*")]
            maps = Path(f"{pid}/maps").read_text()
        except OSError:
            continue
        held = [fd for fd in fds if "accel" in fd] + (["mapped"] if "accel" in maps else [])
        if held:
            cmdline = Path(f"{pid}/cmdline").read_text().replace("\0", " ")[:120]
            lines.append(f"pid {pid[6:]} {held} {cmdline}")
    return "\n".join(lines)


def log_mark() -> str:
    """Write a unique line into the kernel log and return it, for :func:`dmesg_since`.

    Counting lines does not mark a place: once the ring buffer is full (a quarter hour into a
    guest run), every new line pushes an old one out and the count stays put."""
    mark = f"vnpu-test mark {uuid.uuid4().hex}"
    write_once(Path("/dev/kmsg"), mark + "\n")
    return mark


def dmesg_since(mark: str) -> list[str]:
    """The kernel log's lines after ``mark`` (all of them if it has rotated out: each is newer)."""
    lines = dmesg().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].endswith(mark):
            return lines[i + 1 :]
    return lines


def bad_dmesg_lines(since: str | None = None) -> list[str]:
    """The kernel log's splats (WARNING, BUG, Oops, ...), after the :func:`log_mark` ``since`` if given."""
    lines = dmesg().splitlines() if since is None else dmesg_since(since)
    return [line for line in lines if BAD_DMESG.search(line)]


def vector(slot: int, va: int, count: int, dtype: int = INT8) -> bytes:
    """TENSOR: slot ``slot`` is ``count`` contiguous elements at device VA ``va``."""
    size = SPEC.dtype_by_code(dtype).size
    return encode("TENSOR", slot=slot, dtype=dtype, va=va, n=1, h=1, w=1, c=count, stride_c=size)


def end() -> bytes:
    return encode("END")


def fill_stream(va: int, count: int, value: int) -> bytes:
    """A stream that fills ``count`` INT8 elements at ``va`` with ``value``."""
    return vector(0, va, count) + encode("FILL", dst=0, value=value) + end()


def copy_stream(src_va: int, dst_va: int, count: int) -> bytes:
    """A stream that copies ``count`` bytes from ``src_va`` to ``dst_va``."""
    return vector(0, src_va, count) + vector(1, dst_va, count) + encode("COPY", src=0, dst=1) + end()


def hang_stream(sem_va: int, out_va: int) -> bytes:
    """A stream that waits for the INT32 at ``sem_va`` to become 1 (it never does), then writes out."""
    return (
        vector(0, sem_va, 1, INT32)
        + vector(1, out_va, 1)
        + encode("WAIT", sem=0, value=1)
        + encode("FILL", dst=1, value=7)
        + end()
    )


def job_timeout_files() -> list[Path]:
    """vnpu's debugfs ``job_timeout_ms`` file of each device (the timeout of jobs that start afterwards)."""
    return [Path(f) for f in sorted(glob.glob(str(DEBUGFS / "accel" / "*" / "job_timeout_ms")))]


def debugfs_counters() -> dict[str, int]:
    """The ``name: value`` lines of vnpu's debugfs ``counters`` file (/sys/kernel/debug/accel/*/counters)."""
    out: dict[str, int] = {}
    for f in sorted(glob.glob(str(DEBUGFS / "accel" / "*" / "counters"))):
        for line in Path(f).read_text().splitlines():
            m = re.fullmatch(r"\s*([A-Za-z_]\w*):\s+(-?\d+|0x[0-9a-fA-F]+)\s*", line)
            if m:
                out[m.group(1)] = int(m.group(2), 0)
    return out


def dmesg() -> str:
    return subprocess.run(["dmesg"], capture_output=True, text=True, check=False).stdout


def wait_until(cond: Callable[[], object], timeout: float) -> bool:
    """Poll ``cond`` every 50 ms for up to ``timeout`` seconds; its last answer (rmmod, unbind and udev
    finish asynchronously)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return bool(cond())
