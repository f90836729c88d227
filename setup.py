"""The wheel's build step (the metadata is pyproject.toml's): compile libteflon.so and the MAC array
into the wheel, which is therefore a platform wheel (``cp311-cp311-linux_x86_64``).

The same build functions a checkout uses on first use (``delegate_teflon.build.build``,
``device_model.mac_array.build.build``) write into the wheel's tree, beside the modules that load the
result: ``delegate_teflon/libteflon.so`` and ``device_model/mac_array/_vnpu_mac_array.<SOABI>.so``
(one binary with the generic, AVX2 and AVX-512 VNNI kernels, chosen at run time). An editable
install builds nothing here: the checkout keeps building into the cache on first use.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _load(name: str, path: Path) -> ModuleType:
    """A build module by its file: the packages' __init__ import numpy, which a build need not have."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithLibraries(build_py):
    """build_py, then the shared libraries into the build tree (and so into the wheel)."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        sys.path.insert(0, str(ROOT))  # delegate_teflon, uapi, vnpu_common: standard library and cffi
        from delegate_teflon import build as teflon

        mac_array = _load("_vnpu_mac_array_build", ROOT / "device_model" / "mac_array" / "build.py")
        out = Path(self.build_lib)
        print(f"building {teflon.build(out / 'delegate_teflon', build_id=False)}")
        print(f"building {mac_array.build(out / 'device_model' / 'mac_array')}")


class BinaryDistribution(Distribution):
    """The wheel holds compiled code: tag it for this Python and platform, not py3-none-any."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildWithLibraries}, distclass=BinaryDistribution)
