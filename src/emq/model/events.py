"""The event stream of a queue as a typed contract, and ways to read it.

Every transition script appends its events to ``emq:{<queue>}:events`` inside the same script
as the transition, so an event exists if and only if its transition happened. Each entry has
an ``event`` field (its name) and, for job events, a ``job`` field; :data:`EVENT_FIELDS` lists
every other field per name (``docs/events.md`` is the prose form, and a test checks both
against the ``emit(...)`` calls of every ``lua/*.lua`` and ``lua/includes/*.lua`` file).

One stream entry holds one event, or (a queue in keyspace layout 2) every event of one script
call: fields ``n`` (how many) and ``e``: per event its name, then its field, value pairs
(``job`` first), joined by the unit separator U+001F, the events joined by the record separator
U+001E. No value holds either: names, ids and numbers cannot, JSON text (payloads, progress)
escapes them, and free text (errors, cancel reasons) is cleaned of them before it is sent
(:data:`SEPARATORS`; ``emq.calls.call.clean_text``). The script moves the stream's last id on by
``n - 1``, so the i-th event (from 0) of an entry ``<ms>-<seq>`` has the position ``<ms>-<seq +
i>``, below the next entry's id: every reader expands an entry into its events (:func:`expand`),
and an :class:`Event`'s ``id`` is its position, which orders, resumes and deduplicates like a
stream id.

The readers of the stream are in :mod:`emq.queue._async.stream` (and its sync twin); what
they decode is here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from ..errors import InvalidOption

# name -> the fields besides ``event`` and ``job`` (job events carry ``job``; see JOB_EVENTS)
EVENT_FIELDS: dict[str, tuple[str, ...]] = {
    "enqueued": ("attempts", "name", "state"),
    "promoted": (),
    "missing": ("from",),
    "claimed": ("attempts", "token"),
    "lease_lost": ("token", "via"),
    "completed": ("attempts",),
    "retrying": ("attempts", "error", "delay_ms"),
    "dead": ("attempts", "error", "name", "payload", "stalled"),
    "ready": (),  # a flow's parent left waiting: its last child finished (docs/flows.md)
    "delayed": ("attempts", "delay_ms"),
    "stalled": ("attempts", "stalled"),
    "redriven": ("attempts", "to"),
    "removed": ("attempts", "from"),
    "paused": (),
    "resumed": (),
    "drained": ("count",),
    "lane_paused": ("lane",),
    "lane_resumed": ("lane",),
    "rate_limited": ("lane", "until", "by"),
    "limits_set": ("lane", "concurrency", "rate", "weight", "lane_concurrency", "lane_rate"),
    "rescheduled": ("delay_ms", "state"),
    "reprioritised": ("priority",),
    "payload_updated": (),
    "progress": ("progress",),
    "step": ("step", "attempts", "took_ms"),  # a durable step recorded (docs/steps.md)
    "step_failed": ("step", "attempts", "took_ms", "error"),  # a step raised: not recorded
    "cancel_requested": ("reason", "attempts"),
    "cancelled": ("from", "reason", "attempts"),
    "repeat_skipped": ("repeat", "skipped", "tick"),
}
QUEUE_EVENTS = frozenset(
    {"paused", "resumed", "drained", "lane_paused", "lane_resumed", "rate_limited", "limits_set",
     "repeat_skipped"}
)  # fmt: skip
# name -> fields only some writers add: a repeating schedule's job is ``enqueued`` with
# ``repeat`` (the schedule's key)
OPTIONAL_FIELDS: dict[str, tuple[str, ...]] = {"enqueued": ("repeat",)}
JOB_EVENTS = frozenset(EVENT_FIELDS) - QUEUE_EVENTS

READ_CHUNK = 1_000


def parse_id(entry_id: str) -> tuple[int, int]:
    """``"<ms>-<seq>"`` as a pair of ints, which orders like the stream does."""
    ms, _, seq = entry_id.partition("-")
    try:
        return int(ms), int(seq or 0)
    except ValueError:
        raise InvalidOption(f"{entry_id!r} is not a stream id like 1700000000000-0") from None


def format_id(ms: int, seq: int) -> str:
    return f"{ms}-{seq}"


def id_after(entry_id: str) -> str:
    """The smallest stream id strictly greater than ``entry_id``."""
    ms, seq = parse_id(entry_id)
    return format_id(ms, seq + 1) if seq < 2**64 - 1 else format_id(ms + 1, 0)


@dataclass(frozen=True, slots=True)
class Event:
    """One stream entry. ``id`` is the stream id; its ms part is the server time of the append.

    ``job`` is None for queue-level events (``paused``, ``resumed``, ``drained``); ``fields``
    holds every other field with its value as the script wrote it (a string).
    """

    id: str
    event: str
    job: str | None
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[int, int]:
        return parse_id(self.id)

    @property
    def time_ms(self) -> int:
        return self.key[0]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "event": self.event, "job": self.job, "fields": self.fields}

    @classmethod
    def from_entry(cls, entry_id: str, entry: Mapping[str, str]) -> Event:
        """The entry's one event; :func:`expand` reads an entry of several."""
        rest = dict(entry)
        name = rest.pop("event", "")
        job = rest.pop("job", None)
        return cls(entry_id, name, job, rest)

    @classmethod
    def from_row(cls, entry_id: str, name: str, job: str | None, fields_json: str) -> Event:
        return cls(entry_id, name, job, cast(dict[str, str], json.loads(fields_json)))


SEPARATORS = ("\x1e", "\x1f")  # between the events of an entry, between an event's parts


def is_batch(entry: Mapping[str, str]) -> bool:
    return "e" in entry and "n" in entry and "event" not in entry


def expand(entry_id: str, entry: Mapping[str, str]) -> list[Event]:
    """The events of one stream entry, in order, each at its position (the module's doc). An
    entry that does not hold what its ``n`` says is one ``unreadable`` event, never an error."""
    if not is_batch(entry):
        return [Event.from_entry(entry_id, entry)]
    ms, seq = parse_id(entry_id)
    out = []
    records = entry["e"].split(SEPARATORS[0])
    for i, record in enumerate(records):
        name, *rest = record.split(SEPARATORS[1])
        if len(rest) % 2:
            break
        fields = dict(zip(rest[::2], rest[1::2], strict=True))
        job = fields.pop("job", None)
        out.append(Event(format_id(ms, seq + i), name, job, fields))
    if len(out) != len(records) or str(len(records)) != entry["n"]:
        return [Event(entry_id, "unreadable", None, {"n": entry["n"], "e": entry["e"][:200]})]
    return out


def entries(reply: Any) -> list[Event]:
    return [e for i, f in reply or [] for e in expand(i, f)]


def xread_entries(reply: Any) -> list[Event]:
    # RESP2: [[stream, [(id, fields), ...]]]; RESP3: {stream: [[(id, fields), ...]]}
    if not reply:
        return []
    if isinstance(reply, dict):
        (batch,) = reply.values()
        return entries(batch[0] if batch and isinstance(batch[0], list) else batch)
    return entries(reply[0][1])


def position(after: str) -> str:
    if after in ("$", "-", "0"):
        return {"-": "0-0", "0": "0-0"}.get(after, after)
    parse_id(after)
    return after


def last_id(info: Any) -> str:
    """The position of the last event of ``XREVRANGE ... COUNT 1``'s reply ("0-0": none)."""
    if not info:
        return "0-0"
    entry = cast(Sequence[Any], info[0])
    return expand(str(entry[0]), entry[1])[-1].id


def after_position(events: list[Event], start: str, end: str = "+") -> list[Event]:
    """``events`` whose position lies in ``XRANGE``'s ``start`` .. ``end`` (``-``, ``+``, ids,
    ``(`` for exclusive): an entry in range may hold events that are not, and one below
    ``start`` events that are."""

    def bound(text: str, low: bool) -> tuple[tuple[int, int], bool] | None:
        if text in ("-", "+"):
            return None
        exclusive = text.startswith("(")
        return parse_id(text.removeprefix("(")), exclusive

    lo, hi = bound(start, True), bound(end, False)
    out = []
    for e in events:
        k = e.key
        if lo and (k < lo[0] or (lo[1] and k == lo[0])):
            continue
        if hi and (k > hi[0] or (hi[1] and k == hi[0])):
            continue
        out.append(e)
    return out
