"""The debug kernel (``--kernel debug``): its config fragment, cache, build pipeline and harness plumbing.

The real build takes 20-60 minutes, so the pipeline runs here on a stand-in
source tree whose Makefile and merge_config.sh do in a moment what Kbuild's do.
"""

from __future__ import annotations

import fcntl
import json
import tarfile
import threading
import time
from io import BytesIO
from pathlib import Path

import pytest

from qemu_tests import debug_kernel, harness, matrix, preflight

# What the debug kernel is for (KASAN, lockdep, debugobjects, kmemleak, DRM's checks) and what
# vnpu.ko and virtme-ng need from any kernel.
REQUIRED = {
    "CONFIG_KASAN": "y",
    "CONFIG_KASAN_GENERIC": "y",
    "CONFIG_KASAN_INLINE": "y",
    "CONFIG_PROVE_LOCKING": "y",
    "CONFIG_DEBUG_ATOMIC_SLEEP": "y",
    "CONFIG_DEBUG_OBJECTS": "y",
    "CONFIG_DEBUG_OBJECTS_TIMERS": "y",
    "CONFIG_DEBUG_OBJECTS_WORK": "y",
    "CONFIG_DEBUG_OBJECTS_RCU_HEAD": "y",
    "CONFIG_DEBUG_KMEMLEAK": "y",
    "CONFIG_DEBUG_KMEMLEAK_AUTO_SCAN": "n",
    "CONFIG_DEBUG_KMEMLEAK_DEFAULT_OFF": "n",
    "CONFIG_DRM_DEBUG_MM": "y",
    "CONFIG_DEBUG_LIST": "y",
    "CONFIG_MODULES": "y",
    "CONFIG_PCI_MSI": "y",
    "CONFIG_DRM_ACCEL": "y",
    "CONFIG_DEBUG_FS": "y",
    "CONFIG_VIRTIO_PCI": "y",
    "CONFIG_9P_FS": "y",
    "CONFIG_NET_9P_VIRTIO": "y",
    "CONFIG_OVERLAY_FS": "y",
}


def test_the_fragment_asks_for_every_debug_option_and_what_the_guest_needs() -> None:
    fragment = debug_kernel.parse_config(debug_kernel.FRAGMENT.read_text())
    assert {k: fragment.get(k) for k in REQUIRED} == REQUIRED
    # the module's dependencies, as modules or built in (the guest modprobes them by name)
    for dep in ("CONFIG_DRM", "CONFIG_DRM_GEM_SHMEM_HELPER", "CONFIG_DRM_SCHED"):
        assert fragment.get(dep) in ("y", "m"), dep
    # a report must not end the run before the harness can quote it
    assert fragment["CONFIG_PANIC_ON_OOPS"] == "n"


def test_parse_config_reads_both_spellings_of_unset() -> None:
    text = 'CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=n\nCONFIG_D="-x"\n# a comment\nCONFIG_E=16\n'
    assert debug_kernel.parse_config(text) == {
        "CONFIG_A": "y",
        "CONFIG_B": "n",
        "CONFIG_C": "n",
        "CONFIG_D": '"-x"',
        "CONFIG_E": "16",
    }


def test_unmet_names_what_kconfig_refused() -> None:
    fragment = {"CONFIG_KASAN": "y", "CONFIG_USB_SUPPORT": "n", "CONFIG_DRM_SCHED": "m"}
    final = {"CONFIG_KASAN": "y", "CONFIG_DRM_SCHED": "y"}
    assert debug_kernel.unmet(fragment, final) == ["CONFIG_DRM_SCHED=m (got y)"]
    assert debug_kernel.unmet(fragment, {**final, "CONFIG_DRM_SCHED": "m"}) == []
    assert debug_kernel.unmet({"CONFIG_KASAN": "y"}, {}) == ["CONFIG_KASAN=y (got n)"]


def test_the_cache_key_follows_source_fragment_and_compiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    h = debug_kernel.config_hash(b"CONFIG_KASAN=y\n", "gcc (Debian 12.2.0-14) 12.2.0")
    assert h != debug_kernel.config_hash(b"CONFIG_KASAN=n\n", "gcc (Debian 12.2.0-14) 12.2.0")
    assert h != debug_kernel.config_hash(b"CONFIG_KASAN=y\n", "gcc (Debian 13.1.0-1) 13.1.0")
    k = debug_kernel.DebugKernel("6.12.117-1~deb12u1", h)
    assert k.root == tmp_path / "vnpu" / "kernels" / f"linux-source-6.12-6.12.117-1_deb12u1-debug-{h}"
    assert k.image == k.build / "arch" / "x86" / "boot" / "bzImage"
    assert k.name != debug_kernel.DebugKernel("6.12.118-1~deb12u1", h).name
    assert not k.is_built()
    k.image.parent.mkdir(parents=True)
    k.image.write_bytes(b"MZ")
    assert not k.is_built()  # an interrupted build has no done.json
    k.done.write_text("{}")
    assert k.is_built()


def _stand_in_tarball(path: Path, merge_drops: str = "") -> Path:
    """linux-source-6.12/ with a Makefile and merge_config.sh that act like Kbuild's, in a moment."""
    makefile = """\
defconfig:
\tmkdir -p $(O) && printf 'CONFIG_DEFCONFIG=y\\n' > $(O)/.config
olddefconfig:
\ttrue
bzImage:
\tmkdir -p $(O)/arch/x86/boot $(O)/include/config
\techo MZ > $(O)/arch/x86/boot/bzImage
\techo 6.12.117-vnpu-debug > $(O)/include/config/kernel.release
\t@echo '  CC      kernel/fork.o'
\t@echo '  AS      arch/x86/entry/entry_64.o'
\t@echo '  LD      vmlinux'
modules:
\t@echo '  CC [M]  drivers/gpu/drm/scheduler/sched_main.o'
"""
    # merge_config.sh -m -O DIR CONFIG FRAGMENT: append the fragment (less a line Kconfig "refuses")
    merge = f'#!/bin/sh\ngrep -v \'{merge_drops or "^$"}\' "$5" >> "$4"\n'
    with tarfile.open(path, "w:xz") as tar:
        for name, text, mode in (
            ("Makefile", makefile, 0o644),
            ("scripts/kconfig/merge_config.sh", merge, 0o755),
        ):
            info = tarfile.TarInfo(f"linux-source-6.12/{name}")
            data = text.encode()
            info.size, info.mode = len(data), mode
            tar.addfile(info, BytesIO(data))
    return path


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> debug_kernel.DebugKernel:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(debug_kernel, "SOURCE_TARBALL", _stand_in_tarball(tmp_path / "src.tar.xz"))
    monkeypatch.setattr(debug_kernel, "VIRTME_PREP", tmp_path / "no-virtme-prep")
    monkeypatch.setattr(debug_kernel, "missing_requirements", lambda: [])
    return debug_kernel.DebugKernel("6.12.117-1~deb12u1", "0123456789ab")


def test_the_build_unpacks_configures_compiles_and_caches(stand_in: debug_kernel.DebugKernel) -> None:
    said: list[tuple[str, str]] = []
    k = debug_kernel.ensure_built(lambda phase, msg: said.append((phase, msg)), stand_in)
    assert k.is_built() and k.image.read_text() == "MZ\n"
    assert [p for p, _ in said] == ["build", "extract", "config", "compile", "compile", "done"]
    assert str(k.log) in said[0][1]  # the full make log's path is printed
    assert said[4][1].startswith("3 objects compiled")  # CC, AS, CC [M]; not LD
    done = json.loads(k.done.read_text())
    assert (done["release"], done["objects"]) == ("6.12.117-vnpu-debug", 3)
    final = debug_kernel.parse_config((k.build / ".config").read_text())
    assert not debug_kernel.unmet(debug_kernel.parse_config(debug_kernel.FRAGMENT.read_text()), final)
    assert "$ nice make -C" in k.log.read_text() and "-j2" in k.log.read_text()
    # cached: the second call builds nothing
    said.clear()
    assert debug_kernel.ensure_built(lambda phase, msg: said.append((phase, msg)), stand_in) == k
    assert [p for p, _ in said] == ["cache"]


def test_an_option_kconfig_refuses_fails_the_build_by_name(
    stand_in: debug_kernel.DebugKernel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        debug_kernel, "SOURCE_TARBALL", _stand_in_tarball(tmp_path / "drop.tar.xz", "CONFIG_KASAN=")
    )
    with pytest.raises(debug_kernel.BuildError, match=r"refused: CONFIG_KASAN=y \(got n\)"):
        debug_kernel.ensure_built(lambda *_: None, stand_in)
    assert not stand_in.is_built()


def test_a_failed_make_points_at_its_log(stand_in: debug_kernel.DebugKernel) -> None:
    stand_in.source.mkdir(parents=True)
    (stand_in.source / "Makefile").write_text("defconfig:\n\t@echo 'no rule for x86_64_defconfig'; false\n")
    with pytest.raises(debug_kernel.BuildError) as e:
        debug_kernel.ensure_built(lambda *_: None, stand_in)
    assert f"full log: {stand_in.log}" in str(e.value) and "no rule for x86_64_defconfig" in str(e.value)


def test_missing_build_tools_are_named_with_their_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        debug_kernel,
        "BUILD_PACKAGES",
        (("make", "make"), ("vnpu-no-such-flex", "flex"), ("/nonexistent/libelf.h", "libelf-dev")),
    )
    assert debug_kernel.missing_requirements() == [
        ("vnpu-no-such-flex", "flex"),
        ("/nonexistent/libelf.h", "libelf-dev"),
    ]
    with pytest.raises(debug_kernel.BuildError, match="fix: apt-get install flex libelf-dev"):
        debug_kernel.ensure_built(lambda *_: None, debug_kernel.DebugKernel("v", "h"))


# --- the harness and preflight plumbing ------------------------------------


def test_debug_is_a_kernel_spec_for_kernel_and_matrix() -> None:
    p = harness.build_parser()
    assert p.parse_args(["--kernel", "debug"]).kernel == "debug"
    assert [e.spec for e in p.parse_args(["--matrix", "6.12.117+deb12-amd64,debug"]).matrix] == [
        "6.12.117+deb12-amd64",
        "debug",
    ]
    with pytest.raises(ValueError, match="nor 'debug'"):
        preflight.kernel_spec("debg")


def test_debug_names_the_cached_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    k = preflight.select_kernel(override="debug")
    assert k is not None and not k.debian
    assert k.build == debug_kernel.current().build and k.image == debug_kernel.current().image
    assert k.release == "debug"  # before the build; then its kernel.release
    with pytest.raises(ValueError, match="--kdir"):
        preflight.select_kernel(override="debug", kdir=tmp_path)


def test_the_check_lists_the_build_tools_until_the_kernel_is_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(debug_kernel, "BUILD_PACKAGES", (("vnpu-no-such-bison", "bison"),))
    reqs = preflight.check_kernel(preflight.Host(), "debug")
    assert [(r.name, r.ok, r.fix) for r in reqs] == [
        ("debug kernel build: vnpu-no-such-bison", False, "apt-get install bison"),
        ("debug kernel", True, ""),
    ]
    assert "not built yet" in reqs[-1].detail
    k = debug_kernel.current()
    k.image.parent.mkdir(parents=True)
    k.image.write_bytes(b"MZ")
    (k.build / "Makefile").write_text("")
    (k.build / ".config").write_text(
        'CONFIG_DRM_ACCEL=y\nCONFIG_CC_VERSION_TEXT="gcc (Debian 12.2.0-14+deb12u1) 12.2.0"\n'
    )
    k.done.write_text("{}")
    names = [r.name for r in preflight.check_kernel(preflight.Host(), "debug")]
    assert names == ["debug kernel", "kernel image", "kernel build tree", "kernel compiler"]


def test_ci_packages_leave_out_the_debug_build(monkeypatch: pytest.MonkeyPatch) -> None:
    host = preflight.Host(
        apt_names=lambda: ["linux-image-6.12.117+deb12-amd64-unsigned", "linux-headers-6.12.117+deb12-amd64"]
    )
    ci = preflight.debian_packages(host)
    debug = preflight.debian_packages(host, debug=True)
    build = {p for _, p in debug_kernel.BUILD_PACKAGES}
    assert {"flex", "bison", "libelf-dev", "libssl-dev", "bc"} <= build <= set(debug)
    assert not {"flex", "bison", "libelf-dev", "libssl-dev", "bc"} & set(ci)
    assert set(ci) <= set(debug) and len(debug) == len(set(debug))


def test_the_debug_kernel_gets_a_longer_default_timeout() -> None:
    p = harness.build_parser()
    assert harness.guest_timeout(p.parse_args([]), None) == harness.TIMEOUT
    assert harness.guest_timeout(p.parse_args([]), "debug") == harness.DEBUG_TIMEOUT > harness.TIMEOUT
    assert harness.guest_timeout(p.parse_args(["--timeout", "90"]), "debug") == 90


def test_a_failed_debug_build_is_a_failed_build_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(preflight, "check_host", lambda **_: [])

    def fail(*_: object) -> None:
        raise debug_kernel.BuildError("the kernel build failed; full log: /x/build.log")

    monkeypatch.setattr(debug_kernel, "ensure_built", fail)
    args = harness.build_parser().parse_args(["--kernel", "debug", "--no-install"])
    outcome = harness.run_kernel(args, "debug", None, tmp_path, harness.Clock(quiet=True))
    assert (outcome.rc, outcome.build, outcome.release) == (2, matrix.BUILD_FAILED, "debug")
    assert "debug kernel: the kernel build failed; full log: /x/build.log" in capsys.readouterr().err


JUNIT_PASS = '<testsuite><testcase classname="tests.kernel.test_kill" name="test_kill"/></testsuite>'
KASAN_LOG = """\
[   40.100000] vnpu 0000:00:04.0: job 7 done
[   41.000000] ==================================================================
[   41.000001] BUG: KASAN: slab-use-after-free in vnpu_job_free+0x2c/0x90 [vnpu]
[   41.000002] Read of size 8 at addr ffff888004a1c010 by task kworker/0:2/77
[   41.000003] Call Trace:
[   41.000004]  vnpu_job_free+0x2c/0x90 [vnpu]
[   41.000005] ==================================================================
[   42.000000] vnpu 0000:00:04.0: job 8 done
[   50.000000] kmemleak: 1 new suspected memory leaks (see /sys/kernel/debug/kmemleak)
"""
KMEMLEAK = """\
unreferenced object 0xffff888005e3a000 (size 256):
  comm "python3", pid 311, jiffies 4294901234
  backtrace (crc 5d3e0f1a):
    vnpu_bo_create+0x4d/0x1a0 [vnpu]
"""


def _results(path: Path, dmesg: str, kmemleak: str = "") -> Path:
    path.mkdir(exist_ok=True)
    (path / "junit.xml").write_text(JUNIT_PASS)
    (path / "dmesg.txt").write_text(dmesg)
    if kmemleak:
        (path / "kmemleak.txt").write_text(kmemleak)
    return path


def test_a_kernel_report_fails_the_run_and_is_quoted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _results(tmp_path, KASAN_LOG, KMEMLEAK)
    assert harness.report(out, 0, harness.Clock(quiet=True)) == 1
    printed = capsys.readouterr().out
    assert "--- KASAN (dmesg line 3) ---" in printed
    assert "Read of size 8 at addr ffff888004a1c010" in printed and "job 8 done" not in printed
    assert "--- kmemleak (dmesg line 9) ---" in printed and "vnpu_bo_create+0x4d/0x1a0" in printed
    assert "1 passed, 0 failed" in printed  # the tests passed; the kernel's reports fail the run


def test_a_clean_log_passes(tmp_path: Path) -> None:
    out = _results(tmp_path, KASAN_LOG.splitlines()[0] + "\n")
    assert harness.report(out, 0, harness.Clock(quiet=True)) == 0


def test_a_warning_inside_a_debugobjects_report_is_that_report() -> None:
    log = """\
[    5.0] ------------[ cut here ]------------
[    5.1] ODEBUG: free active (active state 0) object: 000000001234 object type: timer_list hint: x
[    5.2] WARNING: CPU: 0 PID: 1 at lib/debugobjects.c:514 debug_print_object+0x1/0x2
[    6.0] list_del corruption. prev->next should be ffff8880, but was dead000000000100
[    6.1] WARNING: CPU: 1 PID: 2 at lib/list_debug.c:62 __list_del_entry_valid_or_report+0x1/0x2
[    9.0] WARNING: CPU: 1 PID: 3 at drivers/accel/vnpu/vnpu_job.c:1 vnpu_run+0x1/0x2 [vnpu]
"""
    assert matrix.count_splats(log) == {"debugobjects": 1, "list": 1, "WARN": 1}


def test_a_second_run_waits_for_the_first_build(stand_in: debug_kernel.DebugKernel) -> None:
    lock = debug_kernel.cache_root() / f"{stand_in.name}.lock"
    lock.parent.mkdir(parents=True)
    said: list[tuple[str, str]] = []
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # the "first run"
        t = threading.Thread(
            target=debug_kernel.ensure_built, args=(lambda p, m: said.append((p, m)), stand_in)
        )
        t.start()
        deadline = time.monotonic() + 10
        while not said and time.monotonic() < deadline:
            time.sleep(0.01)
        assert said and "waiting" in said[0][1] and not stand_in.is_built()
        fcntl.flock(held, fcntl.LOCK_UN)
    t.join(timeout=30)
    assert stand_in.is_built()


def test_a_warn_is_quoted_with_the_message_before_it() -> None:
    log = """\
[  876.6] vnpu 0000:00:0b.0: [drm] not a vnpu NPU: BAR2 magic 0xf0e1d2c3
[  883.7] ------------[ cut here ]------------
[  883.8] DMA-API: pci 0000:00:0a.0: device driver has pending DMA allocations while released from device
[  883.9] WARNING: CPU: 0 PID: 263 at kernel/dma/debug.c:862 dma_debug_device_change+0x273/0x3d0
[  884.0] ---[ end trace 0000000000000000 ]---
"""
    quoted = matrix.quote_splats(log).splitlines()
    assert quoted[0] == "--- WARN (dmesg line 4) ---"
    assert "pending DMA allocations" in quoted[2] and "not a vnpu NPU" not in "\n".join(quoted)
    assert quoted[-1].endswith("---[ end trace 0000000000000000 ]---")


def test_a_checking_kernel_loads_vnpu_with_a_longer_job_timeout(tmp_path: Path, monkeypatch) -> None:
    from qemu_tests import guest_run

    monkeypatch.setattr(guest_run, "LOCKDEP", tmp_path / "lockdep")
    monkeypatch.setattr(guest_run, "KMEMLEAK", tmp_path / "kmemleak")
    assert guest_run.module_params() == []
    (tmp_path / "lockdep").write_text("")
    (timeout,) = guest_run.module_params()
    # Longer than the default the module states, and in a form insmod takes.
    name, value = timeout.split("=")
    assert name == "timeout_ms" and int(value) > 5000
    assert guest_run.checking_kernel() and guest_run.CHECKING_KERNEL_TIMEOUT_SCALE > 1
