"""Python bindings of the vnpu ioctl ABI, read from the C headers with cffi.

The ABI has one source of truth, ``uapi/drm/vnpu_accel.h`` (plus the vendored
``uapi/drm/drm.h`` for the core DRM ioctls libaccel uses). This module reads
the header *text* at import: it strips comments, extracts the struct and enum
definitions and the integer ``#define`` constants, hands the structs to
cffi's ABI mode (``ffi.cdef``), and computes every ``DRM_IOCTL_*`` number
from its ``DRM_IOWR/IOW/IOR(nr, struct X)`` definition with Linux's _IOC
encoding and ``ffi.sizeof``. There is no hand-written copy of any struct or
number; ``tests/uapi/test_abi_layout.py`` checks the result against gcc.

Public names: ``ffi``, ``IOCTLS`` (name -> request number), ``CONSTANTS``
(name -> int), and every constant as a module attribute.
"""

from __future__ import annotations

import ast
import operator
import re
from pathlib import Path

import cffi

HEADER_DIR = Path(__file__).with_name("drm")
VNPU_HEADER = HEADER_DIR / "vnpu_accel.h"
DRM_HEADER = HEADER_DIR / "drm.h"

# Core structs and ioctls from drm.h that libaccel uses.
DRM_CORE_STRUCTS = (
    "drm_version",
    "drm_gem_close",
    "drm_syncobj_create",
    "drm_syncobj_destroy",
    "drm_syncobj_wait",
)
DRM_CORE_IOCTLS = (
    "DRM_IOCTL_VERSION",
    "DRM_IOCTL_GEM_CLOSE",
    "DRM_IOCTL_SYNCOBJ_CREATE",
    "DRM_IOCTL_SYNCOBJ_DESTROY",
    "DRM_IOCTL_SYNCOBJ_WAIT",
)
# Integer constants taken from drm.h (vnpu_accel.h's are all taken).
DRM_CORE_CONSTANT_PREFIXES = ("DRM_COMMAND_BASE", "DRM_IOCTL_BASE", "DRM_SYNCOBJ_")

# The kernel's type names -> C99 types cffi knows.
_TYPE_MAP = {
    "__u8": "uint8_t",
    "__s8": "int8_t",
    "__u16": "uint16_t",
    "__s16": "int16_t",
    "__u32": "uint32_t",
    "__s32": "int32_t",
    "__u64": "uint64_t",
    "__s64": "int64_t",
    "__kernel_size_t": "size_t",
}

# Linux's asm-generic/ioctl.h encoding (x86, arm, riscv: 8-bit nr and type,
# 14-bit size, 2-bit direction).
_IOC_NRSHIFT = 0
_IOC_TYPESHIFT = 8
_IOC_SIZESHIFT = 16
_IOC_DIRSHIFT = 30
_IOC_NONE = 0
_IOC_WRITE = 1
_IOC_READ = 2
_IOC_SIZEMASK = (1 << 14) - 1
_IOC_DIRS = {
    "DRM_IO": _IOC_NONE,
    "DRM_IOW": _IOC_WRITE,
    "DRM_IOR": _IOC_READ,
    "DRM_IOWR": _IOC_READ | _IOC_WRITE,
}


class HeaderParseError(RuntimeError):
    """The header text does not contain what the bindings need."""


def ioc(direction: int, type_: int, nr: int, size: int) -> int:
    """Linux's _IOC(dir, type, nr, size)."""
    if not 0 <= size <= _IOC_SIZEMASK:
        raise ValueError(f"ioctl argument size {size} does not fit in _IOC's 14 bits")
    return (
        (direction << _IOC_DIRSHIFT)
        | (type_ << _IOC_TYPESHIFT)
        | (nr << _IOC_NRSHIFT)
        | (size << _IOC_SIZESHIFT)
    )


def strip_comments(text: str) -> str:
    """Remove C block and line comments (the headers have no comment markers inside strings)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _join_continuations(text: str) -> str:
    return re.sub(r"\\\n", " ", text)


def extract_struct(text: str, name: str) -> str:
    """Return ``struct name { ... };`` from comment-free header text, as cffi cdef source."""
    m = re.search(rf"\bstruct\s+{re.escape(name)}\s*\{{(.*?)\}}\s*;", text, flags=re.S)
    if m is None:
        raise HeaderParseError(f"struct {name} not found in the header")
    # Preprocessor lines may sit inside a struct (drm.h defines flags there).
    body = "\n".join(line for line in m.group(1).splitlines() if not line.strip().startswith("#"))
    body = re.sub(r"\b__user\b|\b__volatile__\b", "", body)
    for kernel_type, c_type in _TYPE_MAP.items():
        body = re.sub(rf"\b{kernel_type}\b", c_type, body)
    return f"struct {name} {{{body}}};"


def extract_enums(text: str) -> dict[str, str]:
    """All named enums: name -> cdef source."""
    out = {}
    for m in re.finditer(r"\benum\s+(\w+)\s*\{(.*?)\}\s*;", text, flags=re.S):
        out[m.group(1)] = f"enum {m.group(1)} {{{m.group(2)}}};"
    return out


def extract_struct_names(text: str) -> list[str]:
    return re.findall(r"\bstruct\s+(\w+)\s*\{", text)


_BINOPS = {
    ast.BitOr: operator.or_,
    ast.BitAnd: operator.and_,
    ast.BitXor: operator.xor,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
}


def _eval_int(node: ast.AST, known: dict[str, int]) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in known:
            raise KeyError(node.id)
        return known[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_eval_int(node.left, known), _eval_int(node.right, known))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
        return ~_eval_int(node.operand, known)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval_int(node.operand, known)
    raise ValueError(f"not an integer constant expression: {ast.dump(node)}")


def eval_c_int(expr: str, known: dict[str, int]) -> int:
    """Evaluate a C integer constant expression (literals with U/L suffixes, char literals, names)."""
    expr = re.sub(r"'(\\?.)'", lambda m: str(ord(m.group(1)[-1])), expr)
    expr = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", expr)
    return _eval_int(ast.parse(expr.strip(), mode="eval").body, known)


_DEFINE_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+(.+?)[ \t]*$", re.M)
_IOCTL_RE = re.compile(r"^(DRM_IO|DRM_IOW|DRM_IOR|DRM_IOWR)\s*\(\s*(.+?)\s*(?:,\s*struct\s+(\w+)\s*)?\)$")


def extract_defines(text: str) -> dict[str, str]:
    """Object-like ``#define NAME value`` lines (function-like macros are skipped)."""
    return {m.group(1): m.group(2) for m in _DEFINE_RE.finditer(_join_continuations(text))}


def _integer_constants(defines: dict[str, str], known: dict[str, int], accept) -> dict[str, int]:
    """Evaluate every define that is an integer expression; iterate since defines refer to each other."""
    out: dict[str, int] = {}
    pending = {k: v for k, v in defines.items() if accept(k) and not _IOCTL_RE.match(v)}
    while pending:
        progress = False
        for name, value in list(pending.items()):
            try:
                out[name] = eval_c_int(value, {**known, **out})
            except KeyError:
                continue
            except (ValueError, SyntaxError):
                pass  # not an integer (a string, a type, a macro call)
            del pending[name]
            progress = True
        if not progress:
            break
    return out


def _ioctls(defines: dict[str, str], wanted, consts: dict[str, int], ffi: cffi.FFI) -> dict[str, int]:
    out = {}
    for name, value in defines.items():
        if not wanted(name):
            continue
        m = _IOCTL_RE.match(value)
        if m is None:
            continue
        macro, nr_expr, struct_name = m.groups()
        nr = eval_c_int(nr_expr, consts)
        size = ffi.sizeof(f"struct {struct_name}") if struct_name else 0
        out[name] = ioc(_IOC_DIRS[macro], consts["DRM_IOCTL_BASE"], nr, size)
    return out


def build() -> tuple[cffi.FFI, dict[str, int], dict[str, int], list[str]]:
    """Parse both headers; return (ffi, constants, ioctls, vnpu struct names)."""
    vnpu_text = strip_comments(VNPU_HEADER.read_text())
    drm_text = strip_comments(DRM_HEADER.read_text())

    vnpu_structs = extract_struct_names(vnpu_text)
    cdef = [extract_struct(drm_text, s) for s in DRM_CORE_STRUCTS]
    cdef += list(extract_enums(vnpu_text).values())
    cdef += [extract_struct(vnpu_text, s) for s in vnpu_structs]
    ffi = cffi.FFI()
    ffi.cdef("\n".join(cdef))

    drm_defines = extract_defines(drm_text)
    vnpu_defines = extract_defines(vnpu_text)
    consts = _integer_constants(drm_defines, {}, lambda n: n.startswith(DRM_CORE_CONSTANT_PREFIXES))
    consts.update(_integer_constants(vnpu_defines, consts, lambda n: not n.startswith("__")))
    # Enumerators are constants too (cffi evaluates them from the cdef).
    for enum_name in extract_enums(vnpu_text):
        consts.update(ffi.typeof(f"enum {enum_name}").relements)

    ioctls = _ioctls(drm_defines, lambda n: n in DRM_CORE_IOCTLS, consts, ffi)
    missing = set(DRM_CORE_IOCTLS) - set(ioctls)
    if missing:
        raise HeaderParseError(f"drm.h lacks ioctl definitions {sorted(missing)}")
    ioctls.update(_ioctls(vnpu_defines, lambda n: n.startswith("DRM_IOCTL_VNPU_"), consts, ffi))
    return ffi, consts, ioctls, vnpu_structs


ffi, CONSTANTS, IOCTLS, VNPU_STRUCTS = build()
CORE_STRUCTS: tuple[str, ...] = DRM_CORE_STRUCTS
globals().update(CONSTANTS)
globals().update(IOCTLS)


def ioctl_name(request: int) -> str:
    """The DRM_IOCTL_* name of a request number (for error messages)."""
    for name, number in IOCTLS.items():
        if number == request:
            return name
    return f"ioctl {request:#x}"
