"""uapi/abi_generated.json is current, and what it holds is what the compiler says.

The bindings load that file instead of parsing the headers; these tests make sure a header
change cannot leave it behind, and that a changed header changes the numbers in it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from libaccel.tools import decode
from uapi import bindings

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "tools" / "generate_bindings.py"

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to read the headers")


def test_generated_bindings_are_current() -> None:
    r = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_a_header_change_makes_the_file_stale_and_regenerating_follows_it(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "uapi", tmp_path / "uapi", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "tools").mkdir()
    gen = tmp_path / "tools" / "generate_bindings.py"
    shutil.copy(GENERATOR, gen)
    shutil.copy(GENERATOR.parent / "generated_files.py", tmp_path / "tools")
    header = tmp_path / "uapi" / "drm" / "vnpu_accel.h"
    # One more field in the SUBMIT struct: its size, hence its request number, must change.
    text = header.read_text()
    anchor = "struct drm_vnpu_submit {"
    assert anchor in text
    header.write_text(text.replace(anchor, anchor + "\n\t__u64 extra;", 1))
    r = subprocess.run([sys.executable, str(gen), "--check"], capture_output=True, text=True)
    assert r.returncode == 1 and "abi_generated.json" in r.stderr and "generate_bindings.py" in r.stderr
    assert subprocess.run([sys.executable, str(gen)], capture_output=True).returncode == 0
    doc = json.loads((tmp_path / "uapi" / "abi_generated.json").read_text())
    new = doc["ioctls"]["DRM_IOCTL_VNPU_SUBMIT"]["request"]
    old = bindings.IOCTLS["DRM_IOCTL_VNPU_SUBMIT"]
    assert (new >> 16) & 0x3FFF == ((old >> 16) & 0x3FFF) + 8
    assert new & 0xFFFF == old & 0xFFFF


def test_every_ioctl_struct_size_matches_its_request_number() -> None:
    table = decode.ioctl_table()
    with_struct = [d for d in table.values() if d.struct]
    assert len(with_struct) > 50, "the drm.h structs were not read"
    for d in with_struct:
        request = bindings.ABI.ioctls[d.name].request
        assert (request >> 16) & 0x3FFF == d.size, d.name


def test_every_vnpu_ioctl_and_core_ioctl_is_bound() -> None:
    assert set(bindings.DRM_CORE_IOCTLS) <= set(bindings.IOCTLS)
    vnpu = {n for n, r in bindings.ABI.ioctls.items() if r.header == "vnpu_accel.h"}
    assert vnpu and vnpu <= set(bindings.IOCTLS)
    assert all(r.struct for n, r in bindings.ABI.ioctls.items() if n in vnpu)
