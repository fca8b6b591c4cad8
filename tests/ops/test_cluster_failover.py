"""Failover on a real local cluster (3 primaries, 3 replicas, cluster-node-timeout 2 s): a
producer process enqueuing and three worker processes running while the primary that holds the
queue's slot is SIGKILLed. Its replica takes over; producer and workers carry on by
themselves. With ``durability="replica"`` every acknowledged enqueue ends completed (zero
lost) and no job is in two places; with ``"none"`` the loss, if any, is counted and printed.
The counts are printed with ``-s``. Waits poll with deadlines that only bound a hang."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from emq import Queue
from emq.embedded.cluster import EmbeddedCluster
from emq.model.keys import QueueKeys
from emq.server.clients import sync_client

from ..support.helpers import assert_consistent

pytestmark = pytest.mark.servers("cluster")  # a cluster of its own

HANG = 90.0
TESTS = Path(__file__).parents[1]  # tests/
CLI = "from emq.cli.main import main; main()"
WORKER = ["--concurrency", "10", "--lease-ms", "2000", "--stalled-interval-ms", "500"]


@pytest.fixture(scope="module")
def failover_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    cluster = EmbeddedCluster(tmp_path_factory.mktemp("failover"), primaries=3, replicas=1)
    cluster.start()
    yield cluster
    cluster.stop()


def wait_for(cond: object, what: str, bound: float = HANG) -> None:
    deadline = time.monotonic() + bound
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class Run:
    """The processes of one failover run and what they wrote."""

    def __init__(self, url: str, queue: str, durability: str, tmp: Path) -> None:
        self.dir = tmp
        self.env = dict(os.environ, EMQ_URL=url, EMQ_TEST_RUNS=str(tmp), EMQ_TEST_QUEUE=queue,
                        EMQ_TEST_DURABILITY=durability)  # fmt: skip
        self.env["PYTHONPATH"] = os.pathsep.join(
            [str(TESTS.parent), os.environ.get("PYTHONPATH", "")]
        )
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, name: str, args: list[str]) -> None:
        with (self.dir / f"{name}-{len(self.procs)}.log").open("wb") as log:  # the child's copy
            self.procs.append(subprocess.Popen(
                [sys.executable, *args], env=self.env, stdout=log, stderr=log, cwd=self.dir
            ))  # fmt: skip

    def acked(self) -> list[tuple[float, str]]:
        path = self.dir / "acked.txt"
        lines = path.read_text().splitlines() if path.exists() else []
        return [(float(t), i) for t, i in (line.split() for line in lines if " " in line)]

    def runs(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for path in self.dir.glob("runs-*.txt"):
            out.update(path.read_text().split())
        return out

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait(HANG)


def kill_slot_primary(cluster: EmbeddedCluster, cc: RedisCluster, queue: str) -> int:
    """SIGKILL the primary that owns the queue's slot; returns its port."""
    port = int(cc.get_node_from_key(QueueKeys.of(queue).metrics).port)
    node = next(n for n in cluster.nodes() if n._state()["port"] == port)
    os.kill(node._state()["pid"], signal.SIGKILL)
    return port


def on_the_urls_node(cc: RedisCluster, url: str, base: str) -> str:
    """A queue name whose slot the URL's own node holds, so the kill takes the one node the
    producer and the workers were given: they must find the others by themselves."""
    port = urlparse(url).port
    for i in range(10_000):
        name = f"{base}-{i}"
        if int(cc.get_node_from_key(QueueKeys.of(name).metrics).port) == port:
            return name
    raise AssertionError("no queue name on the URL's node")


def slot_primary_port(cc: RedisCluster, queue: str) -> int | None:
    """The port of the primary the cluster now names for the queue's slot (asked of every node
    the client knows, so a dead one is passed over); None while no node answers."""
    try:
        cc.nodes_manager.initialize()
        return int(cc.get_node_from_key(QueueKeys.of(queue).metrics).port)
    except (redis.RedisError, RedisClusterException):
        return None


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["replica", "none"])
def test_a_primary_killed_mid_run(
    failover_cluster: EmbeddedCluster, durability: str, qname: str, tmp_path: Path
) -> None:
    url = failover_cluster.url()
    cc = sync_client(url, decode_responses=True)
    assert isinstance(cc, RedisCluster)
    qname = on_the_urls_node(cc, url, qname)  # the node every client was given dies
    run = Run(url, qname, durability, tmp_path)
    try:
        run.spawn("producer", ["-m", "tests.support.cluster_procs", "produce"])
        for _ in range(3):
            procs = "tests.support.cluster_procs:worker"
            run.spawn("worker", ["-c", CLI, "worker", procs, *WORKER])
        wait_for(lambda: len(run.runs()) >= 300, "300 jobs run before the kill")
        killed_at, killed = time.time(), kill_slot_primary(failover_cluster, cc, qname)
        wait_for(
            lambda: slot_primary_port(cc, qname) not in (None, killed), "a replica to take over"
        )
        took_over = time.time() - killed_at
        # A supervisor restarts the killed node: it rejoins as the new primary's replica, so
        # WAIT (durability="replica") can be answered again; until then enqueues are retried.
        failover_cluster.start()
        rejoined = time.time() - killed_at
        before = len(run.runs())
        wait_for(lambda: sum(t > killed_at for t, _ in run.acked()) >= 300, "300 enqueues after")
        wait_for(lambda: len(run.runs()) >= before + 300, "300 more jobs run after")
        (tmp_path / "stop").touch()
        run.procs[0].wait(HANG)
        acked = dict((i, t) for t, i in run.acked())
        times = sorted(acked.values())
        paused = max(b - a for a, b in itertools.pairwise(times) if b > killed_at)
        queue = Queue.from_url(url, qname)

        def settled() -> bool:
            counts = queue.counts()
            return all(counts[loc] == 0 for loc in ("pending", "active", "schedule"))

        wait_for(settled, "every surviving job to end")
        fresh = sync_client(url, decode_responses=True)
        runs = run.runs()
        dead = set(fresh.zrange(QueueKeys.of(qname).location("dead"), 0, -1))
        lost = [i for i in acked if i not in runs and i not in dead]
        twice = sum(1 for n in runs.values() if n > 1)
        ran = len(set(runs) & set(acked))
        recovered = sum(
            log.read_text().count('"event": "recovered"') for log in tmp_path.glob("worker-*.log")
        )
        print(
            f"\nfailover ({durability}): {len(acked)} acknowledged, {ran} run, {len(dead)} dead, "
            f"{len(lost)} lost, {twice} run twice, {recovered} lapsed leases recovered by the "
            f"sweep; a replica took over {took_over:.1f} s after "
            f"the kill, the killed node rejoined as a replica at {rejoined:.1f} s, the producer's "
            f"longest pause between two acknowledged enqueues was {paused:.1f} s"
        )
        assert_consistent(fresh, qname)
        if durability == "replica":
            assert lost == [], f"{len(lost)} acknowledged jobs lost"
        fresh.close()
        queue.close()
    finally:
        run.close()
        cc.close()
        failover_cluster.start()
        take_back(failover_cluster)  # the next run starts from the first shape


def take_back(cluster: EmbeddedCluster) -> None:
    """Make the URL's node (the first) a primary again if a failover left it a replica:
    ``CLUSTER FAILOVER`` on it, as an operator restores a cluster's shape."""
    node: Any = redis.Redis.from_url(cluster.url(), decode_responses=True)
    try:
        if node.info("replication")["role"] == "master":
            return
        node.execute_command("CLUSTER", "FAILOVER")
        wait_for(lambda: node.info("replication")["role"] == "master", "the first node back")
    finally:
        node.close()
