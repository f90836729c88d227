"""The current kernel from Debian unstable (qemu_tests/sid_kernel.py): its pure logic, without the network."""

from __future__ import annotations

from pathlib import Path

import pytest

from qemu_tests import harness, matrix, preflight, sid_kernel

R = "7.2.13+deb14-amd64"
NEWER = "7.2.14+deb14-amd64"


def _offered(release: str, series: str = "7.2", skip: str = "") -> list[str]:
    """The package names sid offers for one kernel (its image metapackage too), minus ``skip``."""
    names = [f"linux-image-{release}", *sid_kernel.packages(release, series).values()]
    return [n for n in names if n != skip]


@pytest.mark.parametrize("spec", ["7.2", "6.12", "10.0"])
def test_a_series_is_two_numbers(spec: str) -> None:
    assert sid_kernel.is_series(spec)
    assert preflight.kernel_spec(spec) == spec


@pytest.mark.parametrize("spec", [R, "7", "7.2.13", "7.2-rc1", "./7.2", "debug"])
def test_other_specs_are_not_series(spec: str) -> None:
    assert not sid_kernel.is_series(spec)


def test_the_packages_of_one_kernel() -> None:
    assert sid_kernel.packages(R, "7.2") == {
        "image": f"linux-binary-{R}",
        "modules": f"linux-modules-{R}",
        "config": f"linux-base-{R}",
        "symvers": f"linux-headers-{R}",
        "source": "linux-source-7.2",
    }


def test_pick_release_takes_the_newest_generic_kernel_of_the_series() -> None:
    names = [
        *_offered(R),
        *_offered(NEWER),
        *_offered("7.2.99+deb14-rt-amd64"),
        *_offered("7.2.99+deb14-cloud-amd64"),
        *_offered("7.3.1+deb14-amd64", "7.3"),
        f"linux-image-{R}-dbg",
    ]
    assert sid_kernel.pick_release(names, "7.2") == NEWER
    assert sid_kernel.pick_release(names, "7.3") == "7.3.1+deb14-amd64"
    assert sid_kernel.pick_release(names, "7.4") is None


def test_pick_release_compares_numbers_not_strings() -> None:
    assert sid_kernel.pick_release(
        [*_offered("7.2.9+deb14-amd64"), *_offered("7.2.10+deb14-amd64")], "7.2"
    ) == ("7.2.10+deb14-amd64")


@pytest.mark.parametrize("what", ["image", "modules", "config", "symvers"])
def test_pick_release_skips_a_kernel_with_a_package_missing(what: str) -> None:
    skip = sid_kernel.packages(NEWER, "7.2")[what]
    assert sid_kernel.pick_release([*_offered(R), *_offered(NEWER, skip=skip)], "7.2") == R


def test_pick_release_needs_the_series_source() -> None:
    assert sid_kernel.pick_release(_offered(R, skip="linux-source-7.2"), "7.2") is None


def test_the_archive_comes_from_a_deb822_sources_file() -> None:
    text = """Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
"""
    assert sid_kernel.archive_uri([text]) == "http://deb.debian.org/debian"


def test_the_archive_comes_from_a_one_line_list_past_the_security_archive() -> None:
    lines = [
        "deb http://security.debian.org/debian-security bookworm-security main",
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example.org/debian/ bookworm main",
    ]
    assert sid_kernel.archive_uri(["\n".join(lines)]) == "http://mirror.example.org/debian"


def test_no_sources_fall_back_to_debian_s_own_archive() -> None:
    assert sid_kernel.archive_uri(["# nothing here\n"]) == sid_kernel.FALLBACK_ARCHIVE


def test_the_source_list_names_sid_main_and_the_keyring() -> None:
    text = sid_kernel.source_list("http://deb.debian.org/debian")
    line = f"[signed-by={sid_kernel.KEYRING}] http://deb.debian.org/debian sid main"
    assert text.splitlines() == [f"deb {line}", f"deb-src {line}"]


def test_apt_keeps_to_its_own_directory(tmp_path: Path) -> None:
    options = sid_kernel.Apt(tmp_path).options()
    settings = dict(o.split("=", 1) for o in options[1::2])
    assert settings["Dir::Etc::sourcelist"] == str(tmp_path / "sources.list")
    assert settings["Dir::Etc::sourceparts"] == "-"  # not /etc/apt/sources.list.d
    assert settings["Dir::State::Lists"].startswith(str(tmp_path))
    assert settings["Dir::Cache"].startswith(str(tmp_path))


def test_kconfig_rust_options_follow_depends_on() -> None:
    kconfig = """
config RUST
	bool "Rust support"
	depends on RUST_IS_AVAILABLE

config RUST_PHYLIB_ABSTRACTIONS
	bool
	depends on RUST

menuconfig AMCC_QT2025_PHY
	tristate "AMCC QT2025 PHY"
	depends on RUST_PHYLIB_ABSTRACTIONS

config DRM_PANIC_SCREEN_QR_CODE
	bool
	depends on DRM_PANIC && RUST

config DRM_PANIC_SCREEN_QR_CODE_URL
	string
	depends on DRM_PANIC_SCREEN_QR_CODE

config DEBUG_INFO_BTF_MODULES
	def_bool y
	depends on DEBUG_INFO_BTF && MODULES && PAHOLE_HAS_SPLIT_BTF
"""
    rust = sid_kernel.rust_options(sid_kernel.kconfig_depends([kconfig]))
    assert {"AMCC_QT2025_PHY", "DRM_PANIC_SCREEN_QR_CODE", "DRM_PANIC_SCREEN_QR_CODE_URL"} <= rust
    assert "DEBUG_INFO_BTF_MODULES" not in rust


def test_config_differences_pass_the_toolchain_and_rust_but_nothing_else() -> None:
    debian = sid_kernel.parse_config(
        'CONFIG_CC_VERSION_TEXT="x86_64-linux-gnu-gcc-16 (Debian 16.2.0-4) 16.2.0"\n'
        "CONFIG_GCC_VERSION=160200\nCONFIG_CC_HAS_COUNTED_BY_PTR=y\nCONFIG_PAHOLE_VERSION=132\n"
        "CONFIG_RUST=y\nCONFIG_AMCC_QT2025_PHY=m\nCONFIG_DEBUG_INFO_BTF_MODULES=y\nCONFIG_DRM_ACCEL=y\n"
    )
    prepared = sid_kernel.parse_config(
        'CONFIG_CC_VERSION_TEXT="gcc (Debian 12.2.0-14+deb12u1) 12.2.0"\nCONFIG_GCC_VERSION=120200\n'
        "CONFIG_PAHOLE_VERSION=124\n# CONFIG_RUST is not set\nCONFIG_DRM_ACCEL=y\n"
    )
    rust = {"RUST", "AMCC_QT2025_PHY"}
    # struct module has fields under CONFIG_DEBUG_INFO_BTF_MODULES: pahole missing on the host drops it.
    assert sid_kernel.config_differences(debian, prepared, rust) == ["CONFIG_DEBUG_INFO_BTF_MODULES: y -> n"]
    assert sid_kernel.config_differences(debian, debian, rust) == []


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VNPU_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(preflight.KERNEL_ENV, raising=False)
    return tmp_path / sid_kernel.SUITE


def _prepare_fake(release: str) -> sid_kernel.SidKernel:
    kernel = sid_kernel.SidKernel(release, "7.2")
    kernel.image.parent.mkdir(parents=True)
    kernel.image.write_bytes(b"MZ")
    kernel.source.mkdir(parents=True)
    kernel.done.write_text("{}\n")
    return kernel


def test_the_series_spec_names_the_newest_prepared_kernel(cache: Path) -> None:
    _prepare_fake(R)
    newer = _prepare_fake(NEWER)
    (cache / "7.2.15+deb14-amd64").mkdir()  # an interrupted prepare: no done.json
    kernel = preflight.kernel_from_spec("7.2")
    assert (kernel.release, kernel.image, kernel.build, kernel.debian) == (
        NEWER,
        newer.image,
        newer.source,
        False,
    )
    assert harness.module_build_dir(kernel).name == f"kmod-{NEWER}"
    assert matrix.parse_entries("6.12.117+deb12-amd64,7.2")[1].spec == "7.2"


def test_a_series_not_prepared_yet_is_prepared_by_the_run(cache: Path) -> None:
    reqs = preflight.check_kernel(preflight.Host(), "7.2")
    (line,) = [r for r in reqs if r.name == "7.2 kernel"]
    assert line.ok and "not prepared yet" in line.detail
    # The tree's own checks wait for the tree: no missing image or build tree before the run made them.
    assert not [r for r in reqs if r.name.startswith("kernel ")]


def test_without_prepare_tools_the_fix_names_their_packages(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sid_kernel, "locate", lambda what: None if what == "pahole" else f"/usr/bin/{what}")
    (bad,) = [r for r in preflight.check_kernel(preflight.Host(), "7.2") if not r.ok]
    assert bad.fix == "apt-get install pahole"
    with pytest.raises(sid_kernel.PrepareError, match="apt-get install pahole"):
        sid_kernel.ensure_prepared("7.2")


def test_no_install_without_a_prepared_kernel_says_what_to_run(cache: Path) -> None:
    with pytest.raises(sid_kernel.PrepareError, match=r"without --no-install.*qemu_tests\.sid_kernel 7\.2"):
        sid_kernel.ensure_prepared("7.2", refresh=False)


def test_the_install_list_has_the_prepare_packages(tmp_path: Path) -> None:
    host = preflight.Host(root=tmp_path, apt_names=lambda: ["linux-image-6.12.117+deb12-amd64-unsigned"])
    listed = preflight.debian_packages(host, release="6.12.117+deb12-amd64", sid=True)
    assert {p for _, p in sid_kernel.PREPARE_PACKAGES} <= set(listed)
    assert not [p for p in listed if "7.2" in p]  # nothing from sid is installed


def test_kdir_does_not_go_with_a_series() -> None:
    with pytest.raises(ValueError, match="--kdir goes with an image path"):
        preflight.kernel_from_spec("7.2", kdir=Path("/tmp"))
