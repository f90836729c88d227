"""The ``vnpu`` backend of ``ai_edge_litert.aot`` (registered on import)::

    import litert_vendor.aot_backend as vnpu_aot
    from ai_edge_litert.aot import aot_compile

    result = aot_compile("model.tflite", output_dir="out", target=vnpu_aot.VnpuTarget())
    # out/model_Vnpu_vnpu.tflite: the NPU partitions as DISPATCH_OP nodes

It has the shape of the wheel's ``aot/vendors/example`` backend: the AOT flow's ``apply_plugin``
component runs ``apply_plugin_main`` with ``--libs`` pointing at vnpu's compiler plugin.
"""

from __future__ import annotations

import functools
from typing import Any

from ai_edge_litert.aot.core import aot_types, components
from ai_edge_litert.aot.vendors import import_vendor

from litert_vendor import abi, library_dir

BACKEND_ID = "vnpu"


class VnpuTarget(aot_types.Target):
    """vnpu's one SoC."""

    def __init__(self, soc_manufacturer: str = abi.SOC_MANUFACTURER, soc_model: str = abi.SOC_MODEL) -> None:
        self.soc_manufacturer = soc_manufacturer
        self.soc_model = soc_model

    def __hash__(self) -> int:
        return hash((self.soc_manufacturer, self.soc_model))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VnpuTarget) and (self.soc_manufacturer, self.soc_model) == (
            other.soc_manufacturer,
            other.soc_model,
        )

    def __repr__(self) -> str:
        return f"{self.soc_manufacturer}_{self.soc_model}"

    def flatten(self) -> dict[str, Any]:
        return {
            "backend_id": BACKEND_ID,
            "soc_manufacturer": self.soc_manufacturer,
            "soc_model": self.soc_model,
        }

    @classmethod
    def backend_id(cls) -> str:
        return BACKEND_ID


@import_vendor.register_backend
class VnpuBackend(aot_types.Backend):
    """Compiles with libLiteRtCompilerPlugin_Vnpu.so."""

    def __init__(self, config: aot_types.Config) -> None:
        super().__init__(config)

    @classmethod
    def id(cls) -> str:
        return BACKEND_ID

    @property
    def target(self) -> VnpuTarget:
        return VnpuTarget()

    @property
    def target_id(self) -> str:
        return ""

    @classmethod
    def create(cls, config: aot_types.Config) -> VnpuBackend:
        if config.get("backend_id", "") != cls.id():
            raise ValueError(f"not a vnpu config: backend_id {config.get('backend_id')!r}")
        return cls(config)

    def call_component(
        self, input_model: aot_types.Model, output_model: aot_types.Model, component: aot_types.Component
    ) -> Any:
        return _call_component(component, self, input_model, output_model)


@functools.singledispatch
def _call_component(
    component: aot_types.Component,
    backend: VnpuBackend,
    input_model: aot_types.Model,
    output_model: aot_types.Model,
) -> Any:
    raise NotImplementedError(f"the {backend.id()} backend has no {component.component_name} component")


@_call_component.register
def _apply_plugin(
    component: components.ApplyPluginT,
    backend: VnpuBackend,
    input_model: aot_types.Model,
    output_model: aot_types.Model,
) -> Any:
    # ApplyPlugin turns extra keywords into flags: --libs points apply_plugin_main at the plugin.
    return component(
        input_model,
        output_model,
        backend.target.soc_manufacturer,
        backend.target.soc_model,
        libs=library_dir(),
    )


@_call_component.register
def _mlir_transforms(
    component: components.MlirTransformsT,
    backend: VnpuBackend,
    input_model: aot_types.Model,
    output_model: aot_types.Model,
) -> Any:
    return component(input_model, output_model, [])
