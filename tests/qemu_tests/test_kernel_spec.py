"""Kernel specs (``--kernel``, ``--matrix``): a Debian release, a build tree, or a bzImage (with --kdir)."""

from __future__ import annotations

from pathlib import Path

import pytest

from qemu_tests import harness, preflight

RT = "6.12.117+deb12-rt-amd64"


def _tree(root: Path, release: str | None = "6.13.0-rc3-vnpu+") -> Path:
    """A kernel build tree as `make O=root bzImage modules_prepare` leaves it."""
    (root / "arch/x86/boot").mkdir(parents=True)
    (root / "arch/x86/boot/bzImage").write_bytes(b"MZ")
    (root / "Makefile").write_text("# kbuild\n")
    if release is not None:
        (root / "include/config").mkdir(parents=True)
        (root / "include/config/kernel.release").write_text(release + "\n")
    return root


@pytest.mark.parametrize(
    "spec", ["6.12.107+deb12-amd64", RT, "6.13.0-rc3", "6.12", "./linux", "/src/linux/arch/x86/boot/bzImage"]
)
def test_valid_specs(spec: str) -> None:
    assert preflight.kernel_spec(spec) == spec


@pytest.mark.parametrize("spec", ["", "linux", "vmlinuz", "latest", "6", "6.12.107 amd64", "-rt"])
def test_invalid_specs_say_what_a_spec_is(spec: str) -> None:
    with pytest.raises(ValueError, match="neither a release .* nor a path"):
        preflight.kernel_spec(spec)


def test_a_release_is_the_installed_debian_kernel(tmp_path: Path) -> None:
    host = preflight.Host(root=tmp_path)
    k = preflight.kernel_from_spec(RT, host=host)
    assert k == preflight.Kernel(
        RT, tmp_path / f"boot/vmlinuz-{RT}", tmp_path / f"lib/modules/{RT}/build", debian=True
    )


def test_a_build_directory_boots_its_bzimage(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "linux")
    k = preflight.kernel_from_spec(str(tree))
    assert (k.release, k.image, k.build, k.debian) == (
        "6.13.0-rc3-vnpu+",
        tree / "arch/x86/boot/bzImage",
        tree,
        False,
    )


def test_a_bzimage_in_its_tree_is_built_against_that_tree(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "linux")
    k = preflight.kernel_from_spec(str(tree / "arch/x86/boot/bzImage"))
    assert (k.image, k.build) == (tree / "arch/x86/boot/bzImage", tree)


def test_a_copied_bzimage_needs_kdir(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "build")
    image = tmp_path / "bzImage-test"
    image.write_bytes(b"MZ")
    with pytest.raises(ValueError, match="--kdir"):
        preflight.kernel_from_spec(str(image))
    k = preflight.kernel_from_spec(str(image), kdir=tree)
    assert (k.image, k.build, k.release) == (image, tree, "6.13.0-rc3-vnpu+")


def test_without_kernel_release_the_image_names_the_kernel(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "linux", release=None)
    assert preflight.kernel_from_spec(str(tree)).release == "bzImage"


def test_kdir_does_not_go_with_a_release() -> None:
    with pytest.raises(ValueError, match="--kdir"):
        preflight.kernel_from_spec(RT, kdir=Path("/src/linux"))


def test_a_user_kernel_that_is_missing_is_not_fixed_with_apt(tmp_path: Path) -> None:
    reqs = preflight.check_kernel(preflight.Host(root=tmp_path), str(tmp_path / "linux"))
    assert [(r.name, r.ok) for r in reqs] == [("kernel image", False), ("kernel build tree", False)]
    assert all("apt-get" not in r.fix and not r.packages for r in reqs)
    assert "--kdir" in reqs[1].fix


def test_a_missing_debian_kernel_names_its_apt_packages(tmp_path: Path) -> None:
    reqs = preflight.check_kernel(preflight.Host(root=tmp_path), RT)
    assert [r.fix for r in reqs] == [
        f"apt-get install linux-image-{RT}-unsigned",
        f"apt-get install linux-headers-{RT}",
    ]


def test_the_harness_parser_takes_specs() -> None:
    p = harness.build_parser()
    assert p.parse_args(["--kernel", RT]).kernel == RT
    args = p.parse_args(["--kernel", "/tmp/bzImage", "--kdir", "/src/linux"])
    assert (args.kernel, args.kdir) == ("/tmp/bzImage", Path("/src/linux"))
    assert [e.spec for e in p.parse_args(["--matrix", f"6.12.107+deb12-amd64, {RT},./linux"]).matrix] == [
        "6.12.107+deb12-amd64",
        RT,
        "./linux",
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["--kernel", "latest"],
        ["--matrix", "6.12.107+deb12-amd64,bogus"],
        ["--matrix", ","],
        ["--kernel", RT, "--matrix", RT],
        ["--kdir", "/src/linux"],  # --kdir alone
    ],
)
def test_the_harness_rejects_bad_kernel_arguments(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert harness.main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("python -m qemu_tests: "), line


def test_vnpu_ko_is_built_per_kernel_from_a_copy_of_the_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each kernel gets build/kmod-<release>/ (two levels down, as Kbuild's ../../uapi include needs)."""
    repo = tmp_path / "repo"
    sources = repo / "kernel" / "drivers_accel_stub"
    sources.mkdir(parents=True)
    (repo / "uapi" / "drm").mkdir(parents=True)
    for name in ("Kbuild", "vnpu_drv.c", "vnpu_drv.h"):
        (sources / name).write_text(f"/* {name} */\n")
    (sources / "vnpu.mod.c").write_text("/* modpost output for another kernel */\n")
    (sources / "Makefile").write_text("all:\n\t$(MAKE) -C $(KDIR) M=$(CURDIR) modules\n")
    kdirs = []
    for release in ("6.12.107+deb12-amd64", RT):
        kdir = tmp_path / release
        kdir.mkdir()
        # A stand-in for the kernel's build tree: "builds" vnpu.ko naming the tree it was built against.
        (kdir / "Makefile").write_text(f"modules:\n\techo {release} > $(M)/vnpu.ko\n")
        kdirs.append(preflight.Kernel(release, kdir / "bzImage", kdir))
    monkeypatch.setattr(harness, "REPO", repo)
    monkeypatch.setattr(harness, "MODULE_DIR", sources)
    built = [harness.build_module(harness.Clock(quiet=True), k) for k in kdirs]
    assert built == [repo / "build" / f"kmod-{k.release}" / "vnpu.ko" for k in kdirs]
    assert [m.read_text().strip() for m in built] == [k.release for k in kdirs]
    for m in built:
        assert (m.parent / "../../uapi/drm").resolve().is_dir()
        assert sorted(p.name for p in m.parent.iterdir()) == [
            "Kbuild",
            "Makefile",
            "vnpu.ko",
            "vnpu_drv.c",
            "vnpu_drv.h",
        ]
    assert not (sources / "vnpu.ko").exists()  # nothing lands in tree
    (kdirs[0].build / "Makefile").write_text("modules:\n\tfalse\n")
    with pytest.raises(harness.HarnessError, match="module build failed"):
        harness.build_module(harness.Clock(quiet=True), kdirs[0])
