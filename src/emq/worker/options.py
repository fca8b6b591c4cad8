"""Worker settings, handler registrations and counters: plain data, no I/O.

:class:`WorkerOptions` is a frozen, keyword-only dataclass validated on construction, like the
rest of emq's config. A :class:`HandlerSpec` is one registered handler with its own retry
policy; a job's own ``max_attempts`` (set at enqueue) is enforced by ``fail.lua`` and the
handler's, when given, by the worker: the smaller one wins.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from ..errors import EmqError, InvalidOption
from ..model.checks import check_int
from ..model.config import (
    DEFAULT_LEASE_MS,
    MAX_ATTEMPTS,
    MAX_KEEP_MS,
    MAX_LEASE_MS,
    MAX_STALLED,
    MIN_WORKER_LEASE_MS,
    SWEEP_LIMIT,
    Backoff,
)
from .children import ChildPool, isolated

Handler = Callable[..., Any]
"""``handler(payload, ctx)`` or ``handler(payload)``; sync or ``async def``."""


class Permanent(EmqError):
    """Raise from a handler to fail the job with no retry: it goes straight to ``dead``
    (``fail`` with ``retry=False``), whatever attempts remain."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerOptions:
    """How a :class:`~emq.worker.Worker` runs.

    ``concurrency``: handlers running at once. ``prefetch``: extra jobs claimed ahead and held
    (leased, heartbeated) until a slot frees; on shutdown they are given back unspent.
    ``lease_ms``: the lease taken by a claim and renewed by every heartbeat, which beats every
    ``heartbeat_ms`` (default ``lease_ms // 3``). ``stalled_interval_ms``: how often the fleet
    sweeps expired leases (guarded by ``stalled-check``); ``max_stalled``: the stall count at
    which the sweep dead-letters a job. ``timeout_ms``: the default hard limit of one attempt
    (None: no limit). ``grace_ms``: how long a graceful shutdown waits for running handlers.
    ``poll_ms``: the longest a parked worker waits on the wake list before it claims again.
    ``cancel_grace_ms``: how long a handler whose job was cancelled (``Queue.cancel``: it sees
    ``ctx.cancelled``) may run on before the worker abandons it (0: at once): its job ends
    dead, cancelled, an async handler's task is cancelled and its slot freed; a sync one's
    thread keeps its slot until it returns (a thread cannot be killed).
    ``progress_interval_ms``: the most often one job's ``ctx.progress`` reaches the server
    (once per interval, the latest value wins; the last one is sent before the job's outcome).
    ``burst``: return once nothing is claimable and nothing runs (jobs waiting in
    ``schedule`` for a later time, such as retries in backoff, are left for the next run).
    ``ack_with_claim``: send the completions waiting for their ack with the next claim of
    their queue, in one call (``complete_claim``; not on a queue with a durability level,
    whose acks wait for the fsync or the replicas while a claim need not); False: apart.
    ``metrics_port``: serve this worker's Prometheus histograms (handler duration, wait
    time) on ``metrics_host:metrics_port`` while it runs (0: any free port; None: no
    endpoint, and no cost; docs/observability.md).
    """

    concurrency: int = 10
    prefetch: int = 0
    lease_ms: int = DEFAULT_LEASE_MS
    heartbeat_ms: int | None = None
    stalled_interval_ms: int = 5_000
    max_stalled: int = MAX_STALLED
    sweep_limit: int = SWEEP_LIMIT
    timeout_ms: int | None = 300_000
    grace_ms: int = 30_000
    poll_ms: int = 1_000
    max_attempts: int | None = None
    backoff: Backoff | None = None
    burst: bool = False
    ack_with_claim: bool = True
    cancel_grace_ms: int = 10_000
    progress_interval_ms: int = 500
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        check_int("concurrency", self.concurrency, 1, 1000)
        check_int("prefetch", self.prefetch, 0, 1000)
        check_int("lease_ms", self.lease_ms, MIN_WORKER_LEASE_MS, MAX_LEASE_MS, "ms")
        check_int("max_stalled", self.max_stalled, 0, 1_000_000)
        check_int("sweep_limit", self.sweep_limit, 1, 10_000)
        for name in ("stalled_interval_ms", "poll_ms"):
            check_int(name, getattr(self, name), 1, unit="ms")
        check_int("grace_ms", self.grace_ms, 0, unit="ms")
        check_int("cancel_grace_ms", self.cancel_grace_ms, 0, MAX_LEASE_MS, "ms")
        check_int("progress_interval_ms", self.progress_interval_ms, 10, 3_600_000, "ms")
        for name in ("heartbeat_ms", "timeout_ms"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), 1, unit="ms")
        if self.max_attempts is not None:
            check_int("max_attempts", self.max_attempts, 1, MAX_ATTEMPTS)
        if self.metrics_port is not None:
            check_int("metrics_port", self.metrics_port, 0, 65535)
        if not isinstance(self.metrics_host, str) or not self.metrics_host:
            raise InvalidOption("metrics_host must be a host name or address")
        if self.heartbeat_ms is not None and self.heartbeat_ms * 2 > self.lease_ms:
            raise InvalidOption(
                f"heartbeat_ms ({self.heartbeat_ms}) must be at most half of lease_ms "
                f"({self.lease_ms}) so a lease is renewed well before it lapses"
            )

    @property
    def beat_ms(self) -> int:
        """The heartbeat period: ``heartbeat_ms`` or a third of the lease."""
        return self.heartbeat_ms or max(1, self.lease_ms // 3)


MAX_BATCH = 1000  # the most jobs one claim call returns
MAX_BATCH_WAIT_MS = 3_600_000

ISOLATIONS = ("thread", "process")
"""Where a sync handler runs: a thread of the worker's pool, or a child process
(:mod:`.children`)."""


class TaskOptions(TypedDict, total=False):
    """The keywords of :meth:`Tasks.task <emq.Tasks.task>`, which ``@worker.task`` passes on."""

    max_attempts: int | None
    timeout_ms: int | None
    backoff: Backoff | None
    result_ttl_ms: int | None
    lane: str | None
    priority: int | None
    isolation: str
    max_memory_mb: int | None
    max_jobs_per_child: int | None
    batch_wait_ms: int | None  # with batch_size, which is a keyword of its own


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    """One registered handler. ``None`` fields fall back to the worker's options."""

    name: str
    fn: Handler
    is_async: bool
    takes_ctx: bool
    max_attempts: int | None = None
    timeout_ms: int | None = None
    backoff: Backoff | None = None
    result_ttl_ms: int | None = None  # keep its return value this long (None: the queue's)
    children: ChildPool | None = None  # isolation="process": its child processes
    batch_size: int | None = None  # a batch handler: a list of up to this many payloads
    batch_wait_ms: int = 0  # how long a batch may wait to fill after its first job's claim

    @classmethod
    def of(
        cls,
        name: str,
        fn: Handler,
        *,
        max_attempts: int | None = None,
        timeout_ms: int | None = None,
        backoff: Backoff | None = None,
        result_ttl_ms: int | None = None,
        isolation: str = "thread",
        max_memory_mb: int | None = None,
        max_jobs_per_child: int | None = None,
        batch_size: int | None = None,
        batch_wait_ms: int | None = None,
    ) -> HandlerSpec:
        if isolation not in ISOLATIONS:
            raise InvalidOption(f"isolation must be 'thread' or 'process', got {isolation!r}")
        if isolation != "process" and (max_memory_mb or max_jobs_per_child):
            raise InvalidOption("max_memory_mb and max_jobs_per_child need isolation='process'")
        if not callable(fn):
            raise InvalidOption(f"handler for {name!r} is not callable: {fn!r}")
        if max_attempts is not None:
            check_int("max_attempts", max_attempts, 1, MAX_ATTEMPTS)
        if timeout_ms is not None:
            check_int("timeout_ms", timeout_ms, 1, unit="ms")
        if result_ttl_ms is not None:
            check_int("result_ttl_ms", result_ttl_ms, 0, MAX_KEEP_MS, "ms")
        batch = _batching(name, batch_size, batch_wait_ms)
        is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - an async callable object
        )
        if isolation == "process":  # a sync call in a pool thread, the handler in a child
            pool = ChildPool(
                check_int("max_memory_mb", max_memory_mb or 0, 0, 1 << 20, "MiB"),
                check_int("max_jobs_per_child", max_jobs_per_child or 0, 0),
            )
            call = isolated(name, fn, _takes_ctx(fn), is_async, pool)
            return cls(name, call, False, True, max_attempts, timeout_ms, backoff,
                       result_ttl_ms, pool, *batch)  # fmt: skip
        return cls(name, fn, is_async, _takes_ctx(fn), max_attempts, timeout_ms, backoff,
                   result_ttl_ms, None, *batch)  # fmt: skip

    def call(self, payload: Any, ctx: Any) -> Any:
        return self.fn(payload, ctx) if self.takes_ctx else self.fn(payload)


def _batching(name: str, size: int | None, wait_ms: int | None) -> tuple[int | None, int]:
    """``(batch_size, batch_wait_ms)`` checked: a size of 1 to ``MAX_BATCH`` makes a batch
    handler; a wait without a size is refused (it would mean nothing)."""
    if size is None:
        if wait_ms is not None:
            raise InvalidOption(f"handler {name!r}: batch_wait_ms needs batch_size")
        return None, 0
    check_int("batch_size", size, 1, MAX_BATCH)
    return size, check_int("batch_wait_ms", wait_ms or 0, 0, MAX_BATCH_WAIT_MS, "ms")


def _takes_ctx(fn: Handler) -> bool:
    """True unless the handler accepts exactly one positional argument (the payload)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2


@dataclass(slots=True)
class WorkerStats:
    """Counters of one worker run (this process only; the queue's own totals are in
    ``Queue.counts()``)."""

    claimed: int = 0
    claim_calls: int = 0  # claim scripts sent (a limited queue must not make this spin)
    completed: int = 0
    retried: int = 0
    dead: int = 0
    lease_lost: int = 0
    timeouts: int = 0
    cancelled: int = 0  # jobs this worker ended dead, cancelled (Queue.cancel)
    cancel_abandoned: int = 0  # cancelled handlers still running past cancel_grace_ms
    given_back: int = 0
    rate_limited: int = 0  # handlers that raised RateLimited: given back, their lane held
    recovered: int = 0
    swept_dead: int = 0
    missing: int = 0  # ids found without their row (claim, sweep): dropped, logged, counted
    abandoned: int = 0  # handler threads still running at the end, past their decided attempt
    sweeps: int = 0
    outages: int = 0
    uncertain_acks: int = 0
    joined_acks: int = 0  # completions sent with a claim, in one call (complete_claim)
    heartbeats: int = 0
    heartbeat_max_late_ms: float = 0.0
    lost_ids: list[str] = field(default_factory=list)  # the last 1,000

    def as_dict(self) -> dict[str, Any]:
        fields = self.__dataclass_fields__
        return {name: getattr(self, name) for name in fields if name != "lost_ids"}
