"""``step.lua`` driven with raw keys: a step is recorded in the row under the lease only, once
per name, with its event; a stale or recovered attempt records nothing; a failed step is an
event only; the row's deletion takes the steps along (docs/steps.md, docs/lua-contract.md)."""

from __future__ import annotations

import json

import pytest
import redis

from emq import Queue, WrongState
from emq.lua import scripts

from ..support.helpers import assert_consistent, expire_leases

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")


def now_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def step(client: redis.Redis, queue: Queue, job: str, token: int, name: str, value: str,
         mode: str = "ok") -> object:  # fmt: skip
    k = queue.core.keys
    args = [k.prefix, 1000, job, str(token), mode, name, value, 7]
    return scripts.run(client, "step", [k.active, k.events], args)


def events_of(queue: Queue, job: str) -> list[tuple[str, dict[str, str]]]:
    return [(e.event, e.fields) for e in queue.events() if e.job == job]


def test_a_step_is_recorded_once_under_the_lease_with_its_event(
    queue: Queue, client: redis.Redis
) -> None:
    k = queue.core.keys
    job = queue.enqueue("x")
    (lease,) = queue.claim(1, lease_ms=30_000)
    before = now_ms(client)
    at = step(client, queue, job, lease.token, "charge card", '{"id":"ch_1"}')
    assert isinstance(at, int) and at >= before
    assert client.hget(k.job(job), "step:charge card") == f'{at} {{"id":"ch_1"}}'
    with pytest.raises(WrongState, match="recorded already"):
        step(client, queue, job, lease.token, "charge card", '{"id":"ch_2"}')
    # the same record resent (its reply lost): answered as the first, nothing written again
    assert step(client, queue, job, lease.token, "charge card", '{"id":"ch_1"}') == at
    assert client.hget(k.job(job), "step:charge card") == f'{at} {{"id":"ch_1"}}'
    assert step(client, queue, job, lease.token, "mail", "OSError: down", "failed") >= at
    assert client.hexists(k.job(job), "step:mail") == 0  # a failed step is not recorded
    assert step(client, queue, job, lease.token - 1, "other", "1") == "lost"
    assert step(client, queue, "JOB00000000ZZZ", 1, "other", "1") == "gone"
    assert client.hexists(k.job(job), "step:other") == 0
    failed = {"step": "mail", "attempts": "1", "took_ms": "7", "error": "OSError: down"}
    assert events_of(queue, job)[-2:] == [
        ("step", {"step": "charge card", "attempts": "1", "took_ms": "7"}),
        ("step_failed", failed),
    ]
    (seen,) = queue.job(job).steps  # type: ignore[union-attr]
    assert (seen.name, seen.result, seen.at_ms) == ("charge card", {"id": "ch_1"}, at)
    assert client.zscore(k.active, job) is not None  # the job did not move
    assert_consistent(client, queue.name)
    queue.complete(job, lease.token)
    assert client.exists(k.job(job)) == 0  # the steps went with the row
    assert_consistent(client, queue.name)


def test_a_recovered_job_keeps_its_steps_and_its_stale_attempt_records_nothing(
    queue: Queue, client: redis.Redis
) -> None:
    k = queue.core.keys
    job = queue.enqueue("x")
    (first,) = queue.claim(1, lease_ms=30_000)
    at = step(client, queue, job, first.token, "a", "1")
    expire_leases(client, queue.name, job)
    assert step(client, queue, job, first.token, "b", "2") == "lost"  # lapsed, not swept yet
    assert queue.sweep_stalled(max_stalled=5).recovered == [job]
    assert step(client, queue, job, first.token, "b", "2") == "lost"  # pending now
    (second,) = queue.claim(1, lease_ms=30_000)
    assert second.token > first.token and second.stalled == 1
    assert step(client, queue, job, first.token, "b", "2") == "lost"  # the old token
    assert step(client, queue, job, second.token, "b", "2") >= at
    assert [(s.name, s.result) for s in queue.job_steps(job)] == [("a", 1), ("b", 2)]
    row = client.hgetall(k.job(job))
    assert json.loads(row["step:a"].split(" ", 1)[1]) == 1 and row["state"] == "active"
    assert [e for e, _ in events_of(queue, job)].count("step") == 2
    assert_consistent(client, queue.name)
