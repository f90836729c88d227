"""Running a model on TFLite's reference kernels (``OpResolverType.BUILTIN_REF``), the spec the NPU is
bit-exact with, and the random inputs to run it on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from modelgen.builder import NP_TYPES


def _interpreter_module(runtime: str) -> Any:
    if runtime == "tflite_runtime":
        import tflite_runtime.interpreter as mod
    elif runtime == "ai_edge_litert":
        import ai_edge_litert.interpreter as mod
    else:
        raise ValueError(f"unknown runtime {runtime!r} (tflite_runtime or ai_edge_litert)")
    return mod


def reference_interpreter(
    model: bytes, runtime: str = "tflite_runtime", delegates: Sequence[Any] = ()
) -> Any:
    """An allocated interpreter for ``model`` on TFLite's reference kernels (BUILTIN_REF)."""
    mod = _interpreter_module(runtime)
    interp = mod.Interpreter(
        model_content=model,
        experimental_op_resolver_type=mod.OpResolverType.BUILTIN_REF,
        experimental_delegates=list(delegates) or None,
    )
    interp.allocate_tensors()
    return interp


def random_inputs(model: bytes, seed: int = 0) -> list[np.ndarray]:
    """Uniformly random inputs over each input's full integer range (as Mesa's Teflon tests do)."""
    from libaccel.compiler.graph import graph_from_tflite
    from libaccel.runtime.inputs import random_arrays

    g = graph_from_tflite(model)
    return random_arrays(((NP_TYPES[g.tensors[i].dtype], g.tensors[i].shape) for i in g.inputs), seed)


def run_reference(
    model: bytes, inputs: Sequence[np.ndarray], runtime: str = "tflite_runtime", delegates: Sequence[Any] = ()
) -> list[np.ndarray]:
    """Run ``model`` once on BUILTIN_REF (plus ``delegates``); its outputs in the model's order."""
    interp = reference_interpreter(model, runtime, delegates)
    for detail, value in zip(interp.get_input_details(), inputs, strict=True):
        interp.set_tensor(detail["index"], value)
    interp.invoke()
    return [interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()]
