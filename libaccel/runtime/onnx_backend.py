"""vnpu as an ONNX backend (``onnx.backend.base.Backend``): what ``onnx.backend.test.BackendTest`` drives.

    from libaccel.runtime.onnx_backend import VnpuBackend

    rep = VnpuBackend.prepare(model)          # a ModelProto; read, compiled and loaded once
    (y,) = rep.run([x])                       # the graph inputs in order (or a dict by name)
    print(rep.report())                       # which node ran on the NPU, which on the CPU and why

``prepare`` reads the model with :func:`libaccel.compiler.onnx_frontend.graph_from_onnx` and runs it
as :class:`libaccel.runtime.model.OnnxProgram` does for ``accel run``: NPU partitions for the nodes the
compiler lowers, onnxruntime for the rest. A model the front end cannot read at all (a float-only
model, a type it does not take, ...) still runs: the whole model in one onnxruntime session, every
node reported on the CPU with the front end's reason. Either way the answer is onnxruntime's where
the CPU computes it and the NPU's, exact against onnxruntime, where the NPU does.

ONNX's device strings name where the host code runs: ``"CPU"`` is the one supported (the host runs
the CPU nodes and drives the NPU). The vnpu device is the ``vnpu_device`` keyword: "shim" (the
default), "kernel" or a ``/dev/accel/accelN`` node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx.backend.base import Backend, BackendRep

from libaccel.compiler import onnx_frontend as fe
from libaccel.runtime.model import ModelResult, OnnxProgram, Placement

__all__ = [
    "VnpuBackend",
    "VnpuBackendRep",
    "prepare",
    "run_model",
    "run_node",
    "runnable_model",
    "supports_device",
]

DEVICES = ("CPU",)  # ONNX device types this backend serves (the host drives the NPU)


@dataclass
class _Fallback:
    """The whole model in one onnxruntime session (the front end refused it, with ``reason``)."""

    session: Any
    reason: str


def runnable_model(model: Any) -> Any:
    """``model``, or where onnxruntime has no kernel for one of its ops at the model's opset, the
    model converted down by onnx's own version converter to the newest opset (not below the
    front end's window, :data:`~libaccel.compiler.onnx_frontend.OPSETS`) that onnxruntime runs.
    onnx releases define opsets before onnxruntime implements them (onnx 1.23's QuantizeLinear of
    opset 28 against onnxruntime 1.32's of 25); the converter's adapters keep the meaning."""
    import onnx.version_converter

    try:
        fe.reference_session(model)
        return model
    except fe.OnnxModelError as e:
        first = e
    for target in range(fe.model_opset(model) - 1, fe.OPSETS.stop - 2, -1):
        try:
            converted = onnx.version_converter.convert_version(model, target)
            fe.reference_session(converted)
        except Exception:  # no adapter to this opset, or onnxruntime still refuses it: the next
            continue
        return converted
    raise first


class VnpuBackendRep(BackendRep):
    """A prepared model: ``run(inputs)`` as often as wanted, then ``close()`` (or ``with``)."""

    def __init__(
        self, model: Any, vnpu_device: str = "shim", shapes: dict[str, tuple[int, ...]] | None = None
    ):
        from libaccel import Device

        inits = {t.name for t in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]
        self.output_names = [o.name for o in model.graph.output]
        self.device: Any = None
        self.program: OnnxProgram | None = None
        self.fallback: _Fallback | None = None
        self.opset = fe.model_opset(model)
        model = runnable_model(model)
        self.converted_to = fe.model_opset(model) if fe.model_opset(model) != self.opset else None
        try:
            og = fe.graph_from_onnx(model, shapes)
        except fe.OnnxModelError as e:
            m = fe.load_model(model)
            self.fallback = _Fallback(fe.reference_session(m), str(e))
            self.placement = [
                Placement(k, n.op_type, False, reason=f"{e}; the model runs in onnxruntime", name=n.name)
                for k, n in enumerate(m.graph.node)
            ]
            self.partitions = 0
            return
        self.device = Device.open(vnpu_device)
        try:
            self.program = OnnxProgram(og, self.device)
        except BaseException:
            self.device.close()
            raise
        self.placement = self.program.placement
        self.partitions = self.program.partitions

    def run(
        self, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray], **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, Mapping):
            feeds = {name: np.asarray(v) for name, v in inputs.items()}
        else:
            if len(inputs) != len(self.input_names):
                raise ValueError(f"{len(inputs)} inputs given, the model has {len(self.input_names)}")
            # np.asarray: a 0-d input may come as a numpy scalar, which onnxruntime does not take
            feeds = {name: np.asarray(v) for name, v in zip(self.input_names, inputs, strict=True)}
        if self.fallback is not None:
            try:
                values = self.fallback.session.run(self.output_names, feeds)
            except Exception as e:  # onnxruntime's Fail/InvalidArgument: one line
                raise fe.OnnxModelError(
                    f"onnxruntime cannot run the model: {str(e).splitlines()[0]}"
                ) from None
            return tuple(values)
        assert self.program is not None
        out = self.program.run(feeds)
        return tuple(out[name] for name in self.output_names)

    @property
    def npu_nodes(self) -> int:
        return sum(p.npu for p in self.placement)

    def report(self) -> str:
        """The placement report of ``accel run`` (:meth:`libaccel.runtime.model.ModelResult.report`)."""
        return ModelResult({}, self.placement, self.partitions, 0.0, 0.0, 0.0).report()

    def close(self) -> None:
        if self.program is not None:
            self.program.close()
            self.program = None
        if self.device is not None:
            self.device.close()
            self.device = None

    def __enter__(self) -> VnpuBackendRep:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class VnpuBackend(Backend):
    """The ONNX backend: ``prepare`` a model for the NPU (with onnxruntime for what it cannot run)."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> VnpuBackendRep:
        """``model`` read and compiled for ``vnpu_device`` (kwargs: ``vnpu_device``, ``shapes``)."""
        if not cls.supports_device(device):
            raise ValueError(f"device {device!r}: the vnpu backend serves {', '.join(DEVICES)}")
        return VnpuBackendRep(model, kwargs.get("vnpu_device", "shim"), kwargs.get("shapes"))

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        with cls.prepare(model, device, **kwargs) as rep:
            return rep.run(inputs)

    @classmethod
    def run_node(
        cls,
        node: Any,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
        **kwargs: Any,
    ) -> tuple[Any, ...]:
        """One node on ``inputs`` (arrays in the node's input order, or a dict by name): a model of
        that node alone, at ``opset_version`` (kwarg; default onnx's newest), prepared and run."""
        from onnx import helper

        names = [i for i in node.input if i]
        if isinstance(inputs, Mapping):
            values = [np.asarray(inputs[n]) for n in names]
        else:
            values = [np.asarray(v) for v in inputs]
            if len(values) != len(names):
                raise ValueError(f"{len(values)} inputs given, node {node.op_type} has {len(names)}")
        graph_inputs = [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
            for n, v in zip(names, values, strict=True)
        ]
        graph_outputs = []
        for k, name in enumerate(o for o in node.output if o):
            if outputs_info is not None and k < len(outputs_info):
                dtype, shape = outputs_info[k]
                elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
                graph_outputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
            else:
                graph_outputs.append(helper.make_empty_tensor_value_info(name))
        import onnx.defs

        version = int(kwargs.pop("opset_version", onnx.defs.onnx_opset_version()))
        opsets = [helper.make_opsetid("", version)]
        if node.domain and node.domain != "ai.onnx":
            opsets.append(helper.make_opsetid(node.domain, 1))
        graph = helper.make_graph([node], f"{node.op_type}_node", graph_inputs, graph_outputs)
        model = helper.make_model(graph, opset_imports=opsets)
        with cls.prepare(model, device, **kwargs) as rep:
            return rep.run(dict(zip(names, values, strict=True)))

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.split(":")[0].upper() in DEVICES


prepare = VnpuBackend.prepare
run_model = VnpuBackend.run_model
run_node = VnpuBackend.run_node
supports_device = VnpuBackend.supports_device
