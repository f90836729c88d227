"""Fixtures of the LiteRT vendor tests: the built libraries and the C host (tests/c/litert_host.c in
its ``npu`` mode)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import litert_host
import pytest
from litert_host import write_reference

__all__ = ["MODELS", "run_npu_host", "write_reference"]

MODELS = Path(__file__).resolve().parents[1] / "corpus" / "models"


@pytest.fixture(scope="session")
def libs() -> str:
    import litert_vendor

    return litert_vendor.library_dir()


@pytest.fixture(scope="session")
def npu_host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return litert_host.build(tmp_path_factory.mktemp("c") / "litert_host")


def run_npu_host(
    host: Path, libs: str, model: Path, options: str, files: list[Path], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The C host on ``model`` with vnpu's vendor libraries and the ``vnpu`` opaque options ``options``."""
    return litert_host.run(host, "npu", libs, model, options, files, env)
