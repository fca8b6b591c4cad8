"""Small statistics helpers shared by the harness."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def percentile(sorted_values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending sequence."""
    if not sorted_values:
        raise ValueError("no values")
    rank = max(0, min(len(sorted_values) - 1, round(pct / 100 * len(sorted_values)) - 1))
    return float(sorted_values[rank])


def median(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None
