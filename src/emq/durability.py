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
  redis/redis#13793; ``tests/test_durability.py`` shows such writes lost to a simulated power
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
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import scripts
from .config import QueueOptions
from .errors import EmqError, ScriptError, ServerUnreachable, UnsafeServer, from_reply
from .shell import UNREACHABLE

log = logging.getLogger(__name__)

DURABLE_SCRIPTS = frozenset({"enqueue", "complete", "fail", "delay", "redrive", "remove"})
"""The writes that ``durability="aof"`` confirms: admitting and finishing a job, and the
operator's moves. Claims, extends, promotes and sweeps are not waited for: losing one to a
rollback puts a job back where a worker or the sweep finds it again."""

SAFE_POLICY = "noeviction"
WAITAOF_SINCE = "Valkey 7.2 or Redis 7.2"
PROBE_TIMEOUT_MS = 1  # the probe's WAITAOF only asks whether the command works
MARKER_FIELD = "completed"  # HINCRBY <metrics> completed 0: a write that changes nothing

Calls = list[tuple[list[str], list[str | int | float]]]
_LOST = (RedisConnectionError, RedisTimeoutError)


class NotDurable(EmqError):
    """``durability="aof"`` or ``"replica"``: the write WAS applied on the server (an enqueued
    job exists, a completion is done), but the server did not confirm within
    ``durability_timeout_ms`` that it reached its AOF on disk (or enough replicas), or refused
    ``WAITAOF``/``WAIT`` (AOF turned off meanwhile). It is not
    undone; it may be lost if the server's host crashes before its next fsync. An enqueue can
    be re-sent with the same ids (then reported ``created=False``) to wait again."""


@dataclass(frozen=True, slots=True)
class Facts:
    """What one probe learned. ``policy`` None: it could not be read. ``aof`` None: not
    probed; ``""``: ``WAITAOF`` works; else why ``durability="aof"`` cannot be provided.
    ``replicas``: the replicas connected to a primary (-1: the server is itself a replica);
    None: not probed."""

    policy: str | None
    aof: str | None = None
    replicas: int | None = None


def probe_commands(mode: str) -> list[tuple[str | int, ...]]:
    """What to ask the server for a queue of durability ``mode``."""
    cmds: list[tuple[str | int, ...]] = [("CONFIG GET", "maxmemory-policy"), ("INFO", "memory")]
    if mode == "aof":
        cmds += [
            ("CONFIG GET", "appendfsync"),
            ("INFO", "server"),
            ("WAITAOF", 1, 0, PROBE_TIMEOUT_MS),
        ]
    elif mode == "replica":
        cmds.append(("INFO", "replication"))
    return cmds


def _config_value(reply: Any, name: str) -> str | None:
    if isinstance(reply, list):
        reply = dict(zip(reply[::2], reply[1::2], strict=False))
    value = reply.get(name) if isinstance(reply, dict) else None
    return value if isinstance(value, str) else None


def _info_value(reply: Any, field: str) -> str | None:
    if isinstance(reply, str):
        reply = dict(line.split(":", 1) for line in reply.splitlines() if ":" in line)
    value = reply.get(field) if isinstance(reply, dict) else None
    return None if value is None else str(value).strip()


def _server_name(info: Any) -> str:
    valkey = _info_value(info, "valkey_version")
    if valkey:
        return f"Valkey {valkey}"
    redis_version = _info_value(info, "redis_version")
    return f"Redis {redis_version}" if redis_version else "of unknown version"


def _aof_problem(fsync: Any, info: Any, waitaof: Any) -> str:
    if isinstance(waitaof, Exception):
        text = str(waitaof)
        low = text.lower()
        if "unknown command" in low:
            return (
                f"it needs WAITAOF, which {WAITAOF_SINCE} added, and this server is "
                f"{_server_name(info)}: upgrade the server, or use durability='none' "
                "(docs/guarantees.md says what each survives)"
            )
        if "appendonly" in low:
            return (
                "the server's AOF is off: turn on appendonly (CONFIG SET appendonly yes, "
                "and in its config file)"
            )
        if "replica" in low:
            return "the server is a replica: connect to the primary"
        return f"the server refused WAITAOF: {text}"
    policy = _config_value(fsync, "appendfsync")
    if policy == "no":
        return (
            "the server has appendfsync no, so it never confirms an fsync: set appendfsync "
            "always (CONFIG SET appendfsync always, and in its config file)"
        )
    if policy != "always" and early_ack(info):
        shown = policy or "unknown (CONFIG GET appendfsync was refused)"
        return (
            f"this server ({_server_name(info)}) answers WAITAOF before the fsync when "
            "appendfsync is everysec (a server bug, fixed in Redis 8.0 by redis/redis#13793, "
            f"not in Valkey), and its appendfsync is {shown}: set appendfsync always "
            "(CONFIG SET appendfsync always, and in its config file)"
        )
    return ""


def early_ack(info: Any) -> bool:
    """True where ``WAITAOF 1 ...`` may answer before the fsync under ``appendfsync
    everysec``: every Valkey so far and Redis before 8.0 (fixed by redis/redis#13793); also
    when the version cannot be read. There only ``appendfsync always`` can be confirmed."""
    if _info_value(info, "valkey_version"):
        return True
    version = _info_value(info, "redis_version") or ""
    major = version.split(".")[0]
    return not major.isdigit() or int(major) < 8


def _replicas(info: Any) -> int:
    if _info_value(info, "role") == "slave":
        return -1
    count = _info_value(info, "connected_slaves") or "0"
    return int(count) if count.isdigit() else 0


def read_facts(replies: list[Any], mode: str) -> Facts:
    """Decode the replies to :func:`probe_commands` (error replies as exception objects)."""
    policy = _config_value(replies[0], "maxmemory-policy")
    if policy is None:
        policy = _info_value(replies[1], "maxmemory_policy")
    if mode == "aof":
        return Facts(policy, aof=_aof_problem(*replies[2:5]))
    if mode == "replica":
        return Facts(policy, replicas=_replicas(replies[2]))
    return Facts(policy)


def refusal(facts: Facts, options: QueueOptions) -> UnsafeServer | None:
    """Why this server cannot run a queue with ``options``, or None."""
    if facts.policy not in (None, SAFE_POLICY) and not options.allow_eviction:
        return UnsafeServer(
            f"the server's maxmemory-policy is {facts.policy!r}: under memory pressure it "
            "deletes keys, and emq would lose jobs without a trace. Fix: CONFIG SET "
            "maxmemory-policy noeviction (and set it in the server's config file); or, "
            "accepting that jobs may vanish, QueueOptions(allow_eviction=True). "
            "Nothing was written."
        )
    if options.durability == "aof" and facts.aof:
        return UnsafeServer(
            f"durability='aof' cannot be provided: {facts.aof}. Nothing was written."
        )
    wanted = options.durability_replicas
    if options.durability == "replica" and facts.replicas is not None and facts.replicas < wanted:
        why = (
            "the server is a replica: connect to the primary"
            if facts.replicas < 0
            else f"it waits for {wanted} replica(s) and the server has {facts.replicas} connected"
        )
        return UnsafeServer(f"durability='replica' cannot be provided: {why}. Nothing was written.")
    return None


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
        raise from_reply(str(reply)) or ScriptError(str(reply))
    return reply


def _unreachable(exc: Exception) -> ServerUnreachable:
    err = ServerUnreachable(f"the server could not be reached: {exc}")
    err.__cause__ = exc
    return err


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
        pool = client.connection_pool
        facts = self._cached(pool)
        if facts is None:
            mode = self.options.durability
            facts = read_facts(_send(client, probe_commands(mode)), mode)
        self._judge(pool, facts)

    def run(self, client: redis.Redis, name: str, calls: Calls) -> list[Any]:
        """Run ``calls`` of script ``name`` and wait for their fsync (see the module doc)."""
        sha = scripts.SCRIPTS[name].sha
        cmds = [("EVALSHA", sha, len(k), *k, *a) for k, a in calls] + self._tail()
        replies = _send(client, cmds)
        out, tail = replies[: len(calls)], replies[len(calls) :]
        missed = [i for i, r in enumerate(out) if isinstance(r, NoScriptError)]
        if missed:  # nothing applied: scripts.run loads the script, applies the call
            for i in missed:
                out[i] = scripts.run(client, name, *calls[i])
            tail = _send(client, self._tail())
        out = [_script_reply(r) for r in out]
        self._confirm(tail)
        return out

    # -- async ------------------------------------------------------------------------------

    async def acheck(self, client: redis.asyncio.Redis) -> None:
        """Raise :class:`~emq.errors.UnsafeServer` if this server cannot run the queue."""
        pool = client.connection_pool
        facts = self._cached(pool)
        if facts is None:
            mode = self.options.durability
            facts = read_facts(await _asend(client, probe_commands(mode)), mode)
        self._judge(pool, facts)

    async def arun(self, client: redis.asyncio.Redis, name: str, calls: Calls) -> list[Any]:
        """Run ``calls`` of script ``name`` and wait for their fsync (see the module doc)."""
        sha = scripts.SCRIPTS[name].sha
        cmds = [("EVALSHA", sha, len(k), *k, *a) for k, a in calls] + self._tail()
        replies = await _asend(client, cmds)
        out, tail = replies[: len(calls)], replies[len(calls) :]
        missed = [i for i, r in enumerate(out) if isinstance(r, NoScriptError)]
        if missed:
            for i in missed:
                out[i] = await scripts.run_async(client, name, *calls[i])
            tail = await _asend(client, self._tail())
        out = [_script_reply(r) for r in out]
        self._confirm(tail)
        return out


async def check_queues(client: redis.asyncio.Redis, queues: Mapping[str, QueueOptions]) -> None:
    """Check the server for every queue's options before a worker starts: raises
    :class:`~emq.errors.UnsafeServer`. An unreachable server is not an error here (a worker
    rides out an outage); the queues' first calls check it then. ``client`` stays open."""
    try:
        for options in queues.values():
            await Guard(options, "").acheck(client)
    except UNREACHABLE:
        log.debug("server unreachable at start: checked at the first call instead")


def _send(client: redis.Redis, cmds: list[tuple[Any, ...]]) -> list[Any]:
    """One pipeline, one connection, no MULTI; error replies come back as exceptions."""
    try:
        with client.pipeline(transaction=False) as pipe:
            for cmd in cmds:
                pipe.execute_command(*cmd)  # type: ignore[no-untyped-call]
            return pipe.execute(raise_on_error=False)
    except _LOST as exc:
        raise _unreachable(exc) from exc


async def _asend(client: redis.asyncio.Redis, cmds: list[tuple[Any, ...]]) -> list[Any]:
    try:
        async with client.pipeline(transaction=False) as pipe:
            for cmd in cmds:
                pipe.execute_command(*cmd)
            return await pipe.execute(raise_on_error=False)
    except _LOST as exc:
        raise _unreachable(exc) from exc
