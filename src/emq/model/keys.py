"""Every key name of a queue. Nothing else in emq builds key strings.

Each per-queue key is ``emq:{<queue>}:<suffix>``; the braces make every key of one queue hash
to one cluster slot, so each script touches one slot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InvalidName
from .checks import shown
from .lanes import DEFAULT_LANE

QUEUE_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")


def check_queue_name(name: object) -> str:
    """Return ``name`` if it matches ``^[A-Za-z0-9._-]{1,128}$``, else raise InvalidName."""
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
        raise InvalidName(
            f"queue name {shown(name)} is invalid: use 1-128 characters from A-Z a-z 0-9 . _ -"
        )
    return name


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """The keys of one queue; construct with :meth:`of` so the name is validated."""

    queue: str

    @classmethod
    def of(cls, queue: str) -> QueueKeys:
        return cls(check_queue_name(queue))

    @property
    def prefix(self) -> str:
        return f"emq:{{{self.queue}}}:"

    def _k(self, suffix: str) -> str:
        return self.prefix + suffix

    @property
    def pending(self) -> str:
        return self._k("pending")

    @property
    def packed(self) -> str:
        """Layout 3: HASH job id -> packed entry (``<name> <max_attempts> <trace> <payload>``,
        :func:`emq.calls.call.packed_row`) of each waiting job kept without a row. It is the
        truth of membership: a packed job is in no location set, has no row, and counts as
        pending (priority 0, default lane)."""
        return self._k("packed")

    @property
    def ready(self) -> str:
        """Layout 3: LIST of the packed jobs' ids in claim order (FIFO). It may also hold ids
        no longer in :attr:`packed` (unpacked into a row, or claimed), so its length is never
        a count of waiting jobs."""
        return self._k("ready")

    @property
    def active(self) -> str:
        return self._k("active")

    @property
    def schedule(self) -> str:
        return self._k("schedule")

    @property
    def dead(self) -> str:
        return self._k("dead")

    @property
    def events(self) -> str:
        return self._k("events")

    @property
    def events_count(self) -> str:
        """Layout 2: about how many job events ``events`` holds (the cap's count)."""
        return self._k("events:count")

    @property
    def events_archived(self) -> str:
        """The archive's watermark W; while this key exists, scripts never trim ``events``."""
        return self._k("events:archived")

    @property
    def events_archiver(self) -> str:
        """The lease of the archiver (its floor id) that owns retention of ``events``."""
        return self._k("events:archiver")

    @property
    def meta(self) -> str:
        return self._k("meta")

    @property
    def metrics(self) -> str:
        return self._k("metrics")

    @property
    def settings(self) -> str:
        """The queue's stored settings (emq.calls.settings): name -> text."""
        return self._k("settings")

    @property
    def stalled_check(self) -> str:
        return self._k("stalled-check")

    @property
    def wake(self) -> str:
        return self._k("wake")

    @property
    def completed(self) -> str:
        """Kept completed jobs (``keep_completed``), score = completed_at ms."""
        return self._k("completed")

    def done(self, job_id: str) -> str:
        """The LIST a job's ``result()`` waiters block on; the caller must have validated
        the id."""
        return self._k("done:" + job_id)

    def job(self, job_id: str) -> str:
        """The row of ``job_id``; the caller must have validated the id."""
        return self._k("job:" + job_id)

    def logs(self, job_id: str) -> str:
        """The LIST of a job's ``ctx.log`` lines, oldest first (emq.calls.logs); the caller
        must have validated the id."""
        return self._k("logs:" + job_id)

    @property
    def logs_index(self) -> str:
        """ZSET of the ids that have a ``logs:<id>`` list, score = when it expires (ms,
        server clock): what ``obliterate`` deletes them by."""
        return self._k("logs")

    def flow(self, job_id: str) -> str:
        """A flow parent's HASH child id -> status ('' while unfinished); ``+ ":results"``
        is its HASH child id -> result JSON (docs/flows.md)."""
        return self._k("flow:" + job_id)

    @property
    def outbox(self) -> str:
        """HASH of flow messages for other queues, written by this queue's scripts and
        delivered by its maintenance beat (docs/flows.md, Across queues)."""
        return self._k("outbox")

    def dedup(self, key: str) -> str:
        return self._k("de:" + key)

    def claim_reply(self, request: str) -> str:
        """Where claim.lua keeps a call's reply for ``lease_ms``, by its request id."""
        return self._k("claim:" + request)

    def admitted(self, request: str) -> str:
        """Where enqueue.lua marks a call that ran, for 60 s, by its request id."""
        return self._k("admitted:" + request)

    def location(self, name: str) -> str:
        return self._k(name)

    def lane(self, lane: str, what: str) -> str:
        """A key of one lane: ``pending`` (ZSET), ``active`` (SET), ``rate`` (ZSET, its claim
        log). The default lane's waiting jobs are in :attr:`pending`; the caller must have
        validated the lane's name."""
        return self._k(f"lane:{lane}:{what}")

    def lane_pending(self, lane: str) -> str:
        """Where a lane's waiting jobs are: :attr:`pending` for the default lane."""
        return self.pending if lane == DEFAULT_LANE else self.lane(lane, "pending")

    @property
    def repeats(self) -> str:
        """ZSET of the repeating schedules: member = schedule key, score = next tick (ms)."""
        return self._k("repeats")

    @property
    def repeat_slots(self) -> str:
        """HASH slot -> schedule key (taken) or ``~<ms>`` (freed at that server time)."""
        return self._k("repeat-slots")

    def repeat(self, key: str) -> str:
        """The HASH of one schedule (spec and state); the caller must have validated ``key``."""
        return self._k("repeat:" + key)

    def lanes(self, what: str) -> str:
        """A key about every lane: ``ring`` (ZSET), ``later`` (ZSET), ``full`` (SET),
        ``conf`` (HASH); ``rate`` is the queue's own claim log."""
        return self._k(what if what == "rate" else f"lanes:{what}")


def node_key(node: int) -> str:
    """The lease key of an id-minting node number (global, not per queue)."""
    return f"{{emq}}:node:{node}"


KNOWN_QUEUES = "{emq}:queues"
"""SET of every queue name known on the server (global, not per queue): written by a producer
once per queue object and by every worker's registry beat; read by :mod:`emq.server.discovery`."""


WORKERS = "{emq}:workers"
"""ZSET of the worker registry's ids, score = when the entry expires (ms, the worker's clock);
the entries themselves are :func:`worker_key` (:mod:`emq.observe.registry`)."""


def worker_key(worker_id: str) -> str:
    """One live worker's registry entry (STRING, JSON, ``PX``); ``worker_id`` is validated by
    :mod:`emq.observe.registry`."""
    return f"{{emq}}:worker:{worker_id}"
