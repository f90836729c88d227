"""ONNX's own backend tests (``onnx.backend.test.BackendTest``) driving vnpu's backend on the shim.

Pinned to the cases that matter here: the quantization ops, the int8/uint8 cases of every op, and
the cases of the ops vnpu lowers in 8 bits (MaxPool, Clip) and of integer Div/Mod. A case whose
nodes cannot go to the NPU (scales fed at run time, a float model, an op without a lowering) passes
on the CPU fallback; the cases below that cannot pass are excluded by name with the reason.
"""

from __future__ import annotations

import unittest
from typing import Any

import numpy as np
import onnx.backend.test
import pytest
from onnx import helper

from libaccel.runtime.onnx_backend import VnpuBackend, VnpuBackendRep

INCLUDE = [
    r"^test_(qlinearconv|qlinearmatmul|quantizelinear|dequantizelinear|dynamicquantizelinear)",
    r"^test_(convinteger|matmulinteger)",
    r"^test_.*_u?int8(_|$)",
    r"^test_(maxpool|clip)_",
    r"^test_(div|mod)_.*int",
]
# name pattern -> why the case cannot pass (neither onnxruntime 1.32 nor its Python API runs it)
EXCLUDE = {
    r"^test_(de)?quantizelinear_(u?int[24]|e4m3fn|e5m2|float4e2m1)": (
        "4-bit, 2-bit and float8/float4 tensors: onnxruntime's Python API takes no numpy array of "
        "these (ml_dtypes) types, and it has no float4e2m1 kernel at any opset"
    ),
    r"^test_dequantizelinear_e4m3fn": "float8 input: as above",
    r"^test_convinteger_with_padding": (
        "a per-channel weight zero point: onnxruntime's ConvInteger takes per-tensor zero points only"
    ),
    r"^test_bitcast_bool_to_uint8": "onnxruntime 1.32 has no BitCast kernel",
}

PLACEMENTS: dict[str, tuple[int, int]] = {}  # case (graph name) -> (nodes, nodes on the NPU)


class _Recording(VnpuBackend):
    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> VnpuBackendRep:
        rep = super().prepare(model, device, **kwargs)
        PLACEMENTS[model.graph.name] = (len(rep.placement), rep.npu_nodes)
        return rep


_backend_test = onnx.backend.test.BackendTest(_Recording, __name__)
for _pattern in INCLUDE:
    _backend_test.include(_pattern)
for _pattern in EXCLUDE:
    _backend_test.exclude(_pattern)
for _name, _case in _backend_test.test_cases.items():
    # only the selected cases on the CPU device: the thousands of filtered-out ones are not listed
    for _attr in [a for a in vars(_case) if a.startswith("test_")]:
        if getattr(getattr(_case, _attr), "__unittest_skip__", False):
            delattr(_case, _attr)
    if any(a.startswith("test_") for a in vars(_case)):
        globals()[_name] = _case


def test_zz_backend_cases_reach_the_npu() -> None:
    """After the cases above: how many ran, and how many of their nodes ran on the NPU."""
    if not PLACEMENTS:
        pytest.skip("run with the BackendTest cases of this module")
    nodes = sum(n for n, _ in PLACEMENTS.values())
    npu = sum(k for _, k in PLACEMENTS.values())
    print(f"BackendTest: {len(PLACEMENTS)} cases ran, {npu} of their {nodes} nodes on the NPU")
    for case in ("test_maxpool_2d_uint8", "test_clip_default_int8_inbounds"):
        if case in PLACEMENTS:
            assert PLACEMENTS[case][1] == PLACEMENTS[case][0], case


def test_prepare_runs_on_the_npu_and_reports() -> None:
    """A uint8 MaxPool of opset 22 (only its types grew since 21): one NPU node, exact; a float model
    runs whole in onnxruntime with the front end's reason."""
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    x = np.random.default_rng(0).integers(0, 256, (1, 2, 5, 5)).astype(np.uint8)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, list(x.shape))],
        [helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    with VnpuBackend.prepare(model) as rep:
        (y,) = rep.run([x])
        assert rep.npu_nodes == 1 and rep.partitions == 1, rep.report()
    padded = np.pad(x, ((0, 0), (0, 0), (0, 1), (0, 1)))  # ceil_mode: the last window is partial
    assert np.array_equal(y, padded.reshape(1, 2, 3, 2, 3, 2).max(axis=(3, 5)))
    float_model = helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "f",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3])]),
        opset_imports=[helper.make_opsetid("", 17)],
    )  # fmt: skip
    with VnpuBackend.prepare(float_model) as rep:
        assert rep.run({"x": np.array([-1, 0, 2], np.float32)})[0].tolist() == [0, 0, 2]
        assert rep.npu_nodes == 0 and "float-only model" in rep.placement[0].reason


def test_run_node_and_devices() -> None:
    """run_node: one node at a given opset; ONNX's "CPU" device only (the vnpu device is a kwarg)."""
    node = helper.make_node("Clip", ["x", "lo", "hi"], ["y"])
    x = np.arange(-6, 6, dtype=np.int8).reshape(3, 4)
    (y,) = VnpuBackend.run_node(node, [x, np.int8(-2), np.int8(3)], opset_version=13)
    assert np.array_equal(y, np.clip(x, -2, 3))
    assert VnpuBackend.supports_device("CPU") and not VnpuBackend.supports_device("CUDA")
    with pytest.raises(ValueError, match="device 'CUDA': the vnpu backend serves CPU"):
        VnpuBackend.prepare(helper.make_model(helper.make_graph([], "e", [], [])), "CUDA")


if __name__ == "__main__":
    unittest.main()
