"""EP context models: a session with ep.context_enable=1 writes <model>_ctx.onnx; a fresh process runs
it without the front end, the compiler or the compile cache, byte for byte as the first run.

Each session runs in a fresh interpreter that imports onnxruntime (the script below); with
``forbid`` it first makes the front end and the compiler raise in that process (the EP's Python runs
in it), and its compile cache is an empty directory.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx

import vnpu_ort_ep
from libaccel.compiler.cache import ENV_CACHE_DIR

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "tests" / "onnx" / "models" / "resnet_like_qdq.onnx"

SCRIPT = r"""
import importlib, json, sys
import numpy as np
import onnxruntime as ort

lib, model, config, forbid = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4] == "1"
ort.register_execution_provider_library("vnpu", lib)
if forbid:
    def refuse(*args, **kwargs):
        raise AssertionError("the front end or the compiler was called")
    for module, name in [("libaccel.compiler.cache", "compile_partition"),
                         ("libaccel.compiler.lower", "compile_partition"),
                         ("libaccel.compiler.onnx_frontend", "graph_from_onnx")]:
        setattr(importlib.import_module(module), name, refuse)
devices = [d for d in ort.get_ep_devices() if d.ep_name == "VnpuExecutionProvider"]
so = ort.SessionOptions()
so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
for key, value in config.items():
    so.add_session_config_entry(key, value)
so.add_provider_for_devices(devices, {"device": "shim"})
try:
    session = ort.InferenceSession(model, so)
except Exception as e:
    print(json.dumps({"error": str(e)}))
    sys.exit(0)
rng = np.random.default_rng(0)
outs = []
for _ in range(2):
    x = (2 * rng.standard_normal((1, 3, 32, 32))).astype(np.float32)
    outs += [y.tobytes().hex() for y in session.run(None, {"input": x})]
assigned = {}
for a in session.get_provider_graph_assignment_info():
    assigned[a.ep_name] = assigned.get(a.ep_name, 0) + len(a.get_nodes())
ops = sorted(n.op_type for a in session.get_provider_graph_assignment_info()
             if a.ep_name == "VnpuExecutionProvider" for n in a.get_nodes())
del session
ort.unregister_execution_provider_library("vnpu")
print(json.dumps({"outputs": outs, "assigned": assigned, "vnpu_ops": ops}))
"""


def run(model: Path, config: dict[str, str], tmp: Path, forbid: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if forbid:
        env[ENV_CACHE_DIR] = str(tmp / "empty-cache")
    args = [vnpu_ort_ep.library_path(), str(model), json.dumps(config), "1" if forbid else "0"]
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, timeout=600, env=env, cwd="/"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compiled_model(tmp: Path, config: dict[str, str]) -> tuple[dict, Path]:
    model = tmp / "resnet.onnx"
    shutil.copy(MODEL, model)
    first = run(model, {"ep.context_enable": "1", **config}, tmp)
    assert "error" not in first, first
    ctx = Path(config.get("ep.context_file_path", tmp / "resnet_ctx.onnx"))
    assert ctx.is_file()
    return first, ctx


def test_context_model_runs_without_compiling_byte_identical(tmp_path: Path) -> None:
    first, ctx = compiled_model(tmp_path, {})
    assert first["assigned"] == {"VnpuExecutionProvider": 51, "CPUExecutionProvider": 2}
    nodes = onnx.load(ctx).graph.node
    contexts = [n for n in nodes if n.op_type == "EPContext"]
    assert len(contexts) == 1 and contexts[0].domain == "com.microsoft"
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in contexts[0].attribute}
    assert attrs["source"] == b"VnpuExecutionProvider" and attrs["embed_mode"] == 0
    payload = tmp_path / attrs["ep_cache_context"].decode()  # embed_mode 0 (the default): a file beside
    assert payload.read_bytes()[:8] == b"VNPUCP01"  # the compile cache's format
    # the weights are in the payload: the model keeps the CPU nodes' scales and zero points alone
    assert all(onnx.numpy_helper.to_array(t).size == 1 for t in onnx.load(ctx).graph.initializer)
    second = run(ctx, {}, tmp_path, forbid=True)
    assert "error" not in second, second
    assert second["outputs"] == first["outputs"]
    assert second["vnpu_ops"] == ["EPContext"]
    assert not any(p.is_file() for p in (tmp_path / "empty-cache").rglob("*"))  # nothing compiled


def test_embedded_context_model_and_its_own_path(tmp_path: Path) -> None:
    target = tmp_path / "out" / "embedded.onnx"
    target.parent.mkdir()  # onnxruntime writes the file, not its directory
    first, ctx = compiled_model(tmp_path, {"ep.context_embed_mode": "1", "ep.context_file_path": str(target)})
    assert ctx == target and sorted(p.name for p in target.parent.iterdir()) == ["embedded.onnx"]
    second = run(ctx, {}, tmp_path, forbid=True)
    assert second.get("outputs") == first["outputs"], second


def _edit_context(ctx: Path, out: Path, edit) -> Path:
    model = onnx.load(ctx)
    node = next(n for n in model.graph.node if n.op_type == "EPContext")
    for a in node.attribute:
        edit(a)
    onnx.save(model, out)
    return out


def test_context_of_another_version_is_refused(tmp_path: Path) -> None:
    _, ctx = compiled_model(tmp_path, {"ep.context_embed_mode": "1"})

    def notes_version(a: onnx.AttributeProto) -> None:
        if a.name == "notes":
            notes = json.loads(a.s)
            notes["vnpu_ep_context"] = 99
            a.s = json.dumps(notes).encode()

    bad = _edit_context(ctx, tmp_path / "v99.onnx", notes_version)
    r = run(bad, {}, tmp_path)
    assert "EP context version 99; this EP reads version 1" in r["error"], r

    def compiler_version(a: onnx.AttributeProto) -> None:
        if a.name == "ep_cache_context":
            raw = base64.b64decode(a.s)
            old = json.loads(raw[16 : 16 + int.from_bytes(raw[8:16], "little")])["compiler_version"]
            new = "0." + "0" * (len(old) - 2)  # as long: the header's length stays right
            a.s = base64.b64encode(raw.replace(f'"{old}"'.encode(), f'"{new}"'.encode(), 1))

    bad = _edit_context(ctx, tmp_path / "old.onnx", compiler_version)
    r = run(bad, {}, tmp_path)
    assert (
        "compiled by compiler 0.0000, this is" in r["error"]
        and "compile the original model again" in r["error"]
    ), r


def test_context_enable_on_a_context_model_is_a_clear_error(tmp_path: Path) -> None:
    _, ctx = compiled_model(tmp_path, {"ep.context_embed_mode": "1"})
    r = run(ctx, {"ep.context_enable": "1", "ep.context_file_path": str(tmp_path / "again.onnx")}, tmp_path)
    assert "already an EPContext model" in r["error"], r


def test_bad_context_entry_is_a_clear_error(tmp_path: Path) -> None:
    r = run(MODEL, {"ep.context_embed_mode": "2"}, tmp_path)
    assert "'ep.context_embed_mode' = '2': expected 0 or 1" in r["error"], r
