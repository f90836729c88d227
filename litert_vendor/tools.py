"""Drive the wheel's own LiteRT tools with vnpu's libraries: AOT compile with ``apply_plugin_main``
and run a model with LiteRT's CompiledModel API on the NPU accelerator (AOT-compiled, or compiled
just in time)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np

from litert_vendor import abi, library_dir


def litert_dir() -> Path:
    """The installed ai_edge_litert package's directory (its tools/ and libLiteRt.so)."""
    import ai_edge_litert

    return Path(ai_edge_litert.__file__).resolve().parent


def apply_plugin(model: str | os.PathLike[str], out: str | os.PathLike[str], libs: str | None = None) -> str:
    """``apply_plugin_main --cmd apply`` with vnpu's compiler plugin: writes ``out`` (a .tflite
    whose NPU partitions are DISPATCH_OP nodes); returns the tool's output. Raises RuntimeError with
    the tool's last lines when it fails."""
    tool = litert_dir() / "tools" / "apply_plugin_main"
    args = [
        str(tool),
        "--cmd=apply",
        f"--model={model}",
        f"--o={out}",
        f"--libs={libs or library_dir()}",
        f"--soc_manufacturer={abi.SOC_MANUFACTURER}",
        f"--soc_model={abi.SOC_MODEL}",
    ]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    log = done.stdout + done.stderr
    if done.returncode != 0 or not Path(out).exists():
        tail = "\n".join(log.strip().splitlines()[-5:])
        raise RuntimeError(f"apply_plugin_main failed (exit {done.returncode}):\n{tail}")
    return log


def run_compiled(
    model: str | os.PathLike[str], inputs: list[np.ndarray], libs: str | None = None
) -> list[np.ndarray]:
    """Run ``model`` once with LiteRT's CompiledModel on the NPU accelerator alone, with vnpu's
    libraries from ``libs``; returns the outputs of its first signature. ``model`` is AOT-compiled
    (its DISPATCH_OP nodes go to the dispatch library) or a plain .tflite, which LiteRT compiles
    just in time through the compiler plugin."""
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.environment import Environment
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator

    libs = libs or library_dir()
    # Given no compiler plugin directory, the Environment would take the first vendor's in the wheel.
    env = Environment.create(dispatch_library_path=libs, compiler_plugin_path=libs)
    cm = CompiledModel.from_file(str(model), hardware_accel=HardwareAccelerator.NPU, environment=env)
    try:
        key = next(iter(cm.get_signature_list()))
        in_bufs, out_bufs = cm.create_input_buffers(0), cm.create_output_buffers(0)
        for buf, value in zip(in_bufs, inputs, strict=True):
            buf.write(np.ascontiguousarray(value))
        cm.run_by_index(0, in_bufs, out_bufs)
        details = cm.get_output_tensor_details(key)
        outs = []
        for buf, d in zip(out_bufs, details.values(), strict=True):
            shape = tuple(d["shape"])
            outs.append(buf.read(int(np.prod(shape)), np.dtype(d["dtype"])).reshape(shape))
        return outs
    finally:
        cm.close()
