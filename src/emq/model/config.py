"""Frozen, keyword-only settings, validated on construction.

Environment variables are read only at the CLI edge (``emq.cli``), never here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from ..errors import InvalidOption
from .checks import check_int

DURABILITY = ("none", "aof", "replica")


# Defaults and ranges, each written once: the option dataclasses, the shells, the calls and
# the CLI read them from here.
DEFAULT_LEASE_MS = 30_000
MAX_LEASE_MS = 86_400_000  # the longest lease a claim or an extend accepts (one day)
MIN_WORKER_LEASE_MS = 100  # a worker's heartbeat needs room to renew a lease
MAX_STALLED = 2  # the stall count at which the sweep dead-letters a job (0: never)
SWEEP_LIMIT = 100  # expired leases handled per sweep call
MAX_ATTEMPTS = 1_000_000
MAX_DELAY_MS = 10 * 365 * 86_400_000
MAX_KEEP_MS = 365 * 86_400_000  # the longest a result or a completed job is kept (a year)
MAX_KEEP_COUNT = 10_000_000  # the most completed jobs keep_completed may retain
MAX_PARTITIONS = 64  # the most partitions (hash slots) one queue may be split into
DEFAULT_LOG_TTL_MS = 86_400_000  # how long a job's log lines are kept after its last one (a day)


@dataclass(frozen=True, kw_only=True, slots=True)
class Backoff:
    """How long a failed job waits before its next attempt.

    ``fixed``: always ``base_ms``. ``exponential``: ``base_ms * 2**(attempt-1)``, capped at
    ``cap_ms``. ``jitter`` (0..1) spreads each delay uniformly over ``[d*(1-jitter), d]`` so
    a burst of failures does not retry in lockstep.
    """

    kind: Literal["fixed", "exponential"] = "exponential"
    base_ms: int = 1_000
    cap_ms: int = 300_000
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "exponential"):
            raise InvalidOption(f"backoff kind must be 'fixed' or 'exponential', got {self.kind!r}")
        check_int("backoff base_ms", self.base_ms, 0, unit="ms")
        check_int("backoff cap_ms", self.cap_ms, 0, unit="ms")
        if not 0.0 <= self.jitter <= 1.0:
            raise InvalidOption(f"backoff jitter must be within 0..1, got {self.jitter}")

    def script_args(self, rng: random.Random | None = None) -> tuple[int, int, int, float]:
        """``(base_ms, cap_ms, factor, draw)`` for ``fail.lua``, which evaluates the delay on
        the row's own attempts: ``min(cap, base * factor**(attempts-1)) * (1 - draw)``."""
        factor = 1 if self.kind == "fixed" else 2
        cap = self.base_ms if self.kind == "fixed" else self.cap_ms
        draw = self.jitter * (rng or random).random() if self.jitter else 0.0
        return self.base_ms, cap, factor, round(draw, 6)

    @classmethod
    def exactly(cls, delay_ms: int) -> Backoff:
        """A fixed delay with no jitter (an explicit ``delay_ms`` on ``fail``)."""
        return cls(kind="fixed", base_ms=delay_ms, cap_ms=delay_ms, jitter=0.0)


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueOptions:
    """Per-queue settings held by the client.

    ``events_maxlen``: the approximate cap of the event stream; ``0`` turns events off.
    ``max_payload_bytes``: the largest encoded payload an enqueue accepts.
    ``durability``: ``"none"`` (a call returns once the server applied it; what survives a
    crash is up to the server's ``appendfsync``) or ``"aof"`` (enqueue, complete, fail, delay,
    redrive and remove return only once the server has fsynced the write to its AOF:
    ``WAITAOF``; needs Valkey or Redis >= 7.2 with ``appendonly yes``, and, on Valkey and on
    Redis before 8.0, ``appendfsync always``) or ``"replica"`` (the same calls return only
    once ``durability_replicas`` replicas have acknowledged the write: ``WAIT``; a failover to
    such a replica loses none of them). See docs/guarantees.md.
    ``durability_timeout_ms``: how long ``"aof"`` or ``"replica"`` waits before raising
    :class:`emq.server.durability.NotDurable` (the write was applied but is not confirmed).
    ``durability_replicas``: how many replicas ``"replica"`` waits for (1 by default).
    ``allow_eviction``: run on a server whose ``maxmemory-policy`` may evict keys (it may then
    drop jobs); refused with :class:`~emq.errors.UnsafeServer` unless set.
    ``result_ttl_ms``: keep a completed job's return value (JSON) for this long, readable with
    ``Queue.result`` (0: not kept, the default; a handler may ask for its own).
    ``keep_completed``: ``(max_age_ms, max_count)`` keeps the last ``max_count`` completed jobs
    readable (``Queue.job``, ``jobs("completed")``) for at most ``max_age_ms``; None (the
    default) deletes a completed job's row at once. See docs/control.md.
    ``partitions``: split the queue into this many queues, each its own hash slot (1: not
    split, the default; 2..64 need :class:`emq.PartitionedQueue`, and the count is stored on
    the server by the first producer). See docs/partitions.md.
    ``log_ttl_ms``: how long a job's ``ctx.log`` lines are kept after the last one was
    written (a day by default; 0: ``ctx.log`` lines are not stored). See docs/control.md.
    """

    events_maxlen: int = 10_000
    max_payload_bytes: int = 512 * 1024
    max_attempts: int = 3
    backoff: Backoff = Backoff()
    durability: Literal["none", "aof", "replica"] = "none"
    durability_timeout_ms: int = 5_000
    durability_replicas: int = 1
    allow_eviction: bool = False
    result_ttl_ms: int = 0
    keep_completed: tuple[int, int] | None = None
    partitions: int = 1
    log_ttl_ms: int = DEFAULT_LOG_TTL_MS

    def __post_init__(self) -> None:
        check_int("events_maxlen", self.events_maxlen, 0)
        check_int("max_payload_bytes", self.max_payload_bytes, 1)
        check_int("max_attempts", self.max_attempts, 1, MAX_ATTEMPTS)
        if self.durability not in DURABILITY:
            raise InvalidOption(
                f"durability must be one of {', '.join(map(repr, DURABILITY))}, "
                f"got {self.durability!r}"
            )
        check_int("durability_timeout_ms", self.durability_timeout_ms, 1, unit="ms")
        check_int("durability_replicas", self.durability_replicas, 1, 1_000)
        if not isinstance(self.allow_eviction, bool):
            raise InvalidOption(
                f"allow_eviction must be True or False, got {self.allow_eviction!r}"
            )
        check_int("result_ttl_ms", self.result_ttl_ms, 0, MAX_KEEP_MS, "ms")
        if self.keep_completed is not None:
            keep = self.keep_completed
            if not isinstance(keep, tuple) or len(keep) != 2:
                raise InvalidOption(
                    f"keep_completed must be None or (max_age_ms, max_count), got {keep!r}"
                )
            check_int("keep_completed max_age_ms", keep[0], 1, MAX_KEEP_MS, "ms")
            check_int("keep_completed max_count", keep[1], 1, MAX_KEEP_COUNT)
        check_int("partitions", self.partitions, 1, MAX_PARTITIONS)
        check_int("log_ttl_ms", self.log_ttl_ms, 0, MAX_KEEP_MS, "ms")
