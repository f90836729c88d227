"""The project's C lives in .c/.h files, where compilers, checkpatch and grep see it: no Python string
of the packages the wheel ships (pyproject.toml's package list), nor of the test suites, holds C (a
preprocessor line, a typedef, a function body). cffi's cdef text is allowed where cffi needs it, as
declarations (delegate_teflon/abi.py's extern "Python" callbacks). A test's C program is a file of
tests/c/, compiled with -Wall -Wextra -Werror.

Not checked: the generators that write C headers (tools/generate_headers.py), and the test files of
:data:`TESTS_WITH_C_TEXT`, whose C is made from Python's tables or is the input of the tool they test.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# A line of the preprocessor, a typedef, or a function definition's head and opening brace.
C_TEXT = re.compile(
    r"^\s*#\s*(?:include|define|if|ifdef|ifndef|pragma|error)\b"
    r"|\btypedef\s+(?:struct|union|enum|int|unsigned)\b"
    r"|^\s*(?:static\s+)?[A-Za-z_][\w *]*\b\w+\s*\([^;{)]*\)\s*\{",
    re.M,
)
SHIPPED = tuple(
    f"{pattern.rstrip('*')}/"
    for pattern in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"][
        "find"
    ]["include"]
)


def c_in_strings(source: str) -> list[tuple[int, str]]:
    """(line, the C it found) for each string literal of ``source`` that holds C."""
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", -1)):
            try:
                text = ast.literal_eval(tok.string)  # escapes decoded: "...\\n{" is a newline and a brace
            except (ValueError, SyntaxError):
                text = tok.string  # an f-string: its text as written
            if m := C_TEXT.search(text if isinstance(text, str) else tok.string):
                found.append((tok.start[0], m.group(0).strip()))
    return found


#: Test files whose strings hold C on purpose, and why (each must still hold some: no stale entry).
TESTS_WITH_C_TEXT = {
    "tests/packaging/test_c_sources.py": "the examples this check must see",
    "tests/uapi/test_abi_layout.py": "a program generated from the bindings' tables, compared with them",
    "tests/tools/test_generated_headers.py": "a program generated from the ISA spec, compared with it",
    "tests/uapi/test_headers_install.py": "header text the uapi sanitizer under test rewrites",
    "tests/tools/test_upstream.py": "kernel header fragments the upstream tool under test probes",
}


def python_sources() -> list[Path]:
    """The shipped packages' Python files, setup.py and the test suites' (less TESTS_WITH_C_TEXT)."""
    r = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [
        ROOT / name
        for name in r.stdout.split()
        if name.startswith((*SHIPPED, "tests/")) and name not in TESTS_WITH_C_TEXT or name == "setup.py"
    ]


@pytest.mark.parametrize(
    "text",
    [
        '"""\n#include <stdio.h>\n"""',
        'r"""typedef struct x { int a; } x;"""',
        '"static int f(void)\\n{\\n    return 0;\\n}"',
        'f"""\n  #define N {n}\n"""',
    ],
)
def test_the_check_sees_c(text: str) -> None:
    assert c_in_strings(f"X = {text}\n"), text


def test_a_cdef_declaration_is_not_c_text() -> None:
    cdef = 'CALLBACKS = r"""\nextern "Python" int vnpu_cb(void *context, int handle);\n"""\n'
    assert c_in_strings(cdef) == []


def test_no_c_in_python_strings() -> None:
    sources = python_sources()
    assert {ROOT / "delegate_teflon" / "build.py", ROOT / "litert_vendor" / "abi.py"} <= set(sources)
    assert ROOT / "tests" / "libaccel" / "test_trace.py" in sources
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for path in sources
        if path.exists()
        for line, text in c_in_strings(path.read_text())
    ]
    assert found == [], "C in Python strings (move it to a .c/.h file):\n" + "\n".join(found)


@pytest.mark.parametrize("name", TESTS_WITH_C_TEXT)
def test_every_test_file_allowed_c_text_has_some(name: str) -> None:
    assert c_in_strings((ROOT / name).read_text()), f"{name} holds no C now: drop it from TESTS_WITH_C_TEXT"
