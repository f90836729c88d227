"""The ioctl fuzzer (qemu_tests.ioctl_fuzz): on the shim here, on vnpu.ko in the QEMU guest.

On the shim every random argument must end in an errno (a bad user pointer is EFAULT, not a
SIGSEGV of the process), the device memory must be whole again afterwards, and a known-good job
must still run. In the guest the fuzzer runs as its own process against the kernel, which adds
the dmesg splat checks after every batch and the debugfs / meminfo leak accounting.
"""

from __future__ import annotations

from pathlib import Path

from qemu_tests import ioctl_fuzz
from tests.fuzz.budget import SCALE
from tests.fuzz.guest import guest_only, host_only, run_on_vnpu_ko
from vnpu_common import config

# The shim runs are host tests; in the guest the same file fuzzes the kernel instead.


def _free_bytes() -> int:
    from libaccel.backends.shim import shared_device

    return sum(size for _, size in shared_device().data._free)


@host_only
def test_shim_survives_random_ioctls() -> None:
    before = _free_bytes()
    stats = ioctl_fuzz.Worker("shim", seed=7).run(seconds=60, max_steps=3000 * SCALE)
    assert stats.random_ioctls > 500 and stats.submits_accepted > 20 and stats.jobs_completed > 0, stats
    # Bad pointers reached the handlers and came back as EFAULT.
    assert any(k.endswith(":EFAULT") for k in stats.errnos), stats.errnos
    # Every file is closed at the end of run(): all BO and stream-copy memory is free again
    # once the queued jobs have drained.
    ioctl_fuzz.check_device_works("shim")
    assert _free_bytes() == before


@host_only
def test_run_threads_and_seeds_on_the_shim() -> None:
    res = ioctl_fuzz.run("shim", seed=3, seconds=3, procs=1, threads=2, batch=3)
    assert res.ok, res.failures
    # How many calls fit in 3 s depends on the machine's load (a busy CI host made 7): not a count.
    assert res.stats.ioctls > 0 and res.stats.streams > 0
    assert res.stats.jobs_completed > 0  # the workers' devices ran jobs (not just refused them)


def test_failing_run_prints_a_reproducer() -> None:
    line = ioctl_fuzz.reproducer("kernel", 5, 30, 2, 2)
    assert line == (
        "python -m qemu_tests --exec 'python -m qemu_tests.ioctl_fuzz --device kernel --seed 5 "
        "--seconds 30 --procs 2 --threads 2'"
    )


@guest_only
def test_kernel_ioctl_fuzz(tmp_path: Path) -> None:
    seconds = str(config.FUZZ_SECONDS.get())
    run_on_vnpu_ko("ioctl_fuzz", "--seconds", seconds, "--json", str(tmp_path / "fuzz.json"), timeout=900)
