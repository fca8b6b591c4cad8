"""A batch handler's worker as a real process, SIGKILLed mid-batch: every job of the batch is
recovered by the sweep once, counted one stall, and completed once by another worker."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from emq import Queue

from ..support.helpers import assert_consistent, where
from ..support.procs import HANG, WorkerProcs, read_lines, wait_for

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")
TARGET = "tests.support.batch_handlers:worker"
FAST = ("--lease-ms", "1500", "--stalled-interval-ms", "300")


@pytest.mark.slow
def test_sigkill_mid_batch_recovers_every_job_once_and_completes_each_once(
    procs: WorkerProcs, queue: Queue, client: redis.Redis, qname: str, tmp_path: Path
) -> None:
    ids = [queue.enqueue("bulk", {"i": i}) for i in range(6)]
    env = {"EMQTEST_QUEUE": qname, "EMQTEST_DIR": str(tmp_path)}

    def runs() -> list[list[str]]:
        return [line.split() for line in read_lines(tmp_path / "runs")]

    a = procs.start(TARGET, *FAST, **env)
    wait_for(lambda: len(runs()) == 6, "worker A to start the whole batch")
    a.kill()  # SIGKILL: no give-back, no ack; six leases left to lapse
    a.wait(HANG)
    assert all(where(client, qname, j) == ["active"] for j in ids)
    (tmp_path / "gate").touch()  # the next batch runs through
    b = procs.start(TARGET, *FAST, **env)
    wait_for(lambda: queue.counts()["completed"] == 6, "worker B to recover and run the batch")
    for job in ids:
        assert [pid for what, j, pid in runs() if j == job and what == "start"] == [
            str(a.pid),
            str(b.pid),
        ]
        assert [pid for what, j, pid in runs() if j == job and what == "done"] == [str(b.pid)]
    stalls = [e.job for e in queue.events() if e.event == "stalled"]
    assert sorted(stalls) == sorted(ids)  # each recovered once, one stall each (G2, G3)
    c = queue.counts()
    assert (c["completed"], c["active"], c["pending"], c["dead"]) == (6, 0, 0, 0)
    assert_consistent(client, qname)
