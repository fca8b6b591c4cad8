"""The I/O-free part of dead-letter handling: which dead jobs a filter matches, and how they are
grouped by error.

The shells (:mod:`emq.queue._async.deadletters` and its generated sync twin
:mod:`emq.queue._sync.deadletters`)
send the commands; everything they decide is decided here, so it is tested without a server.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidOption

ERROR_KEY_CHARS = 200  # a group's key: at most this many characters of the error's first line
NO_ERROR = "(no error)"
SCAN_PAGE = 500  # dead ids read per round trip while scanning (ZSCAN COUNT)
BULK_CHUNK = 200  # ids moved per server step of a bulk redrive or purge
MAX_PAGES = 100_000  # bounds a scan (50,000,000 dead jobs at the default page)
ROW_FIELDS = ("state", "name", "last_error")
_SPACE = re.compile(r"\s+")


def error_key(text: str | None) -> str:
    """The group an error belongs to: its first non-blank line, runs of whitespace made one
    space, cut at :data:`ERROR_KEY_CHARS`; :data:`NO_ERROR` when there is none."""
    for line in (text or "").splitlines():
        key = _SPACE.sub(" ", line).strip()
        if key:
            return key if len(key) <= ERROR_KEY_CHARS else key[: ERROR_KEY_CHARS - 1] + "…"
    return NO_ERROR


@dataclass(frozen=True, slots=True)
class DeadFilter:
    """Which dead jobs a grouping or a bulk move takes; a field left None takes every job.

    ``error``: the group key (:func:`error_key`) equals this exactly; ``error_contains``: the
    error text contains this (case-insensitive); ``name``: the job's name equals this;
    ``since_ms`` / ``until_ms``: it died at or after / before this time (server ms)."""

    error: str | None = None
    error_contains: str | None = None
    name: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    def __post_init__(self) -> None:
        for label in ("since_ms", "until_ms"):
            value = getattr(self, label)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise InvalidOption(f"{label} must be a time in ms >= 0, got {value!r}")
        since, until = self.since_ms, self.until_ms
        if since is not None and until is not None and until < since:
            raise InvalidOption("until_ms is before since_ms")

    @property
    def empty(self) -> bool:
        """True when it takes every dead job."""
        return self == DeadFilter()

    def matches(self, name: str | None, error: str | None) -> bool:
        """Whether a dead job with this ``name`` and ``error`` text is taken (the time range
        is applied by the scan, on the dead set's scores)."""
        if self.name is not None and name != self.name:
            return False
        if self.error is not None and error_key(error) != self.error:
            return False
        if self.error_contains is not None:
            return self.error_contains.casefold() in (error or "").casefold()
        return True

    def in_time(self, died_ms: int, now_ms: int) -> bool:
        """Whether a job that died at ``died_ms`` is in the time range (and died no later
        than ``now_ms``, when the scan started)."""
        if self.since_ms is not None and died_ms < self.since_ms:
            return False
        if self.until_ms is not None and died_ms >= self.until_ms:
            return False
        return died_ms <= now_ms

    def describe(self) -> str:
        """The filter in words, for progress lines and flash messages."""
        parts = []
        if self.error is not None:
            parts.append(f"error {self.error!r}")
        if self.error_contains is not None:
            parts.append(f"error containing {self.error_contains!r}")
        if self.name is not None:
            parts.append(f"name {self.name!r}")
        if self.since_ms is not None:
            parts.append(f"died at or after {self.since_ms} ms")
        if self.until_ms is not None:
            parts.append(f"died before {self.until_ms} ms")
        return ", ".join(parts) or "every dead job"


@dataclass(frozen=True, slots=True)
class Group:
    """Dead jobs sharing an error key: how many, when the newest and oldest died (server
    ms), their names with counts (most common first), and the newest job's id."""

    error: str
    count: int
    newest_ms: int
    oldest_ms: int
    names: tuple[tuple[str, int], ...]
    newest_id: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "error": self.error,
            "count": self.count,
            "newest_ms": self.newest_ms,
            "oldest_ms": self.oldest_ms,
            "names": dict(self.names),
            "newest_id": self.newest_id,
        }


@dataclass(frozen=True, slots=True)
class BulkResult:
    """What a bulk redrive or purge did: ``matched`` dead jobs matched the filter when the
    dead set was scanned, ``moved`` of them were redriven (or purged), ``skipped`` were no
    longer dead (or no longer matched) when their chunk's turn came: someone else moved
    them meanwhile. ``matched == moved + skipped``."""

    matched: int
    moved: int
    skipped: int

    def as_dict(self) -> dict[str, int]:
        return {"matched": self.matched, "moved": self.moved, "skipped": self.skipped}


@dataclass
class _Tally:
    count: int = 0
    newest_ms: int = -1
    oldest_ms: int = -1
    newest_id: str = ""
    names: Counter[str] = field(default_factory=Counter)


class Grouper:
    """Accumulates scanned dead jobs into :class:`Group` s."""

    def __init__(self) -> None:
        self._tallies: dict[str, _Tally] = {}

    def add(self, job_id: str, died_ms: int, name: str | None, error: str | None) -> None:
        t = self._tallies.setdefault(error_key(error), _Tally())
        t.count += 1
        t.names[name or ""] += 1
        if died_ms >= t.newest_ms:
            t.newest_ms, t.newest_id = died_ms, job_id
        if t.oldest_ms < 0 or died_ms < t.oldest_ms:
            t.oldest_ms = died_ms

    def groups(self) -> list[Group]:
        """Biggest group first, then the most recent."""
        out = [
            Group(key, t.count, t.newest_ms, t.oldest_ms, tuple(t.names.most_common()), t.newest_id)
            for key, t in self._tallies.items()
        ]
        return sorted(out, key=lambda g: (-g.count, -g.newest_ms, g.error))


def kept(ids: list[str], rows: list[list[str | None]], f: DeadFilter) -> list[str]:
    """The ids among ``ids`` whose row (``HMGET`` of :data:`ROW_FIELDS`) is still dead and
    still matches ``f``."""
    return [
        i
        for i, (state, name, error) in zip(ids, rows, strict=True)
        if state == "dead" and f.matches(name, error)
    ]


def chunks(ids: list[str], size: int) -> list[list[str]]:
    if not 0 < size <= 1000:
        raise InvalidOption(f"a bulk chunk must be 1..1000 ids, got {size}")
    return [ids[i : i + size] for i in range(0, len(ids), size)]
