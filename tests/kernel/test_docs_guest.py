"""The docs' blocks marked ``docs-run: guest`` run on vnpu.ko, in the QEMU guest (docs/contributing.md).

Each document's guest blocks run in order in a working directory of their own, as
tests/docs/test_docs_run.py runs the host's; a block must exit 0 (a console block: the exit codes it
shows) and leave the checkout's ``git status`` as it was.
"""

from __future__ import annotations

from pathlib import Path

import docs_blocks as db
import pytest

GUEST = {str(p.relative_to(db.REPO)): db.parse(p) for p in db.documents()}
GUEST = {doc: blocks for doc, blocks in GUEST.items() if any(b.kind == "guest" for b in blocks)}
# A block's time limit here: a TCG guest on a busy 2-core host starts Python several times slower.
TIMEOUT = 4 * db.TIMEOUT


def test_guest_blocks_exist() -> None:
    assert {"README.md", "docs/uapi.md"} <= set(GUEST)


@pytest.mark.parametrize("doc", sorted(GUEST))
def test_guest_blocks_run(doc: str, tmp_path: Path) -> None:
    before = db.git_status()
    outcomes = db.run_document(GUEST[doc], db.workdir(tmp_path / "checkout"), frozenset({"guest"}), TIMEOUT)
    failed = [o.describe() for o in outcomes if not o.ok]
    assert not failed, "\n\n".join(failed)
    assert db.git_status() == before, f"{doc}: its guest blocks changed the checkout (git status --porcelain)"
