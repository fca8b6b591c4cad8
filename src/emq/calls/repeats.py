"""Repeating jobs and cron, I/O-free: checking a schedule, building its script calls, planning
which ticks to fire, reading the replies. ``Queue.repeat`` / ``unrepeat`` / ``repeats`` /
``fire_repeats`` (emq.queue._async.control) send what this builds; docs/control.md states the
guarantees.

A schedule is a HASH ``repeat:<key>`` (its spec and state) and a member of the ZSET
``repeats`` scored by its next tick (server ms). Firing is two calls: ``due_repeats.lua``
reads the server clock and the due schedules' specs, Python computes their ticks
(:mod:`emq.model.repeat_ticks`: cron cannot run in Lua), and ``fire_repeats.lua`` fires each tick
whose time the server clock has reached, with a compare-and-set on the schedule's version and
next tick, so any number of firers make one job per tick.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidName, InvalidOption
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


@dataclass(frozen=True, slots=True)
class Due:
    """One due schedule as due_repeats.lua read it."""

    key: str
    version: str
    next_ms: int
    spec: tuple[str, str, str, str]  # every_ms, start_at_ms, cron, tz as stored ('' = none)
    catch_up: str

    @property
    def rule(self) -> TickRule:
        """Its tick rule; raises if the stored spec is not one ``repeat()`` would write."""
        every, start, cron, tz = self.spec
        return TickRule(int(every) if every else None, int(start or 0), cron or None, tz or "UTC")


@dataclass(frozen=True, slots=True)
class DueRead:
    now_ms: int
    next_ms: int | None  # the earliest next tick of any schedule; None: no schedule
    due: list[Due]


def _decode_due(reply: list[Any]) -> DueRead:
    due = []
    for i in range(2, len(reply), 8):
        key, version, next_ms, every, cron, tz, catch_up, start = reply[i : i + 8]
        spec = (every or "", start or "", cron or "", tz or "")
        due.append(Due(key, version, int(next_ms), spec, catch_up))
    return DueRead(int(reply[0]), None if int(reply[1]) < 0 else int(reply[1]), due)


def due_repeats(core: QueueCore, limit: int = DUE_LIMIT) -> Call[DueRead]:
    check_int("limit", limit, 1, MAX_BATCH)
    k = core.keys
    return Call("due_repeats", [k.repeats], [k.prefix, limit], _decode_due)


Group = tuple[str, str, int, int, int, int]  # key, version, expect, tick, following, skipped


def plan(read: DueRead) -> tuple[list[Group], list[str]]:
    """The groups for fire_repeats.lua: per due schedule, its ticks up to the server's now
    (catch_up "all": every one, at most 1,000 a call; "latest": the latest, the others
    counted as skipped), each chained on the next tick the one before leaves; and the keys
    of the due schedules whose stored spec yields no tick (edited by hand into an unknown
    zone or a bad cron): skipped, so one broken schedule never stops the others firing."""
    groups: list[Group] = []
    broken: list[str] = []
    for d in read.due:
        try:
            ticks, following, skipped = d.rule.due(d.next_ms, read.now_ms, d.catch_up)
        except Exception:  # any error of the tz database or the cron library: see above
            broken.append(d.key)
            continue
        if d.catch_up == "all":
            chain = [*ticks, following]
            groups += [(d.key, d.version, t, t, chain[n + 1], 0) for n, t in enumerate(ticks)]
        else:
            groups.append((d.key, d.version, d.next_ms, ticks[0], following, skipped))
    return groups, broken


@dataclass(frozen=True, slots=True)
class Fired:
    """What one ``fire_repeats()`` round did: the ids of the jobs it made, and the server's
    ``now_ms`` with the earliest next tick after it (``next_ms``, None: no schedule), which
    tell a worker when to fire again."""

    jobs: list[str]
    now_ms: int
    next_ms: int | None
    answers: dict[str, int]
    broken: list[str] = field(default_factory=list)  # due schedules whose spec is unusable


def _decode_fired(reply: list[Any]) -> Fired:
    jobs: list[str] = []
    answers: dict[str, int] = {}
    for i in range(2, len(reply), 2):
        answers[reply[i]] = answers.get(reply[i], 0) + 1
        if reply[i] == "fired":
            jobs.append(reply[i + 1])
    head = int(reply[1])
    return Fired(jobs, int(reply[0]), None if head < 0 else head, answers)


def fire_repeats(core: QueueCore, groups: list[Group]) -> Call[Fired]:
    """One fire_repeats.lua call for at most 1,000 groups (ticks)."""
    if not 0 < len(groups) <= FIRE_CHUNK:
        raise InvalidOption(f"fire_repeats takes 1..{FIRE_CHUNK} ticks per call")
    k = core.keys
    args: list[Arg] = [k.prefix, core._maxlen]
    for group in groups:
        args += group
    keys = [k.repeats, k.pending, k.events, k.wake, k.meta]
    return Call("fire_repeats", keys, args, _decode_fired)


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


def decode_repeat(key: str, row: dict[str, str]) -> Repeat | None:
    """A :class:`Repeat` from its hash (``HGETALL``), or None if it is gone."""
    if not row:
        return None

    def num(field: str) -> int | None:
        return int(row[field]) if row.get(field) else None

    return Repeat(
        key=key,
        name=row.get("name", ""),
        payload=decode_payload(row.get("payload")),
        every_ms=num("every_ms"),
        cron=row.get("cron") or None,
        tz=row.get("tz", "UTC"),
        lane=row.get("lane") or None,
        priority=int(row.get("priority", 0)),
        max_attempts=int(row.get("max_attempts", 0)),
        catch_up=row.get("catch_up", "latest"),
        start_at_ms=num("start_at"),
        next_ms=int(row.get("next", 0)),
        last_tick_ms=num("last_tick"),
        last_id=row.get("last_id") or None,
        fired=int(row.get("fired", 0)),
        skipped=int(row.get("skipped", 0)),
        slot=int(row.get("slot", 0)),
    )
