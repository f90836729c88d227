"""The docs name every parameter there is: GET_PARAM's in docs/uapi.md (from the header), the module's
in docs/kernel.md (from the driver's module_param declarations), and no module parameter that is gone."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_docs_uapi_names_every_get_param_parameter() -> None:
    header = (REPO / "uapi" / "drm" / "vnpu_accel.h").read_text()
    doc = (REPO / "docs" / "uapi.md").read_text()
    params = re.findall(r"^\s*DRM_VNPU_PARAM_(\w+) = (\d+),", header, re.M)
    assert params
    missing = [name for name, _ in params if f"`{name}`" not in doc]
    assert not missing, f"docs/uapi.md does not name GET_PARAM's {missing}"
    assert f"numbered 0..{max(int(n) for _, n in params)})" in doc


def test_docs_kernel_lists_exactly_the_module_parameters() -> None:
    sources = "".join(p.read_text() for p in (REPO / "kernel" / "drivers_accel_stub").glob("*.c"))
    declared = set(re.findall(r"module_param(?:_named)?\((\w+),", sources))
    section = (REPO / "docs" / "kernel.md").read_text().split("### Module parameters")[1].split("\n## ")[0]
    assert set(re.findall(r"^\| `(\w+)` \|", section, re.M)) == declared
