"""Decoding the uapi for humans: ioctl names, struct fields, GET_PARAM values, capability bits.

Everything here is derived from the headers, never retyped (numbers and layouts through
``uapi/abi_generated.json``, which the compiler made from them; docs from their comments):

- ioctl names: every ``DRM_IOCTL_*`` define of ``uapi/drm/drm.h`` and ``vnpu_accel.h``, keyed by
  (direction, number), so any request of type ``'d'`` gets its name;
- struct layouts: every struct of the headers (so a trace of a foreign DRM ioctl still shows
  fields);
- field directions and parameter docs: the kernel-doc comments (``@size: in, ...; out, ...``);
- parameters: ``enum drm_vnpu_param``; capability names: the ``DRM_VNPU_CAP_*`` defines; a
  version parameter's layout: its kernel-doc, e.g. "as (major << 16) | (minor << 8) | patch".

A parameter or capability added to the header therefore appears in ``accel info`` and
``accel trace`` without a change here.
"""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import cffi

from uapi import bindings
from uapi.bindings import CONSTANTS, ffi

_IOC_DIR_NAMES = {0: "IO", 1: "IOW", 2: "IOR", 3: "IOWR"}
DRM_TYPE = CONSTANTS["DRM_IOCTL_BASE"]


@dataclass(frozen=True)
class IoctlDef:
    """One ``DRM_IOCTL_*`` define: its name, direction bits, number and argument struct (if any)."""

    name: str
    direction: int
    nr: int
    struct: str | None  # "drm_vnpu_submit", or None for DRM_IO / a non-struct type
    size: int | None  # sizeof the argument when the struct is known


def split_request(request: int) -> tuple[int, int, int, int]:
    """Linux _IOC fields of ``request``: (direction, type, nr, size)."""
    return (request >> 30) & 3, (request >> 8) & 0xFF, request & 0xFF, (request >> 16) & 0x3FFF


@cache
def decoder_ffi() -> cffi.FFI:
    """An FFI with every struct of the headers the generator kept (bindings' and all of drm.h's)."""
    dffi = cffi.FFI()
    dffi.cdef(bindings.cdef_source(bindings.ABI, {d.name for d in bindings.ABI.declarations}))
    return dffi


@cache
def ioctl_table() -> dict[tuple[int, int], IoctlDef]:
    """(direction, nr) -> definition, for every DRM and vnpu ioctl in the headers."""
    table: dict[tuple[int, int], IoctlDef] = {}
    dffi = decoder_ffi()
    for record in bindings.ABI.ioctls.values():
        direction, type_, nr, size = split_request(record.request)
        if type_ != DRM_TYPE:
            continue
        struct = record.struct
        if struct is not None:
            try:
                size = dffi.sizeof(f"struct {struct}")
            except (cffi.FFIError, TypeError, ValueError):
                struct = None  # a struct the generator dropped: the ioctl is named, fields stay raw
        table[(direction, nr)] = IoctlDef(record.name, direction, nr, struct, size if struct else None)
    return table


def lookup_ioctl(request: int) -> IoctlDef | None:
    direction, type_, nr, _ = split_request(request)
    if type_ != DRM_TYPE:
        return None
    return ioctl_table().get((direction, nr))


def ioctl_name(request: int) -> str:
    """The DRM_IOCTL_* name of ``request``; an _IOC description for one the headers do not define."""
    d = lookup_ioctl(request)
    if d is not None:
        return d.name
    direction, type_, nr, size = split_request(request)
    kind = chr(type_) if 32 < type_ < 127 else f"{type_:#x}"
    return f"_{_IOC_DIR_NAMES[direction]}('{kind}', {nr:#x}, {size})"


def errno_name(err: int) -> str:
    return errno.errorcode.get(abs(err), str(abs(err)))


# --- kernel-doc ---------------------------------------------------------------------------------

_DOC_BLOCK = re.compile(r"/\*\*(.*?)\*/", re.S)


@cache
def _raw_header_text() -> str:
    return bindings.DRM_HEADER.read_text() + "\n" + bindings.VNPU_HEADER.read_text()


def _clean_doc(text: str) -> str:
    return " ".join(line.strip().lstrip("*").strip() for line in text.splitlines()).strip()


@cache
def field_docs(struct: str) -> dict[str, str]:
    """``@field: text`` comments inside ``struct <struct> { ... }`` of the vnpu header."""
    m = re.search(rf"\bstruct\s+{re.escape(struct)}\s*\{{(.*?)\}}\s*;", _raw_header_text(), re.S)
    if m is None:
        return {}
    out = {}
    for block in _DOC_BLOCK.findall(m.group(1)):
        dm = re.match(r"\s*@(\w+):\s*(.*)", _clean_doc(block), re.S)
        if dm:
            out[dm.group(1)] = dm.group(2).strip()
    return out


def field_is_output(struct: str, field: str) -> bool:
    """Whether the kernel writes ``field`` (its kernel-doc says "out")."""
    return bool(re.search(r"(^|;\s*)out\b", field_docs(struct).get(field, "")))


@cache
def enum_docs(enum: str) -> dict[str, str]:
    """``@ENUMERATOR: text`` from the kernel-doc block above ``enum <enum>``."""
    m = re.search(rf"/\*\*((?:(?!\*/).)*?)\*/\s*enum\s+{re.escape(enum)}\s*\{{", _raw_header_text(), re.S)
    if m is None:
        return {}
    text = "\n".join(line.strip().lstrip("*") for line in m.group(1).splitlines())
    out = {}
    for dm in re.finditer(r"@(\w+):\s*(.*?)(?=\n\s*@\w+:|\Z)", text, re.S):
        out[dm.group(1)] = " ".join(dm.group(2).split())
    return out


# --- structs --------------------------------------------------------------------------------------


def struct_fields(struct: str) -> list[str]:
    return [name for name, _ in decoder_ffi().typeof(f"struct {struct}").fields]


def _plain(value: Any) -> Any:
    dffi = decoder_ffi()
    if isinstance(value, dffi.CData):
        kind = dffi.typeof(value).kind
        if kind == "pointer":
            return int(dffi.cast("uintptr_t", value))
        if kind == "array":
            return [_plain(v) for v in value]
        if kind == "struct":
            return {
                name: _plain(getattr(value, name)) for name in struct_fields(dffi.typeof(value).cname[7:])
            }
    return value


def decode_struct(struct: str, data: bytes) -> dict[str, Any] | None:
    """Field -> value of ``struct`` read from ``data`` (None when it is not that struct's size)."""
    dffi = decoder_ffi()
    size = dffi.sizeof(f"struct {struct}")
    if len(data) < size:
        return None
    obj = dffi.new(f"struct {struct} *")
    dffi.memmove(obj, data[:size], size)
    return {name: _plain(getattr(obj, name)) for name in struct_fields(struct)}


def decode_array(struct: str, data: bytes, stride: int | None = None) -> list[dict[str, Any]]:
    """An array of ``struct`` entries ``stride`` bytes apart (default: its size) in ``data``."""
    size = decoder_ffi().sizeof(f"struct {struct}")
    stride = stride or size
    out = []
    for off in range(0, len(data) - size + 1, stride):
        entry = decode_struct(struct, data[off : off + size])
        if entry is not None:
            out.append(entry)
    return out


# --- GET_PARAM --------------------------------------------------------------------------------------

PARAM_PREFIX = "DRM_VNPU_PARAM_"
CAP_PREFIX = "DRM_VNPU_CAP_"


@dataclass(frozen=True)
class Param:
    """One ``enum drm_vnpu_param`` entry."""

    number: int
    name: str  # lower case, prefix dropped: "fw_version"
    doc: str

    @property
    def enumerator(self) -> str:
        return PARAM_PREFIX + self.name.upper()


def params() -> list[Param]:
    """Every parameter of ``enum drm_vnpu_param``, by number."""
    elements = ffi.typeof("enum drm_vnpu_param").elements
    docs = enum_docs("drm_vnpu_param")
    return [
        Param(number, name[len(PARAM_PREFIX) :].lower(), docs.get(name, ""))
        for number, name in sorted(elements.items())
    ]


def capability_names(mask: int) -> list[str]:
    """``DRM_VNPU_CAP_*`` names (prefix dropped) of the bits set in ``mask``; unknown bits as hex."""
    names = []
    rest = mask
    for name, bit in sorted(CONSTANTS.items(), key=lambda kv: kv[1]):
        if name.startswith(CAP_PREFIX) and mask & bit:
            names.append(name[len(CAP_PREFIX) :])
            rest &= ~bit
    if rest:
        names.append(f"{rest:#x}")
    return names


def version_layout(doc: str) -> list[tuple[str, int, int]] | None:
    """(part, shift, bits) parsed from a doc saying "as (major << 16) | (minor << 8) | patch"."""
    m = re.search(r"\bas\s+(\(\s*\w+\s*<<\s*\d+\s*\)(?:\s*\|\s*(?:\(\s*\w+\s*<<\s*\d+\s*\)|\w+))+)", doc)
    if m is None:
        return None
    parts = []
    for pm in re.finditer(r"\(\s*(\w+)\s*<<\s*(\d+)\s*\)|(\w+)", m.group(1)):
        parts.append((pm.group(1) or pm.group(3), int(pm.group(2) or 0)))
    out = []
    top = 32
    for name, shift in parts:
        out.append((name, shift, top - shift))
        top = shift
    return out


def _human_bytes(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def format_param(param: Param, value: int) -> str:
    """A parameter's value the way its kernel-doc describes it."""
    if param.enumerator == "DRM_VNPU_PARAM_CAPABILITIES":
        names = capability_names(value)
        return f"{value:#x} ({', '.join(names) or 'none'})"
    layout = version_layout(param.doc)
    if layout is not None:
        return ".".join(str((value >> shift) & ((1 << bits) - 1)) for _, shift, bits in layout)
    if param.name.endswith("build_id"):
        return f"{value:016x}"  # a digest prefix: all 16 digits, as vnpu-fw prints it
    if re.search(r"\bin bytes\b|\bbytes\b", param.doc):
        return f"{_human_bytes(value)} ({value:#x})"
    if param.name.endswith("_ms"):
        return f"{value} ms"
    if param.name.endswith("_id"):
        return f"{value:#x}"
    return str(value)
