"""Camera to NPU with no copy: vivid's frames, exported as dma-bufs, read in place by NPU jobs and
checked against the CPU (libaccel.demos.camera_demo)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def vivid() -> Iterator[None]:
    """Linux's virtual camera, capture node only; the test skips where the kernel lacks it."""
    r = subprocess.run(["modprobe", "vivid", "node_types=0x1"], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        pytest.skip(f"no vivid module: {r.stderr.strip()}")
    yield
    subprocess.run(["modprobe", "-r", "vivid"], capture_output=True, check=False)


def test_vivid_frames_are_read_in_place_and_exact(vivid, capsys: pytest.CaptureFixture[str]) -> None:
    from libaccel.demos import camera_demo
    from libaccel.demos.v4l2 import capture_nodes

    assert capture_nodes("vivid"), "vivid loaded but no capture node"
    assert camera_demo.main(["--frames", "4"]) == 0
    out = capsys.readouterr().out
    assert out.count("read in place at VA") == 4
    assert "0 values differ from the CPU" in out and "4 of 4 frames exact" in out
