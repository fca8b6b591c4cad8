"""The worker as real processes: SIGKILL, SIGSTOP, poison jobs, SIGTERM, a server restart,
and a 10,000-job run with random kills. Each test is bounded; waits poll a condition on
the server with a deadline, never sleep for luck.
"""

from __future__ import annotations

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
from emq.embedded.standalone import EmbeddedServer, valkey_binary

from ..support.helpers import assert_consistent, expire_leases, log_records, where
from ..support.worker_handlers import open_gate, runs_key

TESTS = Path(__file__).parents[1]  # tests/
CLI = "from emq.cli.main import main; main()"
# Every wait polls for a condition on the server or in a log; this deadline only bounds a
# hang (a worker that never does the thing), never a speed: a busy machine must still pass.
HANG = 60.0


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
                [sys.executable, "-c", CLI, "worker", f"tests.support.worker_handlers:{target}",
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
        return log_records(self.log_of(proc), event)

    def close(self) -> None:
        for proc, _ in self.started:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            proc.wait(HANG)


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


@pytest.mark.slow
def test_sigkill_mid_job_is_recovered_after_its_lease_and_completes_once(
    procs: Procs, queue: Queue, client: redis.Redis, qname: str
) -> None:
    """Recovered by the other worker's sweep, never while A's last lease was still live (on
    the server clock), and run to completion once. How soon after the lease it is recovered
    is a speed: ``benchmarks/timing_bounds.py`` measures it."""
    a = procs.spawn("--lease-ms", "1500", *FAST, name="a")
    job = queue.enqueue("work", {"ms": 400})
    wait_for(lambda: runs(client, qname), HANG, "worker A to start the job")
    a.kill()
    a.wait(HANG)
    lease_end = client.zscore(queue.core.keys.active, job)  # A's last beat: nobody extends it
    assert lease_end is not None
    b = procs.spawn("--lease-ms", "1500", *FAST, name="b")
    wait_for(lambda: procs.events(b, "recovered"), HANG, "B's sweep to recover the job")
    wait_for(lambda: queue.counts()["completed"] == 1, HANG, "the job to complete")
    starts = [r for r in runs(client, qname) if r.startswith("start")]
    assert [s.split(":")[2] for s in starts] == [str(a.pid), str(b.pid)]
    assert [r for r in runs(client, qname) if r.startswith("done")] == [f"done:{job}:{b.pid}"]
    (stalled,) = [e for e in queue.events() if e.event == "stalled" and e.job == job]
    assert stalled.time_ms >= lease_end  # recovered only once the lease had expired
    print(f"\nSIGKILL mid-job: recovered {stalled.time_ms - lease_end} ms after the lease end")
    c = queue.counts()
    assert (c["completed"], c["recovered"], c["dead"], c["active"], c["pending"]) == (1, 1, 0, 0, 0)
    assert_consistent(client, qname)


@pytest.mark.slow
def test_sigstop_past_lease_then_resume_gets_lease_lost_and_other_run_is_recorded(
    procs: Procs, queue: Queue, client: redis.Redis, qname: str
) -> None:
    a = procs.spawn("--lease-ms", "30000", *FAST, name="a")  # beats every 10 s
    job = queue.enqueue("work", {"ms": 700})
    wait_for(lambda: runs(client, qname), HANG, "worker A to start the job")
    os.kill(a.pid, signal.SIGSTOP)
    expire_leases(client, qname, job)  # A's lease is now past, on the server clock
    b = procs.spawn("--lease-ms", "30000", *FAST, name="b")
    wait_for(lambda: queue.counts()["completed"] == 1, HANG, "B to complete the job")
    os.kill(a.pid, signal.SIGCONT)
    lost = wait_for(lambda: procs.events(a, "lease_lost"), HANG, "A's late completion refused")
    assert lost[0]["job"] == job and lost[0]["token"] > 0 and lost[0]["via"] == "complete"
    done_b = procs.events(b, "completed")
    assert [e["job"] for e in done_b] == [job] and done_b[0]["token"] > lost[0]["token"]
    assert procs.events(a, "completed") == []
    c = queue.counts()
    assert (c["completed"], c["recovered"], c["active"], c["pending"], c["dead"]) == (1, 1, 0, 0, 0)
    assert where(client, qname, job) == []
    assert_consistent(client, qname)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_poison_job_is_dead_after_exactly_max_stalled_stalls(
    procs: Procs, queue: Queue, client: redis.Redis, qname: str
) -> None:
    max_stalled = 3
    # concurrency 1: the poison job (older id, first in FIFO) is claimed alone each time
    args = ["--concurrency", "1", "--lease-ms", "500", "--max-stalled", str(max_stalled), *FAST]
    poison = queue.enqueue("poison", None)
    good = queue.enqueue("work", {"ms": 0})
    deadline = time.monotonic() + 2 * HANG  # a hang bound for the whole loop of spawns
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
    wait_for(lambda: queue.job(good) is None, HANG, "the good job to complete")
    assert queue.counts()["dead"] == 1
    assert_consistent(client, qname)


@pytest.mark.slow
def test_sigterm_mid_batch_loses_nothing_and_spends_no_attempt(
    procs: Procs, queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = [j for j in queue.enqueue_many([("gated", None) for _ in range(8)])]
    a = procs.spawn("--concurrency", "2", "--prefetch", "6", "--lease-ms", "5000", *FAST)
    wait_for(lambda: len(runs(client, qname)) >= 2, HANG, "two jobs to start")
    assert queue.counts()["active"] == 8  # 2 running (held at the gate), 6 claimed ahead
    a.send_signal(signal.SIGTERM)
    wait_for(lambda: procs.events(a, "given_back"), HANG, "the unstarted jobs to be given back")
    open_gate(client, qname, 2)  # the running two finish inside the grace period
    assert a.wait(HANG) == 0
    c = queue.counts()
    assert (c["completed"], c["pending"], c["active"], c["dead"]) == (2, 6, 0, 0)
    for job in queue.jobs("pending"):
        assert job.attempts == 0 and job.token > 0  # given back: the claim's attempt undone
    assert procs.events(a, "given_back")[0]["count"] == 6
    assert {j.id for j in queue.jobs("pending")} | {
        r.split(":")[1] for r in runs(client, qname)
    } == set(ids)
    assert_consistent(client, qname)


@pytest.mark.slow
def test_second_signal_exits_at_once_and_the_sweep_recovers(
    procs: Procs, queue: Queue, client: redis.Redis, qname: str
) -> None:
    """The job is held at its gate and the grace period is 10 minutes: the worker exits
    within HANG of the second signal only because that signal skips the drain."""
    job = queue.enqueue("gated", None)
    a = procs.spawn("--lease-ms", "5000", "--grace-ms", "600000", *FAST)
    wait_for(lambda: runs(client, qname), HANG, "the job to start")
    a.send_signal(signal.SIGTERM)
    wait_for(lambda: procs.events(a, "draining"), HANG, "the drain to begin")
    a.send_signal(signal.SIGINT)
    assert a.wait(HANG) == 130
    assert where(client, qname, job) == ["active"]  # left to lapse
    expire_leases(client, qname, job)
    assert queue.sweep_stalled().recovered == [job]
    assert_consistent(client, qname)


def _binaries() -> list[Any]:
    out: list[Any] = [pytest.param(valkey_binary, id="valkey")]
    found = shutil.which("redis-server")
    out.append(pytest.param(lambda: Path(found) if found else None, id="redis"))
    return out


@pytest.mark.slow
@pytest.mark.timeout(240)
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
                 HANG, "some jobs to complete")  # fmt: skip
        check.close()
        srv.stop()
        time.sleep(0.5)  # the outage itself: the worker must ride it out
        assert a.poll() is None
        srv.start()
        with Queue.from_url(url, qname) as q:
            wait_for(lambda: q.counts()["completed"] >= n, HANG, "every job to complete")
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


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_ten_thousand_jobs_four_workers_random_sigkills(
    procs: Procs, queue: Queue, client: redis.Redis, qname: str
) -> None:
    n, workers = 10_000, 4
    rng = random.Random(7)
    queue.enqueue_many([("fast", {"i": i, "ms": 60}) for i in range(n)])
    args = ["--concurrency", "50", "--lease-ms", "1000", "--stalled-interval-ms", "250"]
    live = [procs.spawn(*args, name="k") for _ in range(workers)]
    kills, t0 = 0, time.monotonic()
    deadline = t0 + 3 * HANG  # a hang bound: the run takes seconds on an idle machine
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
