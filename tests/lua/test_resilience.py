"""EVALSHA-first dispatch survives SCRIPT FLUSH and a server restart; AOF keeps the jobs."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from emq import AsyncQueue, Queue
from emq.embedded.standalone import EmbeddedServer
from emq.lua.scripts import SCRIPTS

from ..support.helpers import assert_consistent


def test_script_flush_between_calls_costs_one_reload(queue: Queue, client: redis.Redis) -> None:
    queue.enqueue("x")
    client.script_flush()
    assert client.script_exists(SCRIPTS["claim"].sha) == [False]
    (c,) = queue.claim()
    assert client.script_exists(SCRIPTS["claim"].sha) == [True]
    client.script_flush()
    queue.complete(c.id, c.token)
    assert queue.counts()["completed"] == 1


async def test_script_flush_async(aqueue: AsyncQueue, client: redis.Redis) -> None:
    await aqueue.enqueue("x")
    client.script_flush()
    (c,) = await aqueue.claim()
    client.script_flush()
    await aqueue.complete(c.id, c.token)
    assert (await aqueue.counts())["completed"] == 1
    await aqueue.close()


def test_evalsha_is_tried_first(queue: Queue, client: redis.Redis) -> None:
    queue.enqueue("warm")  # loads enqueue.lua if needed
    stats = client.info("commandstats")
    before = {k: stats.get(k, {}).get("calls", 0) for k in ("cmdstat_eval", "cmdstat_script|load")}
    for i in range(20):
        queue.enqueue("x", i)
    stats = client.info("commandstats")
    after = {k: stats.get(k, {}).get("calls", 0) for k in before}
    assert after == before, "no EVAL and no SCRIPT LOAD once the script is cached"


@pytest.mark.timeout(60)
def test_restart_between_enqueue_and_claim_loses_nothing(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    own = EmbeddedServer(tmp_path / "srv", binary=server.binary)
    url = own.start()
    q = Queue.from_url(url, "restart")
    ids = q.enqueue_many([("x", {"i": i}) for i in range(300)])
    q.enqueue("later", delay_ms=60_000)
    held = q.claim(count=10, lease_ms=60_000)
    own.stop()  # SIGTERM: the server fsyncs its AOF on the way out
    assert own.start() == url, "same port, same data directory"

    counts = q.counts()  # the client reconnects on its own
    assert (counts["pending"], counts["active"], counts["schedule"]) == (290, 10, 1)
    claimed = q.claim(count=290)  # the first call after the restart loads its script again
    assert [c.id for c in claimed] == ids[10:]
    q.complete_many([(c.id, c.token) for c in claimed + held])
    assert q.counts()["completed"] == 300
    assert_consistent(q.client, "restart")
    q.close()
    own.stop()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_enqueue_rides_out_a_restart_without_duplicates(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    """The server is down when enqueue_many is called and comes back 0.5 s later: the call is
    re-sent with the same (pre-minted) ids, so every job lands exactly once."""
    import threading
    import time

    own = EmbeddedServer(tmp_path / "srv", binary=server.binary)
    url = own.start()
    q = Queue.from_url(url, "resend")
    q.enqueue("warm")  # takes the id node lease while the server is up
    own.stop()
    restarter = threading.Timer(0.5, own.start)
    restarter.start()
    t0 = time.monotonic()
    ids = q.enqueue_many([("x", {"i": i}) for i in range(2500)])  # pipelined chunks
    one = q.enqueue("y")
    assert time.monotonic() - t0 >= 0.4, "the first attempts really met a stopped server"
    restarter.join()
    assert len(set(ids)) == 2500 and all(i.created for i in ids) and one.created
    assert q.counts()["pending"] == 2502
    assert_consistent(q.client, "resend")
    q.close()
    own.stop()


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_async_enqueue_rides_out_a_restart(server: EmbeddedServer, tmp_path: Path) -> None:
    import asyncio

    own = EmbeddedServer(tmp_path / "srv", binary=server.binary)
    url = own.start()
    q = AsyncQueue.from_url(url, "resend")
    await q.enqueue("warm")
    own.stop()
    loop = asyncio.get_running_loop()
    restart = loop.run_in_executor(None, lambda: (__import__("time").sleep(0.5), own.start()))
    ids = await q.enqueue_many([("x", i) for i in range(2500)])
    await restart
    assert len(set(ids)) == 2500 and (await q.counts())["pending"] == 2501
    await q.close()
    own.stop()


def test_a_resent_enqueue_admits_nothing_once_its_job_completed(url: str, qname: str) -> None:
    """The first send of an enqueue landed but its reply was lost; a worker claimed and
    completed the job (its row deleted) before the producer's resend arrived. The resend is
    the same call (same request, same ids): it must admit nothing, or the job runs twice
    (found by the fault table's power-loss run, docs/reliability.md)."""
    from emq.model.records import JobSpec

    with Queue.from_url(url, qname) as q:
        group = q.core.job_spec(JobSpec("send", {"to": "a"}))
        group[0] = q.new_id()
        call = q.core.enqueue([group])
        (first,) = q._run(call)  # landed; the producer never saw this reply
        (job,) = q.claim(1)
        q.complete(job.id, job.token)  # the row is gone: nothing kept
        assert q.job(job.id) is None
        (again,) = q._run(call)  # the producer's resend of the same call
        assert first.created and not again.created and again == first
        assert q.counts()["pending"] == 0 and q.claim(1) == []
        assert_consistent(q.client, qname)
        other = q.core.enqueue([group])  # a new call with the same id is a new admission
        (fresh,) = q._run(other)
        assert fresh.created and q.counts()["pending"] == 1
