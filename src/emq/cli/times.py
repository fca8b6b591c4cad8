"""Times as the command line shows them: one format everywhere a table or ``emq job`` shows one.

An absolute time is ISO-8601 UTC to the second (``2025-01-31T12:03:15Z``); a duration is its
two largest units (``850ms``, ``12s``, ``4m 10s``, ``2h 03m``, ``3d 04h``); a time next to now
is both: ``in 4m 10s (2025-01-31T12:03:15Z)``, ``2m 05s ago (2025-01-31T11:57:05Z)``. Every
time is server-clock ms, and ``now`` is the server's clock too, so an age does not depend on
this machine's clock. Pure functions, no I/O.
"""

from __future__ import annotations

from datetime import UTC, datetime


def iso(ms: int) -> str:
    """``ms`` (epoch ms) as ISO-8601 UTC to the second: ``2025-01-31T12:03:15Z``."""
    return datetime.fromtimestamp(ms // 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def span(ms: int) -> str:
    """A duration as its two largest units: ``850ms``, ``12s``, ``4m 10s``, ``2h 03m``,
    ``3d 04h`` (a negative one as its size)."""
    ms = abs(ms)
    if ms < 1000:
        return f"{ms}ms"
    s = ms // 1000
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m {s:02d}s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h}h {m:02d}m"
    return f"{h // 24}d {h % 24:02d}h"


def relative(ms: int, now: int) -> str:
    """``ms`` seen from ``now``: ``in 4m 10s``, ``2m 05s ago`` or ``now`` (within a second)."""
    if abs(ms - now) < 1000:
        return "now"
    return f"in {span(ms - now)}" if ms > now else f"{span(now - ms)} ago"


def when(ms: int | None, now: int) -> str:
    """``ms`` seen from ``now`` and as a date: ``in 4m 10s (2025-01-31T12:03:15Z)``; ``""``
    for None."""
    return "" if ms is None else f"{relative(ms, now)} ({iso(ms)})"
