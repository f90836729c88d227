"""docs/delegate.md's Python example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "delegate.md"


def test_python_example_runs(capsys: pytest.CaptureFixture) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert blocks, "docs/delegate.md has no python example"
    exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "__doc_example__"})
    assert "NPU output equals the reference kernels" in capsys.readouterr().out
