"""Print the fdinfo of a vnpu.ko file after 20 jobs on a 1 MiB BO: the sample fdinfo_vnpu.txt.

Run in the guest, from the project's root:
``python -m qemu_tests --exec "python3 tests/libaccel/data/capture_fdinfo.py"``, and keep the lines
from ``pos:`` on.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.getcwd())

from libaccel import Device, Job, JobBo  # noqa: E402 - after the path
from uapi.isa import encode  # noqa: E402


def main() -> None:
    dev = Device.open("kernel")
    big = dev.create_bo(1 << 20)
    stream = encode("END")
    job = Job(dev.create_bo_with(stream, read_only=True), len(stream), [JobBo(big)])
    for _ in range(20):
        dev.submit(job)
        if big.wait(timeout=30).status:
            raise SystemExit("a job failed")
    with open(f"/proc/self/fdinfo/{dev.backend.fileno()}") as f:
        sys.stdout.write(f.read())


if __name__ == "__main__":
    main()
