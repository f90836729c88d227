"""Fixtures of the delegate tests: the built library and the two TFLite runtimes."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

import delegate_teflon
from vnpu_common import config

RUNTIMES = ("tflite_runtime", "ai_edge_litert")


@pytest.fixture(scope="session")
def lib_path() -> str:
    return delegate_teflon.library_path()


@pytest.fixture(scope="session")
def test_device() -> str:
    """The delegate's device: the shim on the host; the QEMU harness sets "kernel" in the guest."""
    return config.TEST_DEVICE.get()


@pytest.fixture(params=RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def interp_mod(runtime: str) -> Any:
    return importlib.import_module(f"{runtime}.interpreter")


@pytest.fixture(autouse=True)
def keep_last_graph() -> Any:
    """Let the tests inspect the whole graph the delegate read at its last Prepare."""
    from delegate_teflon import plugin

    plugin.keep_last_graph = True
    yield
    plugin.keep_last_graph = False
