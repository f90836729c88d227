"""vnpu micro-benchmarks: empty-job round trip and job throughput (``python -m bench``).

Every bench writes its JSON under ``RESULTS`` (the checkout's ``build/bench/``, which git ignores)
unless told another path, so running one leaves the checkout as it was; only an explicit
``--markdown`` or ``--plots`` rewrites a published file under ``docs/``.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "build" / "bench"
