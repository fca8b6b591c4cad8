"""A batch handler's worker as a real process, SIGKILLed mid-batch: every job of the batch is
recovered by the sweep once, counted one stall, and completed once by another worker."""

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

from ..support.helpers import assert_consistent, where
from ..support.worker_handlers import open_gate, runs_key

TESTS = Path(__file__).parents[1]
CLI = "from emq.cli.main import main; main()"
HANG = 60.0  # bounds a hang, never a speed

pytestmark = pytest.mark.servers("valkey", "redis")


@pytest.fixture
def spawn(
    url: str, qname: str, tmp_path: Path
) -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str) -> subprocess.Popen[bytes]:
        env = dict(os.environ, EMQ_URL=url, EMQTEST_QUEUE=qname)
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS.parent), env.get("PYTHONPATH", "")])
        with (tmp_path / f"{name}.log").open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-c", CLI, "worker", "tests.support.batch_handlers:worker",
                 "--lease-ms", "1500", "--stalled-interval-ms", "300"],
                env=env, stdout=out, stderr=out, cwd=tmp_path,
            )  # fmt: skip
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(HANG)


def wait_for(cond: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline:
        if value := cond():
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {HANG} s waiting for {what}")


@pytest.mark.slow
def test_sigkill_mid_batch_recovers_every_job_once_and_completes_each_once(
    spawn: Callable[[str], subprocess.Popen[bytes]],
    queue: Queue,
    client: redis.Redis,
    qname: str,
) -> None:
    ids = [queue.enqueue("bulk", {"i": i}) for i in range(6)]
    runs = lambda: client.lrange(runs_key(qname), 0, -1)  # noqa: E731
    a = spawn("a")
    wait_for(lambda: len(runs()) == 6, "worker A to start the whole batch")
    a.kill()  # SIGKILL: no give-back, no ack; six leases left to lapse
    a.wait(HANG)
    assert all(where(client, qname, j) == ["active"] for j in ids)
    open_gate(client, qname, 1)
    b = spawn("b")
    wait_for(lambda: queue.counts()["completed"] == 6, "worker B to recover and run the batch")
    starts = [r.split(":") for r in runs() if r.startswith("start")]
    dones = [r.split(":") for r in runs() if r.startswith("done")]
    for job in ids:
        assert [pid for _, j, pid in starts if j == job] == [str(a.pid), str(b.pid)]
        assert [pid for _, j, pid in dones if j == job] == [str(b.pid)]
    stalls = [e.job for e in queue.events() if e.event == "stalled"]
    assert sorted(stalls) == sorted(ids)  # each recovered once, one stall each (G2, G3)
    c = queue.counts()
    assert (c["completed"], c["active"], c["pending"], c["dead"]) == (6, 0, 0, 0)
    assert_consistent(client, qname)
