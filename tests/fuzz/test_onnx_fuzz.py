"""Damaged .onnx files: graph_from_onnx, run_model and `accel run` end in one OnnxModelError, or work.

The corpus is the committed ONNX test networks (tests/onnx/models: MobileNet- and ResNet-shaped, QDQ
and QOperator): cut short, bit-flipped, and structurally mutated as protobufs (attributes of the wrong
type or value, initializers dropped or resized, bad scales and zero points, input types and shapes,
dangling and duplicated tensor names, nodes dropped or without outputs). Whatever the damage, the
front end returns a graph or raises OnnxModelError with a one-line message; never a bare KeyError,
IndexError, DecodeError or UnicodeDecodeError, never onnxruntime output on stdout or stderr.
"""

from __future__ import annotations

import contextlib
import io
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from libaccel.compiler.onnx_frontend import OnnxModelError, graph_from_onnx
from libaccel.runtime import model as lm
from tests.fuzz.budget import budget
from vnpu_common.cli import ExitCode

ROOT = Path(__file__).resolve().parents[2]
MODELS = sorted((ROOT / "tests" / "onnx" / "models").glob("*.onnx"))
NAMES = [p.name for p in MODELS]


@pytest.fixture(scope="module")
def corpus() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in MODELS}


def _read(data: bytes | onnx.ModelProto) -> lm.fe.OnnxGraph | None:
    """graph_from_onnx: the graph, or None for an OnnxModelError; onnxruntime must print nothing."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            og = graph_from_onnx(data)
    except OnnxModelError as e:
        assert "\n" not in str(e), str(e)
        og = None
    assert not out.getvalue(), out.getvalue()  # e.g. onnxruntime's "EP Error" banner
    return og


def test_the_corpus_reads() -> None:
    assert len(MODELS) == 4
    for p in MODELS:
        assert _read(p.read_bytes()) is not None, p.name


@pytest.mark.parametrize("name", NAMES)
def test_truncated_at_many_lengths(corpus: dict[str, bytes], name: str) -> None:
    data = corpus[name]
    lengths = sorted({*range(0, 32), *np.linspace(32, len(data) - 1, 40).astype(int).tolist()})
    for n in lengths:
        with pytest.raises(OnnxModelError):
            graph_from_onnx(data[:n])


@given(
    name=st.sampled_from(NAMES),
    flips=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 7)), min_size=1, max_size=8),
)
@budget(40)
@example(name="resnet_like_qop.onnx", flips=[(2204, 5)])  # op_type "QLinear\xc1dd": not UTF-8
def test_bit_flips(corpus: dict[str, bytes], name: str, flips: list[tuple[int, int]]) -> None:
    model = bytearray(corpus[name])
    for at, bit in flips:
        model[at % len(model)] ^= 1 << bit
    _read(bytes(model))


# --- structural mutations -----------------------------------------------------------------------------
def _attr_type(m: onnx.ModelProto, r: random.Random) -> None:
    attributes = [a for n in m.graph.node for a in n.attribute]
    if not attributes:
        return
    a = r.choice(attributes)
    for f in ("f", "i", "s", "t", "ints", "floats", "strings"):
        a.ClearField(f)
    kind = r.choice(["f", "s", "i", "ints", "floats", "t"])
    if kind == "f":
        a.f, a.type = 1.5, AttributeProto.FLOAT
    elif kind == "s":
        a.s, a.type = r.choice([b"", b"x", b"\xff"]), AttributeProto.STRING
    elif kind == "i":
        a.i, a.type = r.choice([0, -1, 7, 1 << 40]), AttributeProto.INT
    elif kind == "ints":
        a.ints.extend(r.choice([0, -1, 3, 1 << 40]) for _ in range(r.randrange(6)))
        a.type = AttributeProto.INTS
    elif kind == "floats":
        a.floats.extend([1.0, 2.0])
        a.type = AttributeProto.FLOATS
    else:
        a.t.CopyFrom(numpy_helper.from_array(np.zeros(2, np.float32)))
        a.type = AttributeProto.TENSOR


def _attr_value(m: onnx.ModelProto, r: random.Random) -> None:
    attributes = [a for n in m.graph.node for a in n.attribute]
    if not attributes:
        return
    a = r.choice(attributes)
    if a.type == AttributeProto.INT:
        a.i = r.choice([0, -1, -5, 2, 3, 100, 1 << 31])
    elif a.type == AttributeProto.INTS and a.ints:
        a.ints[r.randrange(len(a.ints))] = r.choice([0, -1, -3, 100])
        if r.random() < 0.3:
            del a.ints[-1]
    elif a.type == AttributeProto.FLOAT:
        a.f = r.choice([0.0, -1.0, float("nan"), float("inf")])
    elif a.type == AttributeProto.STRING:
        a.s = r.choice([b"", b"bogus", b"SAME_UPPER", b"linear"])


def _drop_initializer(m: onnx.ModelProto, r: random.Random) -> None:
    del m.graph.initializer[r.randrange(len(m.graph.initializer))]


def _quant_param(m: onnx.ModelProto, r: random.Random) -> None:
    """A scale or zero point resized, retyped, or set to a bad value (zero, negative, NaN, ...)."""
    t = r.choice([t for t in m.graph.initializer if t.name.endswith(("_scale", "_zero_point"))])
    try:
        arr = numpy_helper.to_array(t).copy()
    except ValueError:
        return  # an earlier mutation left its dims at odds with its data (that case is its own test)
    how = r.randrange(5)
    if how == 0:
        arr = np.resize(arr, (r.choice([0, 2, 3, 7]),)).astype(arr.dtype)
    elif how == 1:
        arr = arr.astype(r.choice([np.int32, np.float64, np.int64, np.float16, np.uint16]))
    elif how == 2 and t.name.endswith("_scale"):
        arr = np.full_like(arr, r.choice([0.0, -1.0, np.nan, np.inf, 1e-45, 1e30]))
    elif how == 3:
        arr = arr.reshape((1,) * r.randrange(1, 4) + arr.shape)
    else:
        arr = np.full_like(arr, r.choice([-128, 127, 255, 0]) if arr.dtype.kind in "iu" else 1.0)
    t.CopyFrom(numpy_helper.from_array(arr, t.name))


def _initializer_dims(m: onnx.ModelProto, r: random.Random) -> None:
    t = r.choice(m.graph.initializer)
    if t.dims:
        t.dims[r.randrange(len(t.dims))] = r.choice([0, 1, 3, 1000, -1])
    else:
        t.dims.append(2)


def _io_shape_or_type(m: onnx.ModelProto, r: random.Random) -> None:
    vi = r.choice([*m.graph.input, *m.graph.output])
    if r.random() < 0.3:
        vi.type.tensor_type.elem_type = r.choice(
            [TensorProto.INT8, TensorProto.FLOAT16, TensorProto.INT32, TensorProto.STRING, 0]
        )
        return
    dims = vi.type.tensor_type.shape.dim
    if r.random() < 0.7:
        # (not millions: a model that big is valid, and onnxruntime's probe run allocates for it)
        dims[r.randrange(len(dims))].dim_value = r.choice([0, 1, 2, 7, 1 << 10])
    else:
        del dims[r.randrange(len(dims))]


def _with_outputs(m: onnx.ModelProto, r: random.Random) -> onnx.NodeProto:
    """A node that still has an output (an earlier mutation may have taken them all)."""
    return r.choice([n for n in m.graph.node if n.output] or [m.graph.node.add(op_type="Relu", output=["o"])])


def _dangling_name(m: onnx.ModelProto, r: random.Random) -> None:
    n = _with_outputs(m, r)
    if n.input and r.random() < 0.7:
        n.input[r.randrange(len(n.input))] = r.choice(["nowhere", "", n.output[0]])
    else:
        m.graph.output[0].name = "nowhere"


def _outputs(m: onnx.ModelProto, r: random.Random) -> None:
    """A node's output cleared or removed, or a second node writing the same name."""
    n = _with_outputs(m, r)
    how = r.randrange(3)
    if how == 0:
        n.output[0] = ""
    elif how == 1:
        del n.output[:]
    else:
        _with_outputs(m, r).output[0] = n.output[0]


def _nodes(m: onnx.ModelProto, r: random.Random) -> None:
    """A node dropped, its inputs swapped or cleared, or a Constant shadowing one of its inputs."""
    n = r.choice(m.graph.node)
    how = r.randrange(3)
    if how == 0:
        m.graph.node.remove(n)
    elif how == 1 and len(n.input) > 1:
        i, j = r.sample(range(len(n.input)), 2)
        n.input[i], n.input[j] = n.input[j], n.input[i]
    elif how == 1:
        del n.input[:]
    elif n.input and n.input[0]:
        value = numpy_helper.from_array(np.zeros(r.choice([(1,), (2, 3)]), r.choice([np.int8, np.float32])))
        m.graph.node.insert(0, helper.make_node("Constant", [], [n.input[0]], value=value))


MUTATIONS: dict[str, Callable[[onnx.ModelProto, random.Random], None]] = {
    "attribute type": _attr_type,
    "attribute value": _attr_value,
    "initializer dropped": _drop_initializer,
    "scale or zero point": _quant_param,
    "initializer dims": _initializer_dims,
    "input/output shape or type": _io_shape_or_type,
    "dangling name": _dangling_name,
    "node outputs": _outputs,
    "nodes": _nodes,
}


@pytest.fixture(scope="module")
def protos(corpus: dict[str, bytes]) -> dict[str, onnx.ModelProto]:
    return {name: onnx.load_from_string(data) for name, data in corpus.items()}


@given(
    name=st.sampled_from(NAMES),
    kinds=st.lists(st.sampled_from(sorted(MUTATIONS)), min_size=1, max_size=2),
    seed=st.integers(0, 1 << 32),
)
@budget(60)
def test_structural_mutations(
    protos: dict[str, onnx.ModelProto], tmp_path_factory: pytest.TempPathFactory, name: str, kinds: list[str],
    seed: int,
) -> None:  # fmt: skip
    """A mutated model reads (and then runs on the shim) or raises OnnxModelError, nothing else."""
    m = onnx.ModelProto()
    m.CopyFrom(protos[name])
    r = random.Random(seed)
    for kind in kinds:
        MUTATIONS[kind](m, r)
    og = _read(m)
    if og is not None and r.random() < 0.25:  # running costs more than reading: a quarter of them
        path = tmp_path_factory.mktemp("mutated") / name
        path.write_bytes(m.SerializeToString())
        with contextlib.suppress(OnnxModelError):
            lm.run_model(path, device="shim", graph=og)


# --- the bugs these found, kept ---------------------------------------------------------------------
def _qop() -> onnx.ModelProto:
    return onnx.load(str(MODELS[NAMES.index("mobilenet_like_qop.onnx")]))


def _set(m: onnx.ModelProto, name: str, value: np.ndarray) -> None:
    t = next(t for t in m.graph.initializer if t.name == name)
    t.CopyFrom(numpy_helper.from_array(value, name))


def test_empty_quantization_parameter() -> None:
    # onnxruntime's QLinearSoftmax reads the first value unchecked: SIGSEGV in the probe run.
    m = _qop()
    _set(m, "softmax42_zero_point", np.zeros(0, np.int8))
    with pytest.raises(OnnxModelError, match="'softmax42_zero_point' is empty"):
        graph_from_onnx(m)


@pytest.mark.parametrize("value", [0.0, -0.5, np.nan, np.inf, 1e-45])
def test_bad_scale(value: float) -> None:
    # onnxruntime runs any of these; the NPU's requantization divided by zero or overflowed (numpy
    # warnings on stderr) and computed from nonsense.
    m = _qop()
    _set(m, "w1_scale", np.array(value, np.float32))
    with pytest.raises(OnnxModelError, match="scale 'w1_scale' is .*, not a positive finite number"):
        graph_from_onnx(m)


def test_initializer_dims_at_odds_with_its_data() -> None:
    m = _qop()
    t = next(t for t in m.graph.initializer if t.name == "w1_quantized")
    t.dims[0] = 0
    with pytest.raises(OnnxModelError, match="onnxruntime rejects the model"):
        graph_from_onnx(m)


def test_node_without_outputs() -> None:
    m = onnx.load(str(MODELS[NAMES.index("resnet_like_qdq.onnx")]))
    dq = next(n for n in m.graph.node if n.op_type == "DequantizeLinear")
    del dq.output[:]  # was an IndexError in the QDQ form test
    with pytest.raises(OnnxModelError):
        graph_from_onnx(m)


def test_names_and_attributes_that_are_not_text() -> None:
    m = _qop()
    m.graph.node[0].name = "conv"
    data = m.SerializeToString().replace(b"\x04conv", b"\x04c\xffnv", 1)
    with pytest.raises(OnnxModelError, match=r"the model.graph.node\[0\].name is not UTF-8 text"):
        graph_from_onnx(data)
    m = _qop()
    conv = next(n for n in m.graph.node if n.op_type == "QLinearConv")
    conv.attribute.append(helper.make_attribute("auto_pad", b"NOT\xffSET"))
    out = io.StringIO()
    with pytest.raises(OnnxModelError, match=r"\.s is not UTF-8 text"), contextlib.redirect_stdout(out):
        graph_from_onnx(m)
    assert not out.getvalue()  # was onnxruntime's "EP Error" banner, then a UnicodeDecodeError


def test_accel_run_prints_one_line(tmp_path: Path) -> None:
    """onnxruntime's own error log stays off: the CLI's error is its one line on stderr."""
    m = _qop()
    conv = next(n for n in m.graph.node if n.op_type == "QLinearConv")
    next(a for a in conv.attribute if a.name == "group").i = 5  # ORT fails running it
    path = tmp_path / "bad_group.onnx"
    onnx.save(m, path)
    r = subprocess.run(
        [sys.executable, "-m", "libaccel.tools.cli", "run", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == ExitCode.BAD_FILE and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("accel run: ") and "onnxruntime" in r.stderr and not r.stdout, r.stderr
