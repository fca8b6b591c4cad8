"""The fault harness's parts: servers, the proxy, agents, the faults, the episodes, counting,
the report. ``benchmarks/faults/run.py`` drives them; ``tests/faults`` runs them in emq's suite."""
