"""The compile cache: a second interpreter of the same model loads the partition from cache_dir,
without re-running the compiler's support checks, and a model whose weights differ misses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import modelgen as gen
from delegate_teflon import compiler_bridge, plugin


def _load(runtime: str, interp_mod: Any, lib_path: str, model: bytes, cache: Path) -> Any:
    options = {"device": "shim", "log_level": "verbose", "cache_dir": str(cache)}
    delegate = interp_mod.load_delegate(lib_path, options)
    return gen.reference_interpreter(model, runtime, [delegate])


def _run(interp: Any, seed: int = 3) -> np.ndarray:
    detail = interp.get_input_details()[0]
    rng = np.random.default_rng(seed)
    info = np.iinfo(detail["dtype"])
    x = rng.integers(info.min, info.max + 1, size=detail["shape"], dtype=detail["dtype"])
    interp.set_tensor(detail["index"], x)
    interp.invoke()
    return interp.get_tensor(interp.get_output_details()[0]["index"]).copy()


def _reference(runtime: str, model: bytes) -> np.ndarray:
    return _run(gen.reference_interpreter(model, runtime))


@pytest.fixture
def constants_as_views() -> Any:
    """Run the delegate as applications do: constants read as views of the model, not copies."""
    plugin.keep_last_graph = False
    yield
    plugin.keep_last_graph = True


def test_second_load_hits_the_cache(
    runtime: str,
    interp_mod: Any,
    lib_path: str,
    tmp_path: Path,
    capfd: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    constants_as_views: None,
) -> None:
    model = gen.conv2d_model((1, 8, 8, 4), 8, 3, 1, "SAME", True, "RELU", 21)
    checks: list[int] = []
    real_check = compiler_bridge.check_node

    def counting_check(graph: Any, node: Any, strict: bool = False) -> Any:
        checks.append(node.index)
        return real_check(graph, node, strict)

    monkeypatch.setattr(compiler_bridge, "check_node", counting_check)
    logs, outputs = [], []
    for _ in range(2):
        interp = _load(runtime, interp_mod, lib_path, model, tmp_path)
        logs.append(capfd.readouterr().err)
        outputs.append(_run(interp))
        del interp
    assert "compiled and uploaded" in logs[0]
    assert "loaded from the compile cache" in logs[1]
    assert checks == [0]  # the second load reused the first one's support check
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".vnpucp", ".vnpusup"]
    want = _reference(runtime, model)
    for got in outputs:
        np.testing.assert_array_equal(got, want)


def test_changed_weights_miss_the_cache(
    runtime: str,
    interp_mod: Any,
    lib_path: str,
    tmp_path: Path,
    capfd: pytest.CaptureFixture,
    constants_as_views: None,
) -> None:
    """Same graph and shapes, other random weights: a new key, a new compile, both exact."""
    a = gen.conv2d_model((1, 8, 8, 4), 8, 3, 1, "SAME", True, "RELU", 21)
    b = gen.conv2d_model((1, 8, 8, 4), 8, 3, 1, "SAME", True, "RELU", 22)
    for model in (a, b):
        interp = _load(runtime, interp_mod, lib_path, model, tmp_path)
        assert "compiled and uploaded" in capfd.readouterr().err
        np.testing.assert_array_equal(_run(interp), _reference(runtime, model))
        del interp
    assert len(list(tmp_path.glob("*.vnpucp"))) == 2
