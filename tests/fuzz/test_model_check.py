"""Damaged .tflite files: every loader refuses them with one ModelError, nothing reads past the end.

tflite_runtime 2.14 does not verify flatbuffers (a truncated model SIGSEGVs it) and the ``tflite``
reader raises bare ``struct.error``; libaccel.compiler.tflite_check stands in front of both.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from libaccel.compiler import ModelError, check_tflite, graph_from_tflite
from modelgen import ModelBuilder, Quant
from tests.fuzz.budget import budget
from vnpu_common.cli import ExitCode

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus" / "models"
MODELS = sorted(CORPUS.glob("*.tflite"))
# The small ones keep the per-example cost low; the big ones are read whole once.
SMALL = [p for p in MODELS if p.stat().st_size < 200_000]


@pytest.fixture(scope="module")
def corpus() -> dict[str, bytes]:
    return {p.stem: p.read_bytes() for p in MODELS}


def test_every_corpus_model_passes(corpus: dict[str, bytes]) -> None:
    for name, data in corpus.items():
        check_tflite(data)
        assert graph_from_tflite(data).nodes, name


@pytest.mark.parametrize("path", SMALL, ids=lambda p: p.stem)
def test_truncated_at_many_lengths(path: Path) -> None:
    data = path.read_bytes()
    # Every length near the start (header, root table, vtables), then 200 spread over the file.
    lengths = sorted({*range(0, 64), *np.linspace(64, len(data) - 1, 200).astype(int).tolist()})
    for n in lengths:
        with pytest.raises(ModelError, match="TFLite model"):
            graph_from_tflite(data[:n])


def test_not_a_model() -> None:
    with pytest.raises(ModelError, match="no TFL3 file identifier"):
        check_tflite(b"\0" * 64)
    with pytest.raises(ModelError, match="shorter than a flatbuffer header"):
        check_tflite(b"TFL3")


@given(st.data())
@budget(60)
def test_bit_flips_give_a_graph_or_a_model_error(data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(SMALL), label="model")
    model = bytearray(path.read_bytes())
    for _ in range(data.draw(st.integers(1, 8), label="flips")):
        # Flips in the first 4 KiB hit the structure (root, vtables, the model's tables) far more
        # often than weight bytes; the rest of the file gets some too.
        hi = data.draw(st.sampled_from([min(4096, len(model)), len(model)]))
        at = data.draw(st.integers(0, hi - 1))
        model[at] ^= 1 << data.draw(st.integers(0, 7))
    try:
        graph = graph_from_tflite(bytes(model))
    except ModelError:
        return
    for node in graph.nodes:
        assert all(-1 <= t < len(graph.tensors) for t in (*node.inputs, *node.outputs))


def test_quantized_operand_without_quantization_is_refused() -> None:
    # A CONV_2D output that lost its quantization table passes the flatbuffer checks and then
    # aborts tflite_runtime 2.14 in allocate_tensors (found by bit-flipping resnet_small).
    m = ModelBuilder()
    q = Quant.tensor(0.05, 0)
    a = m.add_tensor("a", (1, 4), "int8", q)
    b = m.add_tensor("b", (1, 4), "int8", q)
    out = m.add_tensor("out", (1, 4), "int8", None)
    m.add_op("ADD", (a, b), (out,))
    with pytest.raises(ModelError, match="operator 0 uses int8 tensor 2 that has no quantization"):
        graph_from_tflite(m.build((a, b), (out,)))


def test_index_out_of_range_is_refused() -> None:
    m = ModelBuilder()
    q = Quant.tensor(0.05, 0)
    a = m.add_tensor("a", (1, 4), "int8", q)
    out = m.add_tensor("out", (1, 4), "int8", q)
    m.add_op("RELU", (a,), (out,))
    with pytest.raises(ModelError, match="subgraph 0 outputs name tensor 7 of 2"):
        check_tflite(m.build((a,), (7,)))
    m.add_op("RELU", (a,), (9,))
    with pytest.raises(ModelError, match="operator 1 outputs name tensor 9 of 2"):
        check_tflite(m.build((a,), (out,)))


def test_delegate_run_refuses_a_cut_model(tmp_path: Path) -> None:
    cut = tmp_path / "cut.tflite"
    cut.write_bytes((CORPUS / "mobilenet.tflite").read_bytes()[:3000])
    r = subprocess.run(
        [sys.executable, "-m", "delegate_teflon.run", str(cut), "--device", "shim"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == ExitCode.BAD_FILE, r
    lines = r.stderr.strip().splitlines()
    expected = f"python -m delegate_teflon.run: {cut}: not a valid TFLite model"
    assert len(lines) == 1 and lines[0].startswith(expected), r.stderr


# Run in a child: a model the check lets through must not kill the runtime with a signal.
_RUNTIME_CHILD = """
import random, sys
from pathlib import Path
import tflite_runtime.interpreter as tfl
from libaccel.compiler import ModelError, check_tflite
rng = random.Random(int(sys.argv[1]))
paths = sys.argv[2:]
passed = 0
for k in range(60):
    model = bytearray(Path(rng.choice(paths)).read_bytes())
    for _ in range(rng.choice((1, 2, 4))):
        i = rng.randrange(len(model))
        model[i] ^= 1 << rng.randrange(8)
    try:
        check_tflite(bytes(model))
    except ModelError:
        continue
    passed += 1
    try:
        tfl.Interpreter(
            model_content=bytes(model), experimental_op_resolver_type=tfl.OpResolverType.BUILTIN_REF
        ).allocate_tensors()
    except (ValueError, RuntimeError):
        pass
print(passed)
"""


@pytest.mark.parametrize("seed", [2, 3])
def test_checked_models_do_not_crash_tflite_runtime(seed: int) -> None:
    paths = [str(p) for p in SMALL if p.stat().st_size < 120_000]
    r = subprocess.run(
        [sys.executable, "-c", _RUNTIME_CHILD, str(seed), *paths],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode == 0, f"tflite_runtime died ({r.returncode}) on a model check_tflite passed: {r}"
    assert int(r.stdout.strip()) > 0  # some damaged models do reach the runtime
