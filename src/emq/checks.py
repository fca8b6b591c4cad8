"""The one place where values are checked and shown in errors.

Every integer option of emq (a lease, a count, a priority, a limit) is checked by
:func:`check_int`, so each is refused with the same kind of message; :func:`shown` cuts what
an error repeats back, so a 100 KB name or key never fills a log line.
"""

from __future__ import annotations

from .errors import InvalidOption

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
