"""libteflon.so in hosts without Python: C programs (built here with gcc) dlopen it the way TFLite's
external delegate loader does, with an environment that names no Python, from its build directory
and from an installed prefix (``python -m delegate_teflon.build --install PREFIX``); and the C host
on LiteRT's C runtime (tests/c/litert_host.c, libLiteRt.so from the ai-edge-litert wheel) runs whole
models through it, its outputs compared with BUILTIN_REF's, computed here in Python beforehand.

The host's ``delegate`` mode registers libteflon.so as a GPU-class accelerator; its ``npu`` mode,
vnpu as LiteRT's NPU vendor, is tests/litert_npu's. This mode stays because it is the one test of
libteflon.so running whole models in a host without Python: ai-edge-litert's libLiteRt.so is the
only TFLite runtime a package registry ships as a C library (it exports no TfLiteInterpreter* API,
and no wheel ships libtensorflowlite_c.so), and the vendor libraries are other libraries."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import litert_host
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
    # Once each: to report_error where the host gives one, to stderr where it passes NULL.
    assert result.stderr.count("unknown option 'bogus'") == 1, result.stderr


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


# Every node of these runs on the NPU (`python -m delegate_teflon.run MODEL --device shim` places
# none on the CPU): the C host asks LiteRT for the delegate's accelerator alone, so a CPU node would
# be a compilation error rather than a node on LiteRT's optimized (non-reference) CPU kernels.
FULLY_NPU_MODELS = ("resnet_small", "small_cnn_uint8")
MODELS_DIR = Path(__file__).resolve().parents[1] / "corpus" / "models"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = litert_host.build(tmp_path_factory.mktemp("c") / "litert_host")
    linked = subprocess.run(["ldd", str(out)], capture_output=True, text=True, check=True).stdout
    assert "libLiteRt.so" in linked and "libpython" not in linked
    return out


def _run_litert_host(
    host: Path, lib: str, model: Path, device: str, files: list[Path]
) -> subprocess.CompletedProcess[str]:
    return litert_host.run(
        host, "delegate", lib, model, device, files, {"VNPU_DELEGATE_LOG_LEVEL": "verbose"}
    )


@pytest.mark.parametrize("name", FULLY_NPU_MODELS)
def test_litert_c_host_runs_model_on_npu(
    host: Path, lib_path: str, test_device: str, tmp_path: Path, name: str
) -> None:
    model = MODELS_DIR / f"{name}.tflite"
    files = litert_host.write_reference(model, tmp_path)
    result = _run_litert_host(host, lib_path, model, test_device, files)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fully accelerated: yes" in result.stdout
    outputs = [line for line in result.stdout.splitlines() if line.startswith("output ")]
    assert outputs and all(line.endswith(" 0 differing") for line in outputs), result.stdout
    # The delegate ran inside libLiteRt.so's interpreter, every node on the NPU.
    assert re.search(r"vnpu delegate: runtime ai-edge-litert [\d.]+ \(libLiteRt\.so\)", result.stderr)
    assert re.search(
        r"placement \(ai-edge-litert\): (\d+) of \1 nodes on the NPU, 0 on the CPU", result.stderr
    )
    assert "NPU partition 1: invoke 1 took" in result.stderr


def test_litert_c_host_reports_a_differing_output(
    host: Path, lib_path: str, test_device: str, tmp_path: Path
) -> None:
    """The comparison can fail: one flipped reference byte is one differing byte, exit status 1."""
    model = MODELS_DIR / "small_cnn_uint8.tflite"
    files = litert_host.write_reference(model, tmp_path)
    data = bytearray(files[-1].read_bytes())
    data[3] ^= 0x01
    files[-1].write_bytes(bytes(data))
    result = _run_litert_host(host, lib_path, model, test_device, files)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"output 0: {len(data)} bytes, 1 differing" in result.stdout


def test_docs_litert_host_recipe_runs(lib_path: str, tmp_path: Path) -> None:
    """docs/delegate.md's libLiteRt.so recipe runs as written (the library's path and a scratch
    directory put in) and reports equal outputs."""
    repo = Path(__file__).resolve().parents[2]
    doc = (repo / "docs" / "delegate.md").read_text()
    (script,) = re.findall(r"```sh\n(.*?)```", doc, re.S)
    assert "/usr/local/lib/libteflon.so" in script and "tests/c/litert_host.c" in script
    assert ".venv/bin/python" in script
    script = script.replace("/usr/local/lib/libteflon.so", lib_path).replace("/tmp/", f"{tmp_path}/")
    script = script.replace(".venv/bin/python", shlex.quote(sys.executable))  # whatever Python runs the tests
    env = {**_clean_env(), "VNPU_SHIM_JOB_TIMEOUT_MS": "120000"}
    result = subprocess.run(
        ["bash", "-e", "-c", script], env=env, capture_output=True, text=True, timeout=300, cwd=repo
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fully accelerated: yes\noutput 0: 10 bytes, 0 differing\n" in result.stdout
