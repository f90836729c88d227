"""The MAC array's C kernels, which the tests of the C paths need: a build failure fails them.

A compile error in ``device_model/mac_array/mac_array.c`` (or a missing gcc) makes the device model
fall back to numpy with one warning, which is right for a user. For the tests it would turn every C
test into a skip, and a broken kernel into a green run: here it is a collection error instead. Only
``VNPU_MAC_ARRAY=numpy``, which asks for the numpy path on purpose, skips them.
"""

from __future__ import annotations

import os

import pytest

from device_model import mac_array


def numpy_requested() -> bool:
    return os.environ.get(mac_array.ENV, "").strip().lower() == "numpy"


def c_variants() -> list[int]:
    """The C variants this CPU runs (at least the generic one); fails the caller's module if the
    kernels do not build."""
    isas = mac_array.cpu_isas()
    if not isas and not numpy_requested():
        pytest.fail(
            f"the MAC array's C kernels did not build ({mac_array.build_failure()}): run "
            "`python -m device_model.mac_array.build` for the compiler's output",
            pytrace=False,
        )
    return isas


#: Marks a test of the C path: skipped only when VNPU_MAC_ARRAY=numpy asks for numpy.
needs_c = pytest.mark.skipif(numpy_requested(), reason=f"{mac_array.ENV}=numpy selects the numpy path")
