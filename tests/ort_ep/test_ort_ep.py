"""libvnpu_ort_ep.so in the real onnxruntime: its ABI mirror, registration, placement, exactness.

Each session runs in a fresh interpreter that imports onnxruntime alone (no vnpu module), as a user's
script would: it registers the library by path, runs the model with the vnpu EP and with the CPU EP,
unregisters the library and exits.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest

import vnpu_ort_ep
from vnpu_ort_ep import measure

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "onnx" / "models"


def run_ep(model: Path, options: dict[str, str]) -> dict:
    return measure.run_ep(model, options)


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
    version = int(re.search(r"^#\s*define VNPU_ORT_API_VERSION (\d+)", header, re.M)[1])
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
    # each group compiled from the whole model, where the fusion sees the int8 Q/DQ context; the
    # float Conv groups too (at most 1 unit off, none on these inputs)
    assert result["assigned"] == {"VnpuExecutionProvider": 51, "CPUExecutionProvider": 2}
    exact = run_ep(path, {"device": "shim", "exact": "true"})
    assert exact["differing_bytes"] == 0
    assert exact["assigned"] == {"VnpuExecutionProvider": 36, "CPUExecutionProvider": 17}


# (vnpu EP nodes, all nodes) of onnxruntime's graph, quantize_static's defaults (int8 activations)
# and uint8 activations, per-tensor or per-channel weights alike
NETWORK_COUNTS = {
    "int8": {"odd_cnn": (52, 54), "resnet_like": (51, 53), "attention_block": (0, 56), "ffn": (20, 22)},
    "uint8": {"odd_cnn": (52, 54), "resnet_like": (51, 53), "attention_block": (43, 56), "ffn": (20, 22)},
}
# with the exact option: the QDQ Conv/MatMul groups onnxruntime computes in float stay on the CPU EP
EXACT_COUNTS = {"odd_cnn": (37, 54), "resnet_like": (36, 53), "attention_block": (0, 56), "ffn": (16, 22)}


def test_exact_option_keeps_float_sums_on_the_cpu(tmp_path: Path) -> None:
    paths = measure.quantized_networks(tmp_path, "int8")
    counts = {}
    for name, path in paths.items():
        m = measure.measure(name, path, {"device": "shim", "exact": "true"}, runs=3)
        assert m.differing_bytes == 0, (name, m)
        counts[name] = (m.vnpu, m.total)
    assert counts == EXACT_COUNTS


def test_float_sum_groups_on_the_npu_within_one_unit() -> None:
    """float_sums: a QDQ Conv/MatMul group onnxruntime computes in float32 runs as the QLinear op
    of its bytes; every output within 1 quantized unit of onnxruntime's."""
    from onnx import numpy_helper

    from libaccel import Device
    from libaccel.compiler import onnx_frontend as fe
    from libaccel.runtime.model import OnnxProgram
    from tools.convert.make_onnx_models import ffn, odd_cnn, quantize

    device = Device.open("shim")
    rng = np.random.default_rng(5)
    for build in (odd_cnn, ffn):
        model = quantize(build(), "qdq", "int8")
        program = OnnxProgram(fe.graph_from_onnx(model, float_sums=True), device)
        npu = {p.op for p in program.placement if p.npu}
        assert {"Conv" if build is odd_cnn else "MatMul"} <= npu, npu
        inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        last = next(n for n in reversed(model.graph.node) if n.op_type == "DequantizeLinear")
        unit = float(inits[last.input[1]])
        ref = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        name = model.graph.input[0].name
        shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        for _ in range(4):
            x = (2 * rng.standard_normal(shape)).astype(np.float32)
            (want,) = ref.run(None, {name: x})
            (got,) = program.run({name: x}).values()
            assert np.abs(got - want).max() <= unit * 1.001
        program.close()
    device.close()


@pytest.mark.parametrize(("activations", "weights"), measure.CONFIGURATIONS)
def test_quantize_static_networks_placed_and_exact(tmp_path: Path, activations: str, weights: str) -> None:
    paths = measure.quantized_networks(tmp_path, activations, weights)
    counts = {}
    for name, path in paths.items():
        m = measure.measure(name, path, {"device": "shim"}, runs=3)
        assert m.differing_bytes == 0, (name, m)
        assert m.boundary == 2, m  # the input QuantizeLinear and the output DequantizeLinear
        counts[name] = (m.vnpu, m.total)
        if m.share < measure.TARGET:  # what stays on the CPU EP says why
            assert m.reasons, m
    assert counts == NETWORK_COUNTS[activations]


def test_qoperator_model_claimed_with_onnxruntimes_shapes() -> None:
    # com.microsoft ops (QLinearAdd, QLinearGlobalAveragePool) have no onnx shape inference: the
    # EP reads their shapes from onnxruntime's graph
    result = run_ep(MODELS / "resnet_like_qop.onnx", {"device": "shim"})
    assert result["differing_bytes"] == 0
    assert result["assigned"] == {"VnpuExecutionProvider": 12, "CPUExecutionProvider": 2}


def test_float_qdq_groups_on_the_npu_exact_and_float_sums_left_with_the_reason(tmp_path: Path) -> None:
    """The front end lowers DQ -> Add/Mul/MaxPool/Concat -> Q groups that onnxruntime computes in
    float as tables of that float computation; a float Conv/MatMul group stays on the CPU, saying why."""
    from libaccel import Device
    from libaccel.compiler import onnx_frontend as fe
    from libaccel.runtime.model import OnnxProgram
    from tools.convert.make_onnx_models import ffn, odd_cnn, quantize

    device = Device.open("shim")
    rng = np.random.default_rng(3)
    for build in (odd_cnn, ffn):
        model = quantize(build(), "qdq", "int8")
        og = fe.graph_from_onnx(model)
        program = OnnxProgram(og, device)
        npu = {p.op for p in program.placement if p.npu}
        assert {"Add", "DequantizeLinear", "QuantizeLinear"} <= npu
        if build is odd_cnn:
            assert "MaxPool" in npu  # its Concat is a QLinearConcat: onnxruntime fuses that group
        float_sums = [p for p in program.placement if not p.npu and p.op in ("Conv", "MatMul")]
        assert float_sums and all("not bit-exact with float32 sums" in p.reason for p in float_sums)
        ref = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        name = model.graph.input[0].name
        shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        for _ in range(4):
            x = (2 * rng.standard_normal(shape)).astype(np.float32)
            (want,) = ref.run(None, {name: x})
            (got,) = program.run({name: x}).values()
            assert got.tobytes() == want.tobytes()
        program.close()
    device.close()


def test_groups_that_would_change_a_cpu_fusion_stay_on_the_cpu(tmp_path: Path) -> None:
    from libaccel.compiler import onnx_frontend as fe
    from libaccel.compiler import partition
    from libaccel.runtime.model import onnx_placement
    from tools.convert.make_onnx_models import attention_block, quantize
    from vnpu_ort_ep.plugin import edge_plan, keep_cpu_fusions, npu_groups

    # with its tensors' types, as onnxruntime's graph gives them
    model = onnx.shape_inference.infer_shapes(quantize(attention_block(), "qdq", "int8"))
    og = fe.graph_from_onnx(model)
    placed = onnx_placement(og, True)
    groups = npu_groups(model, og, placed)
    runs = partition.partition_runs(placed)
    plans = {}
    for k, (run, g) in enumerate(zip(runs, groups, strict=True)):
        try:
            plans[k] = edge_plan(model, og, run, g)
        except ValueError:
            pass  # a DequantizeLinear shared with a CPU node: onnxruntime's graph has it duplicated
    assert plans and any(e.flip for p in plans.values() for e in p.inputs.values())
    dropped = keep_cpu_fusions(model, og, groups, plans)
    # QK^T and the attention-weighted V are QLinearMatMul on the CPU EP only with their int8
    # inputs' Q/DQ pairs converted to uint8: every group around them stays on the CPU
    assert set(dropped) == set(plans)
    assert any("QLinearMatMul" in reason for reason in dropped.values())


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
    from libaccel.runtime.model import onnx_placement
    from vnpu_ort_ep.plugin import npu_groups

    model = onnx.load(MODELS / "resnet_like_qdq.onnx")
    og = fe.graph_from_onnx(model)
    groups = npu_groups(model, og, onnx_placement(og, True))
    ops = {model.graph.node[k].op_type for g in groups for k in g}
    assert {"Conv", "DequantizeLinear", "QuantizeLinear"} <= ops
    assert np.all(np.diff(groups[0]) > 0)


VERBOSE_LINE = re.compile(
    r"vnpu EP: (\S+) \(float-sum groups: (.*?)\): (\d+) of (\d+) bytes differ from the CPU EP's "
    r"float computation \(max (\d+) units?\)"
)


def test_verbose_reports_the_float_sum_groups_differing_bytes(tmp_path: Path) -> None:
    from tools.convert.make_onnx_models import ffn, quantize

    path = tmp_path / "ffn_int8_qdq.onnx"
    onnx.save(quantize(ffn(), "qdq", "int8"), path)
    runs = 2
    result = measure.run_ep(path, {"device": "shim", "verbose": "true"}, runs)  # at warning level
    assert result["differing_bytes"] == 0
    lines = [m.groups() for m in VERBOSE_LINE.finditer(result["log"])]
    # one line per run of each fused node with a float MatMul group
    assert lines and len(lines) % runs == 0, result["log"][-3000:]
    assert all("MatMul" in groups for _, groups, *_ in lines)
    assert all(int(n) <= int(m) and int(units) <= 1 for _, _, n, m, units in lines)
    exact = measure.run_ep(path, {"device": "shim", "verbose": "true", "exact": "true"}, runs)
    assert not VERBOSE_LINE.search(exact["log"])  # no float-sum group on the NPU: nothing to report


def test_verbose_reference_counts_differing_bytes() -> None:
    """The verbose report's reference (the partition's front-end nodes in onnxruntime's CPU EP)
    against the NPU's run of the same partition, and a changed byte counted."""
    from libaccel import Device
    from libaccel.compiler import PartitionRunner, compile_cached, partition
    from libaccel.compiler import onnx_frontend as fe
    from libaccel.runtime.model import onnx_placement
    from tools.convert.make_onnx_models import ffn, quantize
    from vnpu_ort_ep.plugin import Difference, compare, edge_plan, npu_groups, reference

    model = onnx.shape_inference.infer_shapes(quantize(ffn(), "qdq", "int8"))
    og = fe.graph_from_onnx(model, float_sums=True)
    placed = onnx_placement(og, True)
    groups = npu_groups(model, og, placed)
    plans = []
    for run, g in zip(partition.partition_runs(placed), groups, strict=True):
        try:
            plans.append(edge_plan(model, og, run, g))
        except ValueError:
            pass  # a DequantizeLinear shared with a CPU node: onnxruntime's graph has it duplicated
    refs = [(plan, ref) for plan in plans if (ref := reference(og, plan)) is not None]
    assert refs and all("MatMul" in " ".join(ref.groups) for _, ref in refs)
    device = Device.open("shim")
    rng = np.random.default_rng(7)
    for plan, ref in refs:
        compiled, _ = compile_cached(og.graph, list(plan.run), device.params.isa_version)
        with PartitionRunner(device, compiled) as runner:
            inputs = {}
            for name, edge in plan.inputs.items():
                shape = og.info[og.graph.tensors[edge.ir].name][1]
                inputs[name] = rng.integers(-128, 128, shape).astype(edge.dtype)
            values = runner.run({e.ir: fe.layout_to_ir(inputs[n], e.perm) for n, e in plan.inputs.items()})
            outputs = {
                n: fe.layout_to_onnx(values[e.ir].reshape(e.shape), e.perm) for n, e in plan.outputs.items()
            }
        d = compare(ref, inputs, outputs)
        assert d.total == sum(v.nbytes for v in outputs.values()) and d.max_units <= 1, d
        # the reference's own outputs, one byte moved by one unit
        names = list(dict.fromkeys(ref.outputs.values()))
        feeds = {ref.inputs[n]: v for n, v in inputs.items()}
        want = dict(zip(names, ref.session.run(names, feeds), strict=True))
        changed = {n: want[t].copy() for n, t in ref.outputs.items()}
        first = next(iter(changed.values())).reshape(-1)
        first[0] = first[0] + 1 if first[0] < np.iinfo(first.dtype).max else first[0] - 1
        assert compare(ref, inputs, changed) == Difference(1, d.total, 1)
    device.close()
