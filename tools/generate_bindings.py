#!/usr/bin/env python3
"""Write ``uapi/abi_generated.json``: the ioctl ABI as the C compiler sees it.

Python reads the ABI from this file instead of parsing the headers itself, so there is
no second C parser in the project:

- **declarations**: ``gcc -E`` preprocesses ``uapi/drm/vnpu_accel.h`` (which includes the
  vendored ``drm.h``); pycparser parses the result and writes back, in header order, every
  typedef, struct and enum that cffi accepts, as cffi ``cdef`` source;
- **numbers**: every ``DRM_IOCTL_*`` request number, every integer constant of
  ``vnpu_accel.h`` (and the few of ``drm.h`` that libaccel uses) and every enumerator are
  printed by a C program compiled against the headers, so ``_IOC``'s encoding, the
  struct sizes inside it and the constant expressions are the compiler's, not ours.

The output holds the layout of this build target (x86_64, LP64 Linux), the only one the
project builds for; ``tests/uapi/test_abi_layout.py`` checks it against gcc.

Usage: ``python tools/generate_bindings.py`` writes the file; ``--check`` writes nothing
and exits 1 when the file is missing or differs from what the headers give now.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import cffi
from pycparser import c_ast, c_generator, c_parser

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the project's packages
    sys.path.insert(0, str(ROOT))

from tools.generated_files import write_or_check  # noqa: E402

UAPI = ROOT / "uapi"
OUTPUT = UAPI / "abi_generated.json"
HEADERS = ("drm.h", "drm_mode.h", "vnpu_accel.h")  # the declarations that are ours to read
# Integer constants taken from drm.h (all of vnpu_accel.h's are taken).
DRM_CONSTANT_PREFIXES = ("DRM_COMMAND_BASE", "DRM_IOCTL_BASE", "DRM_SYNCOBJ_")
# gcc extensions that pycparser's C99 grammar does not know; none changes an x86_64 layout.
PYCPARSER_DEFINES = (
    "-D__attribute__(x)=",
    "-D__extension__=",
    "-D__signed__=signed",
    "-D__inline__=",
    "-D__asm__(x)=",
    "-D__restrict=",
    "-D__volatile__=volatile",
    "-D__user=",
)
_LINE_MARKER = re.compile(r'^# (\d+) "([^"]+)"')
_DEFINE = re.compile(r"^#define (\w+)(\(?)\s*(.*)$")
_IOCTL_STRUCT = re.compile(r"^DRM_IO(?:W|R|WR)?\s*\(.*,\s*struct\s+(\w+)\s*\)$")


class GeneratorError(RuntimeError):
    """The compiler or the parser could not read the headers."""


def _gcc() -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise GeneratorError("gcc is not installed (apt install gcc)")
    return gcc


def _preprocess(extra: tuple[str, ...], keep_defines: bool) -> str:
    cmd = [_gcc(), "-E", *extra, "-I", str(UAPI), "-x", "c", "-"]
    if keep_defines:
        cmd.insert(2, "-dD")
    r = subprocess.run(cmd, input="#include <drm/vnpu_accel.h>\n", capture_output=True, text=True)
    if r.returncode != 0:
        raise GeneratorError(f"gcc -E failed: {r.stderr.strip()}")
    return r.stdout


def _origin(path: str) -> str | None:
    """The uapi header a preprocessor line marker names, or None for system headers."""
    p = Path(path)
    return p.name if p.parent == UAPI / "drm" and p.name in HEADERS else None


def object_macros() -> dict[str, tuple[str, str]]:
    """Object-like macros defined in the uapi headers: name -> (header, body as gcc saw it)."""
    out: dict[str, tuple[str, str]] = {}
    current: str | None = None
    for line in _preprocess((), keep_defines=True).splitlines():
        if m := _LINE_MARKER.match(line):
            current = _origin(m.group(2))
        elif current and (m := _DEFINE.match(line)):
            name, paren, body = m.groups()
            if not paren and body and not name.startswith("__"):
                out[name] = (current, body.strip())
    return out


def declarations() -> tuple[list[tuple[str, str, str, str]], list[str]]:
    """(kind, name, header, cdef source) per typedef/struct/union/enum, in order; dropped names.

    System typedefs (``__u32`` and friends) are kept whatever their file; uapi structs
    and enums must come from our headers. A declaration cffi rejects is dropped and named.
    """
    text = _preprocess(PYCPARSER_DEFINES, keep_defines=False)
    ast = c_parser.CParser().parse(text, filename="<uapi>")
    gen = c_generator.CGenerator()
    decls: list[tuple[str, str, str, str]] = []
    for node in ast.ext:
        header = _origin(node.coord.file) if node.coord else None
        if isinstance(node, c_ast.Typedef):
            decls.append(("typedef", node.name, header or "system", gen.visit(node) + ";"))
        elif isinstance(node, c_ast.Decl) and node.name is None and header:
            t = node.type
            if isinstance(t, (c_ast.Struct, c_ast.Union)) and t.decls is not None:
                kind = "struct" if isinstance(t, c_ast.Struct) else "union"
                decls.append((kind, t.name, header, gen.visit(node) + ";"))
            elif isinstance(t, c_ast.Enum) and t.values is not None and t.name:
                decls.append(("enum", t.name, header, gen.visit(node) + ";"))
    kept, dropped = [], []
    ffi = cffi.FFI()
    for decl in decls:
        try:
            ffi.cdef(decl[3])
        except (cffi.CDefError, cffi.FFIError):
            dropped.append(f"{decl[0]} {decl[1]}")
            continue
        kept.append(decl)
    return kept, dropped


def _enumerators(decls: list[tuple[str, str, str, str]]) -> list[str]:
    ffi = cffi.FFI()
    ffi.cdef("\n".join(d[3] for d in decls))
    names = []
    for kind, name, header, _ in decls:
        if kind == "enum" and header == "vnpu_accel.h":
            names += list(ffi.typeof(f"enum {name}").relements)
    return names


def compiled_values(names: list[str]) -> dict[str, int]:
    """Each name's value as a C program compiled against the headers prints it.

    A macro that is not an integer expression (a string, a type) fails to compile or is
    a pointer; it is dropped and the program rebuilt without it.
    """
    names = list(names)
    with tempfile.TemporaryDirectory(prefix="vnpu-bindings-") as tmp:
        src, exe = Path(tmp) / "abi.c", Path(tmp) / "abi"
        while True:
            body = "\n".join(
                f'  printf("%s %d %llu\\n", "{n}", (int)((long long)({n}) < 0), (unsigned long long)({n}));'
                for n in names
            )
            src.write_text(
                "#include <stdio.h>\n#include <drm/vnpu_accel.h>\n"
                f"int main(void)\n{{\n{body}\n  return 0;\n}}\n"
            )
            cmd = [_gcc(), "-Werror=int-conversion", "-Werror=pointer-to-int-cast"]
            r = subprocess.run(
                [*cmd, "-I", str(UAPI), "-o", str(exe), str(src)], capture_output=True, text=True
            )
            if r.returncode == 0:
                break
            bad = {n for n in names if re.search(rf"\b{re.escape(n)}\b", _error_lines(r.stderr, src))}
            if not bad:
                raise GeneratorError(f"compiling the ABI probe failed: {r.stderr.strip()}")
            names = [n for n in names if n not in bad]
        out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    values = {}
    for line in out.splitlines():
        name, negative, raw = line.split()
        value = int(raw)
        values[name] = value - (1 << 64) if negative == "1" else value
    return values


def _error_lines(stderr: str, src: Path) -> str:
    """The probe's source lines that gcc reported errors on."""
    lines = src.read_text().splitlines()
    hits = re.findall(rf"{re.escape(str(src))}:(\d+):\d+: error", stderr)
    return "\n".join(lines[int(n) - 1] for n in hits if 0 < int(n) <= len(lines))


def generate() -> str:
    macros = object_macros()
    decls, dropped = declarations()
    ioctl_names = [
        n for n, (_, body) in macros.items() if n.startswith("DRM_IOCTL_") and body.startswith("DRM_IO")
    ]
    constant_names = [
        n
        for n, (header, _) in macros.items()
        if n not in ioctl_names and (header == "vnpu_accel.h" or n.startswith(DRM_CONSTANT_PREFIXES))
    ]
    enumerators = _enumerators(decls)
    values = compiled_values(ioctl_names + constant_names + enumerators)
    ioctls = {}
    for name in ioctl_names:
        if name not in values:
            continue
        header, body = macros[name]
        m = _IOCTL_STRUCT.match(body)
        ioctls[name] = {"header": header, "request": values[name], "struct": m.group(1) if m else None}
    doc = {
        "generated_by": "tools/generate_bindings.py (do not edit; run it after changing a uapi header)",
        "target": "x86_64 LP64 Linux",
        "declarations": [{"kind": k, "name": n, "header": h, "cdef": s} for k, n, h, s in decls],
        "dropped_declarations": dropped,
        "constants": {n: values[n] for n in constant_names + enumerators if n in values},
        "ioctls": ioctls,
    }
    return json.dumps(doc, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--check", action="store_true", help="exit 1 if the generated file is stale; write nothing"
    )
    args = ap.parse_args(argv)
    try:
        text = generate()
    except GeneratorError as e:
        print(f"generate_bindings: {e}", file=sys.stderr)
        return 2
    return write_or_check({OUTPUT: text}, args.check, ROOT, "file", "tools/generate_bindings.py")


if __name__ == "__main__":
    sys.exit(main())
