"""vnpu micro-benchmarks: empty-job round trip and job throughput (``python -m bench``)."""
