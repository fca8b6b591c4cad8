"""``AsyncQueue``: the asyncio shell that sends what :mod:`emq.calls.jobs` builds.

Every state change is one script call (one indivisible step on the server); reads
(``counts``, ``job``, ``jobs``) are plain commands sent in one MULTI so that they see one
instant.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar, cast

import redis.asyncio

from ...calls.call import Arg, Call, Hold
from ...calls.jobs import node_lease
from ...errors import CancelRequested, EmqError, InvalidOption
from ...lua import scripts
from ...model.config import DEFAULT_LEASE_MS, MAX_STALLED, SWEEP_LIMIT, Backoff, QueueOptions
from ...model.keys import KNOWN_QUEUES
from ...model.records import Answer, Claims, EnqueuedId, JobSpec, SweepResult
from ...observe import otel
from ...server import durability
from ...server.clients import aclose_client, async_client, decodes, pool_of
from ..shared import (
    CHUNK,
    RESEND_DELAYS_S,
    UNREACHABLE,
    WINDOW,
    ShellBase,
    expect,
    known_bulk_limit,
    lease_candidates,
    minter_for,
    note_landed,
    remember_bulk_limit,
)
from .control import AsyncControl
from .reads import AsyncReads
from .settings import AsyncSettings
from .steps import AsyncSteps

T = TypeVar("T")
CLOCK_SAMPLES = 5  # TIME readings at most per node lease (every 20 s)
CLOCK_GOOD_RTT_S = 0.002  # a reading this quick ends the sampling


class AsyncQueue(AsyncControl, AsyncReads, AsyncSettings, AsyncSteps, ShellBase):
    """A queue on an asyncio redis-py client (``decode_responses=True``)."""

    def __init__(
        self, client: redis.asyncio.Redis, name: str, *, options: QueueOptions | None = None
    ) -> None:
        super().__init__(name, options)
        if not decodes(client):
            raise InvalidOption("the client must be created with decode_responses=True")
        self.client = client
        self._minter = minter_for(pool_of(client))
        self._mint_lock = asyncio.Lock()
        self._guard = durability.Guard(self.core.options, self.core.keys.metrics)
        self._announced: set[str] = set()  # queue names this object put in the known queues
        self._asked = options  # what this process opened the queue with (None: nothing)

    @classmethod
    def from_url(cls, url: str, name: str, *, options: QueueOptions | None = None) -> AsyncQueue:
        client = async_client(url, decode_responses=True)
        return cls(client, name, options=options)

    async def close(self) -> None:
        await aclose_client(self.client)

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def check_server(self) -> None:
        """Raise :class:`~emq.errors.UnsafeServer` if the server would break this queue's
        guarantees (an evicting ``maxmemory-policy``; ``durability="aof"`` it cannot provide).
        The first call of every queue does this by itself, once per connection pool."""
        await self._guard.acheck(self.client)

    async def _run(self, call: Call[T]) -> T:
        """Send one script call (durably, when the queue asks for it) and decode its reply."""
        await self._fresh()
        guard = self._guard
        if not guard.ok:
            await guard.acheck(self.client)
        if guard.durable(call.script):
            (reply,) = await guard.arun(self.client, call.script, [(call.keys, call.args)])
            return call.decode(reply)
        return call.decode(await scripts.run_async(self.client, call.script, call.keys, call.args))

    async def _run_pipelined(self, name: str, batch: durability.Calls) -> list[Any]:
        """Several calls of one script in one round trip (:func:`emq.lua.scripts.run_pipelined`)."""
        await self._fresh()
        guard = self._guard
        if not guard.ok:
            await guard.acheck(self.client)
        if guard.durable(name):
            return await guard.arun(self.client, name, batch)
        return await scripts.run_pipelined_async(self.client, name, batch)

    async def _resend(self, send: Callable[[], Awaitable[T]]) -> T:
        """Await an idempotent call, re-sending it unchanged while the server is unreachable."""
        for delay in RESEND_DELAYS_S:
            try:
                return await send()
            except UNREACHABLE:
                await asyncio.sleep(delay)
        return await send()

    async def new_ids(self, n: int) -> list[str]:
        """Mint ``n`` ids under this process's node lease (taken or renewed as needed)."""
        async with self._mint_lock:
            if self._minter.needs_lease():
                sent = time.monotonic()
                for node in lease_candidates(self._minter):
                    asked = time.monotonic()
                    call = node_lease(node, self._minter.owner, self._minter.ttl_ms)
                    held, server_ms = await self._run(call)
                    if held:  # the server's clock stands for the midpoint of this round trip
                        self._minter.leased(node, sent, server_ms, (asked + time.monotonic()) / 2)
                        break
                else:
                    self._minter.lost()
                    raise EmqError("no free id node number (1,023 processes are minting)")
                await self._sync_clock()
            return self._minter.mint_many(n)

    async def _sync_clock(self) -> None:
        """Read the server's clock up to :data:`CLOCK_SAMPLES` times (once the lease is held,
        so on a warm connection) and keep the reading with the shortest round trip: the error
        of the minter's estimate is at most half of it, so a producer slowed down by a busy
        machine cannot mint ids that sort before a later producer's."""
        best: tuple[float, int, float] | None = None
        for _ in range(CLOCK_SAMPLES):
            asked = time.monotonic()
            with scripts.translated():
                seconds, micros = await self.client.time()
            got = time.monotonic()
            if best is None or got - asked < best[0]:
                best = (got - asked, int(seconds) * 1000 + int(micros) // 1000, (asked + got) / 2)
            if got - asked < CLOCK_GOOD_RTT_S:
                break
        if best is not None:
            self._minter.synced(best[1], best[2])

    async def new_id(self) -> str:
        return (await self.new_ids(1))[0]

    async def _bulk_limit(self) -> int | None:
        """The server's proto-max-bulk-len, read once per connection pool (None if CONFIG is
        refused)."""
        known, limit = known_bulk_limit(pool_of(self.client))
        if known:
            return limit
        try:
            reply: object = await self.client.config_get("proto-max-bulk-len")
        except redis.ResponseError:
            reply = None
        return remember_bulk_limit(pool_of(self.client), reply)

    async def enqueue(
        self,
        name: str,
        payload: Any = None,
        *,
        delay_ms: int = 0,
        priority: int = 0,
        max_attempts: int | None = None,
        key: str | None = None,
        id: str | None = None,
        lane: str | None = None,
        lifo: bool = False,
    ) -> EnqueuedId:
        """Admit one job (into ``lane``, or the default lane); its id is returned with
        ``created`` False if it already existed. ``lifo``: ahead of the jobs waiting at its
        priority, the newest lifo job first (docs/control.md)."""
        spec = JobSpec(name, payload, delay_ms, priority, max_attempts, key, id, lane, lifo)
        return (await self.enqueue_many([spec]))[0]

    async def enqueue_many(self, jobs: Iterable[JobSpec | tuple[str, Any]]) -> list[EnqueuedId]:
        """Admit many jobs in one indivisible step per 1,000 (all of a chunk or none)."""
        jobs = list(jobs)
        groups = await self._settled_groups(jobs, self._groups(jobs))  # checked, then sent
        if size := self._largest_payload(groups):
            self._refuse_oversized(size, await self._bulk_limit())
        explicit = self._fill_ids(groups, await self.new_ids(sum(1 for g in groups if not g[0])))
        with otel.enqueue_span(self.name, groups) as trace:  # trace: '' unless OTel is active
            out = await self._admit(groups, explicit, trace)
        if self.name not in self._announced:
            await self._announce([self.name])
        return out

    async def _admit(self, groups: list[list[Arg]], explicit: bool, trace: str) -> list[EnqueuedId]:
        calls = [
            self.core.enqueue(groups[i : i + CHUNK], trace) for i in range(0, len(groups), CHUNK)
        ]
        if explicit or len(calls) == 1:  # a conflict in one chunk stops the ones after it
            out: list[EnqueuedId] = []
            try:
                for call in calls:
                    out += await self._resend(functools.partial(self._run, call))
            except Exception as exc:
                note_landed(exc, out)  # exc.landed: what the earlier chunks admitted
                raise
            return out
        out = []
        for i in range(0, len(calls), WINDOW):  # fresh ids cannot conflict: pipeline the chunks
            window = calls[i : i + WINDOW]
            batch = [(c.keys, c.args) for c in window]
            send = functools.partial(self._run_pipelined, "enqueue", batch)
            replies = await self._resend(send)
            for call, reply in zip(window, replies, strict=True):
                out += call.decode(reply)
        return out

    async def _announce(self, names: Iterable[str]) -> None:
        """Add queue names to the server's known queues (:mod:`emq.server.discovery`), each once per
        queue object, after an enqueue into it landed. Best effort, never raised: a refusal
        (an ACL without ``{emq}:queues``) is not tried again; an unreachable server is, at
        the next enqueue."""
        new = sorted(set(names) - self._announced)
        if not new:
            return
        try:
            await self.client.sadd(KNOWN_QUEUES, *new)
        except UNREACHABLE:
            return
        except redis.RedisError:
            pass
        self._announced.update(new)

    async def claim(self, count: int = 1, lease_ms: int = DEFAULT_LEASE_MS, *,
                    request: str | None = None, worker: str = "") -> Claims:  # fmt: skip
        """Lease up to ``count`` jobs. A connection error is raised, not retried: call again
        with the same ``request`` id and, if the first call had landed, the server returns the
        same jobs (for ``lease_ms``, at most 60 s) instead of leasing more. ``worker`` names
        the holder in each leased row (``Job.worker``)."""
        return await self._run(self.core.claim(count, lease_ms, request, worker))

    async def extend(self, job_id: str, token: int, lease_ms: int = DEFAULT_LEASE_MS) -> int:
        """Extend a held lease; returns the new deadline (server ms) or raises LeaseLost, or
        CancelRequested (the lease was extended, but the job was cancelled: stop and fail it)."""
        (deadline,) = await self._run(self.core.extend([(job_id, token)], lease_ms))
        expect(deadline, job_id, "extend")
        if deadline == Answer.CANCELLED:
            raise CancelRequested(f"job {job_id} was cancelled: stop it and fail it")
        return int(cast(int, deadline))

    async def extend_many(
        self, pairs: Iterable[tuple[str, int]], lease_ms: int
    ) -> list[int | Answer]:
        """Extend many leases in one step: per job the new deadline, or ``Answer.LOST`` /
        ``Answer.GONE``."""
        return await self._run(self.core.extend(pairs, lease_ms))

    async def complete(self, job_id: str, token: int) -> None:
        """Complete a held job (its row is deleted); raises LeaseLost or JobNotFound."""
        (ok,) = await self._run(self.core.complete([(job_id, token)]))
        expect(ok, job_id, "complete")

    async def complete_many(self, pairs: Iterable[tuple[str, int]]) -> list[Answer]:
        """Complete many jobs in one step: per job ``COMPLETED``, ``LOST`` or ``GONE``."""
        return await self._run(self.core.complete(pairs))

    async def complete_and_claim(
        self,
        pairs: Iterable[tuple[str, int]],
        count: int = 1,
        lease_ms: int = DEFAULT_LEASE_MS,
        *,
        request: str | None = None,
        worker: str = "",
    ) -> tuple[list[Answer], Claims]:
        """Complete ``pairs`` and lease up to ``count`` jobs in one step: what
        :meth:`complete_many` and then :meth:`claim` do, in one call and one round trip (the
        claim sees the slots the completions freed). A resend with the same ``request`` id
        completes nothing twice (a job it completed answers ``GONE``) and returns the same
        jobs, as :meth:`claim` does. With no pairs it is :meth:`claim`."""
        core, done = self.core, list(pairs)
        claim = core.claim(count, lease_ms, request, worker)
        if not done:
            return [], await self._run(claim)
        return await self._run(core.complete_claim(core.complete(done), claim))

    async def fail(
        self,
        job_id: str,
        token: int,
        error: str = "",
        *,
        retry: bool = True,
        backoff: Backoff | None = None,
        delay_ms: int | None = None,
    ) -> str:
        """Record a failed attempt: returns ``"scheduled"`` or ``"dead"`` (``"cancelled"``:
        a cancel was requested, so it is dead, cancelled, never retried), or raises LeaseLost."""
        if delay_ms is not None:
            backoff = Backoff.exactly(delay_ms)
        (where,) = await self._run(self.core.fail([(job_id, token, error, retry, backoff)]))
        expect(where, job_id, "fail")
        return str(where)

    async def fail_many(
        self, items: Iterable[tuple[str, int, str, bool, Backoff | None]]
    ) -> list[Answer]:
        return await self._run(self.core.fail(items))

    async def delay(self, job_id: str, token: int, delay_ms: int = 0) -> str:
        """Give a lease back without spending an attempt: ``"pending"`` or ``"scheduled"``
        (``"cancelled"``: a cancel was requested, so it is dead, cancelled, not given back)."""
        (where,) = await self._run(self.core.delay([(job_id, token, delay_ms)]))
        expect(where, job_id, "delay")
        return str(where)

    async def delay_many(self, items: Iterable[tuple[str, int, int] | Hold]) -> list[Answer]:
        """Give many leases back in one step; an item ``(id, token, delay_ms, hold_ms, lane)``
        also holds ``lane`` (``"*"``: the queue) for ``hold_ms``, as a handler's
        :class:`~emq.RateLimited` does."""
        return await self._run(self.core.delay(items))

    async def promote_due(self, limit: int = 1000) -> list[str]:
        """Move due scheduled jobs to pending (a claim does this by itself too); one job now:
        :meth:`promote`."""
        return await self._run(self.core.promote_due(limit))

    async def sweep_stalled(
        self, max_stalled: int = MAX_STALLED, limit: int = SWEEP_LIMIT
    ) -> SweepResult:
        """One bounded stalled sweep (the seed's recovery, one script)."""
        return await self._run(self.core.sweep_stalled(max_stalled, limit))

    async def sweep_all(
        self, max_stalled: int = MAX_STALLED, limit: int = SWEEP_LIMIT
    ) -> SweepResult:
        """Sweep until a call handles fewer than ``limit`` leases; each call is one bounded step."""
        total = SweepResult()
        while True:
            r = await self.sweep_stalled(max_stalled, limit)
            total.recovered.extend(r.recovered)
            total.dead.extend(r.dead)
            total.missing.extend(r.missing)
            total.cancelled.extend(r.cancelled)
            if len(r.recovered) + len(r.dead) + len(r.missing) + len(r.cancelled) < limit:
                return total

    async def redrive(self, job_id: str, *, keep_counters: bool = False) -> bool:
        """Move a dead job back to pending; False if it was not dead. Its
        ``attempts`` and ``stalled`` start again from 0 unless ``keep_counters``."""
        moved = await self._run(self.core.redrive([job_id], keep_counters))
        return bool(moved)

    async def redrive_many(self, ids: Sequence[str], *, keep_counters: bool = False) -> list[str]:
        return await self._run(self.core.redrive(ids, keep_counters))

    async def redrive_all(self, *, keep_counters: bool = False, chunk: int = 500) -> int:
        total = 0
        while True:
            moved = await self._run(self.core.redrive([], keep_counters, chunk))
            if not moved:
                return total
            total += len(moved)

    async def remove(self, job_id: str) -> str:
        """Delete a job wherever it is; returns the location it was in (JobNotFound if none)."""
        return await self._run(self.core.remove(job_id))

    async def drain(self, chunk: int = 1000) -> int:
        total = 0
        while (n := await self._run(self.core.drain(chunk))) > 0:
            total += n
        return total

    async def obliterate(self, *, force: bool = False, chunk: int = 1000) -> int:
        """Delete the queue, ``chunk`` jobs per step; returns how many jobs were deleted. A
        flow's messages to other queues (a child's end, removals included, for its parent
        there: docs/flows.md) are delivered before the outbox goes, last."""
        total = 0
        while True:
            n, done = await self._run(self.core.obliterate(chunk, force))
            total += n
            if done:
                await self._forget_gone()  # emq stats, the dashboard and /metrics forget it
                return total
            if n == 0:  # no job left: the outbox holds what the queue has still to tell
                await self.deliver_outbox()
