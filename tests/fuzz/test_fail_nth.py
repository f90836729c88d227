"""Fault injection in the kernel's allocations (qemu_tests.fail_nth), as syzkaller's fail-nth does it.

In the QEMU guest on a kernel with CONFIG_FAULT_INJECTION (``--kernel debug``) every ioctl the stack
uses is made with its 1st, 2nd, ... allocation failed until it succeeds, with the state, errno and
kernel-log checks after each call; on a kernel without it (Debian's) that test skips and the calls
run once each with nothing armed. Here on the host: the parts that read the kernel's text.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest

from qemu_tests import debug_kernel, fail_nth
from tests.fuzz.guest import guest_only, run_on_vnpu_ko
from uapi import bindings

# The results directory the harness shares with the guest (qemu_tests.harness.GUEST_OUT).
GUEST_OUT = Path("/tmp/vnpu-out")
# The whole series on the debug kernel under TCG: some hundreds of calls, each with its setup,
# checks and teardown, at a few seconds each on a loaded 2-core host.
TIMEOUT_S = 5400


def test_every_ioctl_the_stack_uses_has_a_case() -> None:
    assert set(bindings.IOCTLS) <= set(fail_nth.NAMES)
    assert {"open", "DRM_IOCTL_PRIME_HANDLE_TO_FD", "DRM_IOCTL_PRIME_FD_TO_HANDLE"} <= set(fail_nth.NAMES)
    assert len(set(fail_nth.NAMES)) == len(fail_nth.NAMES)


def test_errnos_come_from_the_uapi_header() -> None:
    documented = fail_nth.documented_errnos(bindings.VNPU_HEADER.read_text())
    vnpu = {n for n in bindings.IOCTLS if n.startswith("DRM_IOCTL_VNPU_")}
    assert set(documented) == vnpu  # every vnpu ioctl documents its errors
    assert {errno.ENOMEM, errno.ENOSPC, errno.E2BIG, errno.EINVAL} <= documented["DRM_IOCTL_VNPU_BO_CREATE"]
    assert {errno.ENOMEM, errno.ENOEXEC, errno.EACCES} <= documented["DRM_IOCTL_VNPU_SUBMIT"]
    assert errno.ENOMEM not in documented["DRM_IOCTL_VNPU_BO_INFO"]
    # ENOMEM is allowed everywhere, an interrupted wait only for the ioctls that wait (SUBMIT waits
    # for the jobs that write a command BO).
    assert errno.ENOMEM in fail_nth.allowed_errnos("DRM_IOCTL_VNPU_BO_INFO")
    assert errno.EINTR in fail_nth.allowed_errnos("DRM_IOCTL_VNPU_BO_WAIT")
    assert errno.EINTR in fail_nth.allowed_errnos("DRM_IOCTL_SYNCOBJ_WAIT")
    assert errno.EINTR in fail_nth.allowed_errnos("DRM_IOCTL_VNPU_SUBMIT")
    assert errno.EINTR not in fail_nth.allowed_errnos("DRM_IOCTL_VNPU_BO_INFO")
    assert errno.EIO not in fail_nth.allowed_errnos("DRM_IOCTL_SYNCOBJ_CREATE")


def test_an_errors_paragraph_is_read_to_the_end_of_its_comment() -> None:
    header = """
/**
 * struct drm_vnpu_x - argument of DRM_IOCTL_VNPU_X
 *
 * Errors: -EINVAL if a; -ENOENT if b;
 * -ETIME if c.
 */
/** struct drm_vnpu_y - no errors here */
"""
    assert fail_nth.documented_errnos(header) == {
        "DRM_IOCTL_VNPU_X": frozenset({errno.EINVAL, errno.ENOENT, errno.ETIME})
    }


def test_the_debug_kernel_has_fault_injection() -> None:
    fragment = debug_kernel.parse_config(debug_kernel.FRAGMENT.read_text())
    for option in (
        "CONFIG_FAULT_INJECTION",
        "CONFIG_FAILSLAB",
        "CONFIG_FAIL_PAGE_ALLOC",
        "CONFIG_FAULT_INJECTION_DEBUG_FS",
        "CONFIG_FAULT_INJECTION_STACKTRACE_FILTER",
    ):
        assert fragment.get(option) == "y", option
    # The stacks fail-nth prints must not push an earlier report out of the log the harness reads.
    assert int(fragment["CONFIG_LOG_BUF_SHIFT"]) >= 21


MODULES = """\
vnpu 217088 0 - Live 0xffffffffc0a3c000 (O)
gpu_sched 65536 1 vnpu, Live 0xffffffffc0900000
drm_shmem_helper 28672 1 vnpu, Live 0xffffffffc08f0000
drm 811008 4 vnpu,gpu_sched,drm_shmem_helper, Live 0xffffffffc07a0000
virtio_blk 20480 0 - Live 0xffffffffc0010000
"""


def test_the_stack_filter_spans_the_drm_modules() -> None:
    assert fail_nth.module_span(MODULES) == (0xFFFFFFFFC07A0000, 0xFFFFFFFFC0A3C000 + 217088)
    assert fail_nth.module_span(MODULES.replace("vnpu 217088", "other 217088")) is None  # not loaded
    hidden = re.sub(r"0x[0-9a-f]{16}", "0x0000000000000000", MODULES)  # kptr_restrict
    assert fail_nth.module_span(hidden) is None


def _fake_debugfs(root: Path) -> None:
    for attr, knobs in fail_nth.KNOBS.items():
        (root / attr).mkdir(parents=True)
        for name in (*knobs, "require-start", "require-end"):
            (root / attr / name).write_text("Y\n" if name.startswith("ignore") else "1\n")


def test_knobs_are_set_and_put_back(tmp_path: Path) -> None:
    _fake_debugfs(tmp_path)
    knobs = fail_nth.Knobs(tmp_path)
    knobs.apply(MODULES)
    assert (tmp_path / "failslab" / "ignore-gfp-wait").read_text() == "N"
    assert (tmp_path / "fail_page_alloc" / "min-order").read_text() == "0"
    assert (tmp_path / "fail_page_alloc" / "require-start").read_text() == "0xffffffffc07a0000"
    assert knobs.span is not None
    knobs.restore()
    assert (tmp_path / "failslab" / "ignore-gfp-wait").read_text() == "Y"
    assert (tmp_path / "fail_page_alloc" / "require-end").read_text() == "1"
    # Without the stack-trace filter (or without the modules' addresses) only the knobs are set.
    no_filter = fail_nth.Knobs(tmp_path)
    no_filter.apply(MODULES, stack_filter=False)
    assert no_filter.span is None and (tmp_path / "failslab" / "require-start").read_text() == "1"
    no_filter.restore()


def test_a_kmsg_record_is_one_or_more_log_lines() -> None:
    record = (
        "5,812,90412345,-;FAULT_INJECTION: forcing a failure.\\x0aname failslab, interval 1, "
        "probability 0, space 0, times 1\n SUBSYSTEM=x\n"
    )
    assert fail_nth.parse_kmsg_record(record) == [
        "FAULT_INJECTION: forcing a failure.",
        "name failslab, interval 1, probability 0, space 0, times 1",
    ]
    assert fail_nth.parse_kmsg_record("no separator") == []


LOG = """\
FAULT_INJECTION: forcing a failure.
name failslab, interval 1, probability 0, space 0, times 1
CPU: 1 UID: 0 PID: 345 Comm: python Not tainted 6.12.117-vnpu-debug #1
Call Trace:
 <TASK>
 dump_stack_lvl+0x5d/0x80
 should_fail_ex+0x3f1/0x4e0
 should_failslab+0xc2/0x120
 __kmalloc_cache_noprof+0x6e/0x3a0
 ? vnpu_job_create+0x91/0x5c0 [vnpu]
 drm_sched_job_init+0x77/0x1f0 [gpu_sched]
 vnpu_job_create+0x2c1/0x5c0 [vnpu]
 vnpu_ioctl_submit+0x3aa/0x900 [vnpu]
 drm_ioctl_kernel+0x170/0x2c0 [drm]
 </TASK>
FAULT_INJECTION: forcing a failure.
name fail_page_alloc, interval 1, probability 0, space 0, times 1
Call Trace:
 <TASK>
 __alloc_pages_noprof+0x1d5/0x480
 shmem_alloc_folio+0x9b/0xd0
 </TASK>
"""


def test_injected_failures_are_attributed_to_their_frames() -> None:
    got = fail_nth.injections(LOG.splitlines())
    assert got == [
        fail_nth.Injection("failslab", "drm_sched_job_init+0x77 [gpu_sched]", "vnpu_job_create+0x2c1 [vnpu]"),
        fail_nth.Injection("fail_page_alloc", "?", ""),
    ]


def test_the_figures_table() -> None:
    case = fail_nth.CaseStats("DRM_IOCTL_VNPU_SUBMIT", calls=3, injected=2, failed=2, clean_at=3)
    case.errnos["ENOMEM"] = 2
    doc = {"cases": [case.to_json()], "calls": 3, "injected": 2, "problems": 0}
    table = fail_nth.markdown_table(doc)
    assert "| VNPU_SUBMIT | 3 | 2 | 2 (ENOMEM 2) | 0 | 3 | 0 |" in table
    assert table.splitlines()[-1].startswith("| all | 3 | 2 | 2 |")


def test_the_cli_refuses_the_shim() -> None:
    assert fail_nth.main(["--device", "shim"]) == 2


@guest_only
def test_every_call_under_fail_nth(tmp_path: Path) -> None:
    reason = fail_nth.unavailable()
    if reason:
        pytest.skip(reason)
    out = GUEST_OUT if GUEST_OUT.is_dir() and os.access(GUEST_OUT, os.W_OK) else tmp_path
    run_on_vnpu_ko("fail_nth", "--json", str(out / "fail_nth.json"), "--markdown", timeout=TIMEOUT_S)


@guest_only
def test_every_call_once_without_injection() -> None:
    # The cases' setups, calls and checks where fail-nth cannot run (Debian's kernels): where it
    # can, the series above makes every call too, and a second pass would only cost time (about
    # 45 s a call on the debug kernel under TCG, most of it the per-call leak baselines).
    if fail_nth.unavailable() is None:
        pytest.skip("the kernel has fail-nth: test_every_call_under_fail_nth makes every call")
    run_on_vnpu_ko("fail_nth", "--dry-run", timeout=1800)
