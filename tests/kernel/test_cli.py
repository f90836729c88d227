"""The accel CLI on the kernel device: `accel list` finds vnpu.ko's node, `accel info` reads it."""

from __future__ import annotations

import pytest
from kernel_helpers import accel_nodes

from libaccel import Device
from libaccel.tools import cli


def test_list_shows_the_vnpu_node(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for node in accel_nodes():
        assert node in out


def test_info_on_the_kernel_device_matches_get_param(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["info", "--device", "kernel"]) == 0
    out = capsys.readouterr().out
    with Device.open("kernel") as dev:
        params = dev.params
    assert "driver: vnpu" in out
    assert f"job_timeout_ms: {params.job_timeout_ms}" in out
    assert f"max_job_bos: {params.max_job_bos}" in out
    assert f"device: {accel_nodes()[0]}" in out
