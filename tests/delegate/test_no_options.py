"""The delegate created with no options at all, as Mesa's test harness creates Teflon
(``tflite_plugin_create_delegate(NULL, NULL, 0, NULL)``): the device rule picks a kernel device,
else the shim, says which on stderr, and the delegate runs a model exactly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from vnpu_common import config

ROOT = Path(__file__).resolve().parents[2]

# The C entry point called through ctypes with NULLs; the TfLiteDelegate it returns goes to the
# interpreter as load_delegate's would (the runtime asks only for its pointer).
CHILD = """
import ctypes, sys
import numpy as np
import delegate_teflon
import modelgen as gen
from ai_edge_litert.interpreter import Interpreter, OpResolverType

lib = ctypes.CDLL(delegate_teflon.library_path())
lib.tflite_plugin_create_delegate.restype = ctypes.c_void_p
P = ctypes.c_void_p
lib.tflite_plugin_create_delegate.argtypes = [P, P, ctypes.c_size_t, P]
lib.tflite_plugin_destroy_delegate.argtypes = [ctypes.c_void_p]
pointer = lib.tflite_plugin_create_delegate(None, None, 0, None)
assert pointer, "no delegate"


class Raw:
    def _get_native_delegate_pointer(self):
        return pointer


model = gen.elementwise_model("ADD", (1, 8, 8, 16), None, "RELU", 3)
ref = OpResolverType.BUILTIN_REF
npu = Interpreter(model_content=model, experimental_delegates=[Raw()], experimental_op_resolver_type=ref)
cpu = Interpreter(model_content=model, experimental_op_resolver_type=ref)
from delegate_teflon import plugin
record = plugin.last_prepare()
assert record is not None and all(p.npu for p in record.placements), "not delegated"
x = np.random.default_rng(1).integers(-128, 128, (1, 8, 8, 16), dtype=np.int8)
outs = []
for interp in (npu, cpu):
    interp.allocate_tensors()
    for d in interp.get_input_details():
        interp.set_tensor(d["index"], x)
    interp.invoke()
    outs.append(interp.get_tensor(interp.get_output_details()[0]["index"]))
assert np.array_equal(*outs), "outputs differ"
del npu
lib.tflite_plugin_destroy_delegate(pointer)
print("no options: exact on the NPU")
"""


def test_a_delegate_created_with_no_options_works(lib_path: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("VNPU_DEVICE", "VNPU_DELEGATE_LOG_LEVEL")}
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no options: exact on the NPU" in r.stdout
    # One line says which device the rule took: the guest's vnpu.ko, else the shim on this host.
    notices = [line for line in r.stderr.splitlines() if line.startswith("vnpu: using ")]
    assert len(notices) == 1, r.stderr
    if config.TEST_DEVICE.get() == "shim":
        assert notices[0].startswith("vnpu: using the in-process shim: no vnpu kernel device found"), r.stderr
