"""Repeating jobs and cron, I/O-free: checking a schedule, building its script calls, planning
which ticks to fire, reading the replies. ``Queue.repeat`` / ``unrepeat`` / ``repeats`` /
``fire_repeats`` (emq.queue._async.control) send what this builds; docs/control.md states the
guarantees.

A schedule is a HASH ``repeat:<key>`` (its spec and state) and a member of the ZSET
``repeats`` scored by its next tick (server ms). Firing is two calls: ``due_repeats.lua``
reads the server clock and the due schedules' stored state, Python checks it (:func:`fault`)
and computes their ticks (:mod:`emq.model.repeat_ticks`: cron cannot run in Lua), and
``fire_repeats.lua`` fires each tick the server clock has reached, with a compare-and-set on
the schedule's version and next tick (any number of firers make one job per tick), and parks
each schedule found broken."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from ..errors import InvalidInput, InvalidName, InvalidOption
from ..model.checks import check_int, shown
from ..model.config import MAX_ATTEMPTS
from ..model.ids import EPOCH_MS
from ..model.lanes import check_lane
from ..model.payloads import encode_payload
from ..model.repeat_ticks import MAX_EVERY_MS, TickRule, check_cron, check_zone
from .call import JOB_NAME, MAX_BATCH, PRIORITY_RANGE, Arg, Call, check_job_name, decode_payload
from .jobs import QueueCore

MAX_SCHEDULES = 4_096  # per queue: a tick id's 12 sequence bits name the schedule's slot
CATCH_UPS = ("latest", "all")
DUE_LIMIT = 100  # due schedules planned per fire_repeats() round
FIRE_CHUNK = MAX_BATCH  # ticks per fire_repeats.lua call
LAST_MS = EPOCH_MS + (1 << 41) - 1  # the last ms a job id can carry (year 2093)


def check_repeat_key(key: object) -> str:
    """A schedule key: 1-128 characters of ``A-Za-z0-9._:/-`` (a job name's grammar)."""
    if not isinstance(key, str) or not JOB_NAME.fullmatch(key):
        raise InvalidName(
            f"schedule key {shown(key)} is invalid: use 1-128 characters from A-Z a-z 0-9 . _ : / -"
        )
    return key


@dataclass(frozen=True, slots=True)
class RepeatSpec:
    """A checked schedule, as stored: every value in the text form the scripts compare."""

    key: str
    name: str
    payload: str  # JSON text
    every_ms: int | None
    cron: str | None
    tz: str
    lane: str  # '' = the default lane
    priority: int
    max_attempts: int
    catch_up: str
    start_at_ms: int | None

    @property
    def rule(self) -> TickRule:
        return TickRule(self.every_ms, self.start_at_ms or 0, self.cron, self.tz)

    def first_tick(self, now_ms: int, last_tick_ms: int) -> int:
        """The first tick at or after ``start_at_ms`` (else the server's ``now_ms``) and
        above the last tick already fired."""
        floor = now_ms if self.start_at_ms is None else self.start_at_ms
        return self.rule.at_or_after(max(floor, last_tick_ms + 1))


def repeat_spec(
    core: QueueCore,
    key: str,
    name: str,
    payload: Any = None,
    *,
    every_ms: int | None = None,
    cron: str | None = None,
    tz: str = "UTC",
    lane: str | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    start_at_ms: int | None = None,
    catch_up: str = "latest",
) -> RepeatSpec:
    """Check every argument of ``Queue.repeat`` (before anything is sent); ``max_attempts``
    None takes the queue's ``QueueOptions.max_attempts`` now, at registration."""
    check_repeat_key(key)
    check_job_name(name)
    text = encode_payload(payload, core.options.max_payload_bytes)
    if (every_ms is None) == (cron is None):
        raise InvalidOption(
            "give exactly one of every_ms (an interval in ms) and cron (five fields), "
            f"got every_ms={shown(every_ms)} and cron={shown(cron)}"
        )
    zone = check_zone(tz)
    if every_ms is not None:
        check_int("every_ms", every_ms, 1, MAX_EVERY_MS, "ms")
    else:
        cron = check_cron(cron, zone)
    check_int("priority", priority, *PRIORITY_RANGE)
    attempts = core.options.max_attempts if max_attempts is None else max_attempts
    check_int("max_attempts", attempts, 1, MAX_ATTEMPTS)
    if start_at_ms is not None:
        check_int("start_at_ms", start_at_ms, EPOCH_MS, LAST_MS, "ms since the Unix epoch")
    if catch_up not in CATCH_UPS:
        raise InvalidOption(f"catch_up must be 'latest' or 'all', got {shown(catch_up)}")
    lane_name = "" if lane is None else check_lane(lane)
    return RepeatSpec(
        key, name, text, every_ms, cron, tz, lane_name, priority, attempts, catch_up, start_at_ms
    )


def _opt(value: int | str | None) -> str:
    return "" if value is None else str(value)


def set_repeat(core: QueueCore, spec: RepeatSpec, first_ms: int) -> Call[tuple[int, int]]:
    """``(outcome, ms)``: 0 unchanged (ms = its next tick), 1 updated, 2 created (ms =
    first_ms), -1 first_ms is not above the last fired tick (ms = that tick: plan again)."""
    check_int("first tick", first_ms, EPOCH_MS, LAST_MS, "ms")
    k = core.keys
    args: list[Arg] = [
        k.prefix, spec.key, first_ms, spec.name, spec.payload, _opt(spec.every_ms),
        _opt(spec.cron), spec.tz, spec.lane, str(spec.priority), str(spec.max_attempts),
        spec.catch_up, _opt(spec.start_at_ms),
    ]  # fmt: skip
    return Call("set_repeat", [k.repeats, k.repeat_slots], args, lambda r: (int(r[0]), int(r[1])))


def unrepeat(core: QueueCore, key: str) -> Call[bool]:
    k = core.keys
    args: list[Arg] = [k.prefix, check_repeat_key(key)]
    return Call("unrepeat", [k.repeats, k.repeat_slots], args, lambda r: r == 1)


DUE_FIELDS = ("version", "next", "every_ms", "cron", "tz", "catch_up", "start_at", "slot",
              "floor", "name", "lane", "priority", "max_attempts", "payload")  # fmt: skip
BELT = "its row cannot make a job: a field of it is missing or not a number"  # 'broken'
BROKEN_BACKOFF_MS = 60_000  # a schedule whose stored state cannot be fired is parked this long
_INT = re.compile(r"-?[0-9]{1,19}")


@dataclass(frozen=True, slots=True)
class Due:
    """One due schedule as due_repeats.lua read it: its stored fields as text (None: the
    field is missing; ``version`` None: the due entry has no row; of ``payload`` only
    ``"json"``, or ``"bad"`` when it is not JSON). ``indexed`` False: an audit found its row
    without a due score."""

    key: str
    stored: dict[str, str | None]
    indexed: bool = True

    @property
    def version(self) -> str:
        return self.stored["version"] or ""

    @property
    def next_raw(self) -> str:
        return self.stored["next"] or ""


def _int(due: Due, name: str, low: int, high: int) -> int:
    """The stored field ``name`` as an int within ``low..high``; else InvalidOption."""
    text = due.stored.get(name)
    value = int(text) if text is not None and _INT.fullmatch(text) else text
    return check_int(name, value, low, high)


def fault(due: Due, now_ms: int) -> str | None:
    """Why the due schedule ``due`` cannot be fired at the server's ``now_ms`` (None: it can):
    its stored state is not one ``repeat()`` writes (a hand edit, a partial restore), or its
    stored next tick is after now although its due score was reached."""
    s = due.stored
    if s["version"] is None:
        return "it has no version: the row is missing or was not written by repeat()"
    if not due.indexed:
        return "it has no due score in repeats (a partial restore?): no firer would find it"
    try:
        next_ms = _int(due, "next", EPOCH_MS, LAST_MS)
        if next_ms > now_ms:
            return f"its stored next tick {next_ms} is ahead of its due score (now {now_ms})"
        if (not s["every_ms"]) == (not s["cron"]):
            return "it has both or neither of every_ms and cron"
        zone = check_zone(s["tz"] or "UTC")
        if s["every_ms"]:
            _int(due, "every_ms", 1, MAX_EVERY_MS)
        else:
            check_cron(s["cron"], zone)
        if s["catch_up"] not in CATCH_UPS:
            return f"catch_up is {shown(s['catch_up'])}, not 'latest' or 'all'"
        if s["start_at"]:
            _int(due, "start_at", EPOCH_MS, LAST_MS)
        _int(due, "slot", 0, MAX_SCHEDULES - 1)
        _int(due, "floor", 0, LAST_MS)
        check_job_name(s["name"])
        check_lane(s["lane"] or None)
        _int(due, "priority", *PRIORITY_RANGE)
        _int(due, "max_attempts", 1, MAX_ATTEMPTS)
        if s["payload"] != "json":
            return "its payload is " + ("missing" if s["payload"] is None else "not JSON")
    except InvalidInput as exc:
        return str(exc)
    return None


@dataclass(frozen=True, slots=True)
class DueRead:
    now_ms: int
    next_ms: int | None  # the earliest due score of any schedule; None: no schedule
    due: list[Due]


def _decode_due(reply: list[Any]) -> DueRead:
    due, width = [], 2 + len(DUE_FIELDS)
    for i in range(2, len(reply), width):
        stored = dict(zip(DUE_FIELDS, reply[i + 2 : i + width], strict=True))
        due.append(Due(reply[i], stored, reply[i + 1] is not None))
    return DueRead(int(reply[0]), None if int(reply[1]) < 0 else int(reply[1]), due)


def due_repeats(core: QueueCore, limit: int = DUE_LIMIT, audit: bool = False) -> Call[DueRead]:
    """Read the due schedules; ``audit``: also the rows that have no due score."""
    check_int("limit", limit, 1, MAX_BATCH)
    k = core.keys
    args: list[Arg] = [k.prefix, limit, int(bool(audit))]
    return Call("due_repeats", [k.repeats, k.repeat_slots], args, _decode_due)


# key, version, expect, tick, following, skipped; a park: key, version, next as read, 0, at, 0
Group = tuple[str, str, int | str, int, int, int]


def _park(due: Due, now_ms: int) -> Group:
    """The group that parks a broken due schedule: its due score moves ``BROKEN_BACKOFF_MS``
    ahead, or only to its stored next tick when that is sooner (a next ahead of its due
    score then fires on time once reached); a due entry without a row is dropped; a row
    without a due score gets one again, at its stored next tick when that is a number."""
    at = now_ms + BROKEN_BACKOFF_MS
    if _INT.fullmatch(due.next_raw):
        stored = int(due.next_raw)
        if not due.indexed or now_ms < stored < at:
            at = max(0, stored)
    return (due.key, due.version, due.next_raw, 0, at, 0)


def _ticks(due: Due, now_ms: int) -> tuple[list[int], int, int] | str:
    """``TickRule.due`` of a due schedule: ``(ticks, following, skipped)``, or why it cannot
    be fired (:func:`fault`, or its rule yields no ticks in order)."""
    why = fault(due, now_ms)
    if why is not None:
        return why
    s, next_ms = due.stored, int(due.next_raw)
    every = int(s["every_ms"]) if s["every_ms"] else None
    rule = TickRule(every, int(s["start_at"] or 0), s["cron"] or None, s["tz"] or "UTC")
    try:
        ticks, following, skipped = rule.due(next_ms, now_ms, s["catch_up"] or "")
    except Exception as exc:  # any error of the tz database or the cron library
        return f"its ticks cannot be computed: {type(exc).__name__}: {shown(str(exc))}"
    chain = [*ticks, following]  # what fire_repeats.lua takes: in order, from next on
    if not ticks or ticks[0] < next_ms or any(b <= a for a, b in pairwise(chain)):
        return f"its rule yields ticks out of order from {next_ms}: {shown(chain)}"
    return ticks, following, skipped


def plan(read: DueRead) -> tuple[list[Group], dict[str, str]]:
    """The groups for fire_repeats.lua: per due schedule, its ticks up to the server's now
    (catch_up "all": every one, at most 1,000 a call; "latest": the latest, the others
    counted as skipped), each chained on the next tick the one before leaves; and the due
    schedules that cannot be fired (:func:`fault`: a hand edit or a partial restore left
    their stored state unusable), key -> why, each with a group that parks it: skipped and
    named, so one broken schedule never stops the others firing nor is named every round."""
    groups: list[Group] = []
    broken: dict[str, str] = {}
    for d in read.due:
        planned = _ticks(d, read.now_ms)
        if isinstance(planned, str):
            broken[d.key] = planned
            groups.append(_park(d, read.now_ms))
            continue
        ticks, following, skipped = planned
        if d.stored["catch_up"] == "all":
            chain = [*ticks, following]
            groups += [(d.key, d.version, t, t, chain[n + 1], 0) for n, t in enumerate(ticks)]
        else:
            groups.append((d.key, d.version, int(d.next_raw), ticks[0], following, skipped))
    return groups, broken


@dataclass(frozen=True, slots=True)
class Fired:
    """What one ``fire_repeats()`` round did: the ids of the jobs it made, and the server's
    ``now_ms`` with the earliest next tick after it (``next_ms``, None: no schedule), which
    tell a worker when to fire again. ``broken``: the schedules this round skipped and
    parked because their stored state cannot be fired, ``why`` says what is wrong with each
    (:func:`fault`)."""

    jobs: list[str]
    now_ms: int
    next_ms: int | None
    answers: dict[str, int]
    broken: list[str] = field(default_factory=list)
    why: dict[str, str] = field(default_factory=dict)


def _decode_fired(groups: list[Group], reply: list[Any]) -> Fired:
    jobs: list[str] = []
    answers: dict[str, int] = {}
    broken: list[str] = []
    for group, i in zip(groups, range(2, len(reply), 2), strict=True):
        answers[reply[i]] = answers.get(reply[i], 0) + 1
        if reply[i] == "fired":
            jobs.append(reply[i + 1])
        elif reply[i] == "broken" and group[0] not in broken:  # the script's safety belt
            broken.append(group[0])
    head = int(reply[1])
    why = dict.fromkeys(broken, BELT)
    return Fired(jobs, int(reply[0]), None if head < 0 else head, answers, broken, why)


def fire_repeats(core: QueueCore, groups: list[Group]) -> Call[Fired]:
    """One fire_repeats.lua call for at most 1,000 groups (ticks)."""
    if not 0 < len(groups) <= FIRE_CHUNK:
        raise InvalidOption(f"fire_repeats takes 1..{FIRE_CHUNK} ticks per call")
    k = core.keys
    args: list[Arg] = [k.prefix, core._maxlen, BROKEN_BACKOFF_MS]
    for group in groups:
        args += group
    keys = [k.repeats, k.pending, k.events, k.wake, k.meta]
    return Call("fire_repeats", keys, args, functools.partial(_decode_fired, groups))


@dataclass(frozen=True, slots=True)
class Repeat:
    """One schedule as ``Queue.repeats()`` lists it. Times are server ms (Unix epoch);
    ``next_ms`` is its next tick, ``last_tick_ms``/``last_id`` the last one fired and its
    job, ``fired`` how many jobs it made, ``skipped`` how many due ticks it did not fire
    (catch_up "latest" after a downtime), ``slot`` the sequence bits of its ticks' ids."""

    key: str
    name: str
    payload: Any
    every_ms: int | None
    cron: str | None
    tz: str
    lane: str | None
    priority: int
    max_attempts: int
    catch_up: str
    start_at_ms: int | None
    next_ms: int
    last_tick_ms: int | None
    last_id: str | None
    fired: int
    skipped: int
    slot: int


def _payload(text: str | None) -> Any:
    try:
        return decode_payload(text)
    except ValueError:  # edited by hand into something that is not JSON: shown as it is
        return text


def decode_repeat(key: str, row: dict[str, str]) -> Repeat | None:
    """A :class:`Repeat` from its hash (``HGETALL``), or None if it is gone. A field edited
    by hand into something that is not an integer reads as None (0 where the field is not
    optional): a listing shows a broken schedule, it never fails on one."""
    if not row:
        return None

    def num(field: str) -> int | None:
        text = row.get(field)
        return int(text) if text and _INT.fullmatch(text) else None

    return Repeat(
        key=key,
        name=row.get("name", ""),
        payload=_payload(row.get("payload")),
        every_ms=num("every_ms"),
        cron=row.get("cron") or None,
        tz=row.get("tz", "UTC"),
        lane=row.get("lane") or None,
        priority=num("priority") or 0,
        max_attempts=num("max_attempts") or 0,
        catch_up=row.get("catch_up", "latest"),
        start_at_ms=num("start_at"),
        next_ms=num("next") or 0,
        last_tick_ms=num("last_tick"),
        last_id=row.get("last_id") or None,
        fired=num("fired") or 0,
        skipped=num("skipped") or 0,
        slot=num("slot") or 0,
    )
