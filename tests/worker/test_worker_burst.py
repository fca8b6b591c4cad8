"""Burst runs that end cleanly (docs/worker.md, "Logs and stats": ``idle``): a sync handler
hung past its timeout does not keep ``--burst`` from exiting; a clean run says nothing about
idle pool threads; the user's ``atexit`` handlers run either way."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import redis

from emq import JobContext, JobSpec, Queue, Worker, WorkerOptions

from ..support.flows_check import check_flows

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")

ROOT = Path(__file__).parents[2]
HANG = 60  # bounds a hang, never a speed
CLI = "from emq.cli.main import main; main()"
TASKS = """
import atexit, sys, threading, time
from emq import Worker

atexit.register(lambda: print("ATEXIT-RAN", file=sys.stderr, flush=True))
worker = Worker("{queue}", concurrency=2, url="{url}")

@worker.handler("hang")
def hang(payload, ctx):
    while True:  # ignores ctx.cancelled: a thread cannot be killed
        time.sleep(0.05)

@worker.handler("ok")
def ok(payload):
    return None
"""


@pytest.mark.slow
async def test_burst_returns_although_a_sync_handler_hangs_past_its_timeout(
    queue: Queue,
) -> None:
    release = threading.Event()
    opts = WorkerOptions(concurrency=1, timeout_ms=200, grace_ms=300, burst=True)
    w = Worker(queue, options=opts)

    @w.handler("hang")
    def hang(payload: Any, ctx: JobContext) -> None:
        release.wait(120)  # ignores ctx.cancelled on purpose

    @w.handler("ok")
    def ok(payload: Any) -> None:
        return None

    queue.enqueue("hang", max_attempts=1)
    queue.enqueue_many([("ok", i) for i in range(3)])
    try:
        await asyncio.wait_for(w.run(), 60)  # before: never returned
    finally:
        release.set()
    assert w.stats.abandoned == 1 and w.stats.timeouts == 1
    c = queue.counts()
    assert c["dead"] == 1 and c["active"] == 0  # the hung attempt was decided: failed
    # its one slot was taken by the hung thread: the rest waits for the next run, not lost
    assert c["completed"] + c["pending"] == 3


def _emq(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", CLI, *args], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=90,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("hung", [False, True])
def test_cli_burst_exits_runs_atexit_and_logs_only_json(
    url: str, qname: str, queue: Queue, tmp_path: Path, hung: bool
) -> None:
    (tmp_path / "burst_tasks.py").write_text(TASKS.format(queue=qname, url=url))
    if hung:
        queue.enqueue("hang", max_attempts=1)
    queue.enqueue_many([("ok", i) for i in range(4)])
    done = _emq(tmp_path, "worker", "burst_tasks:worker", "--burst", "--timeout-ms", "300",
                "--grace-ms", "300")  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert "ATEXIT-RAN" in lines  # before: os._exit skipped the user's atexit handlers
    logs = [json.loads(ln) for ln in lines if ln != "ATEXIT-RAN"]  # nothing but JSON lines
    stopped = [r for r in logs if r["event"] == "stopped"][-1]
    assert stopped["abandoned"] == (1 if hung else 0)
    assert queue.counts()["completed"] == 4


BROKEN = """
from emq import Worker
from emq.worker.maintenance import Maintenance

async def broken(self):
    raise KeyError("a bug in the maintenance beat")

Maintenance.beat = broken  # a component that cannot go on
worker = Worker("{queue}", url="{url}")

@worker.handler("ok")
def ok(payload):
    return None
"""


@pytest.mark.timeout(120)
def test_cli_worker_whose_component_fails_exits_non_zero(
    url: str, qname: str, tmp_path: Path
) -> None:
    """Never half-alive: the worker stops and the process exits non-zero, so a supervisor
    restarts it."""
    (tmp_path / "broken_tasks.py").write_text(BROKEN.format(queue=qname, url=url))
    done = _emq(tmp_path, "worker", "broken_tasks:worker")
    assert done.returncode != 0
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    logs = [json.loads(ln) for ln in lines if ln.startswith("{")]
    crashed = [r for r in logs if r["event"] == "crashed"]
    assert crashed and crashed[0]["component"] == "maintenance"
    assert [r["event"] for r in logs][-1] == "stopped"
    assert any("maintenance failed: KeyError" in ln for ln in lines if not ln.startswith("{"))


async def test_a_burst_run_on_a_childs_queue_delivers_its_outbox_before_it_ends(
    queue: Queue, url: str, client: redis.Redis
) -> None:
    """A flow's children in queue C, their parent in P: a burst run on C alone tells the parent
    of every child before it says it is done (docs/flows.md, Across queues). Before: the run
    ended as soon as the last ack landed, and the beat that delivers the outbox was cancelled
    with it (about 1 run in 8 with one child, every run with 50), so the parent waited in P
    with no worker of C left to tell it."""
    with Queue.from_url(url, queue.name + "-kids") as kids:
        ids = queue.enqueue_flow(
            JobSpec("combine"), [JobSpec("part", i, queue=kids.name) for i in range(60)]
        )
        w = Worker(kids, {"part": lambda p: p}, options=WorkerOptions(burst=True))
        await asyncio.wait_for(w.run(), HANG)
        assert w.stats.completed == 60
        assert kids.counts()["outbox"] == 0, "every child's end delivered"
        parent = queue.job(ids.id)
        assert parent.state == "pending"
        assert client.hget(queue.core.keys.job(ids.id), "children_left") == "0"
        done = Worker(queue, {"combine": lambda p: "all"}, options=WorkerOptions(burst=True))
        await asyncio.wait_for(done.run(), HANG)
        assert done.stats.completed == 1 and queue.counts()["completed"] == 1
        check_flows(client, queue.name)
        check_flows(client, kids.name)
