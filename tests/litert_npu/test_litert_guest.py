"""On vnpu.ko, in the QEMU guest: an AOT-compiled model through the dispatch library on the first
kernel device (``/dev/accel/accel0``), exact against BUILTIN_REF. Skips where there is no vnpu
kernel device (on the host). In the harness's default guest suite::

    PATH=.venv/bin:$PATH python -m qemu_tests --suites tests/litert_npu/test_litert_guest.py

One model keeps it short under TCG (every AOT compile starts a Python in apply_plugin_main); the
C host's run (gcc, then a host that starts its own Python) is marked ``slow``, which the default
guest run deselects: ``--pytest-args="-m slow"`` runs it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ai_edge_litert")

from conftest import MODELS, run_npu_host, write_reference  # noqa: E402

from libaccel import discovery  # noqa: E402
from libaccel.runtime.model import differing_bytes  # noqa: E402
from litert_vendor import tools  # noqa: E402

pytestmark = pytest.mark.skipif(
    not discovery.list_devices(), reason="no vnpu kernel device: this test runs in the QEMU guest"
)


@pytest.fixture(scope="module")
def node() -> str:
    return discovery.list_devices()[0].node


@pytest.fixture(scope="module")
def compiled(libs: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("aot")
    models = {}
    for name in ("resnet_small",):
        models[name] = out / f"{name}_npu.tflite"
        tools.apply_plugin(MODELS / f"{name}.tflite", models[name], libs)
    return models


@pytest.mark.parametrize("model", ["resnet_small"])
def test_aot_model_through_the_dispatch_library_on_vnpu_ko_is_exact(
    model: str, node: str, libs: str, compiled: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np
    from ai_edge_litert import interpreter

    from delegate_teflon.run import invoke, make_interpreter, random_inputs

    monkeypatch.setenv("VNPU_DEVICE", node)
    interp = make_interpreter(interpreter, (MODELS / f"{model}.tflite").read_bytes(), [], None)
    inputs = random_inputs(interp.get_input_details(), seed=11)
    want = invoke(interp, inputs)
    got = tools.run_compiled(compiled[model], inputs, libs)
    assert [differing_bytes(w, np.asarray(g).reshape(w.shape)) for w, g in zip(want, got, strict=True)] == [
        0
    ] * len(want)


@pytest.mark.slow
def test_aot_model_from_c_with_the_device_option_on_vnpu_ko_is_exact(
    node: str, npu_host: Path, libs: str, compiled: dict[str, Path], tmp_path: Path
) -> None:
    files = write_reference(MODELS / "resnet_small.tflite", tmp_path)
    done = run_npu_host(npu_host, libs, compiled["resnet_small"], f"device={node}", files)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    outputs = [line for line in done.stdout.splitlines() if line.startswith("output ")]
    assert outputs and all(line.endswith(" 0 differing") for line in outputs), done.stdout
