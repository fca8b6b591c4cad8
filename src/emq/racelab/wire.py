"""Commands the race lab sends, and the two executors that send them.

Everything above this module is sans-I/O: actors and runs are generators that yield a
:class:`Command` and receive the server's raw reply. This module is the only one that talks
to the server:

- :func:`execute` drives one run, one command per round trip, so the server sees exactly the
  order the schedule asked for.
- :func:`execute_many` drives many independent runs in lockstep: each tick sends the next
  command of every live run in one write. Runs never share keys (each has its own queue),
  so a run's own commands still reach the server in its own order; only unrelated runs are
  batched together. This is what keeps the explorer's thousands of runs to seconds.

Script calls are the ones :mod:`emq.calls.jobs` builds, dispatched like :class:`emq.Queue` does:
EVALSHA first, and on ``NOSCRIPT`` loaded and re-sent by :func:`emq.lua.scripts.run`.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import redis
from hiredis import pack_command
from redis.exceptions import NoScriptError, ResponseError

from ..calls.call import Arg, Call
from ..errors import from_reply
from ..lua import scripts
from ..server.clients import node_client

HIDDEN_ARGS = ("prefix", "maxlen", "request")


@dataclass(frozen=True, slots=True)
class Command:
    """One command: a raw command (``args``), or a script call built by :mod:`emq.calls.jobs`."""

    args: tuple[Arg, ...] = ()
    call: Call[Any] | None = None

    def wire(self) -> tuple[Arg, ...]:
        """What goes on the wire (a script call as EVALSHA with the locally computed sha)."""
        if self.call is None:
            return self.args
        sha = scripts.SCRIPTS[self.call.script].sha
        return ("EVALSHA", sha, len(self.call.keys), *self.call.keys, *self.call.args)

    def decode(self, reply: Any) -> Any:
        """The reply as the caller wants it: a script call's own decoder, else unchanged."""
        return reply if self.call is None else self.call.decode(reply)

    def text(self) -> str:
        """The command as a line: raw commands verbatim; a script call as ``EVALSHA
        <name>.lua`` with its named arguments (the key prefix and event cap left out)."""
        if self.call is None:
            return " ".join(str(a) for a in self.args)
        header = scripts.SCRIPTS[self.call.script].header
        named = [
            f"{name}={value}"
            for name, value in zip(header.args, self.call.args, strict=False)
            if name not in HIDDEN_ARGS
        ]
        return " ".join([f"EVALSHA {self.call.script}.lua", *named])


Run = Generator[Command, Any, Any]


def plain(reply: Any) -> Any:
    """A reply as JSON-ready data (tuples become lists)."""
    if isinstance(reply, list | tuple):
        return [plain(x) for x in reply]
    return reply


class Link:
    """Pooled connections, used without redis-py's reply callbacks: every reply is what the
    server sent (a score is the string ``"1"``, ``TIME`` two strings), decoded as UTF-8. On a
    cluster, one connection per node: each command goes to the node of its first key.

    :meth:`send` writes a batch of commands in one write per node and reads one reply per
    command; a batch never holds two commands of one run, so each run's order is kept. A
    ``NOSCRIPT`` reply (someone flushed the script cache) is re-sent through
    :func:`emq.lua.scripts.run`, which loads the script; any other error reply is raised.
    """

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.conns: dict[int, tuple[Any, Any]] = {}  # id(pool) -> (pool, connection)

    def _conn(self, command: Command) -> Any:
        key = command.call.keys[0] if command.call is not None else None
        if command.call is None and len(command.args) > 1:
            key = str(command.args[1])
        pool = node_client(self.client, key or "{emq}").connection_pool
        if id(pool) not in self.conns:
            try:
                self.conns[id(pool)] = (pool, pool.get_connection())
            except TypeError:  # redis-py < 5.3 wants a command name here
                self.conns[id(pool)] = (pool, pool.get_connection("PING"))
        return self.conns[id(pool)][1]

    def __enter__(self) -> Link:
        return self

    def __exit__(self, kind: object, *rest: object) -> None:
        for pool, conn in self.conns.values():
            if kind is not None:  # replies may be unread: never reuse this socket
                conn.disconnect()
            pool.release(conn)

    def send(self, commands: list[Command]) -> list[Any]:
        by_conn: dict[int, tuple[Any, list[int]]] = {}
        for i, command in enumerate(commands):
            conn = self._conn(command)
            by_conn.setdefault(id(conn), (conn, []))[1].append(i)
        replies: list[Any] = [None] * len(commands)
        for conn, indices in by_conn.values():
            packed = b"".join(pack_command(commands[i].wire()) for i in indices)  # type: ignore[arg-type]
            conn.send_packed_command([packed], check_health=False)
            for i in indices:
                try:
                    replies[i] = conn.read_response()
                except ResponseError as exc:  # the whole reply was read; the stream is in step
                    replies[i] = exc
        for i, (command, reply) in enumerate(zip(commands, replies, strict=True)):
            if isinstance(reply, NoScriptError) and command.call is not None:
                call = command.call
                replies[i] = scripts.run(self.client, call.script, call.keys, call.args)
            elif isinstance(reply, ResponseError):
                raise from_reply(str(reply)) or reply
        return replies


def execute(client: redis.Redis, run: Run) -> Any:
    """Drive one run to its end, one round trip per command; return the run's result."""
    with Link(client) as link:
        try:
            command = next(run)
            while True:
                command = run.send(link.send([command])[0])
        except StopIteration as stop:
            return stop.value


def execute_many(client: redis.Redis, runs: Iterable[Run], width: int = 100) -> Iterator[Any]:
    """Drive many independent runs, ``width`` at a time in lockstep, yielding each run's
    result as it ends (in the order they end).

    Each tick sends the next command of every live run in one write (not a transaction: the
    runs touch disjoint keys, and each run has one command in flight). Runs are taken from
    ``runs`` only as room frees up, so memory stays flat however many there are.
    """
    source = iter(runs)
    live: list[tuple[Run, Command]] = []
    with Link(client) as link:
        while True:
            finished: list[Any] = []
            for run in source:
                try:
                    live.append((run, next(run)))
                except StopIteration as stop:
                    finished.append(stop.value)
                    continue
                if len(live) >= width:
                    break
            yield from finished
            if not live:
                return
            replies = link.send([command for _, command in live])
            ticking, live = live, []
            for (run, _), reply in zip(ticking, replies, strict=True):
                try:
                    live.append((run, run.send(reply)))
                except StopIteration as stop:
                    finished.append(stop.value)
            yield from finished
