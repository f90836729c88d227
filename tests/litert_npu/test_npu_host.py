"""LiteRT's C API with vnpu's libraries and no Python host (tests/c/litert_host.c, its npu mode): a plain
model compiled just in time on the NPU class, the device chosen by the ``vnpu`` opaque options."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ai_edge_litert")

from conftest import MODELS, run_npu_host, write_reference  # noqa: E402


@pytest.mark.parametrize("model", ["resnet_small", "ds_cnn_kws"])
def test_jit_from_c_with_the_device_option_is_exact(
    model: str, npu_host: Path, libs: str, tmp_path: Path
) -> None:
    source = MODELS / f"{model}.tflite"
    files = write_reference(source, tmp_path)
    # The option wins over $VNPU_DEVICE (which names no device here): the one device rule.
    done = run_npu_host(npu_host, libs, source, "device=shim", files, {"VNPU_DEVICE": "/nonexistent"})
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "fully accelerated: yes" in done.stdout
    assert "compiler plugins were applied successfully: Vnpu compiler plugin" in done.stderr
    outputs = [line for line in done.stdout.splitlines() if line.startswith("output ")]
    assert outputs and all(line.endswith(" 0 differing") for line in outputs), done.stdout


def test_a_device_option_naming_no_device_is_one_line(npu_host: Path, libs: str, tmp_path: Path) -> None:
    source = MODELS / "resnet_small.tflite"
    done = run_npu_host(npu_host, libs, source, "device=/nonexistent", write_reference(source, tmp_path))
    assert done.returncode == 2
    assert "libLiteRtDispatch_Vnpu.so: cannot open the vnpu device '/nonexistent': " in done.stderr


def test_an_unknown_option_is_one_line(npu_host: Path, libs: str, tmp_path: Path) -> None:
    source = MODELS / "resnet_small.tflite"
    done = run_npu_host(npu_host, libs, source, "device=shim;colour=red", write_reference(source, tmp_path))
    assert done.returncode == 2
    assert "libLiteRtDispatch_Vnpu.so: unknown vnpu option 'colour' (known: device)" in done.stderr


def test_the_c_host_reports_a_differing_output(npu_host: Path, libs: str, tmp_path: Path) -> None:
    source = MODELS / "resnet_small.tflite"
    files = write_reference(source, tmp_path)
    data = bytearray(files[-1].read_bytes())
    data[0] ^= 0x01
    files[-1].write_bytes(bytes(data))
    done = run_npu_host(npu_host, libs, source, "device=shim", files)
    assert done.returncode == 1, done.stdout + done.stderr[-2000:]
    assert f"output 0: {len(data)} bytes, 1 differing" in done.stdout
