"""The wheel's build step (the metadata is pyproject.toml's): compile every shared library of the
stack into the wheel, which is therefore a platform wheel (``cp311-cp311-linux_x86_64``).

The same build functions a checkout uses on first use write into the wheel's tree, beside the
modules that load the result, and each loader takes that copy when it is there:

- ``delegate_teflon/libteflon.so`` (``delegate_teflon.build.build``);
- ``device_model/mac_array/_vnpu_mac_array.<SOABI>.so`` (``device_model.mac_array.build.build``: one
  binary with the generic, AVX2 and AVX-512 VNNI kernels, chosen at run time);
- ``litert_vendor/lib/libLiteRtCompilerPlugin_Vnpu.so`` and ``libLiteRtDispatch_Vnpu.so``
  (``litert_vendor.build.build``);
- ``vnpu_ort_ep/libvnpu_ort_ep.so`` (``vnpu_ort_ep.build.build``);
- ``libaccel/tools/libvnpu_trace.so``, accel trace's interposer (``libaccel.tools.trace.build``);
- ``libaccel/libvnpu_run.so``, the run of a prepared job on the kernel backend
  (``libaccel.prepared_run.build``).

An editable install builds nothing here: the checkout keeps building into the cache on first use.
The build modules import numpy (pyproject.toml's build requirements carry it).
"""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithLibraries(build_py):
    """build_py, then the shared libraries into the build tree (and so into the wheel)."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        sys.path.insert(0, str(ROOT))
        import litert_vendor
        from delegate_teflon import build as teflon
        from device_model.mac_array import build as mac_array
        from libaccel import prepared_run
        from libaccel.tools import trace
        from litert_vendor import build as litert
        from vnpu_ort_ep import build as ort_ep

        out = Path(self.build_lib)
        print(f"building {teflon.build(out / 'delegate_teflon', build_id=False)}")
        print(f"building {mac_array.build(out / 'device_model' / 'mac_array')}")
        litert_dir = out / "litert_vendor" / litert_vendor.PREBUILT.name
        print(f"building {litert.build(litert_dir, build_id=False)}")
        print(f"building {ort_ep.build(out / 'vnpu_ort_ep', build_id=False)}")
        print(f"building {trace.build(out / 'libaccel' / 'tools')}")
        print(f"building {prepared_run.build(out / 'libaccel')}")


class BinaryDistribution(Distribution):
    """The wheel holds compiled code: tag it for this Python and platform, not py3-none-any."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildWithLibraries}, distclass=BinaryDistribution)
