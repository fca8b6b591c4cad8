"""The interleaver: one job, a few actors, a schedule, run command by command on real keys.

:func:`lab_run` is a sans-I/O generator (see :mod:`emq.racelab.wire` for the executors). It

1. enqueues one job on a fresh queue with the real ``enqueue`` script and writes its stall
   counter (``HSET stalled n``: 0, or n > 0 as having stalled before, a fixture for the
   worked example);
2. for each round: leases the job with the real ``claim`` script and moves its deadline into
   the past with ``ZADD XX`` (the server clock then calls it expired; nothing sleeps), starts
   fresh actors and runs the schedule's tokens, then every unfinished actor to its end;
3. after every step that can move the job (remove, requeue, sweep, claim) looks where it is
   (``ZSCORE`` in pending and in active), noting any moment it is in both or in neither;
4. reads the final ``stalled`` and deletes every key of the queue.

Every command an actor sends is recorded with the server's reply. The readouts
(:class:`RunResult`) are measured from replies, never assumed.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..calls.jobs import QueueCore
from ..model.keys import QueueKeys
from ..model.records import JobSpec
from .forms import (
    MOVING_STEPS,
    PAST_MS,
    Actor,
    Mode,
    Report,
    claim_request,
    sweep_actor,
    worker,
)
from .schedule import ActorSpec, Schedule, ScheduleError, Token
from .wire import Command, plain

JOB_NAME = "racelab.job"
LEASE_MS = 30_000


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One run: which form, which actors, in which order, over how many lapses of one job."""

    queue: str
    mode: Mode
    actors: tuple[ActorSpec, ...]
    schedule: Schedule
    initial_stalled: int = 0
    rounds: int = 1
    lease_ms: int = LEASE_MS
    record: bool = True  # keep every step (the explorer, running thousands, does not)

    def __post_init__(self) -> None:
        QueueKeys.of(self.queue)
        self.schedule.check(self.actors, self.mode)
        if self.rounds < 1 or self.initial_stalled < 0:
            raise ScheduleError("rounds must be >= 1 and initial_stalled >= 0")


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One command an actor sent and the server's raw reply; ``command`` and ``reply`` give
    them as text and JSON-ready data (built when asked, so the explorer pays nothing)."""

    actor: str
    step: str
    sent: Command
    raw: Any
    round: int = 1

    @property
    def command(self) -> str:
        return self.sent.text()

    @property
    def reply(self) -> Any:
        return plain(self.raw)

    def as_dict(self) -> dict[str, Any]:
        return {
            "actor": self.actor,
            "step": self.step,
            "command": self.command,
            "reply": self.reply,
        }


@dataclass(slots=True)
class RunResult:
    """What a run measured.

    ``recover_count``: recoveries of the job the sweeps reported. ``lapses``: leases of it
    that expired. ``stalled``: the counter's final value; ``expected_stalled`` is what it
    would read had every increment a sweep applied been kept (``initial + recover_count``).
    ``most_deliveries``: the most claims that handed the job out between two lapses (2 means
    delivered twice for one expired lease). ``in_two_sets`` / ``in_none``: at some step
    boundary the job sat in both pending and active, or in neither.
    """

    queue: str
    job: str
    mode: Mode
    schedule: str
    initial_stalled: int
    rounds: int
    lapses: int = 0
    recover_count: int = 0
    stalled: int = 0
    most_deliveries: int = 0
    in_two_sets: bool = False
    in_none: bool = False
    steps: list[StepRecord] = field(default_factory=list)

    @property
    def expected_stalled(self) -> int:
        return self.initial_stalled + self.recover_count

    @property
    def lost_increments(self) -> int:
        return self.expected_stalled - self.stalled

    @property
    def double_delivered(self) -> bool:
        return self.most_deliveries >= 2

    @property
    def recovered_twice(self) -> bool:
        return self.recover_count > self.lapses


@dataclass(slots=True)
class _Live:
    spec: ActorSpec
    gen: Actor
    nominal: tuple[str, ...]
    pending: tuple[str, Command] | None = None
    report: Report = field(default_factory=Report)

    def start(self) -> None:
        self.pending = None
        try:
            self.pending = next(self.gen)
        except StopIteration as stop:
            self.report = stop.value

    def advance(self, decoded: Any) -> None:
        self.pending = None
        try:
            self.pending = self.gen.send(decoded)
        except StopIteration as stop:
            self.report = stop.value


def run_keys(spec: RunSpec, job_id: str) -> list[str]:
    """Every key a run can create on its queue (deleted when the run ends), including the
    replies the claim script stores under each claim's request id and the enqueue's mark."""
    k = QueueKeys.of(spec.queue)
    fixed = [k.pending, k.packed, k.ready, k.active, k.schedule, k.dead, k.events,
             k.events_count, k.meta, k.metrics, k.wake]  # fmt: skip
    claimers = ["", *(a.name for a in spec.actors if a.role == "worker")]
    replies = [
        k.claim_reply(claim_request(rnd, name))
        for rnd in range(1, spec.rounds + 1)
        for name in claimers
    ]
    return [*fixed, k.stalled_check, k.job(job_id), k.admitted(enqueue_request(job_id)), *replies]


def enqueue_request(job_id: str) -> str:
    """The request id of a run's enqueue call, so the run can delete its mark."""
    return f"lab-{job_id}"


def lab_run(spec: RunSpec, job_id: str) -> Generator[Command, Any, RunResult]:
    """Run ``spec`` over one job with id ``job_id``; see the module docstring."""
    core = QueueCore(spec.queue)
    keys = core.keys
    out = RunResult(
        spec.queue, job_id, spec.mode, str(spec.schedule), spec.initial_stalled, spec.rounds
    )
    # priority 1: the job has its row from the start (a job of the common case waits packed,
    # without one, until its claim), so the stall counter written below is the row's own
    group = core.job_spec(JobSpec(JOB_NAME, None, id=job_id, priority=1))
    yield Command(call=core.enqueue([group], request=enqueue_request(job_id)))
    try:
        yield from _rounds(spec, job_id, core, out)
    except Exception:  # a refused schedule: leave nothing behind, then say why
        yield Command(("DEL", *run_keys(spec, job_id)))
        raise
    stalled = yield Command(("HGET", keys.job(job_id), "stalled"))
    out.stalled = int(stalled or 0)
    yield Command(("DEL", *run_keys(spec, job_id)))
    return out


def _rounds(
    spec: RunSpec, job_id: str, core: QueueCore, out: RunResult
) -> Generator[Command, Any, None]:
    """Each round: lease the job, lapse it, run the schedule, then every actor to its end."""
    keys = core.keys
    # the counter the forms race on, written even at 0 (a new row leaves it out): each read
    # step then shows the number it read
    yield Command(("HSET", keys.job(job_id), "stalled", spec.initial_stalled))
    for rnd in range(1, spec.rounds + 1):
        claim = Command(call=core.claim(1, spec.lease_ms, claim_request(rnd, "")))
        if [j.id for j in claim.decode((yield claim))] != [job_id]:
            raise ScheduleError(f"round {rnd}: the job was not in pending to be leased")
        yield Command(("ZADD", keys.active, "XX", PAST_MS, job_id))
        out.lapses += 1
        live = {
            a.name: _Live(a, _actor(spec, a, core, rnd), a.steps(spec.mode)) for a in spec.actors
        }
        for actor in live.values():
            actor.start()
        state = _Round(out, job_id, keys, rnd, spec.record)
        for token in spec.schedule.tokens:
            yield from state.run(live[token.actor], token)
        for actor in live.values():  # then every actor to its end, in declared order
            while actor.pending is not None:
                yield from state.run(actor, Token(actor.spec.name, actor.nominal[-1]))
        out.recover_count += sum(
            a.report.recovered.count(job_id) for a in live.values() if a.spec.role == "sweep"
        )


def _actor(spec: RunSpec, actor: ActorSpec, core: QueueCore, rnd: int) -> Actor:
    if actor.role == "sweep":
        return sweep_actor(spec.mode, core)
    request = claim_request(rnd, actor.name)
    return worker(core, actor.worker_steps, spec.lease_ms, request)


@dataclass(slots=True)
class _Round:
    """One round's bookkeeping: records steps, counts deliveries, looks where the job is."""

    out: RunResult
    job_id: str
    keys: QueueKeys
    round: int
    record: bool
    deliveries: int = 0

    def run(self, actor: _Live, token: Token) -> Generator[Command, Any, None]:
        moved = False
        for step, command in _through(actor, token):
            raw = yield command
            decoded = command.decode(raw)
            self.out.steps.append(StepRecord(token.actor, step, command, raw, self.round))
            if step == "claim" and self.job_id in [job.id for job in decoded]:
                self.deliveries += 1
                self.out.most_deliveries = max(self.out.most_deliveries, self.deliveries)
            elif step == "lapse" and raw == 1:  # ZADD XX CH: 1 when a held lease moved
                self.deliveries = 0
                self.out.lapses += 1
            moved = moved or step in MOVING_STEPS
            actor.advance(decoded)
        if moved:
            in_pending = yield Command(("ZSCORE", self.keys.pending, self.job_id))
            in_active = yield Command(("ZSCORE", self.keys.active, self.job_id))
            self.out.in_two_sets |= in_pending is not None and in_active is not None
            self.out.in_none |= in_pending is None and in_active is None


def _through(actor: _Live, token: Token) -> Generator[tuple[str, Command], None, None]:
    """The actor's commands up to and including step ``token.step`` (none if it finished).

    Stops early if the actor's step order starts over (a sweep's next job), so one token
    never runs a second job's steps."""
    if actor.pending is None:
        return
    target = actor.nominal.index(token.step)
    start = actor.nominal.index(actor.pending[0])
    if target < start:
        raise ScheduleError(f"{token}: {actor.spec.title} is past it (next: {actor.pending[0]})")
    position = start
    while actor.pending is not None:
        step, command = actor.pending
        index = actor.nominal.index(step)
        if index > target or index < position:
            return
        position = index
        yield step, command


def spec_for(
    queue: str,
    mode: Mode,
    actors: Sequence[ActorSpec],
    schedule: str,
    *,
    initial_stalled: int = 0,
    rounds: int = 1,
) -> RunSpec:
    """A :class:`RunSpec` from a schedule string (validated before anything is sent)."""
    return RunSpec(queue, mode, tuple(actors), Schedule.parse(schedule), initial_stalled, rounds)
