"""The calls of a job's life: one method of :class:`QueueCore` per transition of
``lua/`` (enqueue, claim, extend, complete, fail, delay, promote, sweep, redrive, remove,
pause, resume, limits, drain, obliterate) that builds the script call and decodes its reply.
``Queue`` and ``AsyncQueue`` only send what these build.

Every input is validated here, before a key is built or a byte is sent, so bad input raises
a subclass of :class:`~emq.errors.InvalidInput` and writes nothing.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import InvalidOption
from ..model.checks import check_int, shown
from ..model.config import (
    MAX_ATTEMPTS,
    MAX_DELAY_MS,
    MAX_KEEP_MS,
    MAX_LEASE_MS,
    Backoff,
    QueueOptions,
)
from ..model.ids import check_id
from ..model.keys import QueueKeys, node_key
from ..model.lanes import Lane, Limits, check_lane, decode_lanes, lane_arg, limits_args
from ..model.payloads import encode_payload
from ..model.records import Answer, Claimed, Claims, EnqueuedId, JobSpec, SweepResult
from ..model.states import STATE_OF_LOCATION, Location
from .call import (
    _ANSWERS,
    MAX_BATCH,
    MAX_CHUNK,
    MAX_ERROR_CHARS,
    PRIORITY_RANGE,
    Arg,
    Call,
    Hold,
    _pairs,
    check_job_name,
    check_text,
    clean_text,
    decode_answers,
    stored_payload,
)


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

    def enqueue(
        self, groups: Sequence[list[Arg]], trace: str = "", request: str | None = None
    ) -> Call[list[EnqueuedId]]:
        """``trace``: the producer span's W3C traceparent, stored in each new row ('' none).
        ``request`` names the call (a fresh one by default): sent again (a resend after a lost
        reply) within 60 s of its first landing, it admits nothing, even if a job has
        completed since and its row is gone."""
        if not groups:
            raise InvalidOption("enqueue needs at least one job")
        if len(groups) > MAX_BATCH:
            raise InvalidOption(f"at most {MAX_BATCH} jobs per enqueue call; split the batch")
        request = uuid.uuid4().hex if request is None else check_text("request", request, 128)
        attempts = _compact(groups)
        args: list[Arg] = [self.keys.prefix, self._maxlen, trace, request, attempts]
        for group in groups:
            if not group[0]:
                raise InvalidOption("every job needs an id before it is sent")
            args += group[:3] if attempts else group
        k = self.keys
        keys = [k.pending, k.schedule, k.events, k.wake, k.meta]
        return Call("enqueue", keys, args, _decode_enqueued)

    def claim(
        self, count: int, lease_ms: int, request: str | None = None, worker: str = ""
    ) -> Call[Claims]:
        """``request`` names the call so a resend after a lost reply (redis-py retries on
        connection errors) returns the same jobs instead of leasing more; a fresh one by
        default. ``worker``: the claiming worker's registry id, kept in each leased row
        (``Job.worker``) until its next claim."""
        check_int("count", count, 1, MAX_BATCH)
        check_int("lease_ms", lease_ms, 1, MAX_LEASE_MS, "ms")
        request = uuid.uuid4().hex if request is None else check_text("request", request, 128)
        if worker:
            check_text("worker", worker, 200)
        k = self.keys
        return Call(
            "claim",
            [k.pending, k.active, k.schedule, k.meta, k.events, k.metrics],
            [k.prefix, self._maxlen, count, lease_ms, request, worker],
            _decode_claimed,
        )

    def complete_claim(
        self, done: Call[list[Answer]], claim: Call[Claims]
    ) -> Call[tuple[list[Answer], Claims]]:
        """``done`` (:meth:`complete` or :meth:`complete_keeping`) and then ``claim``
        (:meth:`claim`) in one step (lua/complete_claim.lua): each part runs its own
        script's code on the KEYS and ARGV of its own call, so it keeps every safety belt
        of that script; the reply is the parts' replies, decoded by their own decoders."""
        if done.script != "complete" or claim.script != "claim":
            raise ValueError("complete_claim joins a complete call and a claim call")
        k = self.keys
        keys = [k.active, k.metrics, k.events, k.meta, k.completed, k.pending, k.schedule]
        assert done.keys == keys[:5] and claim.keys == [keys[i] for i in (5, 0, 6, 3, 2, 1)]

        def decode(reply: list[Any]) -> tuple[list[Answer], Claims]:
            return done.decode(reply[0]), claim.decode(reply[1])

        return Call("complete_claim", keys, [len(done.args), *done.args, *claim.args], decode)

    def extend(self, pairs: Iterable[tuple[str, int]], lease_ms: int) -> Call[list[int | Answer]]:
        """Per job: the new deadline (server ms), or ``Answer.LOST`` / ``Answer.GONE``."""
        check_int("lease_ms", lease_ms, 1, MAX_LEASE_MS, "ms")
        k = self.keys
        args = [k.prefix, self._maxlen, lease_ms, *_pairs(pairs)]
        return Call("extend", [k.active, k.events], args, _decode_deadlines)

    def complete(self, pairs: Iterable[tuple[str, int]]) -> Call[list[Answer]]:
        """Per job: ``COMPLETED``, ``LOST`` or ``GONE``. A queue that keeps results or
        completed jobs keeps these (a result of ``None``): :meth:`complete_keeping`."""
        k = self.keys
        if self.options.result_ttl_ms or self.options.keep_completed:
            ttl = self.options.result_ttl_ms
            return self.complete_keeping([(i, t, None, ttl) for i, t in pairs])
        args = [k.prefix, self._maxlen, 0, 0, 0, *_pairs(pairs)]
        keys = [k.active, k.metrics, k.events, k.meta, k.completed]
        return Call("complete", keys, args, decode_answers)

    def complete_keeping(
        self, items: Iterable[tuple[str, int, str | None, int]]
    ) -> Call[list[Answer]]:
        """Complete jobs keeping what the queue and each item ask for: per item ``(id, token,
        result JSON text or None, result_ttl_ms)``; with ``result_ttl_ms`` > 0 the result is
        kept (``None`` keeps ``null``), and the queue's ``keep_completed`` keeps the row. A
        flow's child keeps a result given for its parent whatever its ttl (docs/flows.md). Per
        job: ``COMPLETED``, ``LOST`` or ``GONE``."""
        k = self.keys
        age, count = self.options.keep_completed or (0, 0)
        args: list[Arg] = [k.prefix, self._maxlen, 1, age, count]
        n = 0
        for job_id, token, result, ttl in items:
            args += _pairs([(job_id, token)])
            if ttl.__class__ is not int or not 0 <= ttl <= MAX_KEEP_MS:
                check_int("result_ttl_ms", ttl, 0, MAX_KEEP_MS, "ms")
            # with ttl 0 a given result is still sent: a flow's parent keeps its child's
            args += ["null" if result is None else result, ttl] if ttl else [result or "", 0]
            n += 1
        if n == 0:
            raise InvalidOption("complete needs at least one job")
        if n > MAX_BATCH:
            raise InvalidOption(f"at most {MAX_BATCH} jobs per call")
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
    same step (the minter keeps it as its offset, see :mod:`emq.model.ids`)."""
    return Call("node_lease", [node_key(node)], [owner, ttl_ms], lambda r: (r[0] == 1, int(r[1])))


def _compact(groups: Sequence[list[Arg]]) -> str:
    """The max_attempts every job of the call shares, when every one is of the common case
    (priority 0, no delay, dedup key, lane or lifo): then each is sent as (id, name, payload)
    alone, a third of the arguments (enqueue.lua, ARGV[5]); else ''."""
    attempts = groups[0][4]
    for g in groups:
        if g[3] != 0 or g[4] != attempts or g[5] != 0 or g[6] or g[7] or g[8]:
            return ""
    return str(attempts)


def _decode_enqueued(reply: list[Any]) -> list[EnqueuedId]:
    return [EnqueuedId(reply[i], reply[i + 1] == 1) for i in range(0, len(reply), 2)]


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
            payload=stored_payload(reply[i + 5]),
            deadline_ms=deadline,
            lane=reply[i + 6] or None,
            parent=reply[i + 7] or None,
            trace=reply[i + 8] or None,
        )
        for i in range(3, len(reply), 9)
    ]
    retry_in = int(reply[2])
    return Claims(jobs, list(reply[1]), max(retry_in, 0), blocked=retry_in < 0)
