"""The I/O-free core: one function per transition that builds the script call and decodes
its reply. ``Queue`` and ``AsyncQueue`` only send what these build.

Every input is validated here, before a key is built or a byte is sent, so bad input raises
a subclass of :class:`~emq.errors.InvalidInput` and writes nothing.
"""

from __future__ import annotations

import json
import random
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .checks import check_int, shown
from .config import MAX_ATTEMPTS, MAX_DELAY_MS, MAX_LEASE_MS, Backoff, QueueOptions
from .errors import InvalidName, InvalidOption
from .ids import check_id, minted_at_ms
from .keys import QueueKeys, node_key
from .lanes import Lane, Limits, check_lane, decode_lanes, lane_arg, limits_args
from .payloads import encode_payload
from .records import Answer, Claimed, Claims, EnqueuedId, Job, JobSpec, SweepResult
from .states import STATE_OF_LOCATION, Location

T = TypeVar("T")
Arg = str | int | float
Hold = tuple[str, int, int, int, str]  # (id, token, delay_ms, hold_ms, lane or "*")

JOB_NAME = re.compile(r"[A-Za-z0-9._:/-]{1,128}")
MAX_BATCH = 1_000
MAX_CHUNK = 10_000
MAX_ERROR_CHARS = 4_096
PRIORITY_RANGE = (-(2**31), 2**31 - 1)


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One script invocation: which script, its KEYS and ARGV, and how to read its reply."""

    script: str
    keys: list[str]
    args: list[Arg]
    decode: Callable[[Any], T]


_VALID_NAMES: set[str] = set()  # job names already checked (bounded: names repeat)


def check_job_name(name: object) -> str:
    if name.__class__ is str and name in _VALID_NAMES:
        return name
    if not isinstance(name, str) or not JOB_NAME.fullmatch(name):
        raise InvalidName(
            f"job name {shown(name)} is invalid: use 1-128 characters from A-Z a-z 0-9 . _ : / -"
        )
    if len(_VALID_NAMES) < 4096:
        _VALID_NAMES.add(name)
    return name


def check_text(what: str, value: object, most: int) -> str:
    """A non-empty string of at most ``most`` characters that encodes as UTF-8 (no lone
    surrogates), or :class:`InvalidOption` saying what to fix."""
    if not isinstance(value, str) or not 0 < len(value) <= most:
        raise InvalidOption(
            f"{what} must be a non-empty string of at most {most}, got {shown(value)}"
        )
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidOption(
                f"{what} {shown(value)} is not valid Unicode (a lone surrogate?): {exc}"
            ) from None
    return value


def clean_text(value: object, most: int) -> str:
    """``str(value)`` cut to ``most`` characters, with any lone surrogate written as a
    backslash escape: free text (an error message) is kept, never refused."""
    text = str(value)[:most]
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")


def decode_payload(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _pairs(items: Iterable[tuple[str, int]]) -> list[Arg]:
    args: list[Arg] = []
    for job_id, token in items:
        args += [check_id(job_id), check_int("token", token, 1, 2**62)]
    if not args:
        raise InvalidOption("at least one (job_id, token) pair is required")
    if len(args) > 2 * MAX_BATCH:
        raise InvalidOption(f"at most {MAX_BATCH} jobs per call")
    return args


class QueueCore:
    """Builds every call of one queue. Holds no connection."""

    def __init__(self, name: str, options: QueueOptions | None = None) -> None:
        self.keys = QueueKeys.of(name)
        self.options = options or QueueOptions()

    @property
    def name(self) -> str:
        return self.keys.queue

    @property
    def _maxlen(self) -> int:
        return self.options.events_maxlen

    def job_spec(self, spec: JobSpec) -> list[Arg]:
        """Validate a job and return its ARGV group for enqueue.lua (id '' until minted)."""
        if spec.queue is not None or spec.on_failure != "fail_parent":
            raise InvalidOption(
                "queue= and on_failure= are for the children of a flow: use enqueue_flow"
            )
        return self.job_group(
            spec.name, spec.payload, spec.delay_ms, spec.priority, spec.max_attempts, spec.key,
            spec.id, spec.lane, spec.lifo,
        )  # fmt: skip

    def job_group(
        self,
        name: str,
        payload: Any = None,
        delay_ms: int = 0,
        priority: int = 0,
        max_attempts: int | None = None,
        key: str | None = None,
        id: str | None = None,
        lane: str | None = None,
        lifo: bool = False,
    ) -> list[Arg]:
        """Validate one job's fields and return its ARGV group (the hot path of enqueue)."""
        check_job_name(name)
        text = encode_payload(payload, self.options.max_payload_bytes)
        if delay_ms.__class__ is not int or not 0 <= delay_ms <= MAX_DELAY_MS:
            check_int("delay_ms", delay_ms, 0, MAX_DELAY_MS, "ms")
        if priority.__class__ is not int or not PRIORITY_RANGE[0] <= priority <= PRIORITY_RANGE[1]:
            check_int("priority", priority, *PRIORITY_RANGE)
        attempts = self.options.max_attempts if max_attempts is None else max_attempts
        check_int("max_attempts", attempts, 1, MAX_ATTEMPTS)
        if key is not None:
            check_text("dedup key", key, 256)
        if id is not None:
            check_id(id)
        lane = "" if lane is None else check_lane(lane)
        flag = "1" if lifo is True else ""
        if not flag and lifo is not False:
            raise InvalidOption(f"lifo must be True or False, got {shown(lifo)}")
        return [id or "", name, text, priority, attempts, delay_ms, key or "", lane, flag]

    def enqueue(self, groups: Sequence[list[Arg]], trace: str = "") -> Call[list[EnqueuedId]]:
        """``trace``: the producer span's W3C traceparent, stored in each new row ('' none)."""
        if not groups:
            raise InvalidOption("enqueue needs at least one job")
        if len(groups) > MAX_BATCH:
            raise InvalidOption(f"at most {MAX_BATCH} jobs per enqueue call; split the batch")
        args: list[Arg] = [self.keys.prefix, self._maxlen, trace]
        for group in groups:
            if not group[0]:
                raise InvalidOption("every job needs an id before it is sent")
            args += group
        k = self.keys
        keys = [k.pending, k.schedule, k.events, k.wake, k.meta]
        return Call("enqueue", keys, args, _decode_enqueued)

    def claim(self, count: int, lease_ms: int, request: str | None = None) -> Call[Claims]:
        """``request`` names the call so a resend after a lost reply (redis-py retries on
        connection errors) returns the same jobs instead of leasing more; a fresh one by
        default."""
        check_int("count", count, 1, MAX_BATCH)
        check_int("lease_ms", lease_ms, 1, MAX_LEASE_MS, "ms")
        request = uuid.uuid4().hex if request is None else check_text("request", request, 128)
        k = self.keys
        return Call(
            "claim",
            [k.pending, k.active, k.schedule, k.meta, k.events, k.metrics],
            [k.prefix, self._maxlen, count, lease_ms, request],
            _decode_claimed,
        )

    def extend(self, pairs: Iterable[tuple[str, int]], lease_ms: int) -> Call[list[int | Answer]]:
        """Per job: the new deadline (server ms), or ``Answer.LOST`` / ``Answer.GONE``."""
        check_int("lease_ms", lease_ms, 1, MAX_LEASE_MS, "ms")
        k = self.keys
        args = [k.prefix, self._maxlen, lease_ms, *_pairs(pairs)]
        return Call("extend", [k.active, k.events], args, _decode_deadlines)

    def complete(self, pairs: Iterable[tuple[str, int]]) -> Call[list[Answer]]:
        """Per job: ``COMPLETED``, ``LOST`` or ``GONE``. A queue that keeps results or
        completed jobs keeps these (a result of ``None``): :func:`emq.results.complete`."""
        k = self.keys
        if self.options.result_ttl_ms or self.options.keep_completed:
            from .results import complete

            return complete(self, [(i, t, None, self.options.result_ttl_ms) for i, t in pairs])
        args = [k.prefix, self._maxlen, 0, 0, 0, *_pairs(pairs)]
        keys = [k.active, k.metrics, k.events, k.meta, k.completed]
        return Call("complete", keys, args, decode_answers)

    def fail(
        self,
        items: Iterable[tuple[str, int, str, bool, Backoff | None]],
        rng: random.Random | None = None,
    ) -> Call[list[Answer]]:
        """Per job: ``SCHEDULED`` (a retry waits), ``DEAD``, ``LOST`` or ``GONE``."""
        k = self.keys
        args: list[Arg] = [k.prefix, self._maxlen]
        for job_id, token, error, retry, backoff in items:
            args += _pairs([(job_id, token)])
            args += [clean_text(error, MAX_ERROR_CHARS), 1 if retry else 0]
            args += (backoff or self.options.backoff).script_args(rng)
        if len(args) == 2:
            raise InvalidOption("fail needs at least one job")
        keys = [k.active, k.schedule, k.dead, k.metrics, k.events, k.meta]
        return Call("fail", keys, args, decode_answers)

    def delay(self, items: Iterable[tuple[str, int, int] | Hold]) -> Call[list[Answer]]:
        """Per job: ``PENDING``, ``SCHEDULED``, ``LOST`` or ``GONE``. An item of five,
        ``(id, token, delay_ms, hold_ms, lane)``, also holds that lane (``"*"``: the whole
        queue) for ``hold_ms``: a handler's :class:`~emq.RateLimited`."""
        k = self.keys
        args: list[Arg] = [k.prefix, self._maxlen]
        for item in items:
            args += _pairs([(item[0], item[1])])
            args.append(check_int("delay_ms", item[2], 0, MAX_DELAY_MS, "ms"))
            if len(item) == 5:
                hold = "*" if item[4] == "*" else lane_arg(item[4])
                args += [check_int("hold_ms", item[3], 0, MAX_DELAY_MS, "ms"), hold]
            else:
                args += [0, ""]
        if len(args) == 2:
            raise InvalidOption("delay needs at least one job")
        keys = [k.active, k.pending, k.schedule, k.events, k.wake, k.meta, k.dead]
        return Call("delay", keys, args, decode_answers)

    def promote_due(self, limit: int) -> Call[list[str]]:
        """Due scheduled jobs to pending (the script ``promote``)."""
        check_int("limit", limit, 1, MAX_CHUNK)
        k = self.keys
        keys = [k.schedule, k.pending, k.events, k.wake, k.metrics, k.meta]
        return Call("promote", keys, [k.prefix, self._maxlen, limit], list)

    def sweep_stalled(self, max_stalled: int, limit: int) -> Call[SweepResult]:
        check_int("max_stalled", max_stalled, 0, 1_000_000)
        check_int("limit", limit, 1, MAX_CHUNK)
        k = self.keys
        return Call(
            "sweep_stalled",
            [k.active, k.pending, k.dead, k.metrics, k.events, k.wake, k.meta],
            [k.prefix, self._maxlen, max_stalled, limit],
            lambda r: SweepResult(list(r[0]), list(r[1]), list(r[2]), list(r[3])),
        )

    def redrive(
        self, ids: Sequence[str], keep_counters: bool, all_limit: int = 0
    ) -> Call[list[str]]:
        check_int("all_limit", all_limit, 0, MAX_CHUNK)
        checked = [check_id(i) for i in ids]
        if bool(checked) == bool(all_limit):
            raise InvalidOption("redrive takes either ids or all_limit, not both or neither")
        if len(checked) > MAX_BATCH:
            raise InvalidOption(f"at most {MAX_BATCH} ids per redrive call")
        k = self.keys
        args: list[Arg] = [k.prefix, self._maxlen, 1 if keep_counters else 0, all_limit, *checked]
        return Call("redrive", [k.dead, k.pending, k.events, k.wake, k.meta], args, list)

    def remove(self, job_id: str) -> Call[str]:
        k = self.keys
        keys = [k.pending, k.active, k.schedule, k.dead, k.events, k.meta, k.completed]
        return Call("remove", keys, [k.prefix, self._maxlen, check_id(job_id)], str)

    def pause(self, lane: str | None = None) -> Call[bool]:
        """Pause the queue, or one lane (``"default"`` names the default lane)."""
        k = self.keys
        args: list[Arg] = [k.prefix, self._maxlen, "" if lane is None else lane_arg(lane)]
        return Call("pause", [k.meta, k.events], args, lambda r: r == 1)

    def resume(self, lane: str | None = None) -> Call[bool]:
        k = self.keys
        args: list[Arg] = [k.prefix, self._maxlen, "" if lane is None else lane_arg(lane)]
        return Call("resume", [k.meta, k.events, k.wake], args, lambda r: r == 1)

    def set_limits(self, **limits: Any) -> Call[bool]:
        """Replace the queue's (or ``lane``'s) limits as a whole (see ``limits_args``)."""
        k = self.keys
        args: list[Arg] = [k.prefix, self._maxlen, *limits_args(**limits)]
        return Call("set_limits", [k.meta, k.events, k.wake], args, lambda r: r == 1)

    def lanes(self, leased: bool = True) -> Call[tuple[Limits, list[Lane]]]:
        """Read the queue's limits and its lanes at one instant; ``leased=False`` skips the
        lanes that only have leased jobs (no read of every leased job's row)."""
        args: list[Arg] = [self.keys.prefix, 1 if leased else 0]
        k = self.keys
        return Call("lanes", [k.pending, k.active, k.meta], args, decode_lanes)

    def drain(self, limit: int) -> Call[int]:
        check_int("limit", limit, 1, MAX_CHUNK)
        k = self.keys
        keys = [k.pending, k.schedule, k.events, k.meta]
        return Call("drain", keys, [k.prefix, self._maxlen, limit], int)

    def obliterate(self, limit: int, force: bool) -> Call[tuple[int, bool]]:
        check_int("limit", limit, 1, MAX_CHUNK)
        k = self.keys
        keys = [
            k.pending,
            k.active,
            k.schedule,
            k.dead,
            k.events,
            k.meta,
            k.metrics,
            k.stalled_check,
            k.wake,
            k.completed,
        ]
        args: list[Arg] = [k.prefix, limit, 1 if force else 0]
        return Call("obliterate", keys, args, lambda r: (int(r[0]), r[1] == 1))

    def location_key(self, location: str) -> str:
        """The set of a location, named by the location (``schedule``) or by the state of
        the jobs in it (``scheduled``): both name the same set."""
        for loc, state in STATE_OF_LOCATION.items():
            if location in (loc.value, state.value):
                return self.keys.location(loc.value)
        names = ", ".join(loc.value for loc in Location)
        raise InvalidOption(f"unknown location {shown(location)}; use one of {names}")


def node_lease(node: int, owner: str, ttl_ms: int) -> Call[tuple[bool, int]]:
    """Take or renew id node ``node``: ``(held, server_ms)``, the server clock read in the
    same step (the minter keeps it as its offset, see :mod:`emq.ids`)."""
    return Call("node_lease", [node_key(node)], [owner, ttl_ms], lambda r: (r[0] == 1, int(r[1])))


def _decode_enqueued(reply: list[Any]) -> list[EnqueuedId]:
    return [EnqueuedId(reply[i], reply[i + 1] == 1) for i in range(0, len(reply), 2)]


_ANSWERS: dict[str, Answer] = {a.value: a for a in Answer}  # a dict lookup: no Enum call


def decode_answers(reply: list[Any]) -> list[Answer]:
    return [_ANSWERS[x] for x in reply]


def _decode_deadlines(reply: list[Any]) -> list[int | Answer]:
    return [x if x.__class__ is int else _ANSWERS[x] for x in reply]


def _decode_claimed(reply: list[Any]) -> Claims:
    deadline = int(reply[0])
    jobs = [
        Claimed(
            id=reply[i],
            token=int(reply[i + 1]),
            attempts=int(reply[i + 2]),
            stalled=int(reply[i + 3]),
            name=reply[i + 4],
            payload=decode_payload(reply[i + 5]),
            deadline_ms=deadline,
            lane=reply[i + 6] or None,
            parent=reply[i + 7] or None,
            trace=reply[i + 8] or None,
        )
        for i in range(3, len(reply), 9)
    ]
    retry_in = int(reply[2])
    return Claims(jobs, list(reply[1]), max(retry_in, 0), blocked=retry_in < 0)


def decode_job(job_id: str, row: dict[str, str]) -> Job | None:
    """A :class:`Job` from an ``HGETALL`` reply, or None if the row is gone."""
    if not row:
        return None
    return Job(
        id=job_id,
        state=row.get("state", ""),
        name=row.get("name", ""),
        payload=decode_payload(row.get("payload")),
        attempts=int(row.get("attempts", 0)),
        stalled=int(row.get("stalled", 0)),
        token=int(row.get("token", 0)),
        priority=int(row.get("priority", 0)),
        max_attempts=int(row.get("max_attempts", 0)),
        created_at=int(row.get("created_at") or minted_at_ms(job_id)),
        last_error=row.get("last_error"),
        fields=row,
    )


COUNT_FIELDS = ("completed", "failed", "dead", "recovered")


def decode_counts(
    sizes: Sequence[int], metrics: Sequence[str | None], outbox: int = 0
) -> dict[str, int]:
    """``counts()``: the size of each location, the lifetime counters, the outbox's size."""
    out = {loc.value: int(n) for loc, n in zip(Location, sizes, strict=True)}
    for name, value in zip(COUNT_FIELDS, metrics, strict=True):
        out["dead_total" if name == "dead" else name] = int(value or 0)
    out["outbox"] = int(outbox)
    return out
