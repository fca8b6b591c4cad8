"""A worker's start and stop (docs/worker.md, Reconnect): built from queue objects on a
cluster; started before its server is up (a long run waits for it, a burst run fails fast);
a refused login fails fast either way; a stop ends a parked ``BLPOP`` whose cancel redis-py
swallowed."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from emq import AsyncQueue, AuthenticationFailed, Queue, ServerUnreachable, Worker, WorkerOptions
from emq.embedded.standalone import EmbeddedServer, free_port
from emq.model.keys import QueueKeys
from emq.worker.connect import Outage, park
from emq.worker.connections import ClientFactory

from ..support.helpers import assert_consistent, log_records, until

ROOT = Path(__file__).parents[2]
CLI = "from emq.cli.main import main; main()"
HANG = 60.0  # bounds a hang, never a speed


def events(records: list[logging.LogRecord], name: str) -> list[dict[str, Any]]:
    return [f for r in records if isinstance(f := getattr(r, "emq", None), dict)
            and f.get("event") == name]  # fmt: skip


def nowhere() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there


def wrong_password(url: str) -> str:
    head, _, rest = url.partition("@")
    return f"{head.rsplit(':', 1)[0]}:not-the-password@{rest}"


# -- built from queue objects -----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_worker_of_queue_objects_starts_serves_and_stops_on_a_cluster(
    cluster_server: Any, qname: str, kind: str
) -> None:
    """The README's pattern on a cluster. Before: an asyncio cluster client that had sent no
    command yet has no default node, and the worker's start raised AttributeError."""
    url = cluster_server.url()
    q = AsyncQueue.from_url(url, qname) if kind == "async" else Queue.from_url(url, qname)
    with Queue.from_url(url, qname) as producer:
        producer.enqueue_many([("x", i) for i in range(5)])
        w = Worker(q, {"x": lambda p: p})
        task = asyncio.create_task(w.run())
        served = lambda: task.done() or producer.counts()["completed"] == 5  # noqa: E731
        await until(served, HANG, "the jobs to complete")
        w.stop()
        await asyncio.wait_for(task, HANG)
        assert w.stats.completed == 5


# -- started before its server is up --------------------------------------------------------------


@pytest.mark.servers("valkey")
async def test_a_worker_started_before_its_server_waits_for_it_then_serves(
    own: EmbeddedServer, qname: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A supervisor that starts the server and its workers at once. Before: the start-up read
    of the partition counts raised ServerUnreachable and the worker was gone."""
    url = own.url()
    own.stop()  # a restart keeps its port and password: the worker is given its URL first
    w = Worker(qname, {"x": lambda p: p}, url=url)
    with caplog.at_level(logging.INFO, logger="emq.worker"):
        task = asyncio.create_task(w.run())
        await until(lambda: events(caplog.records, "outage"), HANG, "the outage to be logged")
        assert not task.done()
        own.start()
        with Queue.from_url(url, qname) as q:
            q.enqueue_many([("x", i) for i in range(3)])
            await until(lambda: q.counts()["completed"] == 3, HANG, "the jobs to complete")
            w.stop()
            await asyncio.wait_for(task, HANG)
            admin = redis.Redis.from_url(url, decode_responses=True)
            assert_consistent(admin, qname)
            admin.close()
    (outage,) = events(caplog.records, "outage")  # logged once, however long it lasted
    assert outage["where"] == "start" and outage["kind"] == "unreachable"
    assert ":***@" in outage["url"] and url not in str(outage)
    assert events(caplog.records, "reconnected") and events(caplog.records, "started")


async def test_a_stop_while_waiting_for_the_server_ends_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = Worker("waits", {"x": lambda p: p}, url=nowhere())
    with caplog.at_level(logging.INFO, logger="emq.worker"):
        task = asyncio.create_task(w.run())
        await until(lambda: events(caplog.records, "outage"), HANG, "the outage to be logged")
        w.stop()
        await asyncio.wait_for(task, HANG)  # returns: a stop is no error
    assert not events(caplog.records, "started")


async def test_a_burst_run_fails_fast_when_the_server_is_unreachable() -> None:
    w = Worker("burst", {"x": lambda p: p}, url=nowhere(), options=WorkerOptions(burst=True))
    with pytest.raises(ServerUnreachable):
        await asyncio.wait_for(w.run(), HANG)


@pytest.mark.parametrize("burst", [False, True])
async def test_a_refused_login_fails_fast_at_start(url: str, qname: str, burst: bool) -> None:
    """Not ridden out: a wrong password does not pass by itself."""
    w = Worker(qname, {"x": lambda p: p}, url=wrong_password(url),
               options=WorkerOptions(burst=burst))  # fmt: skip
    with pytest.raises(AuthenticationFailed, match="refused the login") as refused:
        await asyncio.wait_for(w.run(), HANG)
    assert not isinstance(refused.value, ConnectionError), "not the you-may-retry class"
    assert "not-the-password" not in str(refused.value)


def _emq_worker(url: str, qname: str, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, EMQ_URL=url)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    with log.open("wb") as err:
        return subprocess.Popen(
            [sys.executable, "-c", CLI, "worker", "tests.support.worker_handlers:handlers",
             "-q", qname], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip


def _logged(log: Path, name: str) -> bool:
    return bool(log_records(log, name))


@pytest.mark.slow
@pytest.mark.servers("valkey")
@pytest.mark.timeout(120)
async def test_emq_worker_before_its_server_rides_it_out_and_stops_on_sigterm(
    own: EmbeddedServer, qname: str, tmp_path: Path
) -> None:
    """``emq worker`` (no ``--burst``) started before its server: its start-up PING and reads
    wait for the server (logged once); a SIGTERM during that wait ends it with exit 0."""
    url = own.url()
    own.stop()
    waiting = _emq_worker(url, qname, tmp_path / "a.log")
    serving = _emq_worker(url, qname, tmp_path / "b.log")
    try:
        for log in ("a.log", "b.log"):
            await until(lambda: _logged(tmp_path / log, "outage"), HANG, "the outage line")  # noqa: B023
        waiting.send_signal(signal.SIGTERM)
        assert waiting.wait(HANG) == 0, (tmp_path / "a.log").read_text()
        own.start()
        with Queue.from_url(url, qname) as q:
            q.enqueue("fast", {})
            await until(lambda: q.counts()["completed"] == 1, HANG, "the job to complete")
        serving.send_signal(signal.SIGTERM)
        assert serving.wait(HANG) == 0, (tmp_path / "b.log").read_text()
    finally:
        for p in (waiting, serving):
            if p.poll() is None:
                p.kill()
                p.wait()
    password = url.split("@")[0].rsplit(":", 1)[1]
    for log in ("a.log", "b.log"):
        text = (tmp_path / log).read_text()
        assert "Traceback" not in text and password not in text, text
    served = [r["event"] for r in log_records(tmp_path / "b.log")]
    assert served.count("outage") == 1 and "reconnected" in served and "started" in served
    assert "started" not in [r["event"] for r in log_records(tmp_path / "a.log")]


# -- a stop while parked ------------------------------------------------------------------------


@pytest.mark.servers("valkey", "redis")
async def test_a_stop_ends_a_parked_blpop_even_when_its_cancel_is_swallowed(
    url: str, qname: str
) -> None:
    """redis-py sometimes swallows the cancel of a blocking command sent on a new connection
    (redis-py issue 2028 upstream): the BLPOP then waits out its own timeout, and a stop
    waited a whole ``poll_ms`` (60 s here) for it, about 1 stop in 5. Each park below is on
    a new connection, stopped at another moment of its first command; every one must end
    long before its BLPOP would time out."""
    blocking = ClientFactory(url=url).asyncio(socket_timeout=70.0)
    outage = Outage(logging.getLogger("emq.test"))
    keys = [QueueKeys.of(qname).wake]
    parks: list[asyncio.Task[None]] = []
    try:
        for i in range(40):
            await blocking.connection_pool.disconnect()  # the next BLPOP connects anew
            stop = asyncio.Event()
            parks.append(asyncio.create_task(park(blocking, keys, 60_000, outage, stop)))
            await asyncio.sleep((i % 20) / 10_000)  # 0 to 2 ms into the BLPOP
            stop.set()
            done, _ = await asyncio.wait(parks[-1:], timeout=10.0)  # bounds a hang: the bug
            assert done, f"stop {i} still waits for the BLPOP's own timeout"  # waits 60 s
        assert await blocking.ping()  # the client still works after it
    finally:
        await blocking.aclose()  # ends a BLPOP left waiting
        await asyncio.wait(parks, timeout=HANG)
