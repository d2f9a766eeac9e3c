"""Benchmark scripts (``python benchmarks/<name>.py``) and the suite that runs them and writes the README's
benchmark table from their results JSON (``python -m benchmarks``)."""
