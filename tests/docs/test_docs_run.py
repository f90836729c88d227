"""Every shell and Python block of README.md and docs/*.md runs as written (docs/contributing.md).

Unmarked blocks run here, on the host, each in document order in a fresh working directory per
document with a clean environment and a time limit; ``slow`` ones too with ``--docs-slow``.
``guest`` blocks run in the QEMU guest (tests/kernel/test_docs_guest.py); here they, and the
``skip`` ones, are only checked for syntax.
"""

from __future__ import annotations

import sys
from pathlib import Path

import docs_blocks as db
import pytest

DOCS = db.documents()
BLOCKS = {str(p.relative_to(db.REPO)): db.parse(p) for p in DOCS}


def test_documents_are_found() -> None:
    assert "README.md" in BLOCKS and "docs/tools.md" in BLOCKS
    every = [b for blocks in BLOCKS.values() for b in blocks]
    assert sum(b.runnable for b in every) > 50
    # tests/kernel/test_docs_guest.py runs these in the guest; here they get the syntax check only.
    assert sum(b.kind == "guest" for b in every) >= 5


@pytest.mark.parametrize("doc", sorted(BLOCKS))
def test_markers_and_syntax(doc: str) -> None:
    checks = ((db.marker_problem(b), b.runnable and db.syntax_problem(b)) for b in BLOCKS[doc])
    problems = [p for pair in checks for p in pair if p]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("doc", sorted(d for d, blocks in BLOCKS.items() if any(b.runnable for b in blocks)))
def test_blocks_run(doc: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    kinds = frozenset({None, "slow"} if request.config.getoption("--docs-slow") else {None})
    blocks = BLOCKS[doc]
    if not any(b.runnable and b.kind in kinds for b in blocks):
        pytest.skip(f"{doc}: every block is marked guest, slow or skip")
    before = db.git_status()
    outcomes = db.run_document(blocks, db.workdir(tmp_path / "checkout"), kinds)
    failed = [o.describe() for o in outcomes if not o.ok]
    assert not failed, "\n\n".join(failed)
    assert db.git_status() == before, f"{doc}: its blocks changed the checkout (git status --porcelain)"


# The checker itself: a block that fails, a wrong exit code, a marker without a reason.
def _doc(tmp_path: Path, text: str) -> list[db.Block]:
    (tmp_path / "docs").mkdir(exist_ok=True)
    path = tmp_path / "docs" / "x.md"
    path.write_text(text)
    return db.parse(path, tmp_path)


def test_a_failing_block_fails(tmp_path: Path) -> None:
    blocks = _doc(tmp_path, "```sh\nfalse\ntrue\n```\n\n```python\nraise SystemExit(undefined_name)\n```\n")
    outcomes = db.run_document(blocks, tmp_path, frozenset({None}))
    assert [o.ok for o in outcomes] == [False, False]
    assert "NameError: name 'undefined_name'" in outcomes[1].output


def test_console_exit_codes_are_checked(tmp_path: Path) -> None:
    good = "```console\n$ sh -c 'exit 3'\n[exit 3]\n$ echo a \\\n    b\na b\n```\n"
    bad = "```console\n$ true\n[exit 1]\n```\n"
    (ok,) = db.run_document(_doc(tmp_path, good), tmp_path, frozenset({None}))
    assert ok.ok, ok.describe()
    (wrong,) = db.run_document(_doc(tmp_path, bad), tmp_path, frozenset({None}))
    assert not wrong.ok and "docs/x.md:2: exit 0, the block says 1" in wrong.output


def test_named_blocks_are_files_for_later_blocks(tmp_path: Path) -> None:
    blocks = _doc(tmp_path, "```text in.txt\nhello\n```\n\n```sh\ngrep -q hello in.txt\n```\n")
    (outcome,) = db.run_document(blocks, tmp_path, frozenset({None}))
    assert outcome.ok, outcome.describe()


def test_markers_are_checked(tmp_path: Path) -> None:
    text = (
        "<!-- docs-run: skip -->\n```sh\ntrue\n```\n"
        "<!-- docs-run: later soon -->\n```sh\ntrue\n```\n"
        "<!-- docs-run: guest needs /dev/accel -->\n```sh\nif then\n```\n"
        "```\nno language\n```\n"
    )
    blocks = _doc(tmp_path, text)
    assert [b.kind for b in blocks] == ["skip", "later", "guest", None]
    assert "needs a reason" in db.marker_problem(blocks[0])
    assert "unknown docs-run kind 'later'" in db.marker_problem(blocks[1])
    assert db.marker_problem(blocks[2]) is None and "bash -n" in db.syntax_problem(blocks[2])
    assert "no language" in db.marker_problem(blocks[3])
    assert db.run_document(blocks, tmp_path, frozenset({None})) == []


def test_a_timeout_ends_the_block(tmp_path: Path) -> None:
    (block,) = _doc(tmp_path, "```sh\nsleep 30 & sleep 30\n```\n")
    outcome = db.run_block(block, tmp_path, db.clean_env(tmp_path), timeout=0.5)
    assert outcome.returncode is None and "timed out" in outcome.describe()


def test_the_workdir_runs_the_tests_venv_and_checkout(tmp_path: Path) -> None:
    # The delegate's cache key holds both paths: another path for either would build it again.
    command = ".venv/bin/python -c 'import sys, uapi; print(sys.prefix, uapi.__file__)'"
    (block,) = _doc(tmp_path, f"```sh\n{command}\n```\n")
    cwd = db.workdir(tmp_path / "checkout")
    outcome = db.run_block(block, cwd, db.clean_env(cwd))
    assert outcome.ok, outcome.describe()
    assert outcome.output.split() == [sys.prefix, str(db.REPO / "uapi" / "__init__.py")]


def test_fences_inside_list_items_are_blocks(tmp_path: Path) -> None:
    text = "1. Run:\n\n   <!-- docs-run: skip a reason -->\n   ```sh\n   echo hi\n   ```\n"
    text += "\n2. ``` `` ``` inline\n"
    (block,) = _doc(tmp_path, text)
    assert (block.lang, block.kind, block.reason, block.text) == ("sh", "skip", "a reason", "echo hi\n")
