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
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Mapping
from typing import Any

import redis
import redis.asyncio
from redis.exceptions import AskError, MovedError, NoScriptError, ResponseError

from ..errors import EmqError, ServerUnreachable
from ..lua import scripts
from ..model.config import QueueOptions
from ..model.keys import QueueKeys
from ..queue.shared import UNREACHABLE
from . import clients
from .probe import Facts, probe_commands, read_facts, refusal

log = logging.getLogger(__name__)

DURABLE_SCRIPTS = frozenset(
    {"enqueue", "enqueue_flow", "complete", "fail", "delay", "redrive", "remove", "deliver_flow"}
)
"""The writes that ``durability="aof"`` confirms: admitting and finishing a job, a flow's
delivery across queues (confirmed before its outbox entry is deleted), and the operator's
moves. Claims, extends, promotes and sweeps are not waited for: losing one to a rollback
puts a job back where a worker or the sweep finds it again."""

# Replies that mean the script did not run: its cache is empty there (a restart, a flush, a
# replica just promoted), or the slot moved to another node of a cluster.
_NOT_RUN = (NoScriptError, MovedError, AskError)
MARKER_FIELD = "completed"  # HINCRBY <metrics> completed 0: a write that changes nothing

Calls = list[tuple[list[str], list[str | int | float]]]


class NotDurable(EmqError):
    """``durability="aof"`` or ``"replica"``: the write WAS applied on the server (an enqueued
    job exists, a completion is done), but the server did not confirm within
    ``durability_timeout_ms`` that it reached its AOF on disk (or enough replicas), or refused
    ``WAITAOF``/``WAIT`` (AOF turned off meanwhile). It is not
    undone; it may be lost if the server's host crashes before its next fsync. An enqueue can
    be re-sent with the same ids (then reported ``created=False``) to wait again."""


def confirm(tail: list[Any], timeout_ms: int, replicas: int = 0) -> None:
    """Raise :class:`NotDurable` unless the no-change write was applied and ``WAITAOF``
    answered ``numlocal >= 1``, or (``replicas`` > 0) ``WAIT`` answered at least that many
    replicas (``tail``: the replies to both)."""
    marker, waited = tail
    what = "WAIT" if replicas else "WAITAOF"
    for reply in (marker, waited):
        if isinstance(reply, Exception):
            raise NotDurable(
                f"the write was applied but not confirmed durable: the server refused "
                f"{what if reply is waited else 'the HINCRBY that ' + what + ' waits for'}: "
                f"{reply}"
            )
    if replicas:
        if not isinstance(waited, int) or waited < replicas:
            raise NotDurable(
                f"the write was applied but not confirmed durable: {waited} of the {replicas} "
                f"replica(s) asked for acknowledged it within {timeout_ms} ms"
            )
        return
    if not isinstance(waited, list | tuple) or not waited or int(waited[0]) < 1:
        raise NotDurable(
            "the write was applied but not confirmed durable: the server did not fsync it to "
            f"its AOF within {timeout_ms} ms (WAITAOF answered {waited!r})"
        )


def _script_reply(reply: Any) -> Any:
    if isinstance(reply, ResponseError):
        raise scripts.refusal(reply)  # mapped as every script reply is (OOM, NOPERM, EMQ...)
    return reply


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

    def _judge(self, pool: object, facts: Facts) -> None:
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
        self.ok = True

    def _tail(self) -> list[tuple[str | int, ...]]:
        o = self.options
        timeout = o.durability_timeout_ms
        wait: tuple[str | int, ...] = (
            ("WAIT", o.durability_replicas, timeout)
            if o.durability == "replica"
            else ("WAITAOF", 1, 0, timeout)
        )
        return [("HINCRBY", self.marker, MARKER_FIELD, 0), wait]

    def _confirm(self, tail: list[Any]) -> None:
        o = self.options
        replicas = o.durability_replicas if o.durability == "replica" else 0
        confirm(tail, o.durability_timeout_ms, replicas)

    # -- sync -------------------------------------------------------------------------------

    def check(self, client: redis.Redis) -> None:
        """Raise :class:`~emq.errors.UnsafeServer` if this server cannot run the queue."""
        node = self._node(client)
        pool = node.connection_pool
        facts = self._cached(pool)
        if facts is None:
            mode = self.options.durability
            facts = read_facts(_send(node, probe_commands(mode)), mode)
        self._judge(pool, facts)

    def _node(self, client: redis.Redis) -> redis.Redis:
        """The client of the node that holds this queue (``client`` itself off a cluster)."""
        return clients.node_client(client, self.marker) if self.marker else client

    def run(self, client: redis.Redis, name: str, calls: Calls) -> list[Any]:
        """Run ``calls`` of script ``name`` and wait for their fsync (see the module doc)."""
        sha = scripts.SCRIPTS[name].sha
        cmds = [("EVALSHA", sha, len(k), *k, *a) for k, a in calls] + self._tail()
        try:
            replies = _send(self._node(client), cmds)
        except ServerUnreachable:
            clients.relearn_slots(client)
            raise
        out, tail = replies[: len(calls)], replies[len(calls) :]
        missed = [i for i, r in enumerate(out) if isinstance(r, _NOT_RUN)]
        if missed:  # nothing applied: scripts.run loads the script (or finds the slot's new
            for i in missed:  # node), applies the call
                out[i] = scripts.run(client, name, *calls[i])
            tail = _send(self._node(client), self._tail())
        out = [_script_reply(r) for r in out]
        self._confirm(tail)
        return out

    # -- async ------------------------------------------------------------------------------

    async def acheck(self, client: redis.asyncio.Redis) -> None:
        """Raise :class:`~emq.errors.UnsafeServer` if this server cannot run the queue."""
        node = await self._anode(client)
        pool = node.connection_pool
        facts = self._cached(pool)
        if facts is None:
            mode = self.options.durability
            facts = read_facts(await _asend(node, probe_commands(mode)), mode)
        self._judge(pool, facts)

    async def _anode(self, client: redis.asyncio.Redis) -> redis.asyncio.Redis:
        return await clients.anode_client(client, self.marker) if self.marker else client

    async def arun(self, client: redis.asyncio.Redis, name: str, calls: Calls) -> list[Any]:
        """Run ``calls`` of script ``name`` and wait for their fsync (see the module doc)."""
        sha = scripts.SCRIPTS[name].sha
        cmds = [("EVALSHA", sha, len(k), *k, *a) for k, a in calls] + self._tail()
        try:
            replies = await _asend(await self._anode(client), cmds)
        except ServerUnreachable:
            await clients.arelearn_slots(client)
            raise
        out, tail = replies[: len(calls)], replies[len(calls) :]
        missed = [i for i, r in enumerate(out) if isinstance(r, _NOT_RUN)]
        if missed:
            for i in missed:
                out[i] = await scripts.run_async(client, name, *calls[i])
            tail = await _asend(await self._anode(client), self._tail())
        out = [_script_reply(r) for r in out]
        self._confirm(tail)
        return out


async def check_queues(client: redis.asyncio.Redis, queues: Mapping[str, QueueOptions]) -> None:
    """Check the server for every queue's options before a worker starts: raises
    :class:`~emq.errors.UnsafeServer`. An unreachable server is not an error here (a worker
    rides out an outage); the queues' first calls check it then. ``client`` stays open."""
    try:
        for name, options in queues.items():
            await Guard(options, QueueKeys(name).metrics).acheck(client)
    except UNREACHABLE:
        log.debug("server unreachable at start: checked at the first call instead")


def _send(client: redis.Redis, cmds: list[tuple[Any, ...]]) -> list[Any]:
    """One pipeline, one connection, no MULTI; error replies come back as exceptions."""
    try:
        with client.pipeline(transaction=False) as pipe:
            for cmd in cmds:
                pipe.execute_command(*cmd)  # type: ignore[no-untyped-call]
            return pipe.execute(raise_on_error=False)
    except scripts.LOST as exc:
        raise scripts.unreachable(exc) from exc


async def _asend(client: redis.asyncio.Redis, cmds: list[tuple[Any, ...]]) -> list[Any]:
    try:
        async with client.pipeline(transaction=False) as pipe:
            for cmd in cmds:
                pipe.execute_command(*cmd)
            return await pipe.execute(raise_on_error=False)
    except scripts.LOST as exc:
        raise scripts.unreachable(exc) from exc
