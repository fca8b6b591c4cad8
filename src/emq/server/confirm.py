"""How a durable call is confirmed, on one node: the pipeline of script calls and the wait
that follows them (:class:`Step`), what the wait's replies say (:func:`confirm`), and which
metrics key a call's no-change write goes to (:func:`marker_of`). :mod:`emq.server.durability`
decides when and where; this module holds what one round trip sends and reads.
"""

from __future__ import annotations

import time
from typing import Any

import redis
import redis.asyncio
from redis.exceptions import AskError, MovedError, NoScriptError, ResponseError

from ..errors import EmqError
from ..lua import scripts

# Replies that mean the script did not run: its cache is empty there (a restart, a flush, a
# replica just promoted), or the slot moved to another node of a cluster.
_NOT_RUN = (NoScriptError, MovedError, AskError)
RERUNS = 3  # a call not run (NOSCRIPT, MOVED) is sent again with its wait, this often
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


class Step:
    """The calls one node runs and confirms, re-sent (those not run, with the wait) until
    all ran: a script cache flushed there is loaded again for up to ``RELOAD_FOR_S``; a
    slot that moved is followed up to :data:`RERUNS` times; a call refused for memory is sent
    once more in its script's allow-oom shape (:func:`emq.lua.scripts.at_maxmemory`), and the
    wait's no-change write, refused there too, becomes a ``PING``: the wait then covers what
    the script itself wrote on this connection."""

    def __init__(self, script: scripts.Script, calls: Calls, tail: list[tuple[Any, ...]]):
        self.script, self.wait = script, tail
        self.calls = [(script, keys, args) for keys, args in calls]
        self.out: list[Any] = [None] * len(calls)
        self.todo = list(range(len(calls)))
        self.tail: list[Any] = []
        self.moves, self.started = 0, time.monotonic()

    def commands(self) -> list[tuple[Any, ...]]:
        cmds = [
            ("EVALSHA", s.sha, len(k), *k, *a) for s, k, a in (self.calls[j] for j in self.todo)
        ]
        return cmds + self.wait

    def sources(self) -> list[str]:
        """The texts to load before the calls still to run are sent again."""
        return list(dict.fromkeys(self.calls[j][0].source for j in self.todo))

    def sort(self, replies: list[Any]) -> str | None:
        """Keep the replies; None once every call ran, else what to do first: ``"moved"``
        (read the slot map again), ``"load"`` (the scripts) or ``"again"``."""
        got, self.tail = replies[: len(self.todo)], replies[len(self.todo) :]
        missed, oom = [], []
        for j, reply in zip(self.todo, got, strict=True):
            self.out[j] = reply
            if isinstance(reply, _NOT_RUN):
                missed.append(j)
            elif isinstance(reply, ResponseError) and self.calls[j][0] is self.script:
                again = scripts.at_maxmemory(self.script, reply, self.calls[j][2])
                if again is not None:
                    oom.append(j)
                    self.calls[j] = (again[0], self.calls[j][1], again[1])
        if oom:  # none of these ran: at maxmemory, the allow-oom shape and a PING for marker
            self.todo, self.wait = sorted(missed + oom), [("PING",), self.wait[-1]]
            return "load" if missed else "again"
        if not missed:
            self.out = [_script_reply(r) for r in self.out]
            return None
        first = self.out[missed[0]]
        moved = isinstance(first, MovedError | AskError)
        self.moves += moved
        late = time.monotonic() - self.started > scripts.RELOAD_FOR_S
        if self.moves > RERUNS or (late and not moved):  # nothing of these ran: say why
            raise scripts.refusal(first, self.script)
        self.todo = missed
        return "moved" if moved else "load"


def marker_of(key: str) -> str:
    """The metrics key in ``key``'s hash slot (``emq:{<tag>}:metrics``): the target of the
    no-change write that a call's wait covers, on the node that holds the call's keys."""
    start = key.find("{")
    end = key.find("}", start + 1)
    return key if start < 0 or end < 0 else f"emq:{key[start : end + 1]}:metrics"


def send(client: redis.Redis, cmds: list[tuple[Any, ...]]) -> list[Any]:
    """One pipeline, one connection, no MULTI; error replies come back as exceptions."""
    try:
        with client.pipeline(transaction=False) as pipe:
            for cmd in cmds:
                pipe.execute_command(*cmd)  # type: ignore[no-untyped-call]
            return pipe.execute(raise_on_error=False)
    except scripts.LOST as exc:
        raise scripts.unreachable(exc) from exc


async def asend(client: redis.asyncio.Redis, cmds: list[tuple[Any, ...]]) -> list[Any]:
    try:
        async with client.pipeline(transaction=False) as pipe:
            for cmd in cmds:
                pipe.execute_command(*cmd)
            return await pipe.execute(raise_on_error=False)
    except scripts.LOST as exc:
        raise scripts.unreachable(exc) from exc
