"""The one place where values are checked and shown in errors.

Every integer option of emq (a lease, a count, a priority, a limit) is checked by
:func:`check_int`, so each is refused with the same kind of message; :func:`shown` cuts what
an error repeats back, so a 100 KB name or key never fills a log line.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

from ..errors import InvalidOption

MAX_SHOWN = 80  # characters of a refused value an error repeats


def shown(value: object, limit: int = MAX_SHOWN) -> str:
    """``repr(value)`` cut to ``limit`` characters, saying how long it was."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f"{len(value)} characters" if isinstance(value, str | bytes) else f"{len(text)} chars"
    return f"{text[: limit - 3]}... ({size})"


def check_int(name: str, value: object, low: int, high: int | None = None, unit: str = "") -> int:
    """Return ``value`` if it is an int (not a bool) within ``low..high``; else raise
    :class:`~emq.errors.InvalidOption` naming the option, the range and its ``unit``."""
    if value.__class__ is int and low <= value and (high is None or value <= high):
        return value
    if value.__class__ is not int and (isinstance(value, bool) or not isinstance(value, int)):
        kind = f"an integer number of {unit}" if unit else "an integer"
        raise InvalidOption(f"{name} must be {kind}, got {shown(value)}")
    if value < low or (high is not None and value > high):
        bound = f"within {low}..{high}" if high is not None else f">= {low}"
        raise InvalidOption(f"{name} must be {bound}{' ' + unit if unit else ''}, got {value}")
    return value


_AGE = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_when(text: str | None, now_ms: int | None = None) -> int | None:
    """A point in time (ms since the epoch) from what an operator types: nothing (None),
    ms since the epoch (``1764547200000``), an ISO 8601 time (``2026-12-01T06:30``, UTC
    unless it names its offset), or an age before ``now_ms`` (default: this machine's clock)
    such as ``90s``, ``15m``, ``2h``, ``3d``. Anything else raises :class:`InvalidOption`."""
    text = (text or "").strip()
    if not text:
        return None
    if text.isdigit():
        return int(text)
    if m := _AGE.match(text.lower()):
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        return max(0, now - int(float(m[1]) * _UNIT_MS[m[2]]))
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidOption(
            f"not a time: {shown(text, 40)} (give ms since the epoch, an ISO time such as "
            "2026-12-01T06:30, or an age such as 15m, 2h, 3d)"
        ) from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return max(0, int(stamp.timestamp() * 1000))
