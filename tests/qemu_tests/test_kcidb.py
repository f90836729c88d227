"""--kcidb FILE: the run as KCIDB I/O JSON, validated with the kcidb-io package's own schema.

The results directories are fakes with what a run leaves (JUnit files, dmesg,
the console, boot.json); the checkout is this repository or a git repository
made in the test.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kcidb_io import schema

from qemu_tests import harness, kcidb, matrix

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests.kernel.test_hang" name="test_hang_times_out" time="1.25"/>
<testcase classname="tests.conformance.test_uapi" name="test_bo_create[kernel]" time="0.5"/>
<testcase classname="tests.conformance.test_uapi" name="test_sizes[kernel-4096.5]" time="0.1">
  <failure message="assert 1 == 2">AssertionError: assert 1 == 2</failure></testcase>
<testcase classname="tests.kernel.test_large_bo.TestMaps" name="test_16m" time="2">
  <skipped message="no swiotlb"/></testcase>
<testcase classname="tests.kernel.test_cli" name="test_info" time="0.3"><error message="boom"/></testcase>
</testsuite></testsuites>
"""
ISOLATED = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="1">
<testcase classname="tests.kernel.test_lifecycle" name="test_reload" time="9.5"/>
</testsuite></testsuites>
"""
SPLAT = """[    1.000000] Linux version 6.12.117+deb12-amd64
[   40.000000] ------------[ cut here ]------------
[   40.000001] WARNING: CPU: 0 PID: 263 at drivers/accel/vnpu/vnpu_job.c:100 vnpu_job_run+0x10/0x20 [vnpu]
[   40.000002] Call Trace:
[   40.000003]  <TASK>
[   40.000004] ---[ end trace 0000000000000000 ]---
"""


def results(tmp_path: Path, name: str = "run", splat: bool = True) -> Path:
    out = tmp_path / name
    out.mkdir()
    (out / "junit.xml").write_text(JUNIT)
    (out / "junit-isolated.xml").write_text(ISOLATED)
    (out / "dmesg.txt").write_text(SPLAT if splat else SPLAT.splitlines()[0] + "\n")
    (out / "cmdline.txt").write_text("console=ttyS0 swiotlb=65536,force\n")
    (out / "console.log").write_text("booting\n[guest    12.5s] NPU PCI device at 0000:00:0a.0\n")
    (out / "boot.json").write_text(json.dumps({"cmdline": "console=ttyS0 swiotlb=65536,force"}))
    return out


def record(outdir: Path, **kw: object) -> kcidb.Run:
    start = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)
    run = kcidb.Run(
        outdir,
        start=start,
        spec=None,
        release="6.12.117+deb12-amd64",
        image="/boot/vmlinuz-6.12.117+deb12-amd64",
        kernel_build="/lib/modules/6.12.117+deb12-amd64/build",
        compiler="x86_64-linux-gnu-gcc-12 (Debian 12.2.0-14+deb12u1) 12.2.0",
        build_status=matrix.BUILD_OK,
        build_command="make -C build/kmod-6.12.117+deb12-amd64 KDIR=... VNPU_DEBUG=1",
        build_start=start,
        build_seconds=4.2,
        module="build/kmod-6.12.117+deb12-amd64/vnpu.ko",
        accel="tcg",
        accel_reason="auto: KVM cannot run a guest here",
        qemu="QEMU emulator version 7.2.22",
        cpus=2,
        memory="1G",
        npu_cores=2,
        kernel_args=["swiotlb=65536,force"],
        boot_start=start + timedelta(seconds=5),
        guest_seconds=80.0,
        guest_rc=1,
    )
    for k, v in kw.items():
        setattr(run, k, v)
    return run


def validate(data: dict) -> None:
    """What a KCIDB submitter checks: the newest schema the package knows, and v5.0 exactly (the
    version the file declares)."""
    schema.LATEST.validate(data)
    schema.V5_0.validate_exactly(data)
    assert schema.LATEST.is_compatible(data)


def test_a_run_is_valid_kcidb_with_the_ktap_cases_as_tests(tmp_path: Path) -> None:
    run = record(results(tmp_path))
    data = kcidb.write(tmp_path / "kcidb.json", harness.REPO, [run])
    validate(json.loads((tmp_path / "kcidb.json").read_text()))
    assert data["version"] == {"major": 5, "minor": 0}
    (checkout,) = data["checkouts"]
    (build,) = data["builds"]
    assert build["checkout_id"] == checkout["id"] and build["id"].startswith("vnpu:")
    assert build["status"] == "PASS" and build["config_name"] == "6.12.117+deb12-amd64"
    assert build["compiler"].startswith("x86_64-linux-gnu-gcc-12") and build["duration"] == 4.2
    assert build["misc"]["kernel"]["args"] == ["swiotlb=65536,force"]
    assert build["misc"]["kernel"]["cmdline"] == "console=ttyS0 swiotlb=65536,force"
    tests = {t["path"]: t for t in data["tests"]}
    assert all(t["build_id"] == build["id"] for t in tests.values())
    assert len({t["id"] for t in data["tests"]}) == len(data["tests"])
    assert tests["boot"]["status"] == "PASS" and tests["boot"]["duration"] == 12.5
    assert tests["vnpu.tests.kernel.test_hang.test_hang_times_out"]["status"] == "PASS"
    assert tests["vnpu.tests.kernel.test_hang.test_hang_times_out"]["duration"] == 1.25
    # Parameters are a level of their own; characters a path cannot hold become "_".
    assert tests["vnpu.tests.conformance.test_uapi.test_bo_create.kernel"]["status"] == "PASS"
    failed = tests["vnpu.tests.conformance.test_uapi.test_sizes.kernel-4096_5"]
    assert failed["status"] == "FAIL" and "assert 1 == 2" in failed["log_excerpt"]
    assert failed["misc"]["ktap_suite"] == "tests.conformance.test_uapi"
    assert failed["misc"]["ktap_case"] == "test_sizes[kernel-4096.5]"
    assert tests["vnpu.tests.kernel.test_large_bo.TestMaps.test_16m"]["status"] == "SKIP"
    assert tests["vnpu.tests.kernel.test_cli.test_info"]["status"] == "ERROR"
    assert tests["vnpu.tests.kernel.test_lifecycle.test_reload"]["misc"]["junit"] == "junit-isolated.xml"
    # The kernel log's report fails a test of its own, quoted.
    dmesg = tests[kcidb.DMESG_PATH]
    assert dmesg["status"] == "FAIL" and "WARNING: CPU: 0 PID: 263" in dmesg["log_excerpt"]
    assert dmesg["misc"]["reports"] == {"WARN": 1}
    # The machine and the device.
    env = tests["boot"]["environment"]
    assert "TCG" in env["comment"] and "1af4:1110" in env["comment"]
    assert env["misc"]["device"]["npu_cores"] == 2 and env["misc"]["accel"] == "tcg"


def test_the_ktap_paths_match_the_ktap_names() -> None:
    assert kcidb.test_path("tests.kernel.test_hang", "test_x") == "vnpu.tests.kernel.test_hang.test_x"
    assert kcidb.test_path("tests.a", "C.test_y[shim-1.5/x]") == "vnpu.tests.a.C.test_y.shim-1_5_x"
    assert kcidb.test_path("tests.a", "test_z[]") == "vnpu.tests.a.test_z._"
    path_re = schema.LATEST.json["$defs"]["path"]["pattern"]
    import re

    assert re.fullmatch(path_re, kcidb.test_path("tests.a", "test ö[a b]"))


def test_a_clean_kernel_log_passes_and_exec_runs_are_one_test(tmp_path: Path) -> None:
    out = results(tmp_path, splat=False)
    for junit in out.glob("junit*.xml"):
        junit.unlink()
    data = kcidb.document(harness.REPO, [record(out, exec_cmd="accel info", guest_rc=0)])
    validate(data)
    assert [(t["path"], t["status"]) for t in data["tests"]] == [
        ("boot", "PASS"),
        (kcidb.DMESG_PATH, "PASS"),
        (kcidb.EXEC_PATH, "PASS"),
    ]


def test_a_failed_build_has_no_tests_and_a_guest_that_never_ran_fails_its_boot(tmp_path: Path) -> None:
    failed = record(tmp_path, build_status=matrix.BUILD_FAILED, guest_rc=None)
    missing = record(tmp_path, build_status=matrix.BUILD_MISSING, guest_rc=None, release="6.12.1+deb12-amd64")
    (tmp_path / "never").mkdir()
    no_boot = record(tmp_path / "never", guest_rc=matrix.EXIT_TIMEOUT, release="6.12.2+deb12-amd64")
    prebuilt = record(tmp_path / "never", build_status=matrix.BUILD_SKIPPED, guest_rc=None, release="x")
    data = kcidb.document(harness.REPO, [failed, missing, no_boot, prebuilt])
    validate(data)
    assert [b["status"] for b in data["builds"][:3]] == ["FAIL", "MISS", "PASS"]
    assert "status" not in data["builds"][3] and data["builds"][3]["misc"]["prebuilt"]
    assert len({b["id"] for b in data["builds"]}) == 4
    (boot,) = data["tests"]
    assert boot["path"] == "boot" and boot["status"] == "FAIL" and boot["build_id"] == data["builds"][2]["id"]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_the_checkout_is_the_commit_and_says_when_the_tree_had_changes(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "f").write_text("1\n")
    _git(repo, "add", "f")
    _git(
        repo,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.org",
        "commit",
        "-q",
        "-m",
        "first line\n\nbody",
    )
    _git(repo, "remote", "add", "origin", "git@github.com:example/vnpu.git")
    when = datetime(2026, 11, 24, tzinfo=UTC)
    clean = kcidb.checkout(repo, when)
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert clean["id"] == f"vnpu:{commit.stdout.strip()}" and clean["patchset_hash"] == ""
    assert clean["git_repository_url"] == "https://github.com/example/vnpu.git"
    assert clean["git_repository_branch"] == "main" and clean["comment"] == "first line"
    (repo / "f").write_text("2\n")
    dirty = kcidb.checkout(repo, when)
    assert dirty["id"].startswith(clean["id"] + "+dirty-") and "patchset_hash" not in dirty
    assert dirty["misc"] == {"dirty": True} and dirty["git_commit_name"].endswith("-dirty")
    for co in (clean, dirty, kcidb.checkout(tmp_path, when)):  # tmp_path: not a checkout
        validate({"version": kcidb.VERSION, "checkouts": [co]})


@pytest.mark.parametrize(
    ("remote", "url"),
    [
        ("https://github.com/o/r.git", "https://github.com/o/r.git"),
        ("git@github.com:o/r.git", "https://github.com/o/r.git"),
        ("ssh://git@gitlab.com/o/r", "https://gitlab.com/o/r"),
        ("/srv/git/r.git", None),
        ("", None),
    ],
)
def test_remotes_become_https_urls(remote: str, url: str | None) -> None:
    assert kcidb.https_url(remote) == url


def test_a_matrix_writes_one_checkout_and_a_build_per_kernel(tmp_path: Path, capsys) -> None:
    runs = [record(results(tmp_path, "a")), record(results(tmp_path, "b"), release="6.12.117+deb12-rt-amd64")]
    harness.write_kcidb(tmp_path / "k.json", runs, harness.Clock())
    data = json.loads((tmp_path / "k.json").read_text())
    validate(data)
    assert len(data["checkouts"]) == 1 and len(data["builds"]) == 2
    assert {t["build_id"] for t in data["tests"]} == {b["id"] for b in data["builds"]}
    assert "kcidb: " in capsys.readouterr().out


def test_the_option_is_parsed() -> None:
    args = harness.build_parser().parse_args(["--kcidb", "out/kcidb.json"])
    assert args.kcidb == Path("out/kcidb.json")
