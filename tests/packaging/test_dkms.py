"""vnpu.ko's DKMS packaging, checked without dkms: the source tree ``python -m tools.dkms tree`` writes,
dkms.conf as dkms's bash reads it, the harness's ``--module``, and the kernel-CI workflow's DKMS step.

``python -m tools.dkms test`` (dkms add/build/install, then the guest) is the slow check:
docs/qemu_tests.md, "A DKMS-built module".
"""

from __future__ import annotations

import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from qemu_tests import harness
from tools import dkms

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "kernel-matrix.yml"


def _conf(tree: Path, release: str) -> dict[str, str]:
    """dkms.conf's directives as dkms's bash sees them for a kernel ``release``."""
    names = [
        "PACKAGE_NAME",
        "PACKAGE_VERSION",
        "BUILT_MODULE_NAME[0]",
        "BUILT_MODULE_LOCATION[0]",
        "DEST_MODULE_LOCATION[0]",
        "MAKE[0]",
        "CLEAN",
        "BUILD_EXCLUSIVE_KERNEL",
        "BUILD_EXCLUSIVE_CONFIG",
        "AUTOINSTALL",
    ]
    script = f"kernelver={release}; kernel_source_dir=/lib/modules/{release}/build; . ./dkms.conf; "
    script += " ".join(f'printf "%s\\n" "${{{n}}}";' for n in names)
    out = subprocess.run(["bash", "-c", script], cwd=tree, capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.split("\n"), strict=False))


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dkms.write_tree(tmp_path_factory.mktemp("dkms"))


def test_the_tree_is_the_module_its_headers_and_dkms_conf(tree: Path) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert tree.name == f"vnpu-{version}"
    conf = _conf(tree, "6.12.117+deb12-amd64")
    assert (conf["PACKAGE_NAME"], conf["PACKAGE_VERSION"]) == ("vnpu", version)
    module_dir = tree / conf["BUILT_MODULE_LOCATION[0]"]
    # Every object Kbuild links has its source; the uapi headers are where Kbuild's -I points.
    kbuild = (module_dir / "Kbuild").read_text()
    for obj in re.findall(r"\b(vnpu_\w+)\.o\b", kbuild):
        assert (module_dir / f"{obj}.c").is_file(), obj
    (include,) = re.findall(r"-I\$\(src\)/(\S+)", kbuild)
    assert (module_dir / include / "vnpu_accel.h").is_file()
    sources = "".join(p.read_text() for p in module_dir.glob("*.[ch]"))
    for header in re.findall(r'#\s*include "(\w+\.h)"', sources):
        assert (module_dir / header).is_file() or (module_dir / include / header).is_file(), header
    # The copies are the repository's files, and nothing a build in place leaves behind.
    for path in tree.rglob("*"):
        if path.is_file() and path.name != "dkms.conf":
            assert path.read_bytes() == (ROOT / path.relative_to(tree)).read_bytes()
            assert path.suffix in (".c", ".h", "") and not path.name.endswith(".mod.c"), path
    assert (tree / "dkms.conf").read_bytes() == dkms.CONF.read_bytes()


def test_dkms_conf_builds_with_the_modules_makefile_for_debian_612_only(tree: Path) -> None:
    release = "6.12.117+deb12-amd64"
    conf = _conf(tree, release)
    make = shlex.split(conf["MAKE[0]"])
    assert make[:3] == ["make", "-C", conf["BUILT_MODULE_LOCATION[0]"].rstrip("/")]
    assert f"KDIR=/lib/modules/{release}/build" in make
    assert conf["BUILT_MODULE_NAME[0]"] == "vnpu" and conf["DEST_MODULE_LOCATION[0]"].startswith("/updates")
    exclusive = re.compile(conf["BUILD_EXCLUSIVE_KERNEL"])
    for kernel in ("6.12.107+deb12-amd64", "6.12.117+deb12-rt-amd64", "6.12.117+deb12-cloud-amd64"):
        assert exclusive.search(kernel), kernel
    assert not exclusive.search("6.1.0-31-amd64")
    # -cloud kernels pass the version check; their missing DRM accel stops them here.
    assert "CONFIG_DRM_ACCEL" in conf["BUILD_EXCLUSIVE_CONFIG"].split()


def test_the_harness_loads_a_given_module_and_refuses_it_with_no_module_or_a_matrix(tmp_path: Path) -> None:
    ko = tmp_path / "vnpu.ko.xz"
    args = harness.build_parser().parse_args(["--module", str(ko)])
    assert args.module == ko
    guest = harness.guest_command(args, ko)  # guest_run insmods it (and tests reload it) by this path
    assert guest[guest.index("--module") + 1] == str(ko)
    for extra in (["--no-module"], ["--matrix", "6.12.117+deb12-amd64"]):
        assert harness.main(["--module", str(ko), *extra]) == 2


def _dkms_steps() -> list[tuple[str, str]]:
    """(kernel, command line) of every ``-m tools.dkms`` command of the workflow, per matrix kernel."""
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["qemu"]
    kernels = job["strategy"]["matrix"]["kernel"]
    runs = [line for step in job["steps"] for line in step.get("run", "").splitlines()]
    lines = [line for line in runs if "-m tools.dkms" in line]
    return [(k, line.replace("${{ matrix.kernel }}", k)) for line in lines for k in kernels]


def test_the_kernel_ci_workflow_runs_the_dkms_build_in_the_guest_for_each_kernel() -> None:
    steps = _dkms_steps()
    kernels = yaml.safe_load(WORKFLOW.read_text())["jobs"]["qemu"]["strategy"]["matrix"]["kernel"]
    assert sorted(k for k, _ in steps) == sorted(kernels)
    for kernel, line in steps:
        words = shlex.split(line)
        args = dkms.parse_args(words[words.index("tools.dkms") + 1 :])
        assert args.command == "test" and args.kernel == kernel and args.out is not None
        harness.build_parser().parse_args(args.harness_args)  # the rest goes to the harness
