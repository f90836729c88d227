"""libvnpu_ort_ep.so in the real onnxruntime: its ABI mirror, registration, placement, exactness.

Each session runs in a fresh interpreter that imports onnxruntime alone (no vnpu module), as a user's
script would: it registers the library by path, runs the model with the vnpu EP and with the CPU EP,
unregisters the library and exits.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest

import vnpu_ort_ep

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "onnx" / "models"

SCRIPT = r"""
import json, sys
import numpy as np
import onnxruntime as ort

lib, model, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
ort.register_execution_provider_library("vnpu", lib)
devices = [d for d in ort.get_ep_devices() if d.ep_name == "VnpuExecutionProvider"]
so = ort.SessionOptions()
so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
so.add_provider_for_devices(devices, options)
result = {"vendor": devices[0].ep_vendor, "metadata": dict(devices[0].ep_metadata)}
try:
    session = ort.InferenceSession(model, so)
except Exception as e:
    result["error"] = str(e)
    print(json.dumps(result))
    sys.exit(0)
inp = session.get_inputs()[0]
shape = [d if isinstance(d, int) else 1 for d in inp.shape]
x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
y = session.run(None, {inp.name: x})[0]
ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {inp.name: x})[0]
result["differing_bytes"] = int((y.view(np.uint8) != ref.view(np.uint8)).sum())
result["assigned"] = {}
for a in session.get_provider_graph_assignment_info():
    result["assigned"][a.ep_name] = result["assigned"].get(a.ep_name, 0) + len(a.get_nodes())
del session
ort.unregister_execution_provider_library("vnpu")
print(json.dumps(result))
"""


def run_ep(model: Path, options: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, vnpu_ort_ep.library_path(), str(model), json.dumps(options)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd="/",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]  # a clean exit: the library unloads cleanly
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_abi_mirror_against_the_installed_onnxruntime() -> None:
    lib = ctypes.CDLL(str(next((Path(onnxruntime.__file__).parent / "capi").glob("libonnxruntime.so.*"))))

    class ApiBase(ctypes.Structure):  # OrtApiBase as vnpu_ort_abi.h declares it
        _fields_ = [
            ("GetApi", ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32)),
            ("GetVersionString", ctypes.CFUNCTYPE(ctypes.c_char_p)),
        ]

    lib.OrtGetApiBase.restype = ctypes.POINTER(ApiBase)
    base = lib.OrtGetApiBase().contents
    assert base.GetVersionString().decode() == onnxruntime.__version__
    header = (Path(vnpu_ort_ep.__file__).parent / "vnpu_ort_abi.h").read_text()
    version = int(header.split("#define VNPU_ORT_API_VERSION ")[1].split()[0])
    assert base.GetApi(version), (
        f"onnxruntime {onnxruntime.__version__} offers no OrtApi of version {version}"
    )
    # the mirror's slot numbers compile (its _Static_asserts) into the library cffi builds
    assert Path(vnpu_ort_ep.library_path()).is_file()


def test_qdq_model_through_the_ep_is_exact_and_placed() -> None:
    result = run_ep(MODELS / "resnet_like_qdq.onnx", {"device": "shim"})
    assert "error" not in result, result
    assert result["vendor"] == "vnpu"
    assert result["differing_bytes"] == 0
    # 53 nodes in onnxruntime's graph: the input QuantizeLinear and output DequantizeLinear stay on
    # the CPU EP, every QDQ node unit between them is one fused node on vnpu
    assert result["assigned"] == {"VnpuExecutionProvider": 51, "CPUExecutionProvider": 2}


def test_int8_quantize_static_model_runs_exactly(tmp_path: Path) -> None:
    from tools.convert.make_onnx_models import quantize, resnet_like

    path = tmp_path / "resnet_int8_qdq.onnx"
    onnx.save(quantize(resnet_like(), "qdq", "int8"), path)
    result = run_ep(path, {"device": "shim"})
    assert result["differing_bytes"] == 0
    # int8 activations: onnxruntime's fusion of a group alone leaves it in float (its s8->u8
    # conversion needs the group's QuantizeLinear producer), so the EP claims nothing yet
    assert result["assigned"].get("VnpuExecutionProvider", 0) == 0


def test_bad_device_option_is_a_clear_error() -> None:
    result = run_ep(MODELS / "resnet_like_qdq.onnx", {"device": "nowhere"})
    assert "option 'device' = 'nowhere'" in result["error"]


def test_default_device_is_the_shim_without_a_kernel_device() -> None:
    from libaccel import discovery

    if discovery.list_devices():
        pytest.skip("a vnpu kernel device is present")
    result = run_ep(MODELS / "resnet_like_qdq.onnx", {})
    assert result["metadata"]["device"] == "shim"
    assert result["differing_bytes"] == 0


def test_npu_groups_take_whole_qdq_node_units() -> None:
    from libaccel.compiler import onnx_frontend as fe
    from libaccel.model import onnx_placement
    from vnpu_ort_ep.plugin import npu_groups

    model = onnx.load(MODELS / "resnet_like_qdq.onnx")
    og = fe.graph_from_onnx(model)
    groups = npu_groups(model, og, onnx_placement(og, True))
    ops = {model.graph.node[k].op_type for g in groups for k in g}
    assert {"Conv", "DequantizeLinear", "QuantizeLinear"} <= ops
    assert np.all(np.diff(groups[0]) > 0)
