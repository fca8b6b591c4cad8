"""Durable steps across a real crash: a worker process is SIGKILLed after step A is recorded,
the sweep recovers the job, and a second worker finishes it without running A again
(docs/steps.md; docs/guarantees.md, Durable steps). Waits poll the server with a deadline that
bounds a hang, never a speed."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from emq import Queue

from ..support.helpers import assert_consistent
from ..support.procs import HANG, WorkerProcs, read_lines, wait_for

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")

TARGET = "tests.support.steps_handlers:handlers"
FAST = ("--lease-ms", "1000", "--stalled-interval-ms", "200")


@pytest.mark.slow
def test_a_step_recorded_before_a_sigkill_does_not_run_again(
    procs: WorkerProcs, queue: Queue, client: redis.Redis, tmp_path: Path
) -> None:
    effects = tmp_path / "effects"
    env = {"EMQTEST_DIR": str(tmp_path)}
    first = procs.start(TARGET, "-q", queue.name, *FAST, **env)
    job = queue.enqueue("steps")
    wait_for(lambda: read_lines(effects) == [f"A {first.pid}", f"paused {first.pid}"],
             "the first worker to record A and stop after it")  # fmt: skip
    assert client.hexists(queue.core.keys.job(job), "step:A")  # recorded before the kill
    first.kill()
    first.wait(HANG)
    second = procs.start(TARGET, "-q", queue.name, *FAST, **env)
    wait_for(lambda: queue.counts()["completed"] == 1, "the second worker to finish the job")
    ran = [line.split()[0] for line in read_lines(effects)]
    assert ran == ["A", "paused", "B", "C"]  # A once, B once, C once
    assert read_lines(effects)[2:] == [f"B {second.pid}", f"C {second.pid}"]
    story = [e.event for e in queue.events() if e.job == job]
    assert story.count("stalled") == 1 and story.count("step") == 3
    assert story[-1] == "completed" and queue.job(job) is None
    counts = queue.counts()
    assert (counts["recovered"], counts["completed"], counts["dead_total"]) == (1, 1, 0)
    assert_consistent(client, queue.name)
