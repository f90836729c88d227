"""tools/ is not an installed package: make the repository root importable for ``tools.models``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from libaccel import Device  # noqa: E402


@pytest.fixture(scope="module")
def dev() -> Iterator[Device]:
    with Device.open("shim") as d:
        yield d
