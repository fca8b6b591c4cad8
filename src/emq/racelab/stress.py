"""Stress: real processes racing one recovery form, with no forced schedule.

``procs`` processes share one fresh queue of ``jobs`` jobs for ``seconds``. Each loops:

1. **claim** one job with a live lease (the real ``claim`` script, :meth:`Queue.claim`);
2. **recover**: one pass of the form under test (atomic: :meth:`Queue.sweep_stalled`; naive:
   the cautionary round-trip loop);
3. **lapse** the job it holds with a fenced ``extend`` to 1 ms (the lease is then expired on
   the server clock a millisecond later, as if the worker had died). ``extend`` only moves a
   lease its token still holds, so a refusal means a sweep took a *live* lease away: the job
   went back to pending while its worker ran it, and will be delivered twice.

Afterwards the parent looks where every job is, drains what is still leased with the same
form running alone, and counts, per 10,000 recoveries: ``recovered twice`` (recoveries beyond
the leases that lapsed), ``lost increments`` (recoveries not reflected in ``stalled``),
``delivered twice`` (live leases taken away), ``left in two sets`` and ``left in none``.
Nothing sleeps to make a race likely; what the machine produces is what is reported. The
atomic form's counts must be zero.
"""

from __future__ import annotations

import multiprocessing
import time
import uuid
from collections.abc import Generator
from dataclasses import asdict, dataclass
from typing import Any, cast

import redis

from ..errors import EmqError, LeaseLost
from ..queue._sync.queue import Queue
from .forms import LAB_MAX_STALLED, SWEEP_LIMIT, Actor, Mode, Report, naive_sweep
from .wire import Command, execute

LIVE_LEASE_MS = 10_000
LAPSE_MS = 1
START_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 5.0


@dataclass(slots=True)
class Counts:
    """What one process did, and (summed) what all did."""

    iterations: int = 0
    recoveries: int = 0
    lapses: int = 0
    stolen: int = 0


@dataclass(frozen=True, slots=True)
class StressResult:
    mode: Mode
    procs: int
    seconds: float
    jobs: int
    iterations: int
    recoveries: int
    lapses: int
    recovered_twice: int
    lost_increments: int
    delivered_twice: int
    left_in_two_sets: int
    left_in_none: int

    ANOMALIES = (
        "recovered_twice",
        "lost_increments",
        "delivered_twice",
        "left_in_two_sets",
        "left_in_none",
    )

    def per_10k(self, name: str) -> float:
        value = cast(int, getattr(self, name))
        return 10_000 * value / self.recoveries if self.recoveries else 0.0

    @property
    def clean(self) -> bool:
        return all(getattr(self, name) == 0 for name in self.ANOMALIES)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["per_10k"] = {name: round(self.per_10k(name), 1) for name in self.ANOMALIES}
        return out


def solo(actor: Actor) -> Generator[Command, Any, Report]:
    """An actor as a run of its own: every step in order, nothing scheduled between."""
    try:
        _, command = next(actor)
        while True:
            raw = yield command
            _, command = actor.send(command.decode(raw))
    except StopIteration as stop:
        return cast(Report, stop.value)


def recover_once(q: Queue, mode: Mode) -> list[str]:
    """One pass of a recovery form; the ids it says it recovered."""
    if mode == "atomic":
        result = q.sweep_stalled(max_stalled=LAB_MAX_STALLED, limit=SWEEP_LIMIT)
        return [*result.recovered, *result.dead]
    report: Report = execute(q.client, solo(naive_sweep(q.core)))
    return report.recovered


def _child(
    url: str, queue: str, mode: Mode, seconds: float, barrier: Any, out: Any
) -> None:  # pragma: no cover - runs in a spawned process; its counts are asserted
    try:
        q = Queue.from_url(url, queue)
        counts = Counts()
        barrier.wait(timeout=START_TIMEOUT_S)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            counts.iterations += 1
            held = q.claim(1, lease_ms=LIVE_LEASE_MS)
            counts.recoveries += len(recover_once(q, mode))
            for job in held:
                try:
                    q.extend(job.id, job.token, lease_ms=LAPSE_MS)
                    counts.lapses += 1
                except LeaseLost:
                    counts.stolen += 1
        q.close()
        out.put(asdict(counts))
    except BaseException as exc:
        out.put({"error": f"{type(exc).__name__}: {exc}"})


def _spawn(url: str, queue: str, mode: Mode, procs: int, seconds: float) -> Counts:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(procs + 1)
    out = ctx.Queue()
    children = [
        ctx.Process(target=_child, args=(url, queue, mode, seconds, barrier, out), daemon=True)
        for _ in range(procs)
    ]
    for child in children:
        child.start()
    total = Counts()
    try:
        barrier.wait(timeout=START_TIMEOUT_S)
        for _ in children:
            got = out.get(timeout=seconds + START_TIMEOUT_S)
            if "error" in got:
                raise EmqError(f"a stress process failed: {got['error']}")
            for name, value in got.items():
                setattr(total, name, getattr(total, name) + value)
    finally:
        for child in children:
            child.join(timeout=5)
            if child.is_alive():
                child.terminate()
                child.join()
        out.close()
    return total


def _drain(q: Queue, mode: Mode) -> int:
    """Recover every lease still in active with the form running alone; how many it took."""
    recovered = 0
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while q.client.zcard(q.core.keys.active):
        if time.monotonic() > deadline:
            raise EmqError("stress: leases were still active after the drain")
        recovered += len(recover_once(q, mode))
    return recovered


def stress(
    url: str, mode: Mode, *, procs: int = 4, seconds: float = 3.0, jobs: int = 8
) -> StressResult:
    """Race ``procs`` processes running ``mode`` over ``jobs`` jobs for ``seconds``."""
    if not (1 <= procs <= 64 and 0 < seconds <= 600 and 1 <= jobs <= 1000):
        raise EmqError("stress takes 1..64 procs, 0..600 seconds and 1..1000 jobs")
    queue = f"race-stress-{mode}-{uuid.uuid4().hex[:8]}"
    q = Queue.from_url(url, queue)
    try:
        ids = [str(i) for i in q.enqueue_many([("racelab.stress", {"n": n}) for n in range(jobs)])]
        total = _spawn(url, queue, mode, procs, seconds)
        two, none = _where(q, ids)
        recoveries = total.recoveries + _drain(q, mode)
        stalled = sum(int(v or 0) for v in _hget_all(q, ids, "stalled"))
        return StressResult(
            mode=mode,
            procs=procs,
            seconds=seconds,
            jobs=jobs,
            iterations=total.iterations,
            recoveries=recoveries,
            lapses=total.lapses,
            recovered_twice=recoveries - total.lapses,
            lost_increments=recoveries - stalled,
            delivered_twice=total.stolen,
            left_in_two_sets=two,
            left_in_none=none,
        )
    finally:
        _delete_queue(q.client, q.core.keys.prefix)
        q.close()


def _where(q: Queue, ids: list[str]) -> tuple[int, int]:
    """How many jobs are in two of pending, packed (a waiting job without a row) and
    active, and how many in none."""
    k = q.core.keys
    with q.client.pipeline(transaction=True) as p:
        for job_id in ids:
            p.zscore(k.pending, job_id)
            p.hexists(k.packed, job_id)
            p.zscore(k.active, job_id)
        replies = p.execute()
    places = [
        (pend is not None) + bool(packed) + (act is not None)
        for pend, packed, act in zip(replies[0::3], replies[1::3], replies[2::3], strict=True)
    ]
    return sum(1 for n in places if n > 1), sum(1 for n in places if n == 0)


def _hget_all(q: Queue, ids: list[str], name: str) -> list[str | None]:
    with q.client.pipeline(transaction=True) as p:
        for job_id in ids:
            p.hget(q.core.keys.job(job_id), name)
        return cast(list[str | None], p.execute())


def _delete_queue(client: redis.Redis, prefix: str) -> None:
    """Delete every key of the stress queue (claim replies included)."""
    batch: list[str] = []
    for key in client.scan_iter(match=prefix + "*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            client.delete(*batch)
            batch.clear()
    if batch:
        client.delete(*batch)
