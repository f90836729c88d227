"""In the guest: the device model dies with a job in flight; the job fails, the guest does not hang.

Run by tests/qemu_tests/test_device_model_killed.py as
``python -m qemu_tests --allow-kill-request --exec 'python -m qemu_tests.device_model_killed'``.
A first job proves the device works; then the guest asks the harness to SIGKILL the device model
(a line the harness watches for), submits a second job and waits past the driver's job timeout.
Exit 0 when that job failed with a timeout or cancellation, every ioctl kept returning, and the
device, whose reset found nobody to answer it, refuses new jobs with -ENODEV (its DMA is off).
"""

from __future__ import annotations

import errno
import glob
import sys
import time
from pathlib import Path

from libaccel import Device, Job, JobBo
from libaccel.discovery import AUTOSUSPEND_GLOB
from libaccel.errors import AccelError
from qemu_tests.harness import KILL_REQUEST
from uapi.isa import SPEC, encode

INT8 = SPEC.dtypes["INT8"].code


def fill_stream(va: int, count: int, value: int) -> bytes:
    return (
        encode("TENSOR", slot=0, dtype=INT8, va=va, n=1, h=1, w=1, c=count, stride_c=1)
        + encode("FILL", dst=0, value=value)
        + encode("END")
    )


def main() -> int:
    # Powered throughout: the kill may come before or after the second SUBMIT (the harness reads the
    # console when it can), and that job must reach the device either way, not need a power-up.
    for delay in glob.glob(AUTOSUSPEND_GLOB):
        Path(delay).write_text("600000")
    with Device.open("kernel") as dev:
        timeout_s = dev.params.job_timeout_ms / 1000
        out = dev.create_bo(4096)
        for value in (5, 6):
            stream = fill_stream(out.va, 4096, value)
            cmd = dev.create_bo_with(stream, read_only=True)
            if value == 6:
                print(KILL_REQUEST.decode(), flush=True)
                time.sleep(3)  # the harness reads the console line and kills the server
            start = time.monotonic()
            dev.submit(Job(cmd, len(stream), [JobBo(out, write=True)]))
            status = out.wait(timeout=timeout_s + 60).status
            print(f"job {value}: status {status} after {time.monotonic() - start:.1f} s", flush=True)
            if value == 5 and status != 0:
                print("the device did not work before the kill", file=sys.stderr)
                return 1
        if status not in (-errno.ETIMEDOUT, -errno.ECANCELED):
            print(f"expected -ETIMEDOUT or -ECANCELED with the device model dead, got {status}")
            return 1
        try:
            dev.submit(Job(cmd, len(stream), [JobBo(out, write=True)]))
        except AccelError as e:
            if e.errno != errno.ENODEV:
                print(f"SUBMIT on the wedged device: expected -ENODEV, got {e}")
                return 1
        else:
            print("SUBMIT after the failed reset was accepted: the device is not wedged")
            return 1
    print("device model killed: the in-flight job failed, the guest is alive")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
