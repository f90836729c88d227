"""The packages' layering, checked on their import statements (read with ast; nothing is imported).

``uapi`` is the one home of the contract between the layers: the ABI (``drm/vnpu_accel.h`` and its
bindings), the ISA (``vnpu_isa.toml``, ``isa``), the fixed-point arithmetic, the hardware interface
(``hw_layout``) and the firmware image format (``firmware_format``). It imports no other package of
the project, and ``vnpu_common`` (the cache, the CLI conventions) imports none either. Above them the
device model and the firmware tools are peers that never import each other; libaccel runs the device
model in-process only in its shim backend and uses the firmware tools' assembler for its debugging
CLI; the delegate sits on libaccel. docs/architecture.md draws the same graph.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# package -> the project's packages it may import.
ALLOWED: dict[str, set[str]] = {
    "vnpu_common": set(),
    "uapi": set(),
    "device_model": {"uapi", "vnpu_common"},
    "firmware_tools": {"uapi", "vnpu_common"},
    "libaccel": {"uapi", "vnpu_common", "device_model", "firmware_tools"},
    "delegate_teflon": {"uapi", "vnpu_common", "libaccel"},
    "modelgen": {"libaccel"},
}
# Edges allowed only from some modules: (importing package, imported package) -> (importing modules).
NARROW: dict[tuple[str, str], set[str]] = {
    # The shim backend is the device model behind the uapi semantics, in-process (drm-shim's idea).
    ("libaccel", "device_model"): {"libaccel.backends.shim.device", "libaccel.backends.shim.file"},
    # accel submit/trace/coredump read and print command streams in the assembler's syntax.
    ("libaccel", "firmware_tools"): {"libaccel.session", "libaccel.trace", "libaccel.coredump"},
}
# Imports against the layering, each with its reason; an entry that no longer matches fails too.
EXCEPTIONS: dict[tuple[str, str], str] = {
    # accel run MODEL.tflite runs the model the way an application does: in LiteRT with libteflon.so.
    ("libaccel.model", "delegate_teflon"): "a .tflite model runs through the delegate",
}
PROJECT = set(ALLOWED) | {"qemu_tests", "bench", "tools", "tests"}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The project packages ``path`` imports (absolute imports; a relative one stays in its package)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        found |= {n.split(".")[0] for n in names if n.split(".")[0] in PROJECT}
    return found


def _edges() -> list[tuple[str, str, str]]:
    """(importing module, its package, imported package) for every cross-package import."""
    edges = []
    for package in ALLOWED:
        for path in sorted((ROOT / package).rglob("*.py")):
            for target in _imports(path) - {package}:
                edges.append((_module(path), package, target))
    return edges


def test_the_layers_import_only_downward() -> None:
    bad = []
    for module, package, target in _edges():
        if (module, target) in EXCEPTIONS:
            continue
        allowed = target in ALLOWED[package]
        narrow = NARROW.get((package, target))
        if not allowed or (narrow is not None and module not in narrow):
            bad.append(f"{module} imports {target}")
    assert not bad, "imports against the layering (tests/test_imports.py):\n" + "\n".join(bad)


@pytest.mark.parametrize(("module", "target"), sorted(EXCEPTIONS))
def test_every_exception_is_still_needed(module: str, target: str) -> None:
    assert (module, target) in {(m, t) for m, _, t in _edges()}, f"drop the exception {module} -> {target}"


def test_the_graph_is_checked_on_real_imports() -> None:
    # The checker sees the edges the layering rests on (an empty walk would pass everything above).
    edges = {(p, t) for _, p, t in _edges()}
    assert {("device_model", "uapi"), ("libaccel", "device_model"), ("delegate_teflon", "libaccel")} <= edges
