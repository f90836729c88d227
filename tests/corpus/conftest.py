"""The corpus tests read the delegate's whole placement from its last Prepare."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(autouse=True)
def keep_last_graph() -> Any:
    from delegate_teflon import plugin

    plugin.keep_last_graph = True
    yield
    plugin.keep_last_graph = False
