"""`accel trace` as the host and guest tests run it: a C program of tests/c/ built against the uapi
headers, and the tracer around a command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from vnpu_common import config

ROOT = Path(__file__).resolve().parents[1]
C_DIR = ROOT / "tests" / "c"


def build_uapi_program(name: str, out_dir: Path) -> Path:
    """Compile tests/c/``name`` (C including "drm/vnpu_accel.h") with gcc against uapi/, warnings as
    errors; the executable, ``out_dir``/prog (its comm in the trace)."""
    exe = out_dir / "prog"
    r = subprocess.run(
        ["gcc", "-Wall", "-Wextra", "-Werror", "-I", str(ROOT / "uapi"), str(C_DIR / name), "-o", str(exe)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise AssertionError(f"gcc {name} failed:\n{r.stderr}")
    return exe


def trace_env() -> dict[str, str]:
    """The environment a traced command gets: the repository importable, whatever the cwd."""
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def run_trace(
    argv: list[str], out: Path, json_mode: bool = True, timeout: float = 300
) -> tuple[subprocess.CompletedProcess[str], str]:
    """``accel trace [--json] -o OUT -- ARGV``: the finished process and what it wrote to ``out``
    (its stderr when it wrote nothing). ``timeout`` is scaled by ``$VNPU_TIMEOUT_SCALE`` (set in the
    guest: larger on a debug kernel)."""
    timeout *= config.TIMEOUT_SCALE.get()
    cmd = [
        sys.executable,
        "-m",
        "libaccel.tools.cli",
        "trace",
        *(["--json"] if json_mode else []),
        "-o",
        str(out),
    ]
    r = subprocess.run([*cmd, "--", *argv], env=trace_env(), capture_output=True, text=True, timeout=timeout)
    return r, out.read_text() if out.exists() else r.stderr


def trace_in_process(argv: list[str], out: Path, timeout: float = 300) -> tuple[int, list[dict]]:
    """``argv`` traced by this process (libaccel.tools.trace.run, as ``accel trace --json`` does, without
    starting the CLI's interpreter): its exit status and the events. ``timeout(1)`` bounds the program
    (scaled as in run_trace)."""
    from libaccel.tools import trace

    timeout *= config.TIMEOUT_SCALE.get()
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = trace_env()["PYTHONPATH"]
    try:
        with open(out, "w") as f:
            code = trace.run(["timeout", "-k", "10", str(int(timeout)), *argv], f, json_mode=True)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    return code, json_events(out.read_text())


def json_events(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]
