"""vnpu_common.config is the one list of the VNPU_* environment variables, and docs/configuration.md
shows it.

The tree is scanned for the places a variable is read or set: ``getenv`` of a ``VNPU_`` name in C,
the name after a ``$`` or before a ``=`` anywhere (shell, docs, messages), and in Python the
environment calls (``environ.get``, ``monkeypatch.setenv``, ``os.environ[...]``, ``dict(os.environ,
NAME=...)``).
Every name found must be in the table, every entry must be read where it says, and Python reads
them through the table only.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from device_model import mac_array
from vnpu_common import config

ROOT = Path(__file__).resolve().parents[2]
SKIP_DIRS = {".venv", "build", ".git", "vnpu.egg-info", "dist", "__pycache__", ".pytest_cache"}
SUFFIXES = {".py", ".c", ".h", ".sh", ".md", ".toml", ".in", ".yml", ".yaml"}
CONFIG_PY = ROOT / "vnpu_common" / "config.py"

C_GETENV = re.compile(r'\b(?:getenv|setenv|putenv)\(\s*"(VNPU_[A-Z0-9_]+)"')
SHELLISH = re.compile(r"\$\{?(VNPU_[A-Z0-9_]+)|\b(VNPU_[A-Z0-9_]+)=")
ENV_CALLS = {"get", "getenv", "setenv", "delenv", "setdefault", "pop"}
NAME = re.compile(r"VNPU_[A-Z0-9_]+")
# Names the scan finds that are not environment variables.
NOT_VARIABLES = {
    "VNPU_DEBUG": "a make variable of the module's Kbuild (make ... VNPU_DEBUG=1)",
    "VNPU_IMPORT_NS_STRING": "a kernel compatibility macro (tools/upstream.py --probe NAME=y)",
}


def _files() -> list[Path]:
    files = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if any(part in SKIP_DIRS for part in rel.parts) or rel.parts[0] == "kernel":
            continue
        if path.is_file() and (path.suffix in SUFFIXES or path.name == "run.sh") and path != CONFIG_PY:
            files.append(path)
    return files


def _python_env_names(tree: ast.AST) -> set[str]:
    """VNPU_ names a Python module passes to an environment call, indexes an environment by, or
    gives ``dict(os.environ, ...)`` as keywords."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ENV_CALLS and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and NAME.fullmatch(arg.value):
                    found.add(arg.value)
            if name == "dict":
                found |= {k.arg for k in node.keywords if k.arg and NAME.fullmatch(k.arg)}
        elif isinstance(node, ast.Subscript) and "env" in ast.unparse(node.value):
            s = node.slice
            if isinstance(s, ast.Constant) and isinstance(s.value, str) and NAME.fullmatch(s.value):
                found.add(s.value)
    return found


def _env_names() -> dict[str, set[str]]:
    """name -> the files that read or set it."""
    uses: dict[str, set[str]] = {}
    for path in _files():
        text = path.read_text(errors="replace")
        names = set(C_GETENV.findall(text))
        names |= {a or b for a, b in SHELLISH.findall(text)}
        if path.suffix == ".py":
            names |= _python_env_names(ast.parse(text))
        for name in names:
            uses.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return uses


def test_every_variable_the_tree_uses_is_in_the_table() -> None:
    found = _env_names()
    unknown = {
        n: sorted(files) for n, files in found.items() if n not in config.BY_NAME and n not in NOT_VARIABLES
    }
    assert not unknown, f"VNPU_* variables missing from vnpu_common/config.py: {unknown}"
    assert set(NOT_VARIABLES) <= set(found), "an entry of NOT_VARIABLES is found no more"


def test_every_entry_is_read_where_it_says() -> None:
    sources = {p: p.read_text(errors="replace") for p in _files() if p.suffix in (".py", ".c")}
    attrs = {name: v for name, v in vars(config).items() if isinstance(v, config.Variable)}
    for attr, var in attrs.items():
        if var.read_in_c:
            c_file = ROOT / var.reader.removeprefix("C: ")
            assert f'getenv("{var.name}")' in c_file.read_text(), f"{var.name}: no getenv in {c_file}"
        else:
            readers = [p for p, text in sources.items() if p.suffix == ".py" and f"config.{attr}." in text]
            assert readers, f"{var.name}: config.{attr} is used by no Python module"


def test_python_reads_the_variables_through_the_table() -> None:
    """No read of a VNPU_ name by ``os.environ.get``, ``os.getenv`` or ``os.environ[...]``."""
    offenders = []
    for path in _files():
        if path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            key = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in ("get", "getenv") and node.args:
                    key = node.args[0]
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                key = node.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and NAME.fullmatch(key.value):
                if "environ" in ast.unparse(node) or "getenv" in ast.unparse(node):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not offenders, "read these through vnpu_common.config: " + "; ".join(offenders)


def test_the_docs_show_the_table() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    assert config.markdown_table() in doc, (
        "docs/configuration.md differs from vnpu_common.config: paste `python -m vnpu_common.config`"
    )
    for var in config.VARIABLES:
        assert (ROOT / "docs" / var.doc).is_file(), f"{var.name}: no docs/{var.doc}"


def test_the_module_prints_the_table() -> None:
    r = subprocess.run([sys.executable, "-m", "vnpu_common.config"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and r.stdout == config.markdown_table()


@pytest.mark.parametrize(
    ("var", "raw", "message"),
    [
        (config.SHIM_CORES, "two", "VNPU_SHIM_CORES='two': expected a positive integer"),
        (config.SHIM_CORES, "0", "VNPU_SHIM_CORES='0': expected a positive integer"),
        (config.SHIM_CORE_PROCESSES, "yes", "VNPU_SHIM_CORE_PROCESSES='yes': expected 1, true, 0 or false"),
        (config.DELEGATE_LOG_LEVEL, "loud", "VNPU_DELEGATE_LOG_LEVEL='loud': expected quiet, info, verbose"),
        (config.CONFORMANCE_BACKENDS, "shim,qemu", "expected a comma list of shim, kernel"),
        (config.TIMEOUT_SCALE, "-1", "VNPU_TIMEOUT_SCALE='-1': expected a positive number"),
    ],
)
def test_a_bad_value_names_the_variable_and_what_it_accepts(
    var: config.Variable, raw: str, message: str
) -> None:
    with pytest.raises(config.ConfigError, match=re.escape(message)):
        var.get({var.name: raw})


def test_values_and_defaults() -> None:
    assert config.SHIM_CORES.get({}) is None  # the shim's default is the device model's
    assert config.SHIM_CORES.get({"VNPU_SHIM_CORES": "3"}) == 3
    assert config.SHIM_CORES.get({"VNPU_SHIM_CORES": ""}) is None  # empty is unset
    assert config.SHIM_CORE_PROCESSES.get({"VNPU_SHIM_CORE_PROCESSES": "True"}) is True
    assert config.SHIM_CORE_PROCESSES.get({}) is False
    assert config.CONFORMANCE_BACKENDS.get({}) == ["shim"]
    backends = {"VNPU_CONFORMANCE_BACKENDS": "shim, kernel"}
    assert config.CONFORMANCE_BACKENDS.get(backends) == ["shim", "kernel"]
    assert config.MODULE_PARAMS.get({"VNPU_MODULE_PARAMS": "a=1  b=2"}) == ["a=1", "b=2"]
    assert config.DEBUGFS.get({}) == Path("/sys/kernel/debug")


def test_the_mac_array_modes_are_the_device_models() -> None:
    assert set(config.MAC_ARRAY_MODES) == {"auto", "numpy", "c", *mac_array.ISA_NAMES.values()}


def test_a_bad_mac_array_value_is_warned_about_and_auto_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read at each job, so the device model runs on: a warning naming the variable, then auto."""
    monkeypatch.setattr(mac_array, "_selected", {})
    monkeypatch.setattr(mac_array, "_warned", set())
    warned: list[str] = []
    monkeypatch.setattr(mac_array, "_warn_once", warned.append)
    monkeypatch.setenv(config.MAC_ARRAY.name, "fast")
    fast = mac_array.selected_isa()
    monkeypatch.setenv(config.MAC_ARRAY.name, "auto")
    assert fast == mac_array.selected_isa()
    assert warned and "VNPU_MAC_ARRAY='fast': expected auto, numpy" in warned[0]
