"""What a queue learns about its server before it writes: the probe's commands, what their
replies say (:class:`Facts`), and why a server cannot run a queue with given options
(:func:`refusal`). No I/O: :mod:`emq.server.durability` sends the probe once per connection pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ReplicasMissing, UnsafeServer
from ..model.config import QueueOptions

SAFE_POLICY = "noeviction"
WAITAOF_SINCE = "Valkey 7.2 or Redis 7.2"
PROBE_TIMEOUT_MS = 1  # the probe's WAITAOF only asks whether the command works


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
        return ReplicasMissing(
            f"durability='replica' cannot be provided: {why}. Nothing was written."
        )
    return None
