"""The seed's scenarios, named, each run in both forms on a fresh queue of a real server.

Every readout sentence is composed from what the run measured (replies and the final keys),
never from what the scenario expects, so a surprising server would show in the text.

- ``two-sweeps``: two sweeps over one expired lease; in the naive form B slips between A's
  detect and move.
- ``counter``: two stalls' worth of increments of ``stalled``: atomic by two in-script
  ``HINCRBY``s, naive by two clients that both read before either writes.
- ``worked-example``: the seed's section 3 numbers; a job at stalled = 2 overlapped by two
  sweeps, then the same overlap repeated twice from zero.
- ``claim-between``: A moves the job, a worker claims it, B moves it again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from ..queue._sync.queue import Queue
from .forms import MODES, Mode
from .interleaver import RunResult, RunSpec, lab_run, run_keys, spec_for
from .schedule import ActorSpec, ScheduleError
from .wire import execute

A, B = ActorSpec("A", "sweep"), ActorSpec("B", "sweep")
W, W2 = ActorSpec("W", "worker"), ActorSpec("W2", "worker")
W_LAPSES = ActorSpec("W", "worker", ("claim", "lapse"))
OVERLAP = "A.detect B.detect A.probe B.probe A.remove A.requeue B.remove B.requeue"
OVERLAP_COUNTED = OVERLAP + " A.read B.read A.write B.write"


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    summary: str
    actors: tuple[ActorSpec, ...]
    schedules: dict[Mode, str]
    readout: Callable[[RunResult, RunResult | None], str]
    initial_stalled: int = 0
    repeat_rounds: int = 0  # > 0: also run the overlap this many times on a fresh job

    def spec(self, mode: Mode, queue: str, *, repeated: bool = False) -> RunSpec:
        if repeated:
            return spec_for(
                queue, mode, self.actors, self.schedules[mode], rounds=self.repeat_rounds
            )
        return spec_for(
            queue, mode, self.actors, self.schedules[mode], initial_stalled=self.initial_stalled
        )


@dataclass(frozen=True, slots=True)
class Outcome:
    """A scenario run in one form: the measured run, its readout, and (worked-example) the
    repeated run."""

    scenario: str
    result: RunResult
    readout: str
    repeated: RunResult | None = None

    def as_dict(self) -> dict[str, Any]:
        r = self.result
        out: dict[str, Any] = {"scenario": self.scenario, **numbers(r)}
        out.update(
            queue=r.queue,
            job=r.job,
            schedule=r.schedule,
            readout=self.readout,
            steps=[s.as_dict() for s in r.steps],
        )
        if self.repeated is not None:
            out["repeated"] = {"rounds": self.repeated.rounds, **numbers(self.repeated)}
        return out


def numbers(r: RunResult) -> dict[str, Any]:
    """The readouts of a run, as the JSON contract names them (SPEC section 4)."""
    return {
        "mode": r.mode,
        "recover_count": r.recover_count,
        "stalled": r.stalled,
        "expected_stalled": r.expected_stalled,
        "lost_increments": r.lost_increments,
        "double_delivered": r.double_delivered,
        "lapses": r.lapses,
        "in_two_sets": r.in_two_sets,
        "in_none": r.in_none,
    }


def _lost(r: RunResult) -> str:
    n = r.lost_increments
    if n == 0:
        return "no increment lost"
    return f"{n} increment{'s' if n != 1 else ''} lost"


def _values(r: RunResult, step: str) -> list[str]:
    """What each ``read`` returned, or what each ``write`` wrote, in order."""
    if step == "read":
        return [str(s.reply) for s in r.steps if s.step == "read"]
    return [s.command.split()[-1] for s in r.steps if s.step == "write"]


def _two_sweeps(r: RunResult, _: RunResult | None) -> str:
    head = f"recover count {r.recover_count} for {r.lapses} expired lease"
    if r.recovered_twice:
        return (
            f"{head}: B slipped between A's detect and move and recovered the same lease "
            f"again; each recovery counted its stall (stalled {r.stalled}, as expected for "
            f"{r.recover_count} recoveries), so {r.lapses} lapse reads as {r.stalled} stalls"
        )
    how = "the move is one EVALSHA, so sweep B" if r.mode == "atomic" else "sweep B"
    return f"{head}: {how} found the job already gone"


def _counter(r: RunResult, _: RunResult | None) -> str:
    if r.mode == "atomic":
        how = f"in-script HINCRBY x{r.recover_count}"
    else:
        reads, writes = _values(r, "read"), _values(r, "write")
        how = f"client read-modify-write: read {', read '.join(reads)}; wrote {', '.join(writes)}"
    verdict = "correct" if r.lost_increments == 0 else "wrong"
    right = f"{r.expected_stalled} is right"
    return f"{how} -> stalled = {r.stalled} where {right} ({verdict}, {_lost(r)})"


def _worked_example(r: RunResult, rep: RunResult | None) -> str:
    text = (
        f"a job at stalled = {r.initial_stalled} overlapped by two sweeps was recovered "
        f"{r.recover_count}x and records {r.stalled} where {r.expected_stalled} is right "
        f"({_lost(r)})"
    )
    if rep is not None:
        text += (
            f"; repeated from 0 over {rep.lapses} lapses: {rep.recover_count} stalls recorded "
            f"as {rep.stalled} ({_lost(rep)})"
        )
    return text


def _claim_between(r: RunResult, _: RunResult | None) -> str:
    if not r.double_delivered:
        return (
            f"A's sweep moved the job, W claimed it, B's sweep left W's live lease alone: "
            f"delivered once, recover count {r.recover_count}"
        )
    where = (
        "leased and pending at once (in active and in pending)"
        if r.in_two_sets
        else "back in pending while W still ran it"
    )
    return (
        f"A moved the job, W claimed it, B moved it again: the job was {where}, and W2 "
        f"claimed it too: delivered twice for {r.lapses} expired lease. A sorted set holds "
        "a member once, so it is never 'in pending twice'; the harm is double delivery"
    )


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "two-sweeps",
            "two sweeps over one expired lease",
            (A, B),
            {"atomic": "A.sweep B.sweep", "naive": OVERLAP},
            _two_sweeps,
        ),
        Scenario(
            "counter",
            "two stalls' worth of increments of the stalled counter",
            (A, W_LAPSES, B),
            {
                "atomic": "A.sweep W.claim W.lapse B.sweep",
                "naive": "A.detect A.probe A.remove A.requeue A.read W.claim W.lapse "
                "B.detect B.probe B.remove B.requeue B.read A.write B.write",
            },
            _counter,
        ),
        Scenario(
            "worked-example",
            "the seed's numbers: a job at stalled = 2 overlapped by two sweeps",
            (A, B),
            {"atomic": "A.sweep B.sweep", "naive": OVERLAP_COUNTED},
            _worked_example,
            initial_stalled=2,
            repeat_rounds=2,
        ),
        Scenario(
            "claim-between",
            "a worker claims between the two sweeps' moves",
            (A, B, W, W2),
            {
                "atomic": "A.sweep W.claim B.sweep W2.claim",
                "naive": "A.detect B.detect A.probe B.probe A.remove B.remove A.requeue "
                "W.claim B.requeue W2.claim",
            },
            _claim_between,
        ),
    )
}


def scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ScheduleError(f"no scenario {name!r}; choose one of {', '.join(SCENARIOS)}") from None


def modes(choice: str) -> tuple[Mode, ...]:
    """``atomic``, ``naive`` or ``both``."""
    if choice == "both":
        return MODES
    if choice not in MODES:
        raise ScheduleError(f"mode must be atomic, naive or both, got {choice!r}")
    return (choice,)


def run_one(client: redis.Redis, spec: RunSpec) -> RunResult:
    """Run one spec on ``client`` command by command; its keys are deleted however it ends."""
    job_id = Queue(client, spec.queue).new_id()
    try:
        result: RunResult = execute(client, lab_run(spec, job_id))
    except BaseException:
        client.delete(*run_keys(spec, job_id))
        raise
    return result


def run_scenario(client: redis.Redis, name: str, mode: Mode) -> Outcome:
    """Run scenario ``name`` in ``mode`` on fresh queues of the server behind ``client``."""
    sc = scenario(name)
    tag = uuid.uuid4().hex[:8]
    result = run_one(client, sc.spec(mode, f"race-{name}-{mode}-{tag}"))
    repeated = None
    if sc.repeat_rounds:
        repeated = run_one(client, sc.spec(mode, f"race-{name}-{mode}-{tag}-r", repeated=True))
    return Outcome(name, result, sc.readout(result, repeated), repeated)
