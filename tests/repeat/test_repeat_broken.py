"""A schedule whose stored state was damaged by hand or by a partial restore, on Valkey, Redis
and a cluster: every kind of damage (its next tick ahead of its due score, a missing or garbled
field, a due entry without a row) is skipped and named in ``Fired.broken``, the queue's other
schedules fire in the same round, the broken one is parked (its due score moved a back-off
ahead, or a due entry without a row dropped) so it is not named again at once, and a worker
logs it once and keeps claiming. Every wait polls with a deadline; nothing is timed."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from emq import Queue, Worker, WorkerOptions
from emq.calls import repeats as rep
from emq.model.keys import QueueKeys

from ..support.lanes_check import check_lanes

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")

HOUR = 3_600_000


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


Damage = Callable[[redis.Redis, QueueKeys, int], None]


def _hset(field: str, value: str) -> Damage:
    return lambda c, k, now: c.hset(k.repeat("bad"), field, value)  # type: ignore[return-value]


def _hdel(field: str) -> Damage:
    return lambda c, k, now: c.hdel(k.repeat("bad"), field)  # type: ignore[return-value]


DAMAGE: dict[str, Damage] = {
    "next ahead of its due score": lambda c, k, now: c.hset(k.repeat("bad"), "next", now + HOUR),  # type: ignore[dict-item]
    "next missing": _hdel("next"),
    "next not a number": _hset("next", "soon"),
    "next not an integer": _hset("next", "1.5e12"),
    "every_ms not a number": _hset("every_ms", "often"),
    "every_ms negative": _hset("every_ms", "-5"),
    "every_ms zero": _hset("every_ms", "0"),
    "neither every_ms nor cron": _hdel("every_ms"),
    "version missing": _hdel("version"),
    "slot garbled": _hset("slot", "x"),
    "floor missing": _hdel("floor"),
    "name missing": _hdel("name"),
    "priority garbled": _hset("priority", "high"),
    "max_attempts zero": _hset("max_attempts", "0"),
    "catch_up unknown": _hset("catch_up", "sometimes"),
    "start_at garbled": _hset("start_at", "yesterday"),
    "lane invalid": _hset("lane", "no spaces allowed"),
    "payload not JSON": _hset("payload", "{not json"),
    "payload missing": _hdel("payload"),
    "cron invalid": lambda c, k, now: c.hset(  # type: ignore[dict-item]
        k.repeat("bad"), mapping={"every_ms": "", "cron": "not a cron"}
    ),
    "tz unknown": lambda c, k, now: c.hset(  # type: ignore[dict-item]
        k.repeat("bad"), mapping={"every_ms": "", "cron": "* * * * *", "tz": "Nowhere/Bogus"}
    ),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_each_kind_of_damage_is_skipped_named_and_parked_the_other_fires(
    queue: Queue, client: redis.Redis, qname: str, damage: str
) -> None:
    keys = QueueKeys.of(qname)
    now = server_ms(client)
    start = now - 5_000
    queue.repeat("good", "j", every_ms=HOUR, start_at_ms=start)
    queue.repeat("bad", "j", every_ms=HOUR, start_at_ms=start)
    client.zadd(keys.repeats, {"bad": start})  # due
    DAMAGE[damage](client, keys, now)
    fired = queue.fire_repeats()  # never raises: one schedule's data is not the call's fault
    assert fired.broken == ["bad"], (damage, fired)
    assert len(fired.jobs) == 1 and queue.job(fired.jobs[0]) is not None
    assert next(x for x in queue.repeats() if x.key == "good").fired == 1
    parked = client.zscore(keys.repeats, "bad")
    assert parked is not None and parked > server_ms(client), "parked a back-off ahead"
    again = queue.fire_repeats()  # nothing is due: the broken one is not named again at once
    assert (again.jobs, again.broken) == ([], [])
    check_lanes(client, qname)


def test_a_due_entry_without_a_row_is_named_and_dropped(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    keys = QueueKeys.of(qname)
    queue.repeat("good", "j", every_ms=HOUR, start_at_ms=server_ms(client) - 5_000)
    client.zadd(keys.repeats, {"ghost": server_ms(client) - 1})  # a restore's leftover
    fired = queue.fire_repeats()
    assert fired.broken == ["ghost"] and len(fired.jobs) == 1
    assert client.zscore(keys.repeats, "ghost") is None
    assert [x.key for x in queue.repeats()] == ["good"]


def test_an_audit_finds_a_row_without_a_due_score_names_it_and_it_fires_again(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    keys = QueueKeys.of(qname)
    queue.repeat("lost", "j", every_ms=HOUR, start_at_ms=server_ms(client) - 5_000)
    client.zrem(keys.repeats, "lost")  # a partial restore: the row without its due score
    assert queue.fire_repeats().broken == []  # a plain round cannot see it
    found = queue.fire_repeats(audit=True)
    assert found.broken == ["lost"] and "no due score" in found.why["lost"]
    assert client.zscore(keys.repeats, "lost") is not None  # indexed again, at its next
    fired = queue.fire_repeats()
    assert fired.broken == [] and len(fired.jobs) == 1


def test_a_parked_schedule_repaired_by_repeat_fires_again(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    keys = QueueKeys.of(qname)
    start = server_ms(client) - 5_000
    queue.repeat("bad", "j", every_ms=HOUR, start_at_ms=start)
    client.hset(keys.repeat("bad"), "every_ms", "often")
    client.zadd(keys.repeats, {"bad": start})
    assert queue.fire_repeats().broken == ["bad"]
    queue.repeat("bad", "j", every_ms=HOUR, start_at_ms=start - 1)  # a new spec: repaired
    fired = queue.fire_repeats()
    assert fired.broken == [] and len(fired.jobs) == 1


def test_a_park_planned_before_a_repair_is_refused_by_the_compare_and_set(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    """A firer that read the broken schedule, then lost the race to ``repeat()``, must not
    park the repaired one: the park is fenced by the version and next tick it read."""
    keys = QueueKeys.of(qname)
    start = server_ms(client) - 5_000
    queue.repeat("bad", "j", every_ms=HOUR, start_at_ms=start)
    client.hset(keys.repeat("bad"), "every_ms", "often")
    client.zadd(keys.repeats, {"bad": start})
    read = queue._run(rep.due_repeats(queue.core))
    groups, why = rep.plan(read)
    assert list(why) == ["bad"] and len(groups) == 1
    queue.repeat("bad", "j", every_ms=HOUR, start_at_ms=start - 1)  # the repair wins the race
    repaired = client.zscore(keys.repeats, "bad")
    fired = queue._run(rep.fire_repeats(queue.core, groups))
    assert fired.answers == {"moved": 1}
    assert client.zscore(keys.repeats, "bad") == repaired


async def test_a_worker_names_a_broken_schedule_once_and_keeps_claiming(
    queue: Queue, client: redis.Redis, qname: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The reported fault: one schedule whose stored next is ahead of its due score stopped
    every worker of the queue. Now the good schedule fires, plain jobs are claimed, the
    broken one is logged once by name, and run() returns only when stopped."""
    keys = QueueKeys.of(qname)
    ran: list[str] = []
    w = Worker(queue, options=WorkerOptions(concurrency=2, stalled_interval_ms=200))

    @w.handler("tick")
    async def tick(payload: Any) -> None:
        ran.append("tick")

    @w.handler("plain")
    async def plain(payload: Any) -> None:
        ran.append("plain")

    queue.repeat("good", "tick", every_ms=100)
    queue.repeat("bad", "tick", every_ms=100)
    client.hset(keys.repeat("bad"), "next", server_ms(client) + HOUR)  # HSET by hand
    queue.enqueue_many([("plain", {"n": n}) for n in range(5)])
    with caplog.at_level(logging.ERROR, logger="emq.worker"):
        task = asyncio.create_task(w.run())
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not task.done():
            if ran.count("plain") == 5 and ran.count("tick") >= 3:
                break
            await asyncio.sleep(0.05)
        w.stop()
        await asyncio.wait_for(task, 60)  # returns: the maintenance task never died
    assert ran.count("plain") == 5 and ran.count("tick") >= 3, ran
    named = [r for r in caplog.records if getattr(r, "emq", {}).get("event") == "repeat_broken"]
    assert [r.emq["key"] for r in named] == ["bad"], named  # type: ignore[attr-defined]
    assert "ahead of its due score" in named[0].getMessage()
    good = next(x for x in queue.repeats() if x.key == "good")
    assert good.fired >= 3
