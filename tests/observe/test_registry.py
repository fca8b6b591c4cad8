"""The known queues (emq.server.discovery) and the worker registry (emq.observe.registry,
emq workers)."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from typing import Any

import pytest
import redis
import redis.asyncio
from click.testing import CliRunner

from emq import AsyncQueue, JobSpec, Queue, Worker, __version__
from emq.cli.main import cli
from emq.embedded.standalone import EmbeddedServer
from emq.model.keys import KNOWN_QUEUES, WORKERS, worker_key
from emq.observe.registry import WorkerInfo, alist_workers, list_workers, now_ms, publish, ttl_ms
from emq.server.clients import aclose_client, async_client
from emq.server.discovery import SCANNED, aqueue_names, queue_names

from ..support.helpers import until

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")


def run_cli(*args: str) -> Any:
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, (args, result.output)
    return json.loads(result.output)


# -- known queues ------------------------------------------------------------------------------


async def test_a_producer_names_its_queue_once_and_listings_read_the_set(
    url: str, client: redis.Redis, qname: str
) -> None:
    other = qname + ".b"
    with Queue.from_url(url, qname) as q:
        q.enqueue("x", 1)
        assert client.sismember(KNOWN_QUEUES, qname)
        client.srem(KNOWN_QUEUES, qname)
        q.enqueue("x", 2)  # once per Queue object: not written again
        assert not client.sismember(KNOWN_QUEUES, qname)
    async with AsyncQueue.from_url(url, other) as aq:
        await aq.enqueue_many([("x", i) for i in range(3)])
    names = queue_names(client)
    assert other in names and names == sorted(names)
    aclient = async_client(url, decode_responses=True)
    try:
        assert await aqueue_names(aclient) == queue_names(client)
    finally:
        await aclose_client(aclient)
    assert other in run_cli("stats", "--url", url)


def test_a_flow_names_every_queue_it_admits_into(url: str, client: redis.Redis, qname: str) -> None:
    child_q = qname + ".child"
    with Queue.from_url(url, qname) as q:
        q.enqueue_flow(JobSpec("parent"), [JobSpec("child", queue=child_q)])
    assert client.smismember(KNOWN_QUEUES, [qname, child_q]) == [1, 1]


def test_queues_older_than_the_set_are_found_by_one_scan(
    own: EmbeddedServer, admin: redis.Redis
) -> None:
    admin.zadd("emq:{old.one}:pending", {"JOB00000000001": 0})
    admin.hset("emq:{old.two}:meta", "paused", "1")
    admin.set("unrelated", "1")
    assert queue_names(admin) == ["old.one", "old.two"]
    assert admin.smembers(KNOWN_QUEUES) == {"old.one", "old.two", SCANNED}
    # from now on the set is the answer: a queue written behind emq's back is not scanned for
    admin.zadd("emq:{old.three}:pending", {"JOB00000000002": 0})
    assert queue_names(admin) == ["old.one", "old.two"]
    Queue(admin, "new").enqueue("x")
    assert queue_names(admin) == ["new", "old.one", "old.two"]


# -- the worker registry ------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_a_running_worker_is_listed_with_its_load_and_leaves_on_stop(
    url: str, client: redis.Redis, qname: str
) -> None:
    gate = asyncio.Event()

    async def hold(payload: Any) -> None:
        await gate.wait()

    with Queue.from_url(url, qname) as q:
        ids = q.enqueue_many([("hold", i) for i in range(2)])
    w = Worker([qname, qname + ".idle"], {"hold": hold}, url=url, concurrency=3)
    task = asyncio.create_task(w.run())

    def mine() -> WorkerInfo | None:
        return next((i for i in list_workers(client) if qname in i.queues), None)

    info = await until(lambda: (i := mine()) and i.running == 2 and i, 20, "a beat with 2 running")
    assert info.queues == (qname, qname + ".idle") and info.concurrency == 3
    assert info.version == __version__ and info.pid > 0 and info.host
    assert info.beat_ms >= info.started_ms > 0
    assert 0 < client.pttl(worker_key(info.id)) <= ttl_ms()
    assert client.zscore(WORKERS, info.id) is not None
    assert client.smismember(KNOWN_QUEUES, [qname, qname + ".idle"]) == [1, 1]
    aclient = async_client(url, decode_responses=True)
    try:
        assert info.id in {i.id for i in await alist_workers(aclient)}
    finally:
        await aclose_client(aclient)
    shown = run_cli("workers", "--url", url)["workers"]
    assert next(d for d in shown if d["id"] == info.id)["queues"] == [qname, qname + ".idle"]
    # each running job names its holder, the id `emq workers` lists
    with Queue.from_url(url, qname) as q:
        assert [(j.state, j.worker) for j in map(q.job, ids) if j] == [("active", info.id)] * 2
    assert [run_cli("job", qname, i, "--url", url)["worker"] for i in ids] == [info.id] * 2
    text = CliRunner().invoke(cli, ["job", qname, ids[0], "--url", url]).output
    assert f"\nheld by: {info.id}\n" in text
    gate.set()
    w.stop()
    await asyncio.wait_for(task, 30)
    assert mine() is None and not client.exists(worker_key(info.id))
    assert client.zscore(WORKERS, info.id) is None


@pytest.mark.timeout(30)
async def test_an_entry_no_one_rewrites_expires(client: redis.Redis, qname: str) -> None:
    wid = f"gone-host:1:{secrets.token_hex(4)}"
    info = WorkerInfo(wid, "gone-host", 1, (qname,), 1, 0, now_ms(), now_ms(), "0")
    publish(client, info, ttl=300)
    assert wid in {i.id for i in list_workers(client)}
    await until(lambda: wid not in {i.id for i in list_workers(client)}, 10, "the entry to expire")
    client.set(worker_key("broken"), "not json", px=5_000)
    client.zadd(WORKERS, {"broken": 2**50})
    assert "broken" not in {i.id for i in list_workers(client)}  # a hand-written key is skipped
    client.zrem(WORKERS, "broken")


@pytest.mark.timeout(60)
async def test_a_refused_registry_write_is_logged_once_and_the_worker_goes_on(
    own: EmbeddedServer, admin: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    password = secrets.token_urlsafe(16)
    admin.execute_command(
        "ACL", "SETUSER", "noreg", "reset", "on", ">" + password, "~emq:{*}:*", "~{emq}:node:*",
        "+@all", "-@dangerous", "+info",
    )  # fmt: skip
    port = own.url().rsplit(":", 1)[1].split("/")[0]
    url = f"redis://noreg:{password}@127.0.0.1:{port}/0"
    with Queue.from_url(url, "reg") as q:
        q.enqueue_many([("ok", i) for i in range(5)])  # the known-queues write is refused too
    w = Worker("reg", {"ok": lambda p: None}, url=url)
    with caplog.at_level(logging.WARNING, logger="emq.worker"):
        task = asyncio.create_task(w.run())
        # two refused writes (a second apart) and the jobs done: one episode, logged once
        refused = lambda: w._runner and w._runner.presence.refusals._failing.get("registry", 0)  # noqa: E731
        await until(lambda: (refused() or 0) >= 2 and w.stats.completed == 5, 20, "refusals")
        w.stop()
        await asyncio.wait_for(task, 30)
    outages = [r for r in caplog.records if getattr(r, "emq", {}).get("event") == "outage"]
    assert [r.emq["where"] for r in outages] == ["registry"], outages  # type: ignore[attr-defined]
    assert list_workers(admin) == []
    assert queue_names(admin) == ["reg"]  # found by the scan instead
