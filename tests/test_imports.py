"""The packages' layering and the modules' import graph, checked on their import statements (read with
ast; nothing is imported).

``uapi`` is the one home of the contract between the layers: the ABI (``drm/vnpu_accel.h`` and its
bindings), the ISA (``vnpu_isa.toml``, ``isa``), the fixed-point arithmetic, the hardware interface
(``hw_layout``) and the firmware image format (``firmware_format``). It imports no other package of
the project but ``vnpu_common`` (the cache, the CLI conventions), which imports none. Above them the
device model and the firmware tools are peers that never import each other; libaccel runs the device
model in-process only in its shim backend and uses the firmware tools' assembler for its debugging
CLI; the delegate sits on libaccel. Inside libaccel the driver imports none of its subpackages
(``runtime``, the model runner; ``tools``, the debugging CLI, which uses the runner; ``demos``). The
QEMU harness, the benchmarks and the tools sit above the product, and nothing imports the tests.
docs/architecture.md draws the same graph.

An import is an ``import`` statement anywhere in a module (inside functions too), or a string naming
a project module in a module that imports by name (``importlib.import_module``, ``__import__``).
No two modules may import each other at run time, directly or through others: only imports under
``if TYPE_CHECKING:`` (and a script's ``if __name__ == "__main__":`` block) are left out of that.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PRODUCT = {"uapi", "vnpu_common", "device_model", "firmware_tools", "libaccel", "delegate_teflon", "modelgen"}
# package -> the project's packages it may import.
ALLOWED: dict[str, set[str]] = {
    "vnpu_common": set(),
    "uapi": {"vnpu_common"},  # its command line (uapi/__main__.py) keeps the CLI conventions
    "device_model": {"uapi", "vnpu_common"},
    "firmware_tools": {"uapi", "vnpu_common"},
    "libaccel": {"uapi", "vnpu_common", "device_model", "firmware_tools"},
    "delegate_teflon": {"uapi", "vnpu_common", "libaccel"},
    "modelgen": {"libaccel", "vnpu_common"},
    # Above the product: the QEMU harness, the benchmarks (which drive the harness for the in-guest
    # figures) and the tools (the upstream series checks its build with the harness's kernel tools).
    "qemu_tests": PRODUCT,
    "tools": PRODUCT | {"qemu_tests"},
    "bench": PRODUCT | {"qemu_tests", "tools"},
}
# Edges allowed only from some modules: (importing package, imported package) -> (importing modules).
NARROW: dict[tuple[str, str], set[str]] = {
    # The shim backend is the device model behind the uapi semantics, in-process (drm-shim's idea).
    ("libaccel", "device_model"): {
        "libaccel.backends.shim.device",
        "libaccel.backends.shim.file",
        "libaccel.backends.shim.replay",
    },
    # accel submit/trace/coredump read and print command streams in the assembler's syntax.
    ("libaccel", "firmware_tools"): {
        "libaccel.tools.session",
        "libaccel.tools.trace",
        "libaccel.tools.coredump",
    },
}
# Imports against the layering, each with its reason; an entry that no longer matches fails too.
EXCEPTIONS: dict[tuple[str, str], str] = {
    # accel run MODEL.tflite runs the model the way an application does: in LiteRT with libteflon.so,
    # found by the package's library_path; the placement comes back through the delegate's
    # placement_file option, not from its modules (test_the_exception_uses_the_public_entry_only).
    ("libaccel.runtime.model", "delegate_teflon"): "a .tflite model runs through the delegate",
}
# Inside libaccel: the driver (its own modules, backends/, compiler/) imports none of its subpackages;
# subpackage -> the other subpackages it may import. The tools' ``accel run`` is the model runner's.
LIBACCEL_SUBPACKAGES: dict[str, set[str]] = {
    "libaccel.runtime": set(),
    "libaccel.demos": set(),
    "libaccel.tools": {"libaccel.runtime"},
}
# The driver's imports of a subpackage, each with its reason.
LIBACCEL_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("libaccel", "libaccel.runtime"): "libaccel.run_model (public) runs libaccel.runtime.model",
}
PROJECT = set(ALLOWED) | {"tests"}
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")  # a dotted module name ("tests" alone is a path)


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {
    _module(p): p for package in ALLOWED for p in sorted((ROOT / package).rglob("*.py"))
}


def _guarded(node: ast.If) -> bool:
    """``if TYPE_CHECKING:`` or ``if __name__ == "__main__":`` (imports not made when imported)."""
    test = ast.unparse(node.test)
    return "TYPE_CHECKING" in test or "__name__" in test


def _by_name(tree: ast.AST) -> bool:
    """Whether the module imports modules by name (importlib.import_module or __import__)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in ("import_module", "__import__"):
                return True
    return False


def _imported_names(path: Path, name: str, run_time_only: bool = False) -> set[str]:
    """The dotted names ``path`` (module ``name``) imports: statements anywhere (relative ones
    resolved), and project module names in strings where it imports by name. With
    ``run_time_only``, imports under TYPE_CHECKING or ``__name__ == "__main__"`` are left out."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if run_time_only and isinstance(child, ast.If) and _guarded(child):
                for other in child.orelse:
                    visit_one(other)
                continue
            visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - (node.level - 1)] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
        visit(node)

    visit(tree)
    if _by_name(tree):
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and _DOTTED.fullmatch(node.value)
            ):
                if node.value.split(".")[0] in PROJECT:
                    found.add(node.value)
    return found


def _imports(path: Path) -> set[str]:
    """The project packages ``path`` imports."""
    return {n.split(".")[0] for n in _imported_names(path, _module(path))} & PROJECT


def _edges() -> list[tuple[str, str, str]]:
    """(importing module, its package, imported package) for every cross-package import."""
    edges = []
    for module, path in MODULES.items():
        package = module.split(".")[0]
        for target in _imports(path) - {package}:
            edges.append((module, package, target))
    return edges


def _module_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports at run time (a name resolved to its longest module
    prefix; a module's import of its own parent package is the package it is part of, not an edge)."""
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        targets = set()
        for n in _imported_names(path, module, run_time_only=True):
            while n and n not in MODULES:
                n = n.rpartition(".")[0]
            if n and n != module and not module.startswith(n + "."):
                targets.add(n)
        graph[module] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


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


def _subpackage(name: str) -> str | None:
    """The libaccel subpackage module ``name`` is in, or None for the driver (and outside libaccel)."""
    return next((s for s in LIBACCEL_SUBPACKAGES if name == s or name.startswith(s + ".")), None)


def _libaccel_edges() -> set[tuple[str, str]]:
    """(importing libaccel module, imported libaccel subpackage) for every import across them."""
    edges = set()
    for module, path in MODULES.items():
        if module.split(".")[0] != "libaccel":
            continue
        for name in _imported_names(path, module):
            target = _subpackage(name)
            if target is not None and target != _subpackage(module):
                edges.add((module, target))
    return edges


def test_the_driver_imports_none_of_libaccels_subpackages() -> None:
    bad = []
    for module, target in sorted(_libaccel_edges()):
        own = _subpackage(module)
        allowed = LIBACCEL_SUBPACKAGES[own] if own else set()
        if target not in allowed and (module, target) not in LIBACCEL_EXCEPTIONS:
            bad.append(f"{module} imports {target}")
    assert not bad, "imports against libaccel's layering (tests/test_imports.py):\n" + "\n".join(bad)


@pytest.mark.parametrize(("module", "target"), sorted(LIBACCEL_EXCEPTIONS))
def test_every_libaccel_exception_is_still_needed(module: str, target: str) -> None:
    assert (module, target) in _libaccel_edges(), f"drop the exception {module} -> {target}"


def test_the_libaccel_check_sees_its_edges() -> None:
    # accel run imports the runner, and the runner's modules import the driver (not an edge: no subpackage).
    assert ("libaccel.tools.run_cli", "libaccel.runtime") in _libaccel_edges()
    assert _subpackage("libaccel.runtime.model") == "libaccel.runtime"
    assert _subpackage("libaccel.job") is None and _subpackage("libaccel.compiler.lower") is None


def test_no_module_imports_itself_through_others() -> None:
    cycles = _cycles(_module_graph())
    assert not cycles, "modules that import each other at run time:\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def test_the_cycle_check_sees_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_imports_by_name_and_type_checking(tmp_path: Path) -> None:
    """A module name in a string counts where the module imports by name; an import under
    TYPE_CHECKING counts for the layering but not for the cycles."""
    source = (
        "import importlib\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import bench.jobs\n"
        "HOME = 'libaccel.compiler.cache'\ndef f():\n    return importlib.import_module(HOME)\n"
    )
    path = tmp_path / "m.py"
    path.write_text(source)
    assert _imported_names(path, "m") >= {"libaccel.compiler.cache", "bench.jobs", "typing"}
    assert "bench.jobs" not in _imported_names(path, "m", run_time_only=True)


def test_the_exception_uses_the_public_entry_only() -> None:
    """libaccel.runtime.model reaches the delegate through its package's public entry point alone."""
    names = _imported_names(MODULES["libaccel.runtime.model"], "libaccel.runtime.model")
    assert {n for n in names if n.split(".")[0] == "delegate_teflon"} == {
        "delegate_teflon",
        "delegate_teflon.library_path",
    }
