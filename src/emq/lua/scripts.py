"""The Lua transitions: loaded once from package data, dispatched EVALSHA-first.

Each ``lua/<name>.lua`` starts with a header (see ``docs/lua-contract.md``) that
:func:`parse_header` reads; a test checks every header against its Python binding.

What the server runs is ``#!lua`` + the file's header + the includes its ``-- Includes:`` line
names (``lua/includes/<name>.lua``, with the includes they need, each once) + the file's body,
composed by :mod:`emq.lua.compose`: one text, hashed once, so the sha check and the header test
see exactly what runs. The ``#!lua`` line makes the server refuse a script whole while it is out
of memory, before any write (:class:`~emq.errors.ServerOutOfMemory`), never half-way. An error
the server reports at ``user_script:<N>`` is raised naming the file and line it comes from
(``claim.lua:135``, ``includes/lanes.lua:40``).

At maxmemory: a script whose header says ``-- Flags: allow-oom`` (extend, and the scripts that
delete jobs) also has :attr:`Script.at_maxmemory`, its text under ``#!lua flags=allow-oom``,
which the server runs while out of memory. A call is sent plain first (the hot path as it
was); only once the server refused it for memory (``OOM``: none of it ran) is it sent again
in that shape with ``ARGV`` ``maxlen`` 0 (:func:`at_maxmemory`): no event is appended. The
server's refusal is how a script learns it is at maxmemory (it cannot read ``used_memory``).

Dispatch guarantee: a call is sent as ``EVALSHA`` with the sha computed locally. On
``NOSCRIPT`` (after ``SCRIPT FLUSH``, a restart, a failover) the source is loaded, the returned
sha is checked against the local one, and the call is re-sent; any number of flushes in a row
are survived for up to :data:`RELOAD_FOR_S` seconds. A script refusal ``EMQ<CLASS> detail`` is
raised as its :mod:`emq.errors` class, a server refusal (OOM, BUSY, READONLY, NOPERM, ...) as
:class:`~emq.errors.ServerRefused`, and a lost connection as
:class:`~emq.errors.ServerUnreachable` (the redis-py error chained).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from typing import Any

import redis
import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisClusterException, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .. import errors
from ..errors import EmqError, ScriptError, ServerOutOfMemory, ServerUnreachable, from_reply
from .compose import (
    ALLOW_OOM,
    Include,
    Span,
    compose,
    flags_of,
    includes_of,
    library,
    located,
    place,
)

RELOAD_FOR_S = 10.0  # how long a call keeps reloading its script through repeated flushes
INCLUDES_DIR = "includes"  # lua/includes/<name>.lua: the functions scripts share
LOST = (RedisConnectionError, RedisTimeoutError, RedisClusterException)  # the server is away
QUIET_ARG = "maxlen"  # the ARGV set to 0 when a script is sent again at maxmemory: no events
Args = list[str | int | float]

_KEY_LINE = re.compile(r"^-- KEYS\[(\d+)\]\s+(\S+)\s+(\S+)")
_ARG_LINE = re.compile(r"^-- ARGV\[(\d+)\]\s+(\S+)\s+(\S+)")
_GROUP_LINE = re.compile(r"^-- ARGV\[(\d+)\.\.\]\s+\(([^)]*)\)\*")


@dataclass(frozen=True, slots=True)
class Header:
    """What a script's header declares."""

    summary: str  # "claim: pending -> active ..."
    keys: tuple[str, ...]  # KEYS[1..n] names, e.g. ("pending", "active")
    key_types: tuple[str, ...]
    args: tuple[str, ...]  # fixed ARGV names
    group: tuple[str, ...]  # names of a repeated ARGV group, () if none
    returns: str
    errors: str
    derives: str
    includes: tuple[str, ...]  # the '-- Includes:' line: what the body calls
    flags: tuple[str, ...] = ()  # the '-- Flags:' line: ('allow-oom',) or ()


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: str
    sha: str
    header: Header
    spans: tuple[Span, ...]  # the line map of source (emq.lua.compose), of both shapes
    includes: tuple[str, ...]  # composed into source, in order
    at_maxmemory: Script | None = None  # the '#!lua flags=allow-oom' shape, if it has one


def parse_header(name: str, source: str) -> Header:
    """Parse the leading comment block of a script; raise ValueError if it breaks the shape."""
    lines: list[str] = []
    for line in source.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    if not lines or not lines[0].startswith(f"-- {name}: ") or "->" not in lines[0]:
        raise ValueError(f"{name}.lua: first line must be '-- {name}: <from> -> <to>'")
    keys: list[tuple[int, str, str]] = []
    args: list[tuple[int, str]] = []
    group: tuple[str, ...] = ()
    sections: dict[str, str] = {}
    current = ""
    for line in lines[1:]:
        if m := _KEY_LINE.match(line):
            keys.append((int(m[1]), m[2], m[3]))
        elif m := _GROUP_LINE.match(line):
            if int(m[1]) != len(args) + 1:
                raise ValueError(f"{name}.lua: repeated ARGV group must follow ARGV[{len(args)}]")
            group = tuple(part.strip() for part in m[2].split(","))
        elif m := _ARG_LINE.match(line):
            args.append((int(m[1]), m[2]))
        else:
            body = line[2:].strip()
            head = body.split(":", 1)[0]
            if head in ("Returns", "Errors", "Derives"):
                current = head
                sections[head] = body.split(":", 1)[1].strip()
            elif current and body and line.startswith("--   "):
                sections[current] += " " + body
            else:
                current = ""
    for label, items in (("KEYS", [k[0] for k in keys]), ("ARGV", [a[0] for a in args])):
        if items != list(range(1, len(items) + 1)):
            raise ValueError(f"{name}.lua: {label} indices must run 1..n in order, got {items}")
    for section in ("Returns", "Errors", "Derives"):
        if section not in sections:
            raise ValueError(f"{name}.lua: header lacks a '{section}:' line")
    return Header(
        summary=lines[0][3:],
        keys=tuple(k[1] for k in keys),
        key_types=tuple(k[2] for k in keys),
        args=tuple(a[1] for a in args),
        group=group,
        returns=sections["Returns"],
        errors=sections["Errors"],
        derives=sections["Derives"],
        includes=includes_of(f"{name}.lua", source),
        flags=flags_of(f"{name}.lua", source),
    )


def build(name: str, text: str, lib: dict[str, Include] | None = None,
          scripts: dict[str, str] | None = None) -> Script:  # fmt: skip
    """The script of file ``<name>.lua`` whose text is ``text``: its header parsed, composed
    with the includes it names (by default the package's) and the scripts it runs
    (``scripts``: their texts), hashed; with its allow-oom shape when its header has the flag."""
    header = parse_header(name, text)

    def shape(flags: tuple[str, ...], oom: Script | None) -> Script:
        composed = compose(name, text, LIBRARY if lib is None else lib, flags, scripts)
        sha = hashlib.sha1(composed.source.encode("utf-8")).hexdigest()
        return Script(name, composed.source, sha, header, composed.spans, composed.includes, oom)

    return shape((), shape(header.flags, None) if ALLOW_OOM in header.flags else None)


def at_maxmemory(script: Script, exc: Exception, args: Args) -> tuple[Script, Args] | None:
    """What to send when the server refused ``script`` with ``exc``: its allow-oom shape and
    ``args`` with ``maxlen`` 0 (no event) if ``exc`` is the refusal of a server out of memory
    and the script has that shape; else None (the refusal is raised)."""
    shape = script.at_maxmemory
    if shape is None or not _out_of_memory(exc):
        return None
    return shape, quiet(script, args)


def quiet(script: Script, args: Args) -> Args:
    """``args`` of ``script`` with ``maxlen`` (if it takes one) 0: no event appended."""
    at = script.header.args.index(QUIET_ARG) if QUIET_ARG in script.header.args else len(args)
    return args if at >= len(args) else [*args[:at], 0, *args[at + 1 :]]


def _out_of_memory(exc: Exception) -> bool:
    oom = (redis.exceptions.OutOfMemoryError, ServerOutOfMemory)
    return isinstance(exc, oom) or str(exc).startswith("OOM")


def _read_includes() -> dict[str, Include]:
    folder = resources.files("emq").joinpath("lua").joinpath(INCLUDES_DIR)
    return library({
        entry.name[:-4]: entry.read_text(encoding="utf-8")
        for entry in folder.iterdir() if entry.name.endswith(".lua")
    })  # fmt: skip


def _load_all() -> dict[str, Script]:
    texts = {entry.name[:-4]: entry.read_text(encoding="utf-8")
             for entry in resources.files("emq").joinpath("lua").iterdir()
             if entry.name.endswith(".lua")}  # fmt: skip
    return {name: build(name, text, scripts=texts) for name, text in texts.items()}


LIBRARY: dict[str, Include] = _read_includes()
SCRIPTS: dict[str, Script] = _load_all()

# redis-py strips the error class from these replies and raises its own class instead
_STRIPPED: tuple[tuple[type[ResponseError], str], ...] = (
    (redis.exceptions.OutOfMemoryError, "OOM"),
    (redis.exceptions.ReadOnlyError, "READONLY"),
    (redis.exceptions.NoPermissionError, "NOPERM"),
    (redis.exceptions.ExecAbortError, "EXECABORT"),
    (redis.exceptions.ClusterDownError, "CLUSTERDOWN"),  # MASTERDOWN too: its subclass
    (redis.exceptions.TryAgainError, "TRYAGAIN"),
)

_SCRIPT_LINE = re.compile(r"@user_script:(\d+)")
_CALLED = re.compile(r"redis\.call\('([A-Za-z]+)'")
_NAMED = re.compile(r"'[a-z|]+' command")


def _name_the_command(text: str, script: Script | None) -> str:
    """Servers that do not name the command a script was refused (Redis 7.0 names only the
    line) get it added from the script's source."""
    line = _SCRIPT_LINE.search(text)
    if script is None or line is None or _NAMED.search(text):
        return text
    lines = script.source.splitlines()
    n = int(line[1])
    called = _CALLED.search(lines[n - 1]) if 0 < n <= len(lines) else None
    where = place(script.spans, n)
    if called is None or where is None:
        return text
    return f"{text} (line {where[1]} of {where[0]} runs '{called[1].lower()}')"


def _told(text: str, script: Script | None) -> str:
    """An error reply's text as emq raises it: each ``user_script:<N>`` told as the file and
    line it comes from (:func:`emq.lua.compose.located`), a refused command named."""
    text = _name_the_command(text, script)
    return text if script is None else located(text, script.name, script.spans)


def refusal(exc: ResponseError, script: Script | None = None) -> EmqError:
    """The emq error for an error reply: a script's refusal (``EMQ<CLASS>``), a server's
    refusal (:class:`~emq.errors.ServerRefused`, :class:`~emq.errors.ServerOutOfMemory`), or
    else :class:`~emq.errors.ScriptError` (a bug)."""
    text = _told(str(exc), script)
    for cls, head in _STRIPPED:
        if isinstance(exc, cls) and not text.startswith(head):
            text = f"{head} {text}"
            break
    mapped = from_reply(text)
    return mapped if mapped is not None else ScriptError(text)


def _check_loaded(script: Script, sha: Any) -> None:
    if isinstance(sha, bytes):
        sha = sha.decode()
    if sha != script.sha:
        raise ScriptError(
            f"server returned sha {sha!r} for {script.name}.lua, expected {script.sha}"
        )


def _reload_or_give_up(script: Script, started: float, exc: NoScriptError) -> None:
    if time.monotonic() - started > RELOAD_FOR_S:
        raise ScriptError(
            f"{script.name}.lua was flushed from the server's script cache again and again "
            f"for {RELOAD_FOR_S:.0f} s; something keeps running SCRIPT FLUSH: {exc}"
        ) from exc


def unreachable(exc: Exception) -> EmqError:
    """A lost connection, chained; a refused login (redis-py's is one) is AuthenticationFailed.
    A cluster client's own error (no node answers; the slot map cannot be read) is one too."""
    err: EmqError = ServerUnreachable(f"the server could not be reached: {exc}")
    if isinstance(exc, redis.exceptions.AuthenticationError):
        err = errors.AuthenticationFailed(str(exc))
    err.__cause__ = exc
    return err


def _evalsha(client: redis.Redis, script: Script, keys: list[str], args: Args, t0: float) -> Any:
    while True:
        try:
            return client.evalsha(script.sha, len(keys), *keys, *args)
        except NoScriptError as exc:
            _reload_or_give_up(script, t0, exc)
            _check_loaded(script, client.script_load(script.source))


async def _aevalsha(
    client: redis.asyncio.Redis, script: Script, keys: list[str], args: Args, t0: float
) -> Any:
    while True:
        try:
            return await client.evalsha(script.sha, len(keys), *keys, *args)
        except NoScriptError as exc:
            _reload_or_give_up(script, t0, exc)
            _check_loaded(script, await client.script_load(script.source))


def run(client: redis.Redis, name: str, keys: list[str], args: Args) -> Any:
    """Run script ``name`` EVALSHA-first on a sync client (refused for memory: once more in
    its allow-oom shape, if it has one)."""
    script, started = SCRIPTS[name], time.monotonic()
    try:
        try:
            return _evalsha(client, script, keys, args, started)
        except ResponseError as exc:
            if (again := at_maxmemory(script, exc, args)) is None:
                raise
            return _evalsha(client, again[0], keys, again[1], started)
    except ResponseError as exc:
        raise refusal(exc, script) from None
    except LOST as exc:
        raise unreachable(exc) from exc


async def run_async(client: redis.asyncio.Redis, name: str, keys: list[str], args: Args) -> Any:
    """Run script ``name`` EVALSHA-first on an asyncio client (as :func:`run`)."""
    script, started = SCRIPTS[name], time.monotonic()
    try:
        try:
            return await _aevalsha(client, script, keys, args, started)
        except ResponseError as exc:
            if (again := at_maxmemory(script, exc, args)) is None:
                raise
            return await _aevalsha(client, again[0], keys, again[1], started)
    except ResponseError as exc:
        raise refusal(exc, script) from None
    except LOST as exc:
        raise unreachable(exc) from exc


def _sorted_replies(replies: list[Any], script: Script) -> tuple[list[int], EmqError | None]:
    """The positions of a pipeline's replies to re-run alone: ``NOSCRIPT`` (the re-run loads
    the script) and, for a script with an allow-oom shape, ``OOM`` (the re-run sends that
    shape); and the first other refusal (raised once every reply has been read)."""
    again = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError) or
             (isinstance(r, ResponseError) and at_maxmemory(script, r, []))]  # fmt: skip
    refused = next((r for i, r in enumerate(replies) if isinstance(r, ResponseError) and
                    i not in again), None)  # fmt: skip
    return again, None if refused is None else refusal(refused, script)


Calls = list[tuple[list[str], Args]]


def run_pipelined(client: redis.Redis, name: str, calls: Calls) -> list[Any]:
    """Run several calls of script ``name`` in one pipeline (one round trip, no MULTI; each
    call is still its own indivisible step). A call answered ``NOSCRIPT`` (or ``OOM``, when
    the script has an allow-oom shape) is re-run alone, by :func:`run`; any other refusal is
    raised once every reply has been read."""
    script = SCRIPTS[name]
    try:
        with client.pipeline(transaction=False) as pipe:
            for keys, args in calls:
                # execute_command: a cluster pipeline refuses .evalsha, but routes this by key
                pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)  # type: ignore[no-untyped-call]
            replies = pipe.execute(raise_on_error=False)
    except LOST as exc:
        raise unreachable(exc) from exc
    reload, refused = _sorted_replies(replies, script)
    for i in reload:
        replies[i] = run(client, name, *calls[i])
    if refused is not None:
        raise refused
    return list(replies)


async def run_pipelined_async(client: redis.asyncio.Redis, name: str, calls: Calls) -> list[Any]:
    """The asyncio twin of :func:`run_pipelined`."""
    script = SCRIPTS[name]
    try:
        async with client.pipeline(transaction=False) as pipe:
            for keys, args in calls:
                pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            replies = await pipe.execute(raise_on_error=False)
    except LOST as exc:
        raise unreachable(exc) from exc
    reload, refused = _sorted_replies(replies, script)
    for i in reload:
        replies[i] = await run_async(client, name, *calls[i])
    if refused is not None:
        raise refused
    return list(replies)


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Raise redis-py's errors from plain commands (reads) as emq's own, cause chained:
    :class:`~emq.errors.ServerUnreachable` for a lost connection, the mapped refusal for an
    error reply."""
    try:
        yield
    except ResponseError as exc:
        raise refusal(exc) from exc
    except LOST as exc:
        raise unreachable(exc) from exc
