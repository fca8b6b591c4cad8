"""An evicting ``maxmemory-policy`` is refused when a queue or worker connects (docs/guarantees.md,
Memory policy), on a server each test starts and sets at run time; ``allow_eviction=True`` opts out.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import redis

from emq import AsyncQueue, Queue, QueueOptions, UnsafeServer, Worker, WorkerOptions
from emq.embedded.standalone import EmbeddedServer

EVICTING = ["allkeys-lru", "volatile-lru", "allkeys-random", "volatile-ttl"]


def _user_url(url: str, user: str) -> str:
    host = url.split("@")[-1].split("://")[-1]
    return f"redis://{user}:pw-{user}@{host}"


@pytest.mark.parametrize("policy", EVICTING)
def test_evicting_policy_refuses_enqueue_and_writes_nothing(
    own: EmbeddedServer, admin: redis.Redis, policy: str
) -> None:
    admin.config_set("maxmemory-policy", policy)
    with Queue.from_url(own.url(), "q") as q, pytest.raises(UnsafeServer) as err:
        q.enqueue("send", {"to": "a"})
    text = str(err.value)
    assert repr(policy) in text
    assert "CONFIG SET maxmemory-policy noeviction" in text
    assert "allow_eviction=True" in text
    assert admin.dbsize() == 0  # not even an id-minting lease


async def test_evicting_policy_refuses_async_enqueue(
    own: EmbeddedServer, admin: redis.Redis
) -> None:
    admin.config_set("maxmemory-policy", "allkeys-lru")
    async with AsyncQueue.from_url(own.url(), "q") as q:
        with pytest.raises(UnsafeServer, match="allkeys-lru"):
            await q.enqueue_many([("send", i) for i in range(10)])
    assert admin.dbsize() == 0


def test_allow_eviction_opts_out(own: EmbeddedServer, admin: redis.Redis) -> None:
    admin.config_set("maxmemory-policy", "allkeys-lru")
    with Queue.from_url(own.url(), "q", options=QueueOptions(allow_eviction=True)) as q:
        job = q.enqueue("send", 1)
        (claimed,) = q.claim()
        assert claimed.id == job
        q.complete(claimed.id, claimed.token)
        assert q.counts()["completed"] == 1


def test_a_server_fixed_at_run_time_is_accepted_by_the_same_queue(
    own: EmbeddedServer, admin: redis.Redis
) -> None:
    admin.config_set("maxmemory-policy", "allkeys-lfu")
    with Queue.from_url(own.url(), "q") as q:
        with pytest.raises(UnsafeServer):
            q.enqueue("send")
        admin.config_set("maxmemory-policy", "noeviction")
        assert q.enqueue("send").created


def test_policy_is_read_once_per_connection_pool(own: EmbeddedServer, admin: redis.Redis) -> None:
    def config_gets() -> int:
        stats: dict[str, Any] = admin.info("commandstats")
        return int(stats.get("cmdstat_config|get", {}).get("calls", 0))

    client = redis.Redis.from_url(own.url(), decode_responses=True)
    before = config_gets()
    a, b = Queue(client, "a"), Queue(client, "b")
    for _ in range(3):
        a.enqueue("x")
        b.enqueue("x")
    assert config_gets() - before == 1
    client.close()


def test_policy_read_from_info_when_config_is_forbidden(
    own: EmbeddedServer, admin: redis.Redis
) -> None:
    admin.acl_setuser("noconfig", enabled=True, passwords=["+pw-noconfig"], keys=["*"],
                      channels=["*"], commands=["+@all", "-config"])  # fmt: skip
    admin.config_set("maxmemory-policy", "allkeys-lru")
    url = _user_url(own.url(), "noconfig")
    with Queue.from_url(url, "q") as q, pytest.raises(UnsafeServer, match="allkeys-lru"):
        q.enqueue("send")
    assert admin.dbsize() == 0


def test_policy_unreadable_warns_once_and_goes_on(
    own: EmbeddedServer, admin: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    admin.acl_setuser("blind", enabled=True, passwords=["+pw-blind"], keys=["*"],
                      channels=["*"], commands=["+@all", "-config", "-info"])  # fmt: skip
    url = _user_url(own.url(), "blind")
    with caplog.at_level(logging.WARNING, logger="emq"):
        for name in ("a", "b"):
            with Queue.from_url(url, name) as q:
                q.enqueue("send")
    warnings = [r for r in caplog.records if "maxmemory-policy" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].emq["event"] == "policy_unknown"  # type: ignore[attr-defined]


async def test_worker_refuses_to_start_on_an_evicting_policy(
    own: EmbeddedServer, admin: redis.Redis
) -> None:
    admin.config_set("maxmemory-policy", "volatile-lru")
    ran: list[int] = []
    worker = Worker("q", {"send": ran.append}, url=own.url(), options=WorkerOptions(burst=True))
    with pytest.raises(UnsafeServer, match="volatile-lru"):
        await worker.run()
    assert admin.dbsize() == 0
    assert worker.stats.claimed == 0


async def test_worker_given_an_opted_out_queue_runs(
    own: EmbeddedServer, admin: redis.Redis
) -> None:
    admin.config_set("maxmemory-policy", "allkeys-lru")
    q = Queue.from_url(own.url(), "q", options=QueueOptions(allow_eviction=True))
    q.enqueue_many([("send", i) for i in range(20)])
    ran: list[int] = []
    worker = Worker(q, {"send": ran.append}, options=WorkerOptions(burst=True))
    await worker.run()
    assert sorted(ran) == list(range(20))
    assert q.counts()["completed"] == 20
    q.close()


async def test_worker_given_queue_names_takes_queue_options(
    own: EmbeddedServer, admin: redis.Redis
) -> None:
    admin.config_set("maxmemory-policy", "allkeys-lru")
    with pytest.raises(UnsafeServer):
        await Worker("q", url=own.url(), options=WorkerOptions(burst=True)).run()
    ran: list[int] = []
    w = Worker("q", {"x": ran.append}, url=own.url(), options=WorkerOptions(burst=True),
               queue_options=QueueOptions(allow_eviction=True))  # fmt: skip
    Queue.from_url(own.url(), "q", options=QueueOptions(allow_eviction=True)).enqueue("x", 7)
    await w.run()
    assert ran == [7]
