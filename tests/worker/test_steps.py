"""Durable steps and ``ctx.sleep`` through a real worker (docs/steps.md): a recorded step is
not run again on a retry and its recorded value is returned; a failed step is not recorded;
bad names and results are refused in the handler, nothing recorded; ``ctx.sleep`` gives the
job back to the schedule without counting an attempt and it runs again with its steps."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from emq import (
    AsyncQueue,
    Backoff,
    InvalidOption,
    InvalidPayload,
    JobContext,
    Permanent,
    Queue,
    Worker,
    WorkerOptions,
)
from emq.worker.context import Sleeping

from ..support.helpers import assert_consistent

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")

HANG = 30.0  # bounds a wait, never a speed
BURST = WorkerOptions(concurrency=1, burst=True)


def names(queue: Queue, job: str) -> list[str]:
    return [e.event for e in queue.events() if e.job == job]


def test_a_retry_skips_the_recorded_steps_and_gets_their_values(
    queue: Queue, client: redis.Redis
) -> None:
    effects: list[str] = []
    seen: list[Any] = []
    w = Worker(queue, options=BURST)

    def effect(what: str) -> dict[str, Any]:
        effects.append(what)
        return {"what": what, "n": len(effects), "pair": ("a", 1)}

    def ship(ctx: JobContext) -> str:
        effects.append("ship")
        if ctx.attempts == 1:
            raise OSError("carrier down")
        return "shipped"

    @w.handler("order", backoff=Backoff.exactly(0), max_attempts=3)
    def order(payload: Any, ctx: JobContext) -> None:
        a = ctx.step("reserve", effect, "reserve")
        b = ctx.step("charge", effect, what="charge")
        c = ctx.step("ship", ship, ctx)
        seen.append((ctx.attempts, a, b, c))

    job = queue.enqueue("order", {"id": 7})
    w.run_sync(handle_signals=False)
    assert effects == ["reserve", "charge", "ship", "ship"]  # 1-2 ran once, 3 twice
    reserve = {"what": "reserve", "n": 1, "pair": ["a", 1]}  # the JSON round trip, both runs
    assert seen == [(2, reserve, {"what": "charge", "n": 2, "pair": ["a", 1]}, "shipped")]
    assert names(queue, job) == [
        "enqueued", "claimed", "step", "step", "step_failed", "retrying", "promoted", "claimed",
        "step", "completed",
    ]  # fmt: skip
    failed = next(e for e in queue.events() if e.event == "step_failed")
    assert failed.fields["error"] == "OSError: carrier down" and failed.fields["step"] == "ship"
    told = [(e.event, e.fields.get("step")) for e in queue.history(job) if "step" in e.event]
    assert told == [("step", "reserve"), ("step", "charge"), ("step_failed", "ship"),
                    ("step", "ship")]  # fmt: skip
    assert queue.job(job) is None  # completed: the row and its steps are gone
    assert_consistent(client, queue.name)


async def test_an_async_handler_awaits_its_steps_with_sync_and_async_functions(
    queue: Queue, client: redis.Redis
) -> None:
    calls: list[str] = []
    w = Worker(queue, options=BURST)

    async def fetch(n: int) -> int:
        calls.append("fetch")
        return n * 2

    @w.handler("a", backoff=Backoff.exactly(0), max_attempts=2)
    async def handler(payload: Any, ctx: JobContext) -> None:
        doubled = await ctx.astep("fetch", fetch, 21)
        summed = await ctx.astep("sum", lambda x, y: calls.append("sum") or x + y, doubled, 1)
        assert await ctx.step("awaited step", fetch, 1) == 2  # ctx.step is awaitable here
        if ctx.attempts == 1:
            raise Permanent("first run ends here") if summed != 43 else OSError("again")

    job = queue.enqueue("a")
    await w.run()
    assert calls == ["fetch", "sum", "fetch"]  # each step ran once over the two runs
    assert names(queue, job).count("step") == 3 and "completed" in names(queue, job)
    assert_consistent(client, queue.name)


def test_bad_names_and_results_are_refused_and_nothing_is_recorded(
    queue: Queue, client: redis.Redis
) -> None:
    errors: list[type[BaseException]] = []
    w = Worker(queue, options=BURST)
    big = "x" * (queue.core.options.max_payload_bytes + 1)

    @w.handler("bad", max_attempts=1)
    def bad(payload: Any, ctx: JobContext) -> None:
        for name, fn in [
            ("", lambda: 1), ("a\nb", lambda: 1), ("n" * 201, lambda: 1), (7, lambda: 1),
            ("object", object), ("nan", lambda: float("nan")), ("big", lambda: big),
        ]:  # fmt: skip
            try:
                ctx.step(name, fn)  # type: ignore[arg-type]
            except (InvalidOption, InvalidPayload) as exc:
                errors.append(type(exc))
        ctx.step("once", lambda: 1)
        try:
            ctx.step("once", lambda: 2)
        except InvalidOption:
            errors.append(InvalidOption)
        raise Permanent("keep the row to look at")

    job = queue.enqueue("bad")
    w.run_sync(handle_signals=False)
    assert errors == [InvalidOption] * 4 + [InvalidPayload] * 3 + [InvalidOption]
    dead = queue.job(job)
    assert dead is not None and dead.state == "dead"
    assert [(s.name, s.result) for s in dead.steps] == [("once", 1)]
    assert names(queue, job).count("step_failed") == 3  # the refused results
    assert_consistent(client, queue.name)


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_sleep_gives_the_job_back_without_an_attempt_and_it_runs_again_with_its_steps(
    queue: Queue, client: redis.Redis
) -> None:
    """A minute's sleep (no burst run can outlive it and run the job again by chance), then
    the test promotes the job instead of waiting: it runs again with its recorded steps."""
    effects: list[str] = []
    woken: list[bool] = []
    w = Worker(queue, options=BURST)

    @w.handler("remind")
    def remind(payload: Any, ctx: JobContext) -> str:
        ctx.step("welcome", effects.append, "welcome")
        ctx.step("wake at", time.time)
        if not woken:
            ctx.sleep(60_000)
        return "reminded"

    job = queue.enqueue("remind")
    w.run_sync(handle_signals=False)
    slept = queue.job(job)
    assert slept is not None and slept.state == "scheduled" and slept.run_at_ms is not None
    assert slept.run_at_ms >= server_ms(client) + 50_000  # about a minute out, server clock
    assert slept.attempts == 0 and {s.name for s in slept.steps} == {"welcome", "wake at"}
    delayed = [e for e in queue.events() if e.job == job and e.event == "delayed"]
    assert [e.fields["delay_ms"] for e in delayed] == ["60000"]
    woken.append(True)
    assert queue.promote(job)  # wake it now instead of in a minute
    Worker(queue, options=BURST, handlers={"remind": remind}).run_sync(handle_signals=False)
    assert effects == ["welcome"]  # the step ran once, before the sleep
    assert queue.job(job) is None and names(queue, job)[-2:] == ["claimed", "completed"]
    assert_consistent(client, queue.name)


def test_sleep_checks_its_duration() -> None:
    ctx = JobContext(queue="q", id="JOB0000000000A", name="n", token=1, attempts=1, stalled=0,
                     beat=lambda: None)  # fmt: skip
    for bad in (0, -1, 1.5, True, 366 * 86_400_000 + 1):
        with pytest.raises(InvalidOption):
            ctx.sleep(bad)  # type: ignore[arg-type]
    with pytest.raises(Sleeping) as raised:
        ctx.sleep(366 * 86_400_000)
    assert raised.value.ms == 366 * 86_400_000 and isinstance(raised.value, Exception)
    with pytest.raises(Sleeping):  # a swallowed sleep: the next step ends the run
        ctx.step("after", lambda: 1)


def test_a_step_record_whose_reply_is_lost_is_resent_and_recorded_once(
    queue: Queue, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first record of each step lands on the server but its reply is lost (the
    connection drops after the write): it is re-sent unchanged and answered as the first
    was, so the handler goes on in the same attempt, each step ran once and is recorded
    once, with one event."""
    original, lost = AsyncQueue._run, []

    async def reply_lost(q: AsyncQueue, call: Any) -> Any:
        reply = await original(q, call)
        if call.script == "step" and len(lost) < 2:
            lost.append(call.args)
            raise redis.ConnectionError("the reply was lost")
        return reply

    monkeypatch.setattr(AsyncQueue, "_run", reply_lost)
    ran: list[str] = []
    w = Worker(queue, options=BURST)

    @w.handler("two")
    def two(payload: Any, ctx: JobContext) -> int:
        a = ctx.step("a", lambda: ran.append("a") or 1)
        b = ctx.step("b", lambda: ran.append("b") or 2)
        return a + b

    job = queue.enqueue("two")
    w.run_sync(handle_signals=False)
    assert len(lost) == 2 and ran == ["a", "b"]
    assert names(queue, job).count("step") == 2 and "completed" in names(queue, job)
    assert w.stats.completed == 1 and w.stats.retried == 0  # no attempt was spent on it
    assert_consistent(client, queue.name)
