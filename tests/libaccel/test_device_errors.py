"""Opening what is not a vnpu node: one NoDevice naming the path (or $VNPU_DEVICE) and what to give."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from libaccel import Device, discovery
from libaccel.errors import NoDevice


def _regular_file(tmp: Path) -> Path:
    (tmp / "f").write_text("x")
    return tmp / "f"


@pytest.mark.parametrize(
    ("make", "what"),
    [
        (lambda tmp: tmp, "a directory, not a device node"),
        (_regular_file, "a regular file, not a device node"),
        (lambda tmp: tmp / "missing", "no such device node"),
    ],
)
def test_a_path_that_is_no_node(tmp_path: Path, make: Callable[[Path], Path], what: str) -> None:
    path = make(tmp_path)
    with pytest.raises(NoDevice) as e:
        Device.open(str(path))
    assert str(e.value).startswith(f"open {path} failed: ENODEV") and what in str(e.value)
    assert "\n" not in str(e.value)


def test_a_path_through_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(NoDevice, match="a part of the path is not a directory, not a device node"):
        Device.open(str(tmp_path / "f" / "x"))


@pytest.mark.parametrize(("value", "what"), [("bogus", "names no file"), ("/", "is a directory")])
def test_a_bad_vnpu_device_is_named_as_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str, what: str
) -> None:
    monkeypatch.setenv(discovery.ENV_DEVICE, value)
    with pytest.raises(NoDevice) as e:
        discovery.resolve(None)
    assert str(e.value).startswith(f"open $VNPU_DEVICE={value!r} failed") and what in str(e.value)
    assert discovery.resolve("shim") == "shim"  # an explicit choice does not read the variable
