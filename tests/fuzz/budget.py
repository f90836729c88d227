"""The host fuzzers' example budgets: small in CI, raised for a longer run.

Each property test states its CI budget through :func:`budget`; ``VNPU_FUZZ_SCALE`` multiplies
every budget (``VNPU_FUZZ_SCALE=100 python -m pytest tests/fuzz`` is a long run).

At the CI budget the examples are derandomized (the same ones every run), so the README's test
command does not pass or fail by luck; a scaled run explores new random examples, and what it
finds is fixed and kept as an ``@example``.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from vnpu_common import config

SCALE: int = config.FUZZ_SCALE.get()


def budget(examples: int) -> settings:
    """Hypothesis settings for ``examples`` examples (times VNPU_FUZZ_SCALE), no deadline."""
    return settings(
        max_examples=examples * SCALE,
        derandomize=SCALE == 1,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
