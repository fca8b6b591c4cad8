"""What a queue checks about its server before it writes, and the durable dispatch.

**The check**, once per connection pool, at the first script call of a :class:`~emq.Queue` or
:class:`~emq.AsyncQueue` (a worker runs it at start, :meth:`Guard.check`):

* ``maxmemory-policy`` must be ``noeviction``. Any other policy lets the server delete keys
  under memory pressure: job rows, whole location sets, and (``volatile-*`` too) the id-minting
  node leases, so two producers could mint the same ids. Jobs would vanish with no error. Refused
  with :class:`~emq.errors.UnsafeServer` (nothing is written) unless
  ``QueueOptions(allow_eviction=True)``. The policy is read with ``CONFIG GET``, else from
  ``INFO memory`` (managed servers and ACLs often forbid ``CONFIG``); if neither can be read, a
  warning is logged once per server and the queue goes on.
* With ``QueueOptions(durability="aof")``: the server must have ``WAITAOF`` (Valkey or Redis
  7.2 or later), ``appendonly yes``, and ``appendfsync always``, or ``everysec`` on Redis 8.0
  or later. Valkey (through 9.1 at least) and Redis 7.2-7.4 answer ``WAITAOF`` under
  ``everysec`` as soon as the write reached the file, before the fsync (fixed in Redis by
  redis/redis#13793; ``tests/ops/test_durability.py`` shows such writes lost to a simulated power
  cut), so there only ``always`` can be confirmed. Otherwise
  :class:`~emq.errors.UnsafeServer`, nothing written.

* With ``QueueOptions(durability="replica")``: the server must be a primary with at least
  ``durability_replicas`` replicas connected (``INFO replication``); else
  :class:`~emq.errors.UnsafeServer`, nothing written.

A refusal is not remembered: the next call checks again, so a server fixed at run time
(``CONFIG SET maxmemory-policy noeviction``) is accepted without a new client.

**Durable dispatch** (``durability="aof"``): each call of a script in :data:`DURABLE_SCRIPTS`
is sent as one pipeline on one connection, no MULTI (``WAITAOF`` does not wait inside one):
``EVALSHA``, ``HINCRBY <metrics> completed 0`` (a write that changes nothing, so the wait
also covers what this connection did not write itself: a job another producer admitted that
this enqueue found as a duplicate, or the first send of a call re-sent after a lost reply), and
``WAITAOF 1 0 <durability_timeout_ms>``. The call returns only once the server answers that
everything up to that point is fsynced to its AOF; else :class:`NotDurable`. With
``durability="replica"`` the last command is ``WAIT <durability_replicas> <timeout>``: the call
returns once that many replicas acknowledged everything up to that point, so a failover to one
of them keeps it.

**On a cluster** every wait is on the node that ran the call: calls are grouped by the node
of their own keys (a flow's step or an outbox delivery in another queue's slot, a partition),
each group is one such pipeline to its node, with the no-change write to the metrics key of
its own slot (:func:`marker_of`). Every node is checked before the first call is sent, so a
node that cannot confirm refuses the whole call with nothing written. A call answered
``MOVED`` is sent again, with its wait, to the slot's new node; one answered ``NOSCRIPT`` is
loaded and sent again: no call is ever run without its wait.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Mapping
from typing import Any

import redis
import redis.asyncio

from ..errors import ServerUnreachable
from ..lua import scripts
from ..model.config import QueueOptions
from ..model.keys import QueueKeys
from ..queue.shared import UNREACHABLE
from . import clients
from .confirm import MARKER_FIELD, Step, asend, confirm, marker_of, send
from .confirm import Calls as Calls  # where callers have always found them
from .confirm import NotDurable as NotDurable
from .probe import Facts, probe_commands, read_facts, refusal

log = logging.getLogger(__name__)

DURABLE_SCRIPTS = frozenset(
    {
        # admitting and finishing a job; a flow's delivery across queues (confirmed before
        # its outbox entry is deleted)
        *("enqueue", "enqueue_flow", "complete", "complete_claim", "fail", "delay"),
        "deliver_flow",
        "step",  # a recorded durable step: the handler goes on past it (docs/steps.md)
        # the operator's moves and edits of jobs
        *("cancel", "remove", "redrive", "drain", "obliterate", "promote_job", "reschedule"),
        *("set_priority", "update_payload"),
        # the queue's own settings and schedules
        *("pause", "resume", "set_limits", "set_repeat", "unrepeat"),
    }
)
"""The writes that a durability level confirms: every call that a caller is told has changed
a job, the queue's settings or its schedules. Not waited for, because losing one to a
rollback or a failover loses nothing acknowledged: claims and extends (the job goes back to
pending when its lease lapses), promotes of due jobs and the stalled sweep (the next beat
does them again), fired repeat ticks (the schedule's ``next`` is rolled back with them, so
the tick fires again: docs/control.md), progress and node leases."""

# Facts per connection pool: a probe is sent once per pool, not per queue or call.
_FACTS: weakref.WeakKeyDictionary[object, Facts] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()
_WARNED: set[str] = set()


def _where(pool: Any) -> str:
    kw = getattr(pool, "connection_kwargs", {})
    return str(kw.get("path") or f"{kw.get('host')}:{kw.get('port')}")


class Guard:
    """One queue's side of the check and of the durable dispatch. Sync and async methods
    differ only by ``await``."""

    __slots__ = ("marker", "ok", "options")

    def __init__(self, options: QueueOptions, marker: str) -> None:
        self.options = options
        self.marker = marker  # the queue's metrics key: the target of the no-change write
        self.ok = False  # the server passed the check for these options

    def durable(self, script: str) -> bool:
        return self.options.durability != "none" and script in DURABLE_SCRIPTS

    def _cached(self, pool: object) -> Facts | None:
        with _LOCK:
            facts = _FACTS.get(pool)
        mode = self.options.durability
        if facts is None or (mode == "aof" and facts.aof is None):
            return None
        if mode == "replica" and facts.replicas is None:
            return None
        return facts

    def _judge(self, pool: object, facts: Facts, mine: bool = True) -> None:
        problem = refusal(facts, self.options)
        with _LOCK:
            if problem is not None:
                _FACTS.pop(pool, None)  # checked again next time: the server may be fixed
                raise problem
            _FACTS[pool] = facts
            where = _where(pool)
            warn = facts.policy is None and not self.options.allow_eviction
            if warn and where not in _WARNED:
                _WARNED.add(where)
                log.warning(
                    "could not read the server's maxmemory-policy (CONFIG GET and INFO memory "
                    "refused); if it is not noeviction the server may evict jobs",
                    extra={"emq": {"event": "policy_unknown", "server": where}},
                )
        if mine:  # this queue's own node: its calls need no check before they are sent
            self.ok = True

    def _tail(self, marker: str) -> list[tuple[str | int, ...]]:
        o = self.options
        timeout = o.durability_timeout_ms
        wait: tuple[str | int, ...] = (
            ("WAIT", o.durability_replicas, timeout)
            if o.durability == "replica"
            else ("WAITAOF", 1, 0, timeout)
        )
        return [("HINCRBY", marker, MARKER_FIELD, 0), wait]

    def _confirm(self, tail: list[Any]) -> None:
        o = self.options
        replicas = o.durability_replicas if o.durability == "replica" else 0
        confirm(tail, o.durability_timeout_ms, replicas)

    def _groups(self, calls: Calls) -> dict[str, list[int]]:
        """The calls by the marker that confirms them: the metrics key of each call's own
        hash tag, so the no-change write and the wait go to the node that ran the call (a
        flow's step in another queue's slot, a partition). Off a cluster the caller sends
        them all to the one server, under this queue's marker."""
        groups: dict[str, list[int]] = {}
        for i, (keys, _) in enumerate(calls):
            groups.setdefault(marker_of(keys[0]) if keys else self.marker, []).append(i)
        return groups or {self.marker: []}  # no call: wait for what this connection wrote

    # -- sync -------------------------------------------------------------------------------

    def check(self, client: redis.Redis, key: str = "") -> None:
        """Raise :class:`~emq.errors.UnsafeServer` if the server (on a cluster: the node
        that holds ``key``, by default this queue's) cannot run the queue."""
        node = self._node(client, key)
        pool = node.connection_pool
        facts = self._cached(pool)
        if facts is None:
            mode = self.options.durability
            facts = read_facts(send(node, probe_commands(mode)), mode)
        self._judge(pool, facts, mine=not key or key == self.marker)

    def check_all(self, client: redis.Redis, keys: list[str]) -> None:
        """:meth:`check` the node of every key before a call that writes on several: one
        node that cannot confirm refuses the whole call before anything is written."""
        for marker in dict.fromkeys(marker_of(k) for k in keys):
            self.check(client, marker)

    def _node(self, client: redis.Redis, key: str = "") -> redis.Redis:
        """The client of the node that holds ``key`` (``client`` itself off a cluster)."""
        if not clients.is_cluster_client(client):
            return client
        return clients.node_client(client, key or self.marker)

    def run(self, client: redis.Redis, name: str, calls: Calls) -> list[Any]:
        """Run ``calls`` of script ``name`` and wait, on each node that ran some of them,
        for their fsync or replicas (see the module doc)."""
        cluster = clients.is_cluster_client(client)
        groups = self._groups(calls) if cluster else {self.marker: list(range(len(calls)))}
        for marker in groups:
            self.check(client, marker)  # every node first: a refusal writes nothing
        out: list[Any] = [None] * len(calls)
        for marker, idx in groups.items():
            for i, reply in zip(idx, self._run_on(client, name, marker, calls, idx), strict=True):
                out[i] = reply
        return out

    def _run_on(
        self, client: redis.Redis, name: str, marker: str, calls: Calls, idx: list[int]
    ) -> list[Any]:
        step = Step(scripts.SCRIPTS[name], [calls[i] for i in idx], self._tail(marker))
        while True:
            try:
                replies = send(self._node(client, marker), step.commands())
            except ServerUnreachable:
                clients.relearn_slots(client)
                raise
            redo = step.sort(replies)
            if redo is None:
                break
            with scripts.translated():
                if redo == "moved":  # the slot moved: run and wait on its new node
                    clients.relearn_slots(client)
                elif redo == "load":  # a flushed cache: load, then run and wait again
                    for source in step.sources():
                        self._node(client, marker).script_load(source)
        self._confirm(step.tail)
        return step.out

    # -- async ------------------------------------------------------------------------------

    async def acheck(self, client: redis.asyncio.Redis, key: str = "") -> None:
        """Raise :class:`~emq.errors.UnsafeServer` if the server (on a cluster: the node
        that holds ``key``, by default this queue's) cannot run the queue."""
        node = await self._anode(client, key)
        pool = node.connection_pool
        facts = self._cached(pool)
        if facts is None:
            mode = self.options.durability
            facts = read_facts(await asend(node, probe_commands(mode)), mode)
        self._judge(pool, facts, mine=not key or key == self.marker)

    async def acheck_all(self, client: redis.asyncio.Redis, keys: list[str]) -> None:
        """:meth:`acheck` the node of every key (see :meth:`check_all`)."""
        for marker in dict.fromkeys(marker_of(k) for k in keys):
            await self.acheck(client, marker)

    async def _anode(self, client: redis.asyncio.Redis, key: str = "") -> redis.asyncio.Redis:
        if not clients.is_cluster_client(client):
            return client
        return await clients.anode_client(client, key or self.marker)

    async def arun(self, client: redis.asyncio.Redis, name: str, calls: Calls) -> list[Any]:
        """Run ``calls`` of script ``name`` and wait, on each node that ran some of them,
        for their fsync or replicas (see the module doc)."""
        cluster = clients.is_cluster_client(client)
        groups = self._groups(calls) if cluster else {self.marker: list(range(len(calls)))}
        for marker in groups:
            await self.acheck(client, marker)  # every node first: a refusal writes nothing
        out: list[Any] = [None] * len(calls)
        for marker, idx in groups.items():
            got = await self._arun_on(client, name, marker, calls, idx)
            for i, reply in zip(idx, got, strict=True):
                out[i] = reply
        return out

    async def _arun_on(
        self, client: redis.asyncio.Redis, name: str, marker: str, calls: Calls, idx: list[int]
    ) -> list[Any]:
        step = Step(scripts.SCRIPTS[name], [calls[i] for i in idx], self._tail(marker))
        while True:
            try:
                replies = await asend(await self._anode(client, marker), step.commands())
            except ServerUnreachable:
                await clients.arelearn_slots(client)
                raise
            redo = step.sort(replies)
            if redo is None:
                break
            with scripts.translated():
                if redo == "moved":
                    await clients.arelearn_slots(client)
                elif redo == "load":
                    for source in step.sources():
                        await (await self._anode(client, marker)).script_load(source)
        self._confirm(step.tail)
        return step.out


async def check_queues(
    client: redis.asyncio.Redis, queues: Mapping[str, QueueOptions | None]
) -> None:
    """Check the server for every queue's options before a worker starts: raises
    :class:`~emq.errors.UnsafeServer`. An unreachable server is not an error here (a worker
    rides out an outage); the queues' first calls check it then. ``client`` stays open."""
    try:
        for name, options in queues.items():
            await Guard(options or QueueOptions(), QueueKeys(name).metrics).acheck(client)
    except UNREACHABLE:
        log.debug("server unreachable at start: checked at the first call instead")
