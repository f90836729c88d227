"""The kernel matrix: splat counting, rows from results directories, the table, summary and exit code."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from qemu_tests import accel, harness, matrix, preflight

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.kernel.test_hang" name="test_timeout"/>
<testcase classname="tests.kernel.test_hang" name="test_reset"><failure message="boom">x</failure></testcase>
<testcase classname="tests.kernel.test_kill" name="test_kill"><skipped message="no debugfs"/></testcase>
<testcase classname="tests.conformance.test_bo" name="test_create"/>
</testsuite></testsuites>
"""

DMESG = """\
[    0.000000] Linux version 6.12.117+deb12-amd64
[    1.200000] vnpu 0000:00:04.0: firmware vnpu.fw loaded
[    2.000000] WARNING: CPU: 1 PID: 93 at drivers/accel/vnpu/vnpu_job.c:210 vnpu_job_run+0x1c/0x40 [vnpu]
[    2.000100] Call Trace:
[    3.000000] WARNING: possible circular locking dependency detected
[    4.000000] BUG: KASAN: slab-use-after-free in vnpu_gem_free+0x10/0x20 [vnpu]
[    5.000000] refcount_t: underflow; use-after-free.
[    6.000000] BUG: kernel NULL pointer dereference, address: 0000000000000008
[    6.000100] Oops: 0000 [#1] PREEMPT SMP NOPTI
[    7.000000] BUG: sleeping function called from invalid context at kernel/locking/spinlock_rt.c:48
[    8.000000] UBSAN: shift-out-of-bounds in drivers/accel/vnpu/vnpu_mmu.c:40:9
"""


def test_splats_are_counted_per_report_by_kind() -> None:
    assert matrix.count_splats(DMESG) == {
        "WARN": 1,
        "lockdep": 1,
        "KASAN": 1,
        "refcount": 1,
        "BUG": 2,
        "Oops": 1,
        "UBSAN": 1,
    }


def test_a_clean_boot_log_has_no_splats() -> None:
    clean = "\n".join(line for line in DMESG.splitlines()[:2]) + "\n[ 9.0] Call Trace: is not a report\n"
    assert matrix.count_splats(clean) == {}


def _results_dir(path: Path, junit: str = JUNIT, dmesg: str | None = DMESG) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "junit.xml").write_text(junit)
    if dmesg is not None:
        (path / "dmesg.txt").write_text(dmesg)
    return path


def test_collect_reads_junit_and_dmesg(tmp_path: Path) -> None:
    d = _results_dir(tmp_path / "k")
    (d / "junit-isolated.xml").write_text(
        '<testsuite><testcase classname="tests.kernel.test_lifecycle" name="test_reload"/></testsuite>'
    )
    r = matrix.collect("6.12.117+deb12-amd64", "6.12.117+deb12-amd64", matrix.BUILD_OK, 1, d, 75.4)
    assert (r.passed, r.failed, r.skipped) == (3, 1, 1)
    assert sum(r.splats.values()) == 8 and r.results == str(d)
    assert not r.ok


def test_collect_without_results_is_all_zero(tmp_path: Path) -> None:
    r = matrix.collect("/src/linux", "/src/linux", matrix.BUILD_MISSING, 3, tmp_path, 0.5)
    assert (r.passed, r.failed, r.skipped, r.splats) == (0, 0, 0, {})


def _row(kernel: str, **kw: object) -> matrix.KernelResult:
    fields: dict[str, object] = {"release": kernel, "build": matrix.BUILD_OK, "passed": 10, "seconds": 61}
    fields.update(kw)
    return matrix.KernelResult(kernel, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("row", "ok"),
    [
        ({}, True),
        ({"failed": 1, "rc": 1}, False),
        ({"splats": {"WARN": 1}}, False),  # tests passed, but the kernel log has a WARN: a failure
        ({"build": matrix.BUILD_FAILED, "rc": 2, "passed": 0}, False),
        ({"rc": 124}, False),  # the guest was killed at the timeout
        ({"build": matrix.BUILD_SKIPPED}, True),  # --no-build with a module built before
    ],
)
def test_a_kernel_is_ok_only_when_built_passed_and_clean(row: dict[str, object], ok: bool) -> None:
    assert _row("k", **row).ok is ok


def test_table_has_one_row_per_kernel_with_its_verdict() -> None:
    rows = [
        _row("6.12.107+deb12-amd64"),
        _row("6.12.117+deb12-rt-amd64", failed=2, rc=1, splats={"BUG": 1, "WARN": 2}, seconds=3725),
    ]
    lines = matrix.table(rows).splitlines()
    assert len(lines) == 4 and lines[0].startswith("| kernel")
    assert set(lines[1]) <= {"|", "-", " "}
    assert len({len(line) for line in lines}) == 1  # aligned columns
    cells = [c.strip() for c in lines[3].strip("|").split("|")]
    assert cells == [
        "6.12.117+deb12-rt-amd64",
        "ok",
        "10",
        "2",
        "0",
        "3 (BUG 1, WARN 2)",
        "62m05s",
        "FAIL (exit 1)",
    ]
    assert lines[2].rstrip("| ").endswith("ok") and "1m01s" in lines[2]
    (timed_out,) = matrix.table([_row("k", rc=matrix.EXIT_TIMEOUT)]).splitlines()[2:]
    assert timed_out.rstrip("| ").endswith("FAIL (timeout)")


def test_summary_is_json_with_each_verdict(tmp_path: Path) -> None:
    rows = [_row("a"), _row("b", build=matrix.BUILD_MISSING, rc=3, passed=0)]
    matrix.write_summary(tmp_path / "summary.json", rows)
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["ok"] is False
    assert [(k["kernel"], k["ok"], k["build"]) for k in data["kernels"]] == [
        ("a", True, "ok"),
        ("b", False, "missing"),
    ]


@pytest.mark.parametrize(
    ("rows", "code"),
    [
        ([_row("a"), _row("b")], 0),
        ([_row("a"), _row("b", failed=1, rc=1)], 1),
        ([_row("a"), _row("b", build=matrix.BUILD_MISSING, rc=3)], 3),
        ([_row("a", build=matrix.BUILD_MISSING, rc=3), _row("b", splats={"Oops": 1})], 1),
    ],
)
def test_exit_code_is_non_zero_when_any_kernel_fails(rows: list[matrix.KernelResult], code: int) -> None:
    assert matrix.exit_code(rows, preflight.EXIT_MISSING) == code


def test_subdir_names_are_unique_and_path_safe() -> None:
    assert matrix.subdir_name("6.12.117+deb12-rt-amd64", []) == "6.12.117+deb12-rt-amd64"
    assert matrix.subdir_name("6.13.0-rc1 custom/x", []) == "6.13.0-rc1_custom_x"
    assert matrix.subdir_name("6.13.0", ["6.13.0", "6.13.0-2"]) == "6.13.0-3"


def test_run_matrix_runs_each_kernel_in_its_own_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The glue around run_kernel: one subdirectory per kernel, the table, summary.json, the exit code."""
    ran: list[tuple[str | None, Path]] = []

    def fake_run_kernel(
        args: argparse.Namespace,
        spec: str | None,
        kdir: Path | None,
        outdir: Path,
        clock: harness.Clock,
        record: object = None,
    ) -> harness.Outcome:
        ran.append((spec, outdir))
        if spec == "6.12.111+deb12-amd64":  # not installed
            return harness.Outcome(preflight.EXIT_MISSING, matrix.BUILD_MISSING, spec)
        _results_dir(outdir, dmesg="[ 0.1] Linux version\n")
        return harness.Outcome(1, matrix.BUILD_OK, spec or "")

    monkeypatch.setattr(harness, "run_kernel", fake_run_kernel)
    kernels = ["6.12.107+deb12-amd64", "6.12.111+deb12-amd64", "6.12.117+deb12-rt-amd64"]
    rc = harness.main(["--matrix", ",".join(kernels), "--out", str(tmp_path), "--no-install"])
    assert rc == 1
    assert [s for s, _ in ran] == kernels
    assert [d for _, d in ran] == [tmp_path / k for k in kernels]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [(k["kernel"], k["build"], k["failed"]) for k in summary["kernels"]] == [
        (kernels[0], "ok", 1),
        (kernels[1], "missing", 0),
        (kernels[2], "ok", 1),
    ]
    out = capsys.readouterr().out
    assert out.count("FAIL (exit") == 3 and "| kernel" in out


def test_check_over_a_matrix_checks_every_kernel(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    checked: list[str | None] = []

    def fake_check_host(**kw: object) -> list[preflight.Requirement]:
        checked.append(kw["kernel"])  # type: ignore[arg-type]
        return [
            preflight.Requirement("kernel image", kw["kernel"] != "6.12.111+deb12-amd64", "x", "apt-get x")
        ]

    monkeypatch.setattr(preflight, "check_host", fake_check_host)
    assert harness.main(["--check", "--matrix", "6.12.107+deb12-amd64,6.12.111+deb12-amd64"]) == 3
    assert checked == ["6.12.107+deb12-amd64", "6.12.111+deb12-amd64"]
    assert "== 6.12.111+deb12-amd64" in capsys.readouterr().out


SWIOTLB = "swiotlb=65536,force"
K117 = "6.12.117+deb12-amd64"


@pytest.mark.parametrize(
    ("text", "entries"),
    [
        (K117, [(K117, ())]),
        (f"{K117},{K117}[{SWIOTLB}]", [(K117, ()), (K117, (SWIOTLB,))]),
        (f" {K117}[{SWIOTLB} nokaslr] , ./linux,", [(K117, (SWIOTLB, "nokaslr")), ("./linux", ())]),
        (f"debug['dyndbg=module vnpu +p'],{K117}", [("debug", ("dyndbg=module vnpu +p",)), (K117, ())]),
    ],
)
def test_matrix_entries_are_kernels_with_arguments_in_brackets(
    text: str, entries: list[tuple[str, tuple[str, ...]]]
) -> None:
    parsed = matrix.parse_entries(text)
    assert [(e.spec, e.kernel_args) for e in parsed] == entries
    # An entry's name is the entry as written: names read back as the same entries.
    assert matrix.parse_entries(",".join(e.name for e in parsed)) == parsed


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (f"{K117}:{SWIOTLB}", "kernel arguments go in brackets: SPEC[ARGS]"),
        (f"{K117},{K117}[{SWIOTLB}", "a '[' without its ']'"),
        (f"{K117}]", "a ']' without its '['"),
        (f"{K117}[]", "no kernel arguments in the brackets"),
        (f"{K117}[{SWIOTLB}]x", "SPEC or SPEC[KERNEL ARGS]"),
        (f"{K117}[a[b]]", "SPEC or SPEC[KERNEL ARGS]"),
        (f"{K117}[init=/bin/sh]", "virtme-ng sets init itself"),
        (f"[{SWIOTLB}]", "is neither a release"),
        (" , ", "name at least one kernel"),
    ],
)
def test_bad_matrix_entries_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError) as e:
        matrix.parse_entries(text)
    assert says in str(e.value)


def test_an_entry_with_arguments_gets_its_own_directory_name() -> None:
    entry = matrix.Entry(K117, (SWIOTLB,))
    assert entry.name == f"{K117}[{SWIOTLB}]"
    name = matrix.subdir_name(entry.subdir_base(K117), [K117])
    assert name == f"{K117}_swiotlb_65536_force"  # vng's --rwdir takes no "=" or "," in a path
    assert matrix.subdir_name(matrix.Entry(K117, ("a=b c",)).subdir_base(K117), []) == f"{K117}_a_b_c"


def test_run_matrix_runs_each_entry_with_its_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same kernel twice, plain and under swiotlb=force: two directories, two rows, each with its args;
    --append goes to every entry, before the entry's own."""
    ran: list[tuple[str | None, list[str], Path]] = []

    def fake_run_kernel(
        args: argparse.Namespace,
        spec: str | None,
        kdir: Path | None,
        outdir: Path,
        clock: harness.Clock,
        record: object = None,
    ) -> harness.Outcome:
        ran.append((spec, args.kernel_args, outdir))
        _results_dir(
            outdir, dmesg="[ 0.1] Linux version\n", junit='<testsuite><testcase name="t"/></testsuite>'
        )
        return harness.Outcome(0, matrix.BUILD_OK, spec or "")

    monkeypatch.setattr(harness, "run_kernel", fake_run_kernel)
    monkeypatch.setattr(
        preflight, "select_kernel", lambda override, **_: preflight.Kernel(override, Path(), Path())
    )
    argv = ["--matrix", f"{K117},{K117}[{SWIOTLB}]", "--append", "nokaslr", "--out", str(tmp_path)]
    assert harness.main([*argv, "--no-install"]) == 0
    assert ran == [
        (K117, ["nokaslr"], tmp_path / f"{K117}_nokaslr"),
        (K117, ["nokaslr", SWIOTLB], tmp_path / f"{K117}_nokaslr_swiotlb_65536_force"),
    ]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [(k["kernel"], k["kernel_args"], k["ok"]) for k in summary["kernels"]] == [
        (f"{K117}[nokaslr]", ["nokaslr"], True),
        (f"{K117}[nokaslr {SWIOTLB}]", ["nokaslr", SWIOTLB], True),
    ]
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(f"| {K117}")]
    assert [row.split("|")[1].strip() for row in rows] == [f"{K117}[nokaslr]", f"{K117}[nokaslr {SWIOTLB}]"]


def test_check_over_a_matrix_names_each_entrys_arguments(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(preflight, "check_host", lambda **_: [])
    monkeypatch.setattr(accel, "choose", lambda mode, image, **_: accel.Choice("tcg", "--accel tcg"))
    assert harness.main(["--check", "--matrix", f"{K117},{K117}[{SWIOTLB}]"]) == 0
    out = capsys.readouterr().out.splitlines()
    kvm = "preflight: ok       kvm: the guest runs on TCG (--accel tcg)"
    assert out == [
        f"== {K117}",
        kvm,
        f"== {K117}[{SWIOTLB}]",
        kvm,
        f"preflight: ok       kernel arguments: {SWIOTLB} (vng --append)",
    ]
