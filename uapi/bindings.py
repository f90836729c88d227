"""Python bindings of the vnpu ioctl ABI, as the C compiler sees the headers.

The ABI has one source of truth, ``uapi/drm/vnpu_accel.h`` (plus the vendored
``uapi/drm/drm.h`` for the core DRM ioctls libaccel uses). ``tools/generate_bindings.py``
preprocesses it with gcc, parses the declarations with pycparser and has a compiled C
program print every ioctl number and integer constant; it writes the result to
``uapi/abi_generated.json``, which this module loads (no compiler is needed at run time).
``tests/uapi/test_abi_layout.py`` checks the layout against gcc, and
``tests/uapi/test_generated_bindings.py`` that the file is current.

Public names: ``ffi`` (the vnpu structs and the core DRM structs libaccel uses),
``IOCTLS`` (name -> request number), ``CONSTANTS`` (name -> int), every constant as a
module attribute, and ``ABI`` (the whole generated record, for decoders).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import cffi

HEADER_DIR = Path(__file__).with_name("drm")
VNPU_HEADER = HEADER_DIR / "vnpu_accel.h"
DRM_HEADER = HEADER_DIR / "drm.h"
GENERATED = Path(__file__).with_name("abi_generated.json")

# Core structs and ioctls from drm.h that libaccel uses.
DRM_CORE_STRUCTS = (
    "drm_version",
    "drm_gem_close",
    "drm_syncobj_create",
    "drm_syncobj_destroy",
    "drm_syncobj_wait",
    "drm_prime_handle",
)
DRM_CORE_IOCTLS = (
    "DRM_IOCTL_VERSION",
    "DRM_IOCTL_GEM_CLOSE",
    "DRM_IOCTL_SYNCOBJ_CREATE",
    "DRM_IOCTL_SYNCOBJ_DESTROY",
    "DRM_IOCTL_SYNCOBJ_WAIT",
    "DRM_IOCTL_PRIME_HANDLE_TO_FD",
    "DRM_IOCTL_PRIME_FD_TO_HANDLE",
)


@dataclass(frozen=True)
class Declaration:
    """One typedef, struct, union or enum of the headers, as cffi cdef source."""

    kind: str  # "typedef", "struct", "union" or "enum"
    name: str
    header: str  # "vnpu_accel.h", "drm.h", "drm_mode.h" or "system"
    cdef: str


@dataclass(frozen=True)
class IoctlRecord:
    """One ``DRM_IOCTL_*`` define: the compiler's request number and its argument struct."""

    name: str
    header: str
    request: int
    struct: str | None


@dataclass(frozen=True)
class Abi:
    declarations: tuple[Declaration, ...]
    constants: dict[str, int]
    ioctls: dict[str, IoctlRecord]


def load(path: Path = GENERATED) -> Abi:
    doc = json.loads(path.read_text())
    return Abi(
        declarations=tuple(Declaration(**d) for d in doc["declarations"]),
        constants=dict(doc["constants"]),
        ioctls={n: IoctlRecord(name=n, **r) for n, r in doc["ioctls"].items()},
    )


def cdef_source(abi: Abi, wanted: set[str]) -> str:
    """cdef source of the system typedefs and vnpu_accel.h, plus the drm.h ones in ``wanted``."""
    return "\n".join(
        d.cdef for d in abi.declarations if d.header in ("system", "vnpu_accel.h") or d.name in wanted
    )


ABI = load()
VNPU_STRUCTS: list[str] = [
    d.name for d in ABI.declarations if d.kind == "struct" and d.header == "vnpu_accel.h"
]
CORE_STRUCTS: tuple[str, ...] = DRM_CORE_STRUCTS
ffi = cffi.FFI()
ffi.cdef(cdef_source(ABI, set(DRM_CORE_STRUCTS)))
CONSTANTS: dict[str, int] = ABI.constants
IOCTLS: dict[str, int] = {
    n: r.request for n, r in ABI.ioctls.items() if n in DRM_CORE_IOCTLS or r.header == "vnpu_accel.h"
}
globals().update(CONSTANTS)
globals().update(IOCTLS)


def ioctl_name(request: int) -> str:
    """The DRM_IOCTL_* name of a request number (for error messages)."""
    for name, number in IOCTLS.items():
        if number == request:
            return name
    return f"ioctl {request:#x}"
