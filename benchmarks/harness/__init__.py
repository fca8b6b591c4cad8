"""The benchmark harness: venvs, server, measurements, report (see docs/benchmarks.md)."""
