"""docs/uapi.md's examples do what the docs promise, on the kernel device (in the QEMU guest)."""

from __future__ import annotations

import re
import subprocess
import sys

from kernel_helpers import REPO

DOC = REPO / "docs" / "uapi.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_doc_has_both_examples() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 2
    assert "fcntl.ioctl" in blocks[0] and "from libaccel import" in blocks[1]


def test_stdlib_ioctl_example_runs() -> None:
    # Its own process: the example opens the device with a raw fd and never closes it.
    proc = subprocess.run(
        [sys.executable, "-c", python_blocks()[0]], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "COPY ran on the NPU" in proc.stdout


def test_libaccel_example_runs() -> None:
    # The example asserts its own result; it raises (JobFault, AssertionError, OSError) otherwise.
    exec(compile(python_blocks()[1], str(DOC), "exec"), {})

