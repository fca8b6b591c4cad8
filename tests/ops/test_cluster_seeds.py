"""A cluster URL with several seed nodes (``redis+cluster://h1:p1,h2:p2/``) on the suite's own
cluster (3 primaries, 3 replicas): a seed that is down is passed over by every entry point; with
every seed down a long-running worker waits (the outage logged once) and starts when a seed
comes back, while a burst run, a producer and the CLI fail at once with one line; and a node
restarted under a producer and workers loses and doubles nothing.

The nodes these tests take down are the shared cluster's, and each test brings them back
(``EmbeddedCluster.start`` returns once every node is up and every replica in sync) before the
next one runs. A replica is taken down where the cluster must keep serving: a seed that is a
replica is as good as any other for reading the slot map. Waits poll with deadlines that only
bound a hang."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from emq import AsyncQueue, Queue, ServerUnreachable, Tasks, Worker, WorkerOptions
from emq.cli.main import cli
from emq.dashboard.app import create_app
from emq.embedded.cluster import EmbeddedCluster
from emq.embedded.standalone import EmbeddedServer
from emq.model.keys import QueueKeys
from emq.server.clients import close_client, is_cluster_client, sync_client

from ..conftest import ClusterServer
from ..support.asgi import served
from ..support.helpers import assert_consistent, log_records

pytestmark = pytest.mark.servers("cluster")

HANG = 60.0  # bounds a hang, never a speed
ROOT = Path(__file__).parents[2]
CLI = "from emq.cli.main import main; main()"
LOCAL = {"host": "127.0.0.1", "accept": "text/html"}  # the dashboard answers loopback only


def wait_for(cond: Callable[[], Any], what: str) -> None:
    deadline = time.monotonic() + HANG
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def cluster(cluster_server: ClusterServer) -> Iterator[EmbeddedCluster]:
    """The suite's cluster, every node running again (and its replicas in sync) after."""
    yield cluster_server.cluster
    cluster_server.cluster.start()


def replica(cluster: EmbeddedCluster) -> int:
    """The index of a node that is a replica now."""
    return next(n.index for n in cluster.status() if n.role == "replica")


def password(cluster: EmbeddedCluster) -> str:
    return cluster.password_file.read_text().strip()


def node(cluster: EmbeddedCluster, index: int) -> EmbeddedServer:
    """Node ``index``, set up to start as the cluster starts it (its primary's password)."""
    return cluster.nodes(password(cluster))[index]


def emq_worker(url: str, qname: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """``emq worker`` with ``EMQ_URL=url`` on ``qname``; its stderr (the JSON log) in ``log``."""
    env = dict(os.environ, EMQ_URL=url)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    with log.open("wb") as err:
        return subprocess.Popen(
            [sys.executable, "-c", CLI, "worker", "tests.support.worker_handlers:handlers",
             "-q", qname, *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip


def events(log: Path) -> list[str]:
    return [r["event"] for r in log_records(log)]


# -- (1) the first seed down ---------------------------------------------------------------


async def test_every_entry_point_starts_through_another_seed_when_the_first_is_down(
    cluster: EmbeddedCluster, qname: str
) -> None:
    """The node named first is down: a producer (sync and asyncio), a task, a worker, the CLI
    (``--url`` and ``EMQ_URL``) and the dashboard read the slot map from the next seed."""
    down = replica(cluster)
    primary = next(n.index for n in cluster.status() if n.role == "primary")
    node(cluster, down).stop()
    url = cluster.seeds_url([down, primary])
    with Queue.from_url(url, qname) as q:
        assert is_cluster_client(q.client)
        q.enqueue_many([("fast", {}) for _ in range(20)])
        aq = AsyncQueue.from_url(url, qname)
        await aq.enqueue_many([("fast", {}) for _ in range(10)])
        await aq.close()
        tasks = Tasks(qname, url=url)

        @tasks.task()
        def fast() -> None:
            return None

        fast.enqueue()
        worker = Worker(qname, url=url, tasks=tasks, options=WorkerOptions(burst=True))
        await worker.run()
        assert worker.stats.completed == 31 and q.counts()["completed"] == 31
        for args, env in (([qname, "--url", url], {}), ([qname], {"EMQ_URL": url})):
            shown = CliRunner().invoke(cli, ["stats", *args, "--json"], env=env)
            assert shown.exit_code == 0 and '"completed": 31' in shown.output, shown.output
        async with served(create_app(url)) as dashboard:
            page = await dashboard.get(f"/queues/{qname}", headers=LOCAL)
            assert page.status_code == 200 and qname in page.text
        assert_consistent(q.client, qname)


# -- (2) every seed down -------------------------------------------------------------------


async def test_with_its_only_seed_down_a_one_off_call_fails_in_one_line(
    cluster: EmbeddedCluster, qname: str
) -> None:
    """A burst run, a producer, the CLI and the dashboard do not wait: one clear line (exit 2
    for a command), no traceback, no password; nothing is written."""
    down = replica(cluster)
    node(cluster, down).stop()
    url, secret = cluster.seeds_url([down]), password(cluster)
    with pytest.raises(ServerUnreachable, match="no node of the cluster") as refused:
        Queue.from_url(url, qname)
    assert secret not in str(refused.value)
    aq = AsyncQueue.from_url(url, qname)
    with pytest.raises(ServerUnreachable):
        await aq.enqueue("fast", {})
    await aq.close()
    burst = Worker(qname, url=url, options=WorkerOptions(burst=True))
    with pytest.raises(ServerUnreachable):
        await burst.run()
    for args in (["stats", qname], ["worker", "tests.support.worker_handlers:handlers",
                                    "-q", qname, "--burst"]):  # fmt: skip
        result = CliRunner().invoke(cli, [*args, "--url", url])
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1, result.output
        assert lines[0].startswith("error: cannot reach any node of the cluster at redis+clu")
        assert secret not in result.output and "Traceback" not in result.output
    async with served(create_app(url)) as dashboard:
        page = await dashboard.get("/", headers=LOCAL)
        assert page.status_code == 503 and secret not in page.text
    live = sync_client(cluster.url(), decode_responses=True)
    assert live.exists(QueueKeys.of(qname).metrics) == 0  # nothing was written
    close_client(live)


@pytest.mark.slow
def test_a_worker_whose_only_seed_is_down_waits_logs_once_and_starts_when_it_is_back(
    cluster: EmbeddedCluster, qname: str, tmp_path: Path
) -> None:
    """The failure seen in a failover run: ``emq worker`` processes whose one named node was
    down exited 2 and left the acknowledged jobs with no worker. Now the worker waits with
    backoff, says so once, and serves once the node is restarted."""
    down = replica(cluster)
    node(cluster, down).stop()
    url, log = cluster.seeds_url([down]), tmp_path / "worker.log"
    worker = emq_worker(url, qname, log)
    try:
        wait_for(lambda: "outage" in events(log), "the outage line")
        assert worker.poll() is None, log.read_text()
        with Queue.from_url(cluster.url(), qname) as q:  # through a node that is up
            q.enqueue_many([("fast", {}) for _ in range(50)])
            time.sleep(0.5)  # a while of backoff, still not a second outage line
            node(cluster, down).start()
            wait_for(lambda: q.counts()["completed"] == 50, "the jobs to be run")
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(HANG) == 0, log.read_text()
            assert_consistent(q.client, qname)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    said = events(log)
    assert said.count("outage") == 1 and said.index("reconnected") < said.index("started")
    (outage,) = log_records(log, "outage")
    assert outage["where"] == "start" and outage["kind"] == "unreachable"
    text = log.read_text()
    assert password(cluster) not in text and "Traceback" not in text


# -- (3) a node restarted mid-run ----------------------------------------------------------


def slot_owner(client: redis.Redis, qname: str) -> int:
    node_of: Any = client
    return int(node_of.get_node_from_key(QueueKeys.of(qname).metrics).port)


@pytest.mark.slow
def test_a_node_restarted_mid_run_loses_and_doubles_nothing(
    cluster: EmbeddedCluster, qname: str, tmp_path: Path
) -> None:
    """A producer and two workers on a seeds URL whose first seed is the primary of the
    queue's slot; that node is restarted (SIGTERM: its AOF flushed) while they run. Every
    acknowledged enqueue ends completed, each run once (no lease lapsed), and no job is in
    two places. If the restart took longer than the node timeout a replica took over: the
    node is made the slot's primary again after, as an operator would."""
    admin = sync_client(cluster.url(), decode_responses=True)
    ports = [n.port for n in cluster.status()]
    home = ports.index(slot_owner(admin, qname))
    url = cluster.seeds_url([home, *(i for i in range(len(ports)) if i != home)])
    env = dict(os.environ, EMQ_URL=url, EMQ_TEST_RUNS=str(tmp_path), EMQ_TEST_QUEUE=qname)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])

    def spawn(name: str, *args: str) -> subprocess.Popen[bytes]:
        with (tmp_path / f"{name}.log").open("wb") as out:
            return subprocess.Popen([sys.executable, *args], cwd=tmp_path, env=env,
                                    stdout=out, stderr=out)  # fmt: skip

    def acked() -> list[str]:
        path = tmp_path / "acked.txt"
        return [ln.split()[1] for ln in path.read_text().splitlines()] if path.exists() else []

    def runs() -> list[str]:
        return [i for p in tmp_path.glob("runs-*.txt") for i in p.read_text().split()]

    procs = [spawn("producer", "-m", "tests.support.cluster_procs", "produce")]
    procs += [spawn(f"worker-{i}", "-c", CLI, "worker", "tests.support.cluster_procs:worker",
                    "--lease-ms", "30000") for i in range(2)]  # fmt: skip
    try:
        wait_for(lambda: len(runs()) >= 200, "200 jobs run before the restart")
        node(cluster, home).stop()
        node(cluster, home).start()
        before = len(acked())
        wait_for(lambda: len(acked()) >= before + 200, "200 enqueues after the restart")
        (tmp_path / "stop").touch()
        assert procs[0].wait(HANG) == 0, (tmp_path / "producer.log").read_text()
        ids = set(acked())
        wait_for(lambda: ids <= set(runs()), "every acknowledged job to run")
        for p in procs[1:]:
            p.send_signal(signal.SIGTERM)
            assert p.wait(HANG) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        cluster.start()
        take_back(cluster, home)
    ran = runs()
    assert len(ran) == len(set(ran)) == len(ids), "a job ran twice, or one not acknowledged"
    counts = Queue(admin, qname).counts()
    assert counts["completed"] == len(ids)
    assert all(counts[loc] == 0 for loc in ("pending", "active", "schedule", "dead"))
    assert_consistent(admin, qname)
    for log in tmp_path.glob("*.log"):
        assert "Traceback" not in log.read_text(), log.read_text()
    close_client(admin)


def take_back(cluster: EmbeddedCluster, index: int) -> None:
    """Make node ``index`` a primary again if a failover left it a replica."""
    client: Any = redis.Redis.from_url(node(cluster, index).url(), decode_responses=True)
    try:
        if client.info("replication")["role"] != "master":
            client.execute_command("CLUSTER", "FAILOVER")
            wait_for(lambda: client.info("replication")["role"] == "master", "the node back")
    finally:
        client.close()
    cluster.start()
