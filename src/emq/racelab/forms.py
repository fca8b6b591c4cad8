"""The two recovery forms, and the worker that claims between them.

Each actor is a generator: it yields ``(step, command)`` pairs and receives each command's
decoded reply, so the interleaver decides when every command is sent. A yield is a pause
point: another actor may run any number of commands there.

- :func:`atomic_sweep` is emq's recovery: the real ``sweep_stalled`` script, the exact call
  :meth:`emq.Queue.sweep_stalled` sends. One command, so one step: nothing runs inside it.
- :func:`naive_sweep` is the cautionary form. Nothing in emq uses it.
- :func:`worker` claims with the real ``claim`` script and can let its lease lapse.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, Literal

from ..calls.jobs import QueueCore
from ..model.records import Claimed, SweepResult
from .wire import Command

Mode = Literal["atomic", "naive"]
MODES: tuple[Mode, ...] = ("atomic", "naive")

NAIVE_STEPS = ("detect", "probe", "remove", "requeue", "read", "write")
ATOMIC_STEPS = ("sweep",)
WORKER_STEPS = ("claim", "lapse")
# steps after which a job can have changed location (the interleaver looks there)
MOVING_STEPS = frozenset({"remove", "requeue", "sweep", "claim"})

PAST_MS = 1  # a lease deadline in the past: 1 ms after the epoch, on any server clock
SWEEP_LIMIT = 100
LAB_MAX_STALLED = 0  # the naive form never dead-letters, so the lab runs both forms without it


@dataclass(slots=True)
class Report:
    """What an actor says it did: the ids it recovered (sweeps) or was handed (workers)."""

    recovered: list[str] = field(default_factory=list)
    claimed: list[str] = field(default_factory=list)


Actor = Generator[tuple[str, Command], Any, Report]


def atomic_sweep(core: QueueCore, max_stalled: int = LAB_MAX_STALLED) -> Actor:
    """emq's recovery: one EVALSHA of ``sweep_stalled``, a single step.

    Guarantee (G2, G3): detect, move and count run on the server's one command thread with
    nothing between them, so a lease is recovered at most once however sweeps overlap, and
    ``stalled`` is bumped with ``HINCRBY`` on the value the script itself read.
    """
    result: SweepResult = yield "sweep", Command(call=core.sweep_stalled(max_stalled, SWEEP_LIMIT))
    return Report(recovered=[*result.recovered, *result.dead])


def naive_sweep(core: QueueCore) -> Actor:
    """THE CAUTIONARY FORM: the seed's app-side recovery loop, one round trip per line.

    Do not use this for anything but the race lab. It is the common shape of an app-side
    recovery and exactly what ``sweep_stalled.lua`` exists to avoid: every yield below is a
    gap in which another client's commands run. Two of these overlapping can recover one lease
    twice (both detect and probe it before either removes it), put a freshly claimed job back
    in pending while its worker holds it, and lose an increment of ``stalled`` (both read
    ``n``, both write ``n + 1``). It keeps no guarantee; expiry is still read off the server
    clock (``TIME``), so its only fault is the gaps.

    Steps, in order: ``detect`` (TIME, then ZRANGEBYSCORE active -inf now), ``probe`` (ZSCORE:
    is the lease still expired?), ``remove`` (ZREM active), ``requeue`` (ZADD pending 0),
    ``read`` (HGET stalled), ``write`` (HSET stalled n+1). It never dead-letters and does
    not touch the row's ``state``, like the seed's six lines.
    """
    keys = core.keys
    sec, usec = yield "detect", Command(("TIME",))
    now = int(sec) * 1000 + int(usec) // 1000
    in_flight: list[str] = yield (
        "detect",
        Command(("ZRANGEBYSCORE", keys.active, "-inf", now, "LIMIT", 0, SWEEP_LIMIT)),
    )
    report = Report()
    for job_id in in_flight:
        score: str | None = yield "probe", Command(("ZSCORE", keys.active, job_id))
        if score is None or float(score) > now:
            continue  # gone, or leased again: the probe says it is not stalled
        yield "remove", Command(("ZREM", keys.active, job_id))
        yield "requeue", Command(("ZADD", keys.pending, 0, job_id))
        n: str | None = yield "read", Command(("HGET", keys.job(job_id), "stalled"))
        yield "write", Command(("HSET", keys.job(job_id), "stalled", int(n or 0) + 1))
        report.recovered.append(job_id)
    return report


def worker(core: QueueCore, steps: tuple[str, ...], lease_ms: int, request: str) -> Actor:
    """A worker: ``claim`` leases one job with the real ``claim`` script (the call
    :meth:`emq.Queue.claim` sends); ``lapse`` moves the deadline of what it holds into the
    past (``ZADD XX CH``, which answers 1 if the lease was still there to move), as if it had
    died: the server clock then calls the lease expired. ``request`` is the claim's request id
    (see :func:`claim_requests`), so the lab can delete the reply the script stores."""
    report = Report()
    held: list[Claimed] = []
    for step in steps:
        if step == "claim":
            held = yield "claim", Command(call=core.claim(1, lease_ms, request))
            report.claimed += [job.id for job in held]
        elif step == "lapse":
            for job in held:
                yield "lapse", Command(("ZADD", core.keys.active, "XX", "CH", PAST_MS, job.id))
            held = []
    return report


def claim_request(round_: int, actor: str) -> str:
    """The request id of an actor's claim in one round: unique within a run's queue and known
    in advance, so the run can delete the reply the claim script stores under it."""
    return f"racelab-{round_}-{actor or 'setup'}"


def sweep_steps(mode: Mode) -> tuple[str, ...]:
    return ATOMIC_STEPS if mode == "atomic" else NAIVE_STEPS


def sweep_actor(mode: Mode, core: QueueCore) -> Actor:
    return atomic_sweep(core) if mode == "atomic" else naive_sweep(core)
