"""Settings shared by every test directory."""

import pytest
from hypothesis import settings

# The suite runs on 2 shared cores (and inside a TCG guest): wall-clock
# deadlines per example would make property tests flaky, not stricter.
settings.register_profile("vnpu", deadline=None, print_blob=True)
settings.load_profile("vnpu")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "boots_guest: boots a QEMU guest of its own (minutes under TCG)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that boot a guest first: with pytest-xdist (``./run.sh test``: ``-n auto --dist
    worksteal``) one worker runs each while the others take the rest, instead of it starting last."""
    items.sort(key=lambda item: item.get_closest_marker("boots_guest") is None)
