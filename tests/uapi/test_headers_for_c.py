"""``python -m uapi``: the -I option for the headers the package carries, and headers-install."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from uapi import __main__ as uapi_cli
from uapi.bindings import HEADER_DIR

PROGRAM = Path(__file__).resolve().parent / "c" / "include_both.c"


def _compile(tmp_path: Path, include: str) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    subprocess.run(
        ["gcc", "-Wall", "-Werror", include, str(PROGRAM), "-o", str(tmp_path / "prog")], check=True
    )


def test_cflags_name_the_package_headers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert uapi_cli.main(["cflags"]) == 0
    flag = capsys.readouterr().out.strip()
    assert flag == f"-I{HEADER_DIR.parent}"
    _compile(tmp_path, flag)


def test_headers_install_keeps_a_systems_drm_h(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert uapi_cli.main(["headers-install", str(tmp_path / "usr")]) == 0
    dest = tmp_path / "usr" / "include" / "drm"
    for name in (*uapi_cli.OWN_HEADERS, *uapi_cli.KERNEL_HEADERS):
        assert (dest / name).read_bytes() == (HEADER_DIR / name).read_bytes()
    _compile(tmp_path, f"-I{tmp_path / 'usr' / 'include'}")
    # A second install over a tree with its own drm.h rewrites only the vnpu headers.
    (dest / "drm.h").write_text((HEADER_DIR / "drm.h").read_text() + "/* the system's */\n")
    capsys.readouterr()
    assert uapi_cli.main(["headers-install", str(tmp_path / "usr")]) == 0
    assert (dest / "drm.h").read_text().endswith("/* the system's */\n")
    assert "drm.h: kept" in capsys.readouterr().out
