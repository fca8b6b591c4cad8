"""Lease tokens across a rollback of the server's data (G4, docs/guarantees.md).

A power cut loses the last second of an ``appendfsync everysec`` AOF; a failover to a lagging
replica is the same. The test takes a copy of a server's data, lets workers claim, then puts
the copy back and restarts the server: the claims are forgotten, the jobs are pending again.
Before the fix the next claim handed out the same tokens and the stale holders' completions
were accepted while another run held the lease. Tokens now carry the server clock, so a token
issued after the restart is larger than any issued before it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from emq import Answer, JobContext, Queue, Worker, WorkerOptions
from emq.embedded.standalone import EmbeddedServer, free_port
from emq.errors import ServerError

from ..support.helpers import assert_consistent

N = 60


def _roll_back(srv: EmbeddedServer, backup: Path) -> None:
    """Kill the server (no clean shutdown) and restart it from the older copy of its data."""
    pid = srv.status().pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # a power cut: nothing flushed, nothing shut down
    deadline = time.monotonic() + 30
    while srv.status().pid is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    shutil.rmtree(srv.data_dir)
    shutil.copytree(backup, srv.data_dir)
    # the same port, so clients that held the old server reconnect to the restored one (a port
    # just freed by a SIGKILL can be briefly taken: try again rather than move elsewhere)
    deadline = time.monotonic() + 30
    while True:
        try:
            srv.start()
            return
        except ServerError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_no_stale_completion_is_accepted_after_a_rollback(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    srv = EmbeddedServer(tmp_path / "data", binary=server.binary, port=free_port())
    srv.start()
    try:
        with Queue.from_url(srv.url(), "rb") as q:
            ids = [str(i) for i in q.enqueue_many([("j", i) for i in range(N)])]
        srv.stop()  # a clean stop: the AOF holds the enqueues
        backup = tmp_path / "backup"
        shutil.copytree(srv.data_dir, backup)
        srv.start()
        with Queue.from_url(srv.url(), "rb") as q:
            stale = {c.id: c.token for c in q.claim(count=N, lease_ms=120_000)}
        assert set(stale) == set(ids)

        _roll_back(srv, backup)  # the claims are lost with the data: every job pending again

        with Queue.from_url(srv.url(), "rb") as q:
            assert q.counts()["pending"] == N
            fresh = {c.id: c.token for c in q.claim(count=N, lease_ms=120_000)}
            assert all(fresh[i] > stale[i] for i in ids)  # never the same token twice
            # the stale holders finish late: every one refused, nothing changes
            answers = q.complete_many([(i, stale[i]) for i in ids])
            assert answers == [Answer.LOST] * N
            assert q.counts()["active"] == N
            # the current holders complete each job exactly once
            assert q.complete_many([(i, fresh[i]) for i in ids]) == [Answer.COMPLETED] * N
            c = q.counts()
            assert (c["completed"], c["pending"], c["active"], c["dead"]) == (N, 0, 0, 0)
            client = redis.Redis.from_url(srv.url(), decode_responses=True)
            assert_consistent(client, "rb")
            client.close()
    finally:
        srv.stop()


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_a_fleet_across_a_rollback_never_applies_a_stale_result(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    """Workers whose runs straddle the rollback: the runs that held a lease before it report
    their results after it. None of those results is applied while another run holds the
    lease; every job is completed by a run that held it, and nothing is lost."""
    srv = EmbeddedServer(tmp_path / "data", binary=server.binary, port=free_port())
    srv.start()
    try:
        with Queue.from_url(srv.url(), "fleet") as q:
            ids = [str(i) for i in q.enqueue_many([("j", i) for i in range(N)])]
        srv.stop()
        backup = tmp_path / "backup"
        shutil.copytree(srv.data_dir, backup)
        srv.start()
        q = Queue.from_url(srv.url(), "fleet")
        before = {c.id: c.token for c in q.claim(count=N, lease_ms=120_000)}
        _roll_back(srv, backup)

        applied: dict[str, list[int]] = {}
        w = Worker(q, options=WorkerOptions(concurrency=8, lease_ms=10_000, burst=True))

        @w.handler("j")
        async def j(payload: Any, ctx: JobContext) -> None:
            # the pre-rollback holder of this job reports first, then this run finishes
            answer = (await asyncio.to_thread(q.complete_many, [(ctx.id, before[ctx.id])]))[0]
            assert answer == Answer.LOST, f"stale completion of {ctx.id} accepted"
            applied.setdefault(ctx.id, []).append(ctx.token)

        await asyncio.wait_for(w.run(), 90)
        assert sorted(applied) == sorted(ids)
        assert all(len(t) == 1 and t[0] > before[i] for i, t in applied.items())
        c = q.counts()
        assert (c["completed"], c["pending"], c["active"], c["dead"]) == (N, 0, 0, 0)
        assert w.stats.completed == N and w.stats.lease_lost == 0
        q.close()
    finally:
        srv.stop()
