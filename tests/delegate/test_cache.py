"""The compile cache: a second interpreter of the same model loads the partition from cache_dir."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tools.models import generate as gen


def test_second_load_hits_the_cache(
    interp_mod: Any, lib_path: str, tmp_path: Path, capfd: pytest.CaptureFixture
) -> None:
    model = gen.conv2d_model((1, 8, 8, 4), 8, 3, 1, "SAME", True, "RELU", 21)
    options = {"device": "shim", "log_level": "verbose", "cache_dir": str(tmp_path)}
    logs = []
    for _ in range(2):
        delegate = interp_mod.load_delegate(lib_path, options)
        interp = interp_mod.Interpreter(model_content=model, experimental_delegates=[delegate])
        interp.allocate_tensors()
        logs.append(capfd.readouterr().err)
    assert "compiled and uploaded" in logs[0]
    assert "loaded from the compile cache" in logs[1]
    assert len(list(tmp_path.iterdir())) == 1
