"""Commands the race lab sends, and the two executors that send them.

Everything above this module is sans-I/O: actors and runs are generators that yield a
:class:`Command` and receive the server's raw reply. This module is the only one that talks
to the server:

- :func:`execute` drives one run, one command per round trip, so the server sees exactly the
  order the schedule asked for.
- :func:`execute_many` drives many independent runs in lockstep: each tick sends the next
  command of every live run in one pipeline. Runs never share keys (each has its own queue),
  so a run's own commands still reach the server in its own order; only unrelated runs are
  batched together. This is what keeps the explorer's thousands of runs to seconds.

Script calls are the ones :mod:`emq.calls` builds, dispatched like :class:`emq.Queue` does:
EVALSHA first, and on ``NOSCRIPT`` loaded and re-sent by :func:`emq.scripts.run`.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import NoScriptError

from .. import scripts
from ..calls import Arg, Call

HIDDEN_ARGS = ("prefix", "maxlen", "request")


@dataclass(frozen=True, slots=True)
class Command:
    """One command: a raw command (``args``), or a script call built by :mod:`emq.calls`."""

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


def send(client: redis.Redis, command: Command) -> Any:
    """Send one command and return its raw reply."""
    if command.call is None:
        return client.execute_command(*command.args)  # type: ignore[no-untyped-call]
    call = command.call
    return scripts.run(client, call.script, call.keys, call.args)


def execute(client: redis.Redis, run: Run) -> Any:
    """Drive one run to its end, one round trip per command; return the run's result."""
    try:
        command = next(run)
        while True:
            command = run.send(send(client, command))
    except StopIteration as stop:
        return stop.value


def execute_many(client: redis.Redis, runs: Iterable[Run], width: int = 1000) -> list[Any]:
    """Drive many independent runs, ``width`` at a time in lockstep; results in input order.

    Each tick pipelines the next command of every live run (not a transaction: the runs touch
    disjoint keys). A ``NOSCRIPT`` reply is re-sent on its own through :func:`send`, which
    loads the script; any other error reply is raised.
    """
    source = enumerate(runs)
    results: dict[int, Any] = {}
    live: list[tuple[int, Run, Command]] = []

    def admit() -> None:
        for index, run in source:
            try:
                live.append((index, run, next(run)))
            except StopIteration as stop:
                results[index] = stop.value
                continue
            if len(live) >= width:
                return

    admit()
    while live:
        pipe = client.pipeline(transaction=False)
        for _, _, command in live:
            pipe.execute_command(*command.wire())  # type: ignore[no-untyped-call]
        replies = pipe.execute(raise_on_error=False)
        ticking, live = live, []
        for (index, run, command), reply in zip(ticking, replies, strict=True):
            if isinstance(reply, NoScriptError):
                reply = send(client, command)
            elif isinstance(reply, Exception):
                raise reply
            try:
                live.append((index, run, run.send(reply)))
            except StopIteration as stop:
                results[index] = stop.value
        admit()
    return [results[i] for i in range(len(results))]
