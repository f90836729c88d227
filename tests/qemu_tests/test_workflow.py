"""The GitHub Actions kernel matrix (.github/workflows/kernel-matrix.yml), checked without GitHub.

Every job's commands, with its matrix values filled in, must be ones the real
argument parsers (the harness's and the preflight's) accept, and every kernel
a Debian kernel spec the preflight knows how to install. The matrix is
expanded as GitHub does (the axes' product, then ``include``).
"""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess

import pytest
import yaml

from qemu_tests import harness, preflight, sid_kernel

WORKFLOW = harness.REPO / ".github" / "workflows" / "kernel-matrix.yml"
DEBIAN_KERNEL = re.compile(r"^6\.12\.\d+\+deb12-(rt-)?amd64$")  # generic or PREEMPT_RT, never -cloud


def _jobs() -> list[tuple[str, dict]]:
    data = yaml.safe_load(WORKFLOW.read_text())
    # YAML 1.1 reads the bare key `on` as True.
    assert data.get("on", data.get(True)) is not None, "the workflow has no triggers"
    return list(data["jobs"].items())


def expand_matrix(matrix: dict) -> list[dict[str, str]]:
    """The jobs of a strategy matrix, as GitHub makes them: the product of the axes, then each
    ``include`` object is added to every combination whose axis values it does not change (its
    other keys added to it), or, when it fits none, becomes a combination of its own."""
    axes = {k: v for k, v in matrix.items() if k not in ("include", "exclude")}
    base = [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]
    assert not matrix.get("exclude"), "exclude is not modelled here"
    combos = [dict(c) for c in base]
    extra: list[dict[str, str]] = []
    for obj in matrix.get("include", []):
        fits = [i for i, c in enumerate(base) if all(c[k] == v for k, v in obj.items() if k in c)]
        for i in fits:
            combos[i].update(obj)
        if not fits:
            extra.append(dict(obj))
    return combos + extra


def _expand(text: str, combo: dict[str, str]) -> str:
    """``text`` with ${{ matrix.KEY }} filled in from ``combo`` (an undefined key is empty)."""
    text = re.sub(r"\$\{\{\s*matrix\.([\w-]+)\s*\}\}", lambda m: str(combo.get(m[1], "")), text)
    assert "${{" not in text, f"unexpanded expression in {text!r}"
    return text


def _runs(job: dict, combo: dict[str, str]) -> list[str]:
    """The job's shell steps with its matrix values filled in."""
    return [_expand(step["run"], combo) for step in job["steps"] if "run" in step]


def _module_argv(runs: list[str], module: str) -> list[list[str]]:
    """The arguments after ``-m MODULE`` of every command in ``runs``, also inside $(...)."""
    found = []
    for text in runs:
        outer = re.sub(r"\$\([^)]*\)", "", text)
        for line in [outer, *re.findall(r"\$\(([^)]*)\)", text)]:
            words = shlex.split(line)
            for i in range(len(words) - 1):
                if words[i] == "-m" and words[i + 1] == module:
                    found.append(words[i + 2 :])
    return found


def _matrix_jobs() -> list[tuple[str, dict, dict[str, str]]]:
    return [
        (name, job, c)
        for name, job in _jobs()
        if "strategy" in job
        for c in expand_matrix(job["strategy"]["matrix"])
    ]


def _id(value: object) -> str:
    if isinstance(value, dict):
        return "-".join(str(value[k]) for k in ("kernel", "variant") if k in value)
    return str(value)


def test_the_workflow_has_one_job_per_kernel_and_covers_rt() -> None:
    combos = [c for _, _, c in _matrix_jobs()]
    plain = [c["kernel"] for c in combos if c.get("variant") == "default"]
    assert len(plain) >= 2 and len(set(plain)) == len(plain)
    assert any("-rt-" in k for k in plain)
    assert sid_kernel.CURRENT_SERIES in plain  # the current kernel, from Debian unstable
    # Job and artifact names tell every job apart (upload-artifact refuses a name twice in a run).
    names = [_expand(job["name"], c) for _, job, c in _matrix_jobs()]
    assert len(set(names)) == len(names)
    artifacts = [
        _expand(s["with"]["name"], c)
        for _, job, c in _matrix_jobs()
        for s in job["steps"]
        if s.get("uses", "").startswith("actions/upload-artifact@")
    ]
    assert len(set(artifacts)) == len(artifacts) == len(combos)


def test_a_swiotlb_force_job_runs_the_driver_facing_suites() -> None:
    """Every streaming DMA mapping bounced: a job of its own beside the plain run of the same kernel."""
    jobs = []
    for _, job, combo in _matrix_jobs():
        (argv,) = _module_argv(_runs(job, combo), "qemu_tests")
        args = harness.build_parser().parse_args(argv)
        jobs.append((combo, args))
    (forced,) = [(c, a) for c, a in jobs if any(w.startswith("swiotlb=") for w in a.kernel_args)]
    combo, args = forced
    assert "force" in args.kernel_args[0].split("=", 1)[1].split(",")
    assert args.suites == ["tests/kernel", "tests/conformance"]
    # The same kernel also runs plain, with the whole default suite.
    assert any(
        a.kernel == args.kernel and not a.kernel_args and a.suites == list(harness.DEFAULT_SUITES)
        for c, a in jobs
        if c is not combo
    )


@pytest.mark.parametrize(("name", "job", "combo"), _matrix_jobs(), ids=_id)
def test_every_job_runs_the_harness_on_its_kernel(name: str, job: dict, combo: dict[str, str]) -> None:
    kernel = combo["kernel"]
    if sid_kernel.is_series(kernel):
        assert kernel == sid_kernel.CURRENT_SERIES, f"{kernel}: not the series the project tests"
    else:
        assert DEBIAN_KERNEL.match(kernel), f"{kernel}: not a generic or PREEMPT_RT Debian 6.12 kernel"
        assert preflight.kernel_from_spec(kernel).debian
    runs = _runs(job, combo)
    (argv,) = _module_argv(runs, "qemu_tests")
    args = harness.build_parser().parse_args(argv)  # the harness's own parser: exits on a bad command
    assert args.kernel == kernel and args.matrix is None and not args.check and args.exec_cmd is None
    assert args.out is not None and not args.out.is_absolute()
    # The artifacts are the files that run writes.
    (upload,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload.get("if") == "always()"  # failed runs are the ones to read
    paths = upload["with"]["path"].split()
    for name_ in ("results.ktap", "junit*.xml", "dmesg.txt", harness.BOOT_INFO):
        assert str(args.out / name_) in paths
    # The run as KCIDB I/O JSON, for a KernelCI origin to submit.
    assert args.kcidb is not None and str(args.kcidb) in paths
    assert kernel in _expand(job["name"], combo)


@pytest.mark.parametrize(("name", "job", "combo"), _matrix_jobs(), ids=_id)
def test_every_job_installs_its_kernel_from_the_preflight_list(
    name: str, job: dict, combo: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    kernel = combo["kernel"]
    (argv,) = _module_argv(_runs(job, combo), "qemu_tests.preflight")
    assert preflight.main(argv) == 0  # the preflight's own parser, and the list it prints
    packages = capsys.readouterr().out.split()
    if sid_kernel.is_series(kernel):  # nothing from sid: what fetching and preparing it takes
        assert {p for _, p in sid_kernel.PREPARE_PACKAGES} <= set(packages)
    else:
        assert set(preflight.kernel_packages(kernel)) <= set(packages)
    assert set(preflight.BASE_PACKAGES) <= set(packages)


def test_a_debug_kernel_job_runs_fail_nth(capsys: pytest.CaptureFixture[str]) -> None:
    """The one job off the matrix: the debug kernel, its build cached, the fail-nth suite on it."""
    (job,) = [job for _, job in _jobs() if "strategy" not in job]
    runs = _runs(job, {})
    (argv,) = _module_argv(runs, "qemu_tests")
    args = harness.build_parser().parse_args(argv)
    assert args.kernel == "debug" and args.suites == ["tests/fuzz/test_fail_nth.py"]
    assert args.out is not None and not args.out.is_absolute()
    # Its packages are the preflight's list for the debug kernel (the build's tools and the source).
    (pre,) = _module_argv(runs, "qemu_tests.preflight")
    assert preflight.main(pre) == 0
    packages = capsys.readouterr().out.split()
    assert {"linux-source-6.12", "flex", "bison", *preflight.BASE_PACKAGES} <= set(packages)
    # The built kernel is cached where the harness looks for it, keyed on the fragment.
    (cache,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/cache@")]
    assert cache["with"]["path"] == f"{job['env']['VNPU_CACHE_DIR']}/kernels"
    assert "qemu_tests/debug_kernel.config" in cache["with"]["key"]
    (upload,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload.get("if") == "always()"
    paths = upload["with"]["path"].split()
    for name_ in ("results.ktap", "junit*.xml", "dmesg.txt", "kmemleak.txt", "fail_nth.json"):
        assert str(args.out / name_) in paths


def test_ci_runs_the_default_and_the_current_kernel() -> None:
    """run.sh test runs the harness on the default kernel and the driver-facing suites on the current
    one (sid's series), each whatever the other's outcome; the matrix is the workflow's."""
    run_sh = (harness.REPO / "run.sh").read_text()
    assert "--matrix" not in run_sh
    assert "python -m qemu_tests || rc=$?\n" in run_sh
    current = (
        f"python -m qemu_tests --kernel {sid_kernel.CURRENT_SERIES} --suites tests/kernel tests/conformance"
    )
    assert f"{current} || rc=$?\n" in run_sh  # the driver-facing suites, as the swiotlb job runs them
    assert 'exit "$rc"' in run_sh


def test_the_matrix_expands_as_github_does() -> None:
    """include adds keys to the combinations it fits, and is a job of its own where it fits none."""
    matrix = {
        "kernel": ["a", "b"],
        "variant": ["default"],
        "include": [{"kernel": "b", "note": "x"}, {"kernel": "b", "variant": "forced", "args": "--y"}],
    }
    assert expand_matrix(matrix) == [
        {"kernel": "a", "variant": "default"},
        {"kernel": "b", "variant": "default", "note": "x"},
        {"kernel": "b", "variant": "forced", "args": "--y"},
    ]


PIP_OUTPUT = """\
Obtaining file:///work/main
  Installing build dependencies: started
Collecting numpy<2
  Downloading numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.whl (18.2 MB)
     ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 18.2/18.2 MB 40.1 MB/s eta 0:00:00
Requirement already satisfied: cffi in ./.venv/lib/python3.11/site-packages
Installing collected packages: numpy, vnpu
Successfully installed numpy-1.26.4 vnpu-0.1.0
ERROR: pip's dependency resolver does not currently take into account
  all the packages that are installed.
"""


def test_run_sh_shows_pips_progress_a_line_per_step() -> None:
    """The venv step is not a minute of silence: pip runs without -q through a filter that keeps a
    line per package and step, and every line from an error on."""
    run_sh = (harness.REPO / "run.sh").read_text()
    assert ".venv/bin/pip install -e '.[dev]' 2>&1 | pip_progress\n" in run_sh
    assert "pip install -q" not in run_sh
    function = re.search(r"^pip_progress\(\) \{\n.*?^\}\n", run_sh, re.S | re.M)
    assert function is not None
    r = subprocess.run(
        ["bash", "-c", function.group(0) + "pip_progress"], input=PIP_OUTPUT, capture_output=True, text=True
    )
    assert r.returncode == 0 and r.stdout.splitlines() == [
        "  pip: Obtaining file:///work/main",
        "  pip: Collecting numpy<2",
        "  pip:   Downloading numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.whl (18.2 MB)",
        "  pip: Installing collected packages: numpy, vnpu",
        "  pip: Successfully installed numpy-1.26.4 vnpu-0.1.0",
        "  pip: ERROR: pip's dependency resolver does not currently take into account",
        "  pip:   all the packages that are installed.",
    ]
