"""``durability="replica"``: enqueues and acknowledgements return only once a replica has them,
so a failover to that replica loses none. Each test starts its own primary and replica."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from emq import JobContext, Queue, QueueOptions, UnsafeServer, Worker, WorkerOptions
from emq.embedded.standalone import EmbeddedServer
from emq.server.durability import NotDurable

from ..support.helpers import assert_consistent

REPLICA = QueueOptions(durability="replica", durability_timeout_ms=5_000)
HANG = 60.0


def _password(url: str) -> str:
    return url.split("@")[0].rsplit(":", 1)[1]


def _wait(cond: Any, what: str) -> None:
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Pair:
    """A primary and one replica following it, both real servers on loopback ports."""

    def __init__(self, binary: Path, root: Path) -> None:
        self.primary = EmbeddedServer(root / "primary", binary=binary)
        self.replica = EmbeddedServer(root / "replica", binary=binary)
        self.primary.start()
        self.replica.start()
        self.p = redis.Redis.from_url(self.primary.url(), decode_responses=True)
        self.r = redis.Redis.from_url(self.replica.url(), decode_responses=True)
        port = int(self.primary.url().rsplit(":", 1)[1].split("/")[0])
        self.p.config_set("repl-diskless-sync-delay", 0)  # sync the replica at once
        self.r.config_set("masterauth", _password(self.primary.url()))
        self.r.execute_command("REPLICAOF", "127.0.0.1", port)
        _wait(lambda: self.r.info("replication").get("master_link_status") == "up", "the link")
        _wait(lambda: int(self.p.info("replication")["connected_slaves"]) == 1, "the replica")

    def close(self) -> None:
        self.p.close()
        self.r.close()
        self.replica.stop()
        self.primary.stop()


@pytest.fixture
def pair(server: EmbeddedServer, tmp_path: Path) -> Iterator[Pair]:
    p = Pair(server.binary, tmp_path)
    yield p
    p.close()


def test_replica_durability_without_a_replica_is_refused(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    alone = EmbeddedServer(tmp_path / "alone", binary=server.binary)
    alone.start()
    try:
        with Queue.from_url(alone.url(), "q", options=REPLICA) as q:
            with pytest.raises(UnsafeServer, match=r"waits for 1 replica.*has 0 connected"):
                q.enqueue("x")
            client = redis.Redis.from_url(alone.url())
            assert client.dbsize() == 0  # nothing written, not even the id lease
            client.close()
    finally:
        alone.stop()


def test_every_acknowledged_call_is_on_the_replica_when_it_returns(pair: Pair) -> None:
    with Queue.from_url(pair.primary.url(), "q", options=REPLICA) as q:
        keys = q.core.keys
        for i in range(20):
            job = q.enqueue("x", i)
            assert pair.r.exists(keys.job(job)) == 1  # there before the call returned
        ids = q.enqueue_many([("x", i) for i in range(2_500)])
        assert pair.r.zcard(keys.pending) == 2_520 and pair.r.exists(keys.job(ids[-1])) == 1
        for c in q.claim(count=100):
            q.complete(c.id, c.token)
            assert pair.r.exists(keys.job(c.id)) == 0  # the completion reached the replica
        assert int(pair.r.hget(keys.metrics, "completed") or 0) == 100


def test_a_replica_that_stops_acknowledging_is_not_durable(pair: Pair) -> None:
    options = QueueOptions(durability="replica", durability_timeout_ms=300)
    pid = pair.replica.status().pid
    assert pid is not None
    with Queue.from_url(pair.primary.url(), "q", options=REPLICA) as warm:
        warm.enqueue("warm")  # the replica is connected and acknowledging (a busy machine
    with Queue.from_url(pair.primary.url(), "q", options=options) as q:  # may take seconds)
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(NotDurable, match="0 of the 1 replica"):
                q.enqueue("x", 1)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert q.counts()["pending"] == 2  # applied on the primary, not confirmed: said so


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_failover_to_the_replica_keeps_every_acknowledged_job(pair: Pair) -> None:
    """Producers and a worker run with durability='replica'; the primary is SIGKILLed mid-run
    and the replica promoted: every enqueue that returned is there, every completion the worker
    saw acknowledged is applied, and nothing is in two places."""
    q = Queue.from_url(pair.primary.url(), "fo", options=REPLICA)
    acknowledged = [str(i) for i in q.enqueue_many([("x", i) for i in range(300)])]
    w = Worker(q, options=WorkerOptions(concurrency=8, lease_ms=30_000, grace_ms=1_000))

    @w.handler("x")
    async def x(payload: Any, ctx: JobContext) -> None:
        await asyncio.sleep(0.005)

    task = asyncio.create_task(w.run())
    deadline = time.monotonic() + HANG
    while w.stats.completed < 100 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    pid = pair.primary.status().pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # the primary is gone: no clean shutdown
    w.stop()
    await asyncio.wait_for(task, HANG)
    pair.r.execute_command("REPLICAOF", "NO", "ONE")  # the failover
    new = Queue.from_url(pair.replica.url(), "fo")
    c = new.counts()
    # every acknowledged enqueue is on the new primary: completed, or still somewhere
    assert c["completed"] + c["pending"] + c["active"] == len(acknowledged)
    # every completion the server acknowledged to the worker survived the failover
    assert w.stats.completed >= 100 and c["completed"] >= w.stats.completed
    assert_consistent(pair.r, "fo")
    new.close()
    q.close()


def test_every_call_that_changes_a_job_waits_for_the_replica(pair: Pair) -> None:
    """Not only admitting and finishing: cancel, remove, edits, pause, limits and schedules
    are confirmed at the queue's durability level too (a failover must not bring back a
    cancelled job), so with the replica frozen each one says it is not durable."""
    options = QueueOptions(durability="replica", durability_timeout_ms=200)
    pid = pair.replica.status().pid
    assert pid is not None
    with Queue.from_url(pair.primary.url(), "edits", options=REPLICA) as warm:
        ids = warm.enqueue_many([("x", i) for i in range(8)])
        later = warm.enqueue("x", delay_ms=60_000)
    calls: dict[str, Any] = {
        "cancel": lambda q: q.cancel(ids[0]),
        "remove": lambda q: q.remove(ids[1]),
        "set_priority": lambda q: q.set_priority(ids[2], 5),
        "update_payload": lambda q: q.update_payload(ids[3], {"n": 1}),
        "reschedule": lambda q: q.reschedule(ids[4], 60_000),
        "promote": lambda q: q.promote(later),
        "pause": lambda q: q.pause(),
        "resume": lambda q: q.resume(),
        "set_limits": lambda q: q.set_limits(concurrency=3),
        "repeat": lambda q: q.repeat("tick", "x", every_ms=60_000),
        "unrepeat": lambda q: q.unrepeat("tick"),
        "drain": lambda q: q.drain(),
    }
    with Queue.from_url(pair.primary.url(), "edits", options=options) as q:
        os.kill(pid, signal.SIGSTOP)
        try:
            for name, call in calls.items():
                with pytest.raises(NotDurable, match="0 of the 1 replica"):
                    call(q)
                    pytest.fail(f"{name} returned without its replica")
        finally:
            os.kill(pid, signal.SIGCONT)
        _wait(lambda: pair.p.execute_command("WAIT", 1, 1_000) == 1, "the replica")
        assert q.counts()["pending"] == 0  # every call was applied all the same
        assert_consistent(pair.r, "edits")
