"""The worker as real processes: SIGKILL, SIGSTOP, poison jobs, SIGTERM, a server restart,
and a 10,000-job run with random kills. Each test is bounded; waits poll a condition on
the server with a deadline, never sleep for luck.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from emq import Queue
from emq.server import EmbeddedServer, valkey_binary

from .helpers import assert_consistent, expire_leases, where
from .test_worker_support import runs_key

TESTS = Path(__file__).parent
CLI = "from emq.cli.main import main; main()"


class Procs:
    """Worker child processes of one test; all are killed at teardown."""

    def __init__(self, url: str, queue: str, tmp: Path) -> None:
        self.url, self.queue, self.tmp = url, queue, tmp
        self.started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def spawn(
        self, *args: str, name: str = "w", target: str = "handlers"
    ) -> subprocess.Popen[bytes]:
        env = dict(os.environ, EMQ_URL=self.url)
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS.parent), env.get("PYTHONPATH", "")])
        log = self.tmp / f"{name}-{len(self.started)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-c", CLI, "worker", f"tests.test_worker_support:{target}",
                 "-q", self.queue, *args],
                env=env, stdout=out, stderr=out, cwd=self.tmp,
            )  # fmt: skip
        self.started.append((proc, log))
        return proc

    def log_of(self, proc: subprocess.Popen[bytes]) -> Path:
        return next(log for p, log in self.started if p is proc)

    def events(
        self, proc: subprocess.Popen[bytes], event: str | None = None
    ) -> list[dict[str, Any]]:
        out = []
        for line in self.log_of(proc).read_text().splitlines():
            if line.startswith("{"):
                rec = json.loads(line)
                if event is None or rec.get("event") == event:
                    out.append(rec)
        return out

    def close(self) -> None:
        for proc, _ in self.started:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            proc.wait(10)


@pytest.fixture
def procs(url: str, qname: str, tmp_path: Path) -> Iterator[Procs]:
    p = Procs(url, qname, tmp_path)
    yield p
    p.close()


def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def runs(client: redis.Redis, queue: str) -> list[str]:
    return client.lrange(runs_key(queue), 0, -1)


FAST = ["--stalled-interval-ms", "300", "--log-level", "debug"]


@pytest.mark.timeout(60)
def test_sigkill_mid_job_is_recovered_within_lease_plus_interval_and_completes_once(
    procs: Procs, queue: Queue, client: redis.Redis, qname: str
) -> None:
    a = procs.spawn("--lease-ms", "1500", *FAST, name="a")
    job = queue.enqueue("work", {"ms": 400})
    wait_for(lambda: runs(client, qname), 15, "worker A to start the job")
    a.kill()
    killed = time.monotonic()
    a.wait(5)
    b = procs.spawn("--lease-ms", "1500", *FAST, name="b")
    wait_for(lambda: procs.events(b, "recovered"), 15, "B's sweep to recover the job")
    recovered_after = time.monotonic() - killed
    wait_for(lambda: queue.counts()["completed"] == 1, 15, "the job to complete")
    starts = [r for r in runs(client, qname) if r.startswith("start")]
    assert [s.split(":")[2] for s in starts] == [str(a.pid), str(b.pid)]
    assert [r for r in runs(client, qname) if r.startswith("done")] == [f"done:{job}:{b.pid}"]
    print(f"\nSIGKILL mid-job: recovered {recovered_after:.2f} s after the kill")
    # lease 1.5 s + sweep interval 0.3 s, plus the poll slack of this test
    assert recovered_after < 1.5 + 0.3 + 1.0, recovered_after
    c = queue.counts()
    assert (c["completed"], c["recovered"], c["dead"], c["active"], c["pending"]) == (1, 1, 0, 0, 0)
    assert_consistent(client, qname)


@pytest.mark.timeout(60)
def test_sigstop_past_lease_then_resume_gets_lease_lost_and_other_run_is_recorded(
    procs: Procs, queue: Queue, client: redis.Redis, qname: str
) -> None:
    a = procs.spawn("--lease-ms", "30000", *FAST, name="a")  # beats every 10 s
    job = queue.enqueue("work", {"ms": 700})
    wait_for(lambda: runs(client, qname), 15, "worker A to start the job")
    os.kill(a.pid, signal.SIGSTOP)
    expire_leases(client, qname, job)  # A's lease is now past, on the server clock
    b = procs.spawn("--lease-ms", "30000", *FAST, name="b")
    wait_for(lambda: queue.counts()["completed"] == 1, 15, "B to complete the job")
    os.kill(a.pid, signal.SIGCONT)
    lost = wait_for(lambda: procs.events(a, "lease_lost"), 15, "A's late completion refused")
    assert lost[0]["job"] == job and lost[0]["token"] == 1 and lost[0]["via"] == "complete"
    done_b = procs.events(b, "completed")
    assert [(e["job"], e["token"]) for e in done_b] == [(job, 2)]
    assert procs.events(a, "completed") == []
    c = queue.counts()
    assert (c["completed"], c["recovered"], c["active"], c["pending"], c["dead"]) == (1, 1, 0, 0, 0)
    assert where(client, qname, job) == []
    assert_consistent(client, qname)


@pytest.mark.timeout(60)
def test_poison_job_is_dead_after_exactly_max_stalled_stalls(
    procs: Procs, queue: Queue, client: redis.Redis, qname: str
) -> None:
    max_stalled = 3
    # concurrency 1: the poison job (older id, first in FIFO) is claimed alone each time
    args = ["--concurrency", "1", "--lease-ms", "500", "--max-stalled", str(max_stalled), *FAST]
    poison = queue.enqueue("poison", None)
    good = queue.enqueue("work", {"ms": 0})
    deadline = time.monotonic() + 40
    spawned = 0
    while queue.job(poison) is None or queue.job(poison).state != "dead":  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "poison job never dead-lettered"
        proc = procs.spawn(*args, name="p")
        spawned += 1
        while proc.poll() is None and queue.job(poison).state != "dead":  # type: ignore[union-attr]
            time.sleep(0.02)
    row = queue.job(poison)
    assert row is not None
    assert (row.state, row.stalled, row.last_error) == ("dead", max_stalled, "stalled")
    starts = [r for r in runs(client, qname) if r.startswith(f"start:{poison}")]
    assert len(starts) == max_stalled  # delivered exactly max_stalled times, never again
    if proc.poll() is not None:
        procs.spawn(*args, name="p")
    wait_for(lambda: queue.job(good) is None, 15, "the good job to complete")
    assert queue.counts()["dead"] == 1
    assert_consistent(client, qname)


@pytest.mark.timeout(60)
def test_sigterm_mid_batch_loses_nothing_and_spends_no_attempt(
    procs: Procs, queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = [j for j in queue.enqueue_many([("work", {"ms": 600}) for _ in range(8)])]
    a = procs.spawn("--concurrency", "2", "--prefetch", "6", "--lease-ms", "5000", *FAST)
    wait_for(lambda: len(runs(client, qname)) >= 2, 15, "two jobs to start")
    assert queue.counts()["active"] == 8  # 2 running, 6 claimed ahead and not started
    a.send_signal(signal.SIGTERM)
    assert a.wait(15) == 0
    c = queue.counts()
    assert (c["completed"], c["pending"], c["active"], c["dead"]) == (2, 6, 0, 0)
    for job in queue.jobs("pending"):
        assert (job.attempts, job.token) == (0, 1)  # given back: the claim's attempt undone
    assert procs.events(a, "given_back")[0]["count"] == 6
    assert {j.id for j in queue.jobs("pending")} | {
        r.split(":")[1] for r in runs(client, qname)
    } == set(ids)
    assert_consistent(client, qname)


@pytest.mark.timeout(60)
def test_second_signal_exits_at_once_and_the_sweep_recovers(
    procs: Procs, queue: Queue, client: redis.Redis, qname: str
) -> None:
    job = queue.enqueue("work", {"ms": 20_000})
    a = procs.spawn("--lease-ms", "5000", *FAST)
    wait_for(lambda: runs(client, qname), 15, "the job to start")
    a.send_signal(signal.SIGTERM)
    wait_for(lambda: procs.events(a, "draining"), 10, "the drain to begin")
    t0 = time.monotonic()
    a.send_signal(signal.SIGINT)
    assert a.wait(10) == 130
    assert time.monotonic() - t0 < 3
    assert where(client, qname, job) == ["active"]  # left to lapse
    expire_leases(client, qname, job)
    assert queue.sweep_stalled().recovered == [job]
    assert_consistent(client, qname)


def _binaries() -> list[Any]:
    out: list[Any] = [pytest.param(valkey_binary, id="valkey")]
    found = shutil.which("redis-server")
    out.append(pytest.param(lambda: Path(found) if found else None, id="redis"))
    return out


@pytest.mark.timeout(90)
@pytest.mark.parametrize("binary", _binaries())
def test_server_restart_mid_run_worker_resumes_and_completes_each_job_once(
    binary: Callable[[], Path | None], tmp_path: Path, qname: str
) -> None:
    path = binary()
    if path is None:
        if os.environ.get("EMQ_REQUIRE_REDIS") == "1":
            pytest.fail("redis-server is not on the PATH but EMQ_REQUIRE_REDIS=1")
        pytest.skip("redis-server not on the PATH")
    srv = EmbeddedServer(tmp_path / "srv", binary=path)
    url = srv.start()
    procs = Procs(url, qname, tmp_path)
    try:
        n = 400
        with Queue.from_url(url, qname) as q:
            q.enqueue_many([("fast", {"ms": 25}) for _ in range(n)])
        a = procs.spawn("--concurrency", "10", "--lease-ms", "10000", *FAST)
        check = redis.Redis.from_url(url, decode_responses=True)
        wait_for(lambda: int(check.hget(f"emq:{{{qname}}}:metrics", "completed") or 0) > 50,
                 30, "some jobs to complete")  # fmt: skip
        check.close()
        srv.stop()
        time.sleep(0.5)  # the outage itself: the worker must ride it out
        assert a.poll() is None
        srv.start()
        with Queue.from_url(url, qname) as q:
            wait_for(lambda: q.counts()["completed"] >= n, 60, "every job to complete")
            c = q.counts()
            assert (c["completed"], c["pending"], c["active"], c["schedule"], c["dead"]) == (
                n,
                0,
                0,
                0,
                0,
            )
            assert_consistent(q.client, qname)
        assert len(procs.events(a, "outage")) == 1  # logged once per outage
        assert len(procs.events(a, "reconnected")) == 1
    finally:
        procs.close()
        srv.stop()


@pytest.mark.timeout(150)
def test_ten_thousand_jobs_four_workers_random_sigkills(
    procs: Procs, queue: Queue, client: redis.Redis, qname: str
) -> None:
    n, workers = 10_000, 4
    rng = random.Random(7)
    queue.enqueue_many([("fast", {"i": i, "ms": 60}) for i in range(n)])
    args = ["--concurrency", "50", "--lease-ms", "1000", "--stalled-interval-ms", "250"]
    live = [procs.spawn(*args, name="k") for _ in range(workers)]
    kills, t0 = 0, time.monotonic()
    deadline = t0 + 120
    next_kill = t0 + 1.0
    while True:
        c = queue.counts()
        if c["completed"] + c["dead"] == n:
            break
        assert time.monotonic() < deadline, f"run did not finish: {c}"
        if time.monotonic() >= next_kill and kills < 8:
            victim = live.pop(rng.randrange(len(live)))
            victim.kill()
            kills += 1
            live.append(procs.spawn(*args, name="k"))
            next_kill = time.monotonic() + rng.uniform(0.3, 0.6)
        time.sleep(0.05)
    elapsed = time.monotonic() - t0
    c = queue.counts()
    assert c["completed"] + c["dead"] == n
    assert c["dead"] == c["dead_total"]
    assert (c["pending"], c["active"], c["schedule"]) == (0, 0, 0)
    locs = assert_consistent(client, qname)  # none in two places, no row without a place
    assert set(locs["dead"]) == {j.id for j in queue.jobs("dead", 0, 10_000)}
    print(f"\n10k run: {kills} kills, {c['recovered']} recovered, {c['dead']} dead, "
          f"{elapsed:.1f} s")  # fmt: skip
    assert kills >= 3
