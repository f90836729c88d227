"""libteflon.so in hosts without Python: C programs (built here with gcc) dlopen it the way TFLite's
external delegate loader does, with an environment that names no Python, from its build directory
and from an installed prefix (``python -m delegate_teflon.build --install PREFIX``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

C_DIR = Path(__file__).parent / "c"
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build the C host")


def _clean_env() -> dict[str, str]:
    """No PYTHONHOME/PYTHONPATH/VIRTUAL_ENV: the library must find its Python by itself."""
    keep = ("PATH", "HOME", "VNPU_CACHE_DIR", "XDG_CACHE_HOME", "VNPU_COMPILE_CACHE")
    return {k: os.environ[k] for k in keep if k in os.environ}


def _compile(source: str, out: Path) -> Path:
    subprocess.run(
        ["gcc", "-Wall", "-Werror", "-O1", "-o", str(out), str(C_DIR / source), "-ldl"], check=True
    )
    return out


@pytest.fixture(scope="module")
def dlopen_host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _compile("plugin_dlopen.c", tmp_path_factory.mktemp("c") / "plugin_dlopen")


def _run(host: Path, lib: str, device: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(host), lib, device], env=_clean_env(), capture_output=True, text=True, timeout=120, cwd="/"
    )


def test_dlopen_create_destroy_and_report_error(dlopen_host: Path, lib_path: str, test_device: str) -> None:
    result = _run(dlopen_host, lib_path, test_device)
    assert result.returncode == 0, result.stderr
    assert "vnpu delegate: created on" in result.stderr
    assert "report_error: vnpu delegate: unknown option 'bogus'" in result.stdout
    assert "unknown option 'bogus'" in result.stderr  # stderr too


def test_installed_library_finds_its_python(dlopen_host: Path, tmp_path: Path, test_device: str) -> None:
    prefix = tmp_path / "prefix"
    out = subprocess.run(
        [sys.executable, "-m", "delegate_teflon.build", "--install", str(prefix)],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    installed = prefix / "lib" / "libteflon.so"
    assert out.stdout.strip() == str(installed) and installed.is_file()
    result = _run(dlopen_host, str(installed), test_device)
    assert result.returncode == 0, result.stderr


def test_start_failure_is_reported(dlopen_host: Path, lib_path: str, tmp_path: Path) -> None:
    """A Python home without a standard library: the host gets a message, not an abort."""
    env = {**_clean_env(), "PYTHONHOME": str(tmp_path)}
    result = subprocess.run(
        [str(dlopen_host), lib_path, "shim"], env=env, capture_output=True, text=True, timeout=60, cwd="/"
    )
    assert result.returncode == 1
    assert f"vnpu delegate: cannot start Python (home {tmp_path})" in result.stderr
    assert "create failed (1 reports): vnpu delegate: cannot start Python" in result.stderr


def test_docs_c_example_runs(lib_path: str, tmp_path: Path) -> None:
    """docs/delegate.md's C host compiles and runs as written (with the library's path put in)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "delegate.md").read_text()
    source = re.findall(r"```c\n(.*?)```", doc, re.S)[0]
    assert "/usr/local/lib/libteflon.so" in source
    (tmp_path / "host.c").write_text(source.replace("/usr/local/lib/libteflon.so", lib_path))
    subprocess.run(
        ["gcc", "-Wall", "-Werror", "-o", str(tmp_path / "host"), str(tmp_path / "host.c"), "-ldl"],
        check=True,
    )
    result = subprocess.run(
        [str(tmp_path / "host")], env=_clean_env(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
