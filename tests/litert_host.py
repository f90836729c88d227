"""The C host on LiteRT's C runtime (tests/c/litert_host.c), which tests/litert_npu (vnpu as LiteRT's
NPU vendor) and tests/delegate (libteflon.so as an accelerator) both run: building it against the
ai-edge-litert wheel's libLiteRt.so, the reference files it compares with, and running it with an
environment that names no Python (the libraries find theirs)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np

SOURCE = Path(__file__).resolve().parent / "c" / "litert_host.c"
# What the host's environment keeps: no PYTHONHOME/PYTHONPATH/VIRTUAL_ENV.
KEEP_ENV = ("PATH", "HOME", "VNPU_CACHE_DIR", "XDG_CACHE_HOME", "VNPU_COMPILE_CACHE")


def build(out: Path) -> Path:
    """The host linked against the wheel's libLiteRt.so (found by rpath), as ``out``."""
    import ai_edge_litert

    lib_dir = Path(ai_edge_litert.__file__).parent
    subprocess.run(
        ["gcc", "-Wall", "-Wextra", "-Werror", "-O1", "-o", str(out), str(SOURCE),
         f"-L{lib_dir}", "-l:libLiteRt.so", f"-Wl,-rpath,{lib_dir}", "-ldl"],
        check=True,
    )  # fmt: skip
    return out


def write_reference(model: Path, out_dir: Path, seed: int = 0) -> list[Path]:
    """Seeded random inputs and BUILTIN_REF's outputs on ``model`` (ai-edge-litert): one raw file per
    tensor, the inputs first (the host's arguments)."""
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


def run(
    host: Path,
    mode: str,
    lib: str,
    model: Path,
    arg: str,
    files: list[Path],
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``litert_host MODE LIB MODEL ARG FILES...`` (``npu``: LIB the vendor libraries' directory, ARG
    the ``vnpu`` opaque options; ``delegate``: LIB libteflon.so, ARG the device)."""
    base = {k: os.environ[k] for k in KEEP_ENV if k in os.environ}
    # The shim's device model may build its C kernels on a cold cache's first job: give that job
    # more than the default job timeout.
    base["VNPU_SHIM_JOB_TIMEOUT_MS"] = "120000"
    return subprocess.run(
        [str(host), mode, lib, str(model), arg, *map(str, files)],
        env={**base, **(env or {})}, capture_output=True, text=True, timeout=600, cwd="/",
    )  # fmt: skip
