"""Which TFLite runtime called us, and which struct layouts it uses.

The delegate cannot ask ``TfLiteVersion()``: ai-edge-litert exports no TfLite symbols at all. It can
ask the dynamic linker which shared object holds the runtime's ``GetExecutionPlan`` (``dladdr``) and
map that file to its Python distribution and version. The layouts (see :mod:`delegate_teflon.abi`):

===================  =======================  ==============================
runtime              TfLiteRegistration       TfLiteFloatArray
===================  =======================  ==============================
tflite-runtime 2.14  v4 (88 bytes)            inline ``{size; data[]}``
ai-edge-litert 2.x   v4 (88 bytes)            inline
unknown              v4                       detected per tensor
===================  =======================  ==============================

Choosing v4 for an unknown runtime is the safe default on x86-64 SysV: a by-value struct this large
travels in memory, so a runtime whose struct is a prefix of v4 reads its prefix and ignores the rest,
while a struct shorter than the runtime's would leave it reading stack garbage. A known
TfLiteFloatArray layout is still checked on every per-channel tensor against the zero-point count
(a TfLiteIntArray in every version), so a wrong table entry is an error, not wrong numbers.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# Distributions by the top-level package directory that holds the runtime's shared object.
_DISTRIBUTIONS = {
    "tflite_runtime": "tflite-runtime",
    "ai_edge_litert": "ai-edge-litert",
    "tensorflow": "tensorflow",
}


@dataclass(frozen=True)
class RuntimeLayout:
    """The runtime's identity and the struct layouts the delegate uses with it."""

    distribution: str  # "tflite-runtime", "ai-edge-litert", "tensorflow" or "unknown"
    version: str
    library: str  # the shared object that holds the runtime
    registration: int  # 1, 3 or 4: which vnpu_registration_vN to pass by value
    float_array: str  # "inline", "view" or "detect"

    def describe(self) -> str:
        return (
            f"{self.distribution} {self.version} ({Path(self.library).name}): "
            f"TfLiteRegistration v{self.registration}, TfLiteFloatArray {self.float_array}"
        )


def _version_tuple(version: str) -> tuple[int, ...]:
    out = []
    for part in version.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


def layout_for(distribution: str, version: str, library: str) -> RuntimeLayout:
    """The layout table (pure: unit-testable without a runtime)."""
    v = _version_tuple(version)
    if distribution in ("tflite-runtime", "tensorflow"):
        if v < (2, 13):
            # inplace_operator arrived in 2.13; async_kernel in 2.12; registration_external in 2.10.
            reg = 1 if v < (2, 10) else 3
            return RuntimeLayout(distribution, version, library, reg, "inline")
        float_array = "inline" if v <= (2, 19) else "detect"
        return RuntimeLayout(distribution, version, library, 4, float_array)
    if distribution == "ai-edge-litert":
        return RuntimeLayout(distribution, version, library, 4, "inline")
    return RuntimeLayout("unknown", version, library, 4, "detect")


_identified: dict[str, RuntimeLayout] = {}


def identify(ffi: Any, lib: Any, context: Any) -> RuntimeLayout:
    """Identify the runtime that owns ``context`` (a ``TfLiteContext *``)."""
    name = lib.vnpu_object_of(ffi.cast("void *", context.GetExecutionPlan))
    library = ffi.string(name).decode(errors="replace") if name != ffi.NULL else "?"
    # A loaded library's distribution does not change within a process; the metadata search
    # (milliseconds: it scans sys.path) is done once per library.
    known = _identified.get(library)
    if known is None:
        known = _identified[library] = _identify_library(library)
    return known


def _identify_library(library: str) -> RuntimeLayout:
    distribution, version = "unknown", "?"
    parts = Path(library).parts
    for package, dist in _DISTRIBUTIONS.items():
        if package in parts:
            distribution = dist
            try:
                version = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                version = "?"
            break
    return layout_for(distribution, version, library)


class LayoutError(RuntimeError):
    """The runtime's structs do not look like any layout the delegate knows."""


def _floats(ffi: Any, data: Any, n: int) -> list[float]:
    """``n`` C floats as Python floats, read in one go (a per-element cffi read costs ~0.2 us each,
    and a per-channel model has thousands). float32 -> float64 is exact, as cffi's own conversion."""
    if n <= 0:
        return []
    return np.frombuffer(ffi.buffer(data, 4 * n), dtype=np.float32).astype(np.float64).tolist()


def _ints(ffi: Any, data: Any, n: int) -> list[int]:
    """``n`` C ints (TfLiteIntArray data) as Python ints, read in one go."""
    return np.frombuffer(ffi.buffer(data, 4 * n), dtype=np.int32).tolist()


def read_affine(ffi: Any, params: Any, float_array: str) -> tuple[list[float], list[int], int]:
    """(scales, zero_points, quantized_dimension) of a ``TfLiteAffineQuantization *``.

    ``zero_point`` is a TfLiteIntArray in every version, so its size tells which TfLiteFloatArray
    layout ``scale`` has when the layout is "detect", and checks it when the layout is known.
    """
    aq = ffi.cast("TfLiteAffineQuantization *", params)
    zp = aq.zero_point
    n = zp.size if zp != ffi.NULL else -1
    zero_points = _ints(ffi, zp.data, n) if n > 0 else []
    candidates = [float_array] if float_array != "detect" else ["inline", "view"]
    for kind in candidates:
        if kind == "inline":
            arr = ffi.cast("vnpu_float_array_inline *", aq.scale)
            if n < 0 or arr.size == n:
                return _floats(ffi, arr.data, arr.size), zero_points, aq.quantized_dimension
        else:
            view = ffi.cast("vnpu_float_array_view *", aq.scale)
            if view.data != ffi.NULL and (n < 0 or view.size == n):
                return _floats(ffi, view.data, view.size), zero_points, aq.quantized_dimension
    raise LayoutError(
        f"per-channel quantization parameters do not match TfLiteFloatArray layout(s) {candidates} "
        f"({n} zero points); this runtime's common.h is not one the delegate supports"
    )
