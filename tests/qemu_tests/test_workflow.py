"""The GitHub Actions kernel matrix (.github/workflows/kernel-matrix.yml), checked without GitHub.

Every job's commands, with its kernel filled in, must be ones the real
argument parsers (the harness's and the preflight's) accept, and every kernel
a Debian kernel spec the preflight knows how to install.
"""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from qemu_tests import harness, preflight

WORKFLOW = harness.REPO / ".github" / "workflows" / "kernel-matrix.yml"
DEBIAN_KERNEL = re.compile(r"^6\.12\.\d+\+deb12-(rt-)?amd64$")  # generic or PREEMPT_RT, never -cloud


def _jobs() -> list[tuple[str, dict]]:
    data = yaml.safe_load(WORKFLOW.read_text())
    # YAML 1.1 reads the bare key `on` as True.
    assert data.get("on", data.get(True)) is not None, "the workflow has no triggers"
    return list(data["jobs"].items())


def _runs(job: dict, kernel: str) -> list[str]:
    """The job's shell steps with ${{ matrix.kernel }} filled in."""
    runs = []
    for step in job["steps"]:
        if "run" in step:
            text = step["run"].replace("${{ matrix.kernel }}", kernel)
            assert "${{" not in text, f"unexpanded expression in {text!r}"
            runs.append(text)
    return runs


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


def _matrix_jobs() -> list[tuple[str, dict, str]]:
    return [(name, job, k) for name, job in _jobs() for k in job["strategy"]["matrix"]["kernel"]]


def test_the_workflow_has_one_job_per_kernel_and_covers_rt() -> None:
    kernels = [k for _, _, k in _matrix_jobs()]
    assert len(kernels) >= 2 and len(set(kernels)) == len(kernels)
    assert any("-rt-" in k for k in kernels)


@pytest.mark.parametrize(
    ("name", "job", "kernel"), _matrix_jobs(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_job_runs_the_harness_on_its_kernel(name: str, job: dict, kernel: str) -> None:
    assert DEBIAN_KERNEL.match(kernel), f"{kernel}: not a generic or PREEMPT_RT Debian 6.12 kernel"
    assert preflight.kernel_from_spec(kernel).debian
    runs = _runs(job, kernel)
    (argv,) = _module_argv(runs, "qemu_tests")
    args = harness.build_parser().parse_args(argv)  # the harness's own parser: exits on a bad command
    assert args.kernel == kernel and args.matrix is None and not args.check and args.exec_cmd is None
    assert args.out is not None and not args.out.is_absolute()
    # The artifacts are the files that run writes.
    (upload,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload.get("if") == "always()"  # failed runs are the ones to read
    paths = upload["with"]["path"].split()
    for name_ in ("results.ktap", "junit*.xml", "dmesg.txt"):
        assert str(args.out / name_) in paths
    assert kernel in job["name"] or "matrix.kernel" in job["name"]


@pytest.mark.parametrize(
    ("name", "job", "kernel"), _matrix_jobs(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_job_installs_its_kernel_from_the_preflight_list(
    name: str, job: dict, kernel: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (argv,) = _module_argv(_runs(job, kernel), "qemu_tests.preflight")
    assert preflight.main(argv) == 0  # the preflight's own parser, and the list it prints
    packages = capsys.readouterr().out.split()
    assert set(preflight.kernel_packages(kernel)) <= set(packages)
    assert set(preflight.BASE_PACKAGES) <= set(packages)


def test_ci_keeps_one_default_kernel() -> None:
    """run.sh test runs the harness once, on the default kernel; the matrix is the workflow's."""
    run_sh = (harness.REPO / "run.sh").read_text()
    assert "python -m qemu_tests\n" in run_sh and "--matrix" not in run_sh
