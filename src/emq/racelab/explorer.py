"""The explorer: every interleaving of the actors' steps, each run on the real server.

For each form it enumerates every order in which two sweeps (A, B) can take their steps, and
again with a worker W whose one step is a claim (after which a second worker W2 claims, to
see whether the job is handed out again). Each interleaving runs on its own fresh queue,
through :func:`~emq.racelab.wire.execute_many` on one connection, and its keys are deleted
when it ends.

In the naive form a sweep has six steps: 924 interleavings of two sweeps, 12,012 with the
worker. In the atomic form a sweep is one step (one EVALSHA), so there are only 2 and 6: no
order can put another command inside a sweep. The atomic table must be all zeros.

Columns (one run counts once per column): ``recovered twice``, more recoveries than expired
leases (G2); ``lost an increment``, ``stalled`` below the increments the sweeps applied (G3);
``delivered twice``, two claims handed out the job for one lapse; ``in two sets`` / ``in
none``, after some step the job sat in both pending and active, or in neither (G1).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

from ..queue._sync.queue import Queue
from .forms import MODES, WORKER_STEPS, Mode, sweep_steps
from .interleaver import RunResult, RunSpec, lab_run
from .schedule import ActorSpec, Schedule, Token, merges
from .wire import Run, execute_many

COLUMNS = ("recovered_twice", "lost_increment", "delivered_twice", "in_two_sets", "in_none")
SWEEPS = (ActorSpec("A", "sweep"), ActorSpec("B", "sweep"))
WORKERS = (ActorSpec("W", "worker"), ActorSpec("W2", "worker"))
CLAIM = WORKER_STEPS[0]


@dataclass(slots=True)
class Tally:
    """One row of the explorer's table: how many interleavings showed each anomaly, and the
    first schedule that showed it."""

    mode: Mode
    actors: str
    interleavings: int = 0
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COLUMNS, 0))
    examples: dict[str, str] = field(default_factory=dict)

    def add(self, r: RunResult) -> None:
        self.interleavings += 1
        seen = {
            "recovered_twice": r.recovered_twice,
            "lost_increment": r.lost_increments > 0,
            "delivered_twice": r.double_delivered,
            "in_two_sets": r.in_two_sets,
            "in_none": r.in_none,
        }
        for column, hit in seen.items():
            if hit:
                self.counts[column] += 1
                self.examples.setdefault(column, r.schedule)

    @property
    def clean(self) -> bool:
        return not any(self.counts.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "actors": self.actors,
            "interleavings": self.interleavings,
            **self.counts,
            "seconds": round(self.seconds, 2),
            "examples": self.examples,
        }


def schedules(mode: Mode, with_worker: bool) -> Iterator[Schedule]:
    """Every interleaving of two sweeps' steps (and a worker's claim); with the worker, W2's
    claim is appended to each."""
    steps = sweep_steps(mode)
    sequences = {"A": steps, "B": steps}
    if with_worker:
        sequences["W"] = (CLAIM,)
    for schedule in merges(sequences):
        yield Schedule((*schedule.tokens, Token("W2", CLAIM))) if with_worker else schedule


def explore_one(client: redis.Redis, mode: Mode, with_worker: bool, width: int = 100) -> Tally:
    """Run every interleaving of one actor set in one form; return its row."""
    actors = SWEEPS + WORKERS if with_worker else SWEEPS
    tally = Tally(mode, ", ".join(a.name for a in actors))
    tag = uuid.uuid4().hex[:8]
    minter = Queue(client, f"race-x-{tag}")

    def runs() -> Iterator[Run]:
        for i, schedule in enumerate(schedules(mode, with_worker)):
            spec = RunSpec(f"race-x-{tag}-{i}", mode, actors, schedule, record=False)
            yield lab_run(spec, minter.new_id())

    started = time.monotonic()
    for result in execute_many(client, runs(), width):
        tally.add(result)
    tally.seconds = time.monotonic() - started
    return tally


def explore(client: redis.Redis, modes: tuple[Mode, ...] = MODES) -> list[Tally]:
    """The explorer's table: for each form, two sweeps alone, then with a claiming worker."""
    return [explore_one(client, mode, worker) for mode in modes for worker in (False, True)]
