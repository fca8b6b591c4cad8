"""The I/O-free part of dead-letter handling: which dead jobs a filter matches, and how they are
grouped by error (:func:`error_key`: the first line with its varying parts, numbers, ids,
emails, hex strings, made placeholders).

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
_HEX = "[0-9A-Fa-f]"
# the varying parts of an error's first line, in the order they are replaced (an email or an
# id holds digits, so numbers come last); docs/dashboard.md, Dead letters in bulk
PLACEHOLDERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"[\w.%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+"), "<email>"),
    (re.compile(rf"(?<![0-9A-Za-z]){_HEX}{{8}}(?:-{_HEX}{{4}}){{3}}-{_HEX}{{12}}(?![0-9A-Za-z])"),
     "<id>"),  # a UUID
    (re.compile(r"(?<![0-9A-Za-z])JOB[0-9A-Za-z]{11}(?![0-9A-Za-z])"), "<id>"),  # an emq job id
    (re.compile(rf"(?<![0-9A-Za-z_])(?:0[xX]{_HEX}+|(?=[a-fA-F]*[0-9])(?=[0-9]*[a-fA-F])"
                rf"{_HEX}{{8,}})(?![0-9A-Za-z_])"), "<hex>"),  # 0x..., or 8+ digits and a-f
    (re.compile(r"(?<![A-Za-z0-9_])[0-9]+(?:[.,][0-9]+)*"), "<n>"),  # not inside a word (v2)
)  # fmt: skip


def _first(text: str | None) -> str | None:
    """The first non-blank line of ``text``, runs of whitespace made one space."""
    for line in (text or "").splitlines():
        shown = _SPACE.sub(" ", line).strip()
        if shown:
            return shown
    return None


def _cut(text: str) -> str:
    return text if len(text) <= ERROR_KEY_CHARS else text[: ERROR_KEY_CHARS - 1] + "…"


def first_line(text: str | None) -> str:
    """An error as a group shows it for an example: its first non-blank line, runs of
    whitespace made one space, cut at :data:`ERROR_KEY_CHARS`; :data:`NO_ERROR` when there
    is none."""
    line = _first(text)
    return NO_ERROR if line is None else _cut(line)


def normalise(line: str) -> str:
    """``line`` with its varying parts made placeholders (:data:`PLACEHOLDERS`): emails
    ``<email>``, UUIDs and emq job ids ``<id>``, hex strings (``0x`` and hex digits, or 8 or
    more hex characters mixing digits and letters) ``<hex>``, numbers (``42``, ``3.5``,
    ``1,000``) not inside a word ``<n>`` (``v2``, ``utf8``, ``s3`` stay; ``30s`` is
    ``<n>s``). ``normalise(normalise(x)) == normalise(x)``."""
    for pattern, placeholder in PLACEHOLDERS:
        line = pattern.sub(placeholder, line)
    return line


def error_key(text: str | None) -> str:
    """The group an error belongs to: :func:`first_line` with its varying parts made
    placeholders (:func:`normalise`, before the cut); :data:`NO_ERROR` when there is none. A
    key is its own key (``error_key(error_key(x)) == error_key(x)``), so a group's key, as
    listed, filters that group."""
    line = _first(text)
    return NO_ERROR if line is None else _cut(normalise(line))


@dataclass(frozen=True, slots=True)
class DeadFilter:
    """Which dead jobs a grouping or a bulk move takes; a field left None takes every job.

    ``error``: the job's group key (:func:`error_key`) equals this one's (a group's key as
    listed, or any error text of that group: it is made a key here); ``error_contains``: the
    error text contains this (case-insensitive); ``name``: the job's name equals this;
    ``since_ms`` / ``until_ms``: it died at or after / before this time (server ms)."""

    error: str | None = None
    error_contains: str | None = None
    name: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    def __post_init__(self) -> None:
        if self.error is not None:  # a key is its own key: the listed group, or a text's group
            object.__setattr__(self, "error", error_key(self.error))
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
    ms), their names with counts (most common first), the newest job's id, and ``example``:
    the newest job's error as it was (:func:`first_line`, no placeholders)."""

    error: str
    count: int
    newest_ms: int
    oldest_ms: int
    names: tuple[tuple[str, int], ...]
    newest_id: str
    example: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "error": self.error,
            "count": self.count,
            "newest_ms": self.newest_ms,
            "oldest_ms": self.oldest_ms,
            "names": dict(self.names),
            "newest_id": self.newest_id,
            "example": self.example,
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
    example: str = ""
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
            t.newest_ms, t.newest_id, t.example = died_ms, job_id, first_line(error)
        if t.oldest_ms < 0 or died_ms < t.oldest_ms:
            t.oldest_ms = died_ms

    def groups(self) -> list[Group]:
        """Biggest group first, then the most recent."""
        out = [
            Group(
                key,
                t.count,
                t.newest_ms,
                t.oldest_ms,
                tuple(t.names.most_common()),
                t.newest_id,
                t.example,
            )
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
