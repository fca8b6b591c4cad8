"""Durable steps across a real crash: a worker process is SIGKILLed after step A is recorded,
the sweep recovers the job, and a second worker finishes it without running A again
(docs/steps.md; docs/guarantees.md, Durable steps). Waits poll the server with a deadline that
bounds a hang, never a speed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from emq import Queue

from ..support.helpers import assert_consistent
from ..support.steps_handlers import steps_key

# a standalone server each: the handler's side effects go through a plain client
pytestmark = pytest.mark.servers("valkey", "redis")

TESTS = Path(__file__).parents[1]
CLI = "from emq.cli.main import main; main()"
HANG = 60.0
FAST = ["--lease-ms", "1000", "--stalled-interval-ms", "200"]


def wait_for(cond: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {HANG} s waiting for {what}")


@pytest.fixture
def spawn(url: str, qname: str, tmp_path: Path) -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        env = dict(os.environ, EMQ_URL=url)
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS.parent), env.get("PYTHONPATH", "")])
        with (tmp_path / f"w{len(started)}.log").open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-c", CLI, "worker", "tests.support.steps_handlers:handlers",
                 "-q", qname, *FAST],
                env=env, stdout=out, stderr=out, cwd=tmp_path,
            )  # fmt: skip
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(HANG)


@pytest.mark.slow
def test_a_step_recorded_before_a_sigkill_does_not_run_again(
    spawn: Callable[[], subprocess.Popen[bytes]], queue: Queue, client: redis.Redis
) -> None:
    effects = steps_key(queue.name)
    first = spawn()
    job = queue.enqueue("steps")
    wait_for(lambda: client.lrange(effects, 0, -1) == [f"A:{first.pid}", f"paused:{first.pid}"],
             "the first worker to record A and stop after it")  # fmt: skip
    assert client.hexists(queue.core.keys.job(job), "step:A")  # recorded before the kill
    first.kill()
    first.wait(HANG)
    second = spawn()
    wait_for(lambda: queue.counts()["completed"] == 1, "the second worker to finish the job")
    ran = [e.split(":")[0] for e in client.lrange(effects, 0, -1)]
    assert ran == ["A", "paused", "B", "C"]  # A once, B once, C once
    assert client.lrange(effects, 2, -1) == [f"B:{second.pid}", f"C:{second.pid}"]
    story = [e.event for e in queue.events() if e.job == job]
    assert story.count("stalled") == 1 and story.count("step") == 3
    assert story[-1] == "completed" and queue.job(job) is None
    counts = queue.counts()
    assert (counts["recovered"], counts["completed"], counts["dead_total"]) == (1, 1, 0)
    assert_consistent(client, queue.name)
