"""Real models from the TensorFlow converter through libteflon.so: exact, and placed as recorded.

The models are ``tests/corpus/models`` (``tools.convert.make_corpus``: Keras applications and
ordinary Keras models, int8 by full-integer post-training quantization). Each runs through the
delegate and alone on TFLite's reference kernels in both runtimes: 0 differing bytes. Its placement
(nodes on the NPU, partitions, the ops left on the CPU) must equal ``tests/corpus/placement.json``,
so a change in either direction shows here; ``python -m bench.corpus --update-placement`` rewrites
it after a deliberate change. ``docs/compiler.md`` gives the reason for every op left on the CPU.

The device is the shim on the host and vnpu.ko in the QEMU guest (``VNPU_TEST_DEVICE``), where
only the models of ``GUEST_SUBSET`` run (time budget under TCG).
"""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pytest

from bench import corpus
from vnpu_common import config

MODELS = sorted(corpus.manifest())
RUNTIMES = ("tflite_runtime", "ai_edge_litert")
# In the guest (TCG, about 30x slower than the host): one of each kind that runs in seconds there:
# residual adds, two outputs, softmax head, uint8 and float edges, a layer norm's tables and float chain.
GUEST_SUBSET = (
    "resnet_small",
    "ssd_head",
    "ds_cnn_kws",
    "small_cnn_uint8",
    "mobilenet",
    "mobilenet_v2_float_io",
    "unet",
    "transformer_block",
)
DEVICE = config.TEST_DEVICE.get()

# Known failures, each with its cause (strict: a fixed case fails the run until its entry goes).
KNOWN_FAILURES = {
    ("transformer_block", "tflite_runtime"): (
        "tflite_runtime 2.14's BUILTIN_REF gives different outputs for the same input on every new "
        "interpreter and every invoke of this model, so it is no reference"
    ),
}


def _cases() -> list[object]:
    models = MODELS if DEVICE == "shim" else [m for m in MODELS if m in GUEST_SUBSET]
    return [
        pytest.param(m, r, marks=pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[m, r]))
        if (m, r) in KNOWN_FAILURES
        else pytest.param(m, r)
        for m in models
        for r in RUNTIMES
    ]


def test_corpus_is_whole() -> None:
    """Every manifest entry has its model file, the corpus stays small, and placement covers it."""
    files = {p.stem for p in corpus.CORPUS_DIR.glob("*.tflite")}
    assert files == set(MODELS)
    assert sum(p.stat().st_size for p in corpus.CORPUS_DIR.glob("*.tflite")) < 15_000_000
    loading = {m for m in MODELS if all((m, r) not in KNOWN_FAILURES for r in RUNTIMES)}
    assert loading <= set(json.loads(corpus.PLACEMENT_FILE.read_text())) <= set(MODELS)
    assert set(GUEST_SUBSET) <= set(MODELS)


@pytest.mark.parametrize("name", MODELS)
def test_manifest_describes_the_model(name: str) -> None:
    """The manifest's inputs and outputs are the model's, as a runtime reads them."""
    import ai_edge_litert.interpreter as litert

    interp = litert.Interpreter(model_content=corpus.model_bytes(name))
    entry = corpus.manifest()[name]
    for key, details in (("inputs", interp.get_input_details()), ("outputs", interp.get_output_details())):
        got = [{"shape": [int(d) for d in t["shape"]], "dtype": np.dtype(t["dtype"]).name} for t in details]
        assert got == entry[key]
    assert entry["bytes"] == len(corpus.model_bytes(name))


@pytest.mark.parametrize(("name", "runtime"), _cases())
def test_model_exact_and_placed(name: str, runtime: str) -> None:
    run = corpus.run_exact(corpus.model_bytes(name), runtime, DEVICE)
    for got, want in zip(run.outputs, run.reference, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        assert np.unique(want).size > 1, "degenerate reference output: the model says nothing"
    assert run.differing_bytes == 0, f"{run.differing_bytes} bytes differ from BUILTIN_REF"
    expected = json.loads(corpus.PLACEMENT_FILE.read_text())[name]
    assert asdict(run.placement) == expected, f"placement changed; CPU reasons: {run.reasons}"


@pytest.mark.parametrize("name", MODELS)
def test_golden_placement_agrees_with_an_independent_reading(name: str) -> None:
    """placement.json is written by the code it checks; read each model here with the ``tflite``
    flatbuffer package instead (not the delegate's reader nor the compiler) and hold the file to what
    the docs say of this corpus: every operator counted, and the only nodes on the CPU are those that
    touch a float32 model input or output (the float edges; docs/compiler.md)."""
    import tflite
    from tflite.utils import opcode2name

    recorded = json.loads(corpus.PLACEMENT_FILE.read_text()).get(name)
    if recorded is None:
        pytest.skip(f"{name} does not load in every runtime (KNOWN_FAILURES)")
    model = tflite.Model.GetRootAsModel(corpus.model_bytes(name), 0)
    graph = model.Subgraphs(0)
    edges = {graph.Inputs(i) for i in range(graph.InputsLength())}
    edges |= {graph.Outputs(i) for i in range(graph.OutputsLength())}
    float_edges = {t for t in edges if graph.Tensors(t).Type() == tflite.TensorType.FLOAT32}
    on_float_edge: dict[str, int] = {}
    for i in range(graph.OperatorsLength()):
        op = graph.Operators(i)
        tensors = [op.Inputs(j) for j in range(op.InputsLength())]
        tensors += [op.Outputs(j) for j in range(op.OutputsLength())]
        if float_edges & set(tensors):
            code = model.OperatorCodes(op.OpcodeIndex())
            builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
            on_float_edge[opcode2name(builtin)] = on_float_edge.get(opcode2name(builtin), 0) + 1
    assert recorded["nodes"] == graph.OperatorsLength()
    assert recorded["cpu_ops"] == on_float_edge
    assert recorded["npu_nodes"] == graph.OperatorsLength() - sum(on_float_edge.values())


def _mac_variants() -> list[object]:
    from device_model import mac_array as ma

    runs = {ma.ISA_NAMES[i] for i in ma.cpu_isas()}
    return [
        pytest.param(
            name,
            marks=()
            if name == "numpy" or name in runs
            else pytest.mark.skip(reason=f"this CPU cannot run {name}"),
        )
        for name in ("numpy", *ma.ISA_NAMES.values())
    ]


@pytest.mark.skipif(DEVICE != "shim", reason="the MAC array variant is chosen in the device model's process")
@pytest.mark.parametrize("variant", _mac_variants())
def test_attention_with_a_new_input_each_invoke(variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """transformer_block's attention (BATCH_MATMUL of two activations) with a new input before each
    invoke of one delegated interpreter, as an application runs it: 0 differing bytes from
    BUILTIN_REF at every invoke, on each MAC array variant this CPU runs and on numpy."""
    import ai_edge_litert.interpreter as litert

    import delegate_teflon
    from delegate_teflon.run import invoke, random_inputs
    from libaccel.runtime.model import make_interpreter

    monkeypatch.setenv("VNPU_MAC_ARRAY", variant)
    model = corpus.model_bytes("transformer_block")
    reference = make_interpreter(litert, model)
    delegate = litert.load_delegate(delegate_teflon.library_path(), {"device": DEVICE, "log_level": "quiet"})
    npu = make_interpreter(litert, model, [delegate])
    for seed in range(6):
        inputs = random_inputs(reference.get_input_details(), seed)
        want, got = invoke(reference, inputs), invoke(npu, inputs)
        for a, b in zip(got, want, strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b), f"invoke {seed}: outputs differ"
