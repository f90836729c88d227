"""libaccel.tools.fdinfo parses DRM usage stats; the sample is a real /proc/self/fdinfo of vnpu.ko in the
guest (data/capture_fdinfo.py made it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from libaccel.tools import fdinfo

SAMPLE = Path(__file__).parent / "data" / "fdinfo_vnpu.txt"


def test_parse_vnpu_sample() -> None:
    info = fdinfo.parse(SAMPLE.read_text())
    assert info.driver == "vnpu"
    assert info.client_id == 1
    assert info.pdev == "0000:00:0a.0"
    assert info.engines == {"npu": 10201976}
    assert info.engine_ns() == 10201976
    # 1028 KiB: a 1 MiB BO and a one-page command BO.
    assert info.memory == {
        "memory": {"total": 1028 << 10, "shared": 0, "active": 0, "resident": 1028 << 10, "purgeable": 0}
    }
    assert info.memory_bytes("resident") == 1028 << 10
    assert info.jobs == 20
    assert info.jobs_by_core == {0: 20, 1: 0}  # a lone file's jobs stay on one core
    assert info.other == {}


def test_units_engines_and_unknown_keys() -> None:
    text = (
        "pos:\t0\n"
        "drm-driver:\ti915\n"
        "drm-engine-render:\t12 ns\n"
        "drm-engine-capacity-render:\t2\n"
        "drm-total-vram0:\t3 MiB\n"
        "drm-memory-system:\t5\n"
        "drm-cycles-render:\t99\n"
    )
    info = fdinfo.parse(text)
    assert info.client_id is None and info.pdev is None
    assert info.engines == {"render": 12}
    assert info.memory == {"vram0": {"total": 3 << 20}, "system": {"memory": 5}}
    assert info.other == {"drm-engine-capacity-render": "2", "drm-cycles-render": "99"}
    assert info.engine_ns("copy") == 0 and info.memory_bytes("total", "lmem") == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pos:\t0\nflags:\t02\n", "no drm-driver"),
        ("drm-driver:\tvnpu\ndrm-engine-npu:\t12 ms\n", "drm-engine-npu"),
        ("drm-driver:\tvnpu\ndrm-total-memory:\t-1\n", "drm-total-memory"),
        ("drm-driver:\tvnpu\ndrm-client-id:\tabc\n", "drm-client-id"),
    ],
)
def test_malformed(text: str, message: str) -> None:
    with pytest.raises(fdinfo.FdInfoError, match=message):
        fdinfo.parse(text)


def test_read_a_file_that_is_not_drm() -> None:
    fd = os.open(__file__, os.O_RDONLY)
    try:
        with pytest.raises(fdinfo.FdInfoError, match="no drm-driver"):
            fdinfo.read(fd)
    finally:
        os.close(fd)
