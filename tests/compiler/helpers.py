"""Run a model through the compiler on a device and compare with TFLite's reference kernels."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import modelgen as g
from libaccel import Device
from libaccel.compiler import PartitionRunner, check_support, compile_partition, graph_from_tflite
from libaccel.compiler.reference import annotate_reference


def run_both(
    dev: Device,
    model: bytes,
    seed: int = 1,
    runtime: str = "tflite_runtime",
    inputs: Sequence[np.ndarray] | None = None,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(NPU outputs, BUILTIN_REF outputs of ``runtime``) of ``model`` compiled as one partition of all
    its nodes, for the runtime's kernels as the delegate would compile it, on ``inputs`` (default:
    random ones from ``seed``)."""
    graph = annotate_reference(graph_from_tflite(model), runtime.replace("_", "-"))
    for node in graph.nodes:
        support = check_support(graph, node)
        assert support.ok, f"node {node.index} ({node.op}) unsupported: {support.reason}"
    compiled = compile_partition(graph, [n.index for n in graph.nodes], dev.params.isa_version)
    if inputs is None:
        inputs = g.random_inputs(model, seed=seed)
    ref = g.run_reference(model, inputs, runtime)
    with PartitionRunner(dev, compiled) as runner:
        out = runner.run(dict(zip(graph.inputs, inputs, strict=True)))
    got = [out[i].reshape(r.shape) for i, r in zip(graph.outputs, ref, strict=True)]
    return got, ref


def assert_exact(
    dev: Device,
    model: bytes,
    seed: int = 1,
    runtime: str = "tflite_runtime",
    inputs: Sequence[np.ndarray] | None = None,
) -> None:
    got, ref = run_both(dev, model, seed, runtime, inputs)
    for a, b in zip(got, ref, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        differing = int(np.count_nonzero(a != b))
        assert differing == 0, f"{differing} of {a.size} outputs differ from the reference kernels"
        # A grid case that saturates everywhere would prove little.
        assert np.unique(b).size > 1 or b.size == 1
