"""Fixtures of the LiteRT vendor tests: the built libraries and the C host (tests/litert_npu/c)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

C_DIR = Path(__file__).resolve().parent / "c"
MODELS = Path(__file__).resolve().parents[1] / "corpus" / "models"


@pytest.fixture(scope="session")
def libs() -> str:
    import litert_vendor

    return litert_vendor.library_dir()


@pytest.fixture(scope="session")
def npu_host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/litert_npu/c/npu_host.c linked against the wheel's libLiteRt.so (found by rpath)."""
    import ai_edge_litert

    lib_dir = Path(ai_edge_litert.__file__).parent
    out = tmp_path_factory.mktemp("c") / "npu_host"
    subprocess.run(
        ["gcc", "-Wall", "-Werror", "-O1", "-o", str(out), str(C_DIR / "npu_host.c"),
         f"-L{lib_dir}", "-l:libLiteRt.so", f"-Wl,-rpath,{lib_dir}"],
        check=True,
    )  # fmt: skip
    return out


def write_reference(model: Path, out_dir: Path, seed: int = 0) -> list[Path]:
    """Seeded random inputs and BUILTIN_REF's outputs on ``model``: one raw file per tensor, the
    inputs first (the C host's arguments)."""
    from ai_edge_litert import interpreter

    from delegate_teflon.run import invoke, make_interpreter, random_inputs

    interp = make_interpreter(interpreter, model.read_bytes(), [], None)
    inputs = random_inputs(interp.get_input_details(), seed=seed)
    arrays: list[np.ndarray] = [*inputs, *invoke(interp, inputs)]
    paths = []
    for i, array in enumerate(arrays):
        paths.append(out_dir / f"tensor{i}.bin")
        array.tofile(paths[-1])
    return paths


def run_npu_host(
    host: Path, libs: str, model: Path, options: str, files: list[Path], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The C host on ``model`` with the ``vnpu`` opaque options ``options``; no PYTHONPATH: the
    libraries find their Python themselves."""
    keep = ("PATH", "HOME", "VNPU_CACHE_DIR", "XDG_CACHE_HOME", "VNPU_COMPILE_CACHE")
    base = {k: os.environ[k] for k in keep if k in os.environ}
    # The shim's device model may build its C kernels on a cold cache's first job.
    base["VNPU_SHIM_JOB_TIMEOUT_MS"] = "120000"
    return subprocess.run(
        [str(host), libs, str(model), options, *map(str, files)],
        env={**base, **(env or {})}, capture_output=True, text=True, timeout=600, cwd="/",
    )  # fmt: skip
