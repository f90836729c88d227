"""The examples in docs/isa.md, docs/firmware.md and docs/tools.md run and print what the docs say.

Fenced blocks are processed in order, in a fresh directory per document:

- a block with a NAME after its language (```` ```asm NAME ````) is written to the file NAME;
- ```` ```console ```` blocks are transcripts: each ``$ command`` is run with bash and
  its output (stdout and stderr) must equal the lines up to the next ``$``; an
  expected exit status other than 0 is written as a last line ``[exit N]``;
- ```` ```python ```` blocks run in one namespace per document (later blocks see earlier
  definitions).

```` ```sh ```` blocks are instructions to run in the repository and are not executed here
(tests/docs runs them), nor are blocks marked ``docs-run: guest/slow/skip`` (docs/contributing.md).
Blocks are read by tests/docs_blocks.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import docs_blocks
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "docs" / "isa.md", ROOT / "docs" / "firmware.md", ROOT / "docs" / "tools.md"]


def _transcript(body: str) -> list[tuple[str, list[str], int]]:
    steps: list[tuple[str, list[str], int]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], [], 0))
        elif steps:
            m = re.fullmatch(r"\[exit (\d+)\]", line)
            if m:
                cmd, out, _ = steps[-1]
                steps[-1] = (cmd, out, int(m.group(1)))
            else:
                steps[-1][1].append(line)
    return steps


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_doc_examples(doc: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = docs_blocks.parse(doc)
    assert blocks, f"{doc} has no examples"
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # a named python block is a module for later ones
    namespace: dict[str, object] = {"__name__": "doc_example"}
    ran = 0
    for block in blocks:
        lang, name, body = block.lang, block.filename, block.text
        if name:
            (tmp_path / name).write_text(body)
        if block.kind is not None:
            continue
        if lang == "console":
            for cmd, expected, status in _transcript(body):
                r = subprocess.run(
                    ["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
                )
                got = (r.stdout + r.stderr).rstrip("\n").splitlines()
                assert got == expected and r.returncode == status, (
                    f"{doc.name}: $ {cmd}\nexpected (exit {status}):\n"
                    + "\n".join(expected)
                    + f"\ngot (exit {r.returncode}):\n"
                    + "\n".join(got)
                )
                ran += 1
        elif lang == "python":
            exec(compile(body, f"{doc.name}:python", "exec"), namespace)  # noqa: S102 - the doc's own code
            ran += 1
    assert ran
