"""A batch handler's worker as a real process, SIGKILLed mid-batch: every job of the batch is
recovered by the sweep once, counted one stall, and completed once by another worker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from emq import Queue

from ..support.helpers import assert_consistent, where
from ..support.procs import HANG, WorkerProcs, wait_for
from ..support.worker_handlers import open_gate, runs_key

pytestmark = pytest.mark.servers("valkey", "redis")
TARGET = "tests.support.batch_handlers:worker"
FAST = ("--lease-ms", "1500", "--stalled-interval-ms", "300")


@pytest.fixture
def procs(url: str, tmp_path: Path) -> Iterator[WorkerProcs]:
    p = WorkerProcs(url, tmp_path)
    yield p
    p.close()


@pytest.mark.slow
def test_sigkill_mid_batch_recovers_every_job_once_and_completes_each_once(
    procs: WorkerProcs,
    queue: Queue,
    client: redis.Redis,
    qname: str,
) -> None:
    ids = [queue.enqueue("bulk", {"i": i}) for i in range(6)]
    runs = lambda: client.lrange(runs_key(qname), 0, -1)  # noqa: E731
    a = procs.start(TARGET, *FAST, EMQTEST_QUEUE=qname)
    wait_for(lambda: len(runs()) == 6, "worker A to start the whole batch")
    a.kill()  # SIGKILL: no give-back, no ack; six leases left to lapse
    a.wait(HANG)
    assert all(where(client, qname, j) == ["active"] for j in ids)
    open_gate(client, qname, 1)
    b = procs.start(TARGET, *FAST, EMQTEST_QUEUE=qname)
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
