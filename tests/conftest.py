"""Settings shared by every test directory."""

import os

import pytest
from hypothesis import settings

from vnpu_common import config

# The shim's job timeout in the tests (and the programs they start): long, so that a model's jobs on a
# loaded machine (pytest-xdist's workers beside other guests) are not taken for hangs. The hang tests
# set a short one themselves (driver_knobs.job_timeout), on either backend.
os.environ.setdefault(config.SHIM_JOB_TIMEOUT_MS.name, "10000")
# Every placement the tests make is strict: a planner error fails the test instead of quietly putting
# its node on the CPU (libaccel.compiler.partition). Tests of the fallback ask for it explicitly.
os.environ.setdefault(config.STRICT_PLACEMENT.name, "1")

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
