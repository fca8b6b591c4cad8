"""emq on a real local Valkey cluster (3 primaries, 3 replicas): cluster mode detected from any
node's URL, every key of a queue in one slot, scripts reloaded on the owning node after a
flush, queues on every node served by one worker, durability waiting for the slot's replica,
and a queue's slot moved to another node while a worker runs, with no job lost or run twice.
The core, worker and archive suites also run here (each says so: pytest.mark.servers)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import redis
from click.testing import CliRunner
from redis.cluster import RedisCluster
from redis.crc import key_slot

from emq import AsyncQueue, JobSpec, Queue, QueueOptions, Worker, WorkerOptions
from emq.cli.main import cli
from emq.embedded.cluster import EmbeddedCluster
from emq.embedded.standalone import free_port
from emq.errors import InvalidUrl, ServerRefused, UnsafeServer
from emq.model.keys import QueueKeys
from emq.server.clients import is_cluster_client, node_client, sync_client

from ..conftest import ClusterServer
from ..support.helpers import assert_consistent

pytestmark = pytest.mark.servers("cluster")  # clusters of its own, of Valkey and of Redis

HANG = 60.0  # bounds a hang, never a speed


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterServer]:
    """A local cluster of redis-server (3 primaries, 3 replicas), where it is on the PATH."""
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("EMQ_REQUIRE_REDIS") == "1":
            pytest.fail("redis-server is not on the PATH but EMQ_REQUIRE_REDIS=1")
        pytest.skip("redis-server not on the PATH")
    cluster = EmbeddedCluster(
        tmp_path_factory.mktemp("redis-cluster"), primaries=3, replicas=1, binary=binary
    )
    cluster.start()
    yield ClusterServer(cluster)
    cluster.stop()


@pytest.fixture(params=["valkey", "redis"])
def cluster(request: pytest.FixtureRequest) -> ClusterServer:
    """The suite's Valkey cluster, and a Redis cluster of the same shape."""
    name = "cluster_server" if request.param == "valkey" else "redis_cluster"
    found: ClusterServer = request.getfixturevalue(name)
    return found


@pytest.fixture
def curl(cluster: ClusterServer) -> str:
    return cluster.url()


@pytest.fixture
def cc(curl: str) -> Iterator[RedisCluster]:
    c = sync_client(curl, decode_responses=True)
    assert isinstance(c, RedisCluster)
    yield c
    c.close()


def owner(cc: RedisCluster, queue: str) -> str:
    return str(cc.get_node_from_key(QueueKeys.of(queue).metrics).name)


def queues_on_every_primary(cc: RedisCluster, base: str) -> list[str]:
    """One queue name per primary (its slot owned by that primary)."""
    found: dict[str, str] = {}
    i = 0
    while len(found) < len(cc.get_primaries()):
        name = f"{base}-{i}"
        found.setdefault(owner(cc, name), name)
        i += 1
    return sorted(found.values())


def test_any_node_url_is_detected_as_a_cluster(cluster: ClusterServer, qname: str) -> None:
    urls = [node.url() for node in cluster.cluster.nodes()]
    assert len(urls) == 6  # replicas too: any node's URL finds the whole cluster
    for i, u in enumerate(urls):
        with Queue.from_url(u, f"{qname}-{i}") as q:
            assert is_cluster_client(q.client)
            job = q.enqueue("j", i)
            (c,) = q.claim(1, 30_000)
            assert c.id == job
            q.complete(c.id, c.token)
            assert q.counts()["completed"] == 1


def test_the_cluster_switch_in_the_url(curl: str) -> None:
    plain = sync_client(curl + "?cluster=no", decode_responses=True)
    assert isinstance(plain, redis.Redis)
    plain.close()
    with pytest.raises(InvalidUrl, match="cluster=yes or cluster=no"):
        sync_client(curl + "?cluster=maybe")
    with pytest.raises(InvalidUrl) as refused:
        sync_client(curl + "?cluster=x")
    assert urlparse(curl).password not in str(refused.value)


def test_a_user_that_may_not_read_the_slot_map_is_told_which_permissions_to_add(
    curl: str, cc: RedisCluster, qname: str
) -> None:
    user, secret = f"u-{qname}"[:60], "a-long-enough-test-password"
    for node in cc.get_primaries():
        node.redis_connection.acl_setuser(
            user, enabled=True, passwords=[f"+{secret}"], keys=[f"emq:{{{qname}}}:*"],
            commands=["+evalsha", "+info"],
        )  # fmt: skip
    parsed = urlparse(curl)
    url = f"redis://{user}:{secret}@{parsed.hostname}:{parsed.port}/0"
    with pytest.raises(ServerRefused, match=r"\+cluster\|slots \+command") as refused:
        Queue.from_url(url, qname)
    assert secret not in str(refused.value)
    for node in cc.get_primaries():
        node.redis_connection.acl_deluser(user)


def test_the_cli_says_when_no_node_of_a_cluster_answers() -> None:
    url = f"redis://:hunter2-secret@127.0.0.1:{free_port()}/0?cluster=yes"
    result = CliRunner().invoke(cli, ["stats", "--url", url])
    said = result.output
    assert result.exit_code == 2 and "cannot reach any node of the cluster" in said, said
    assert "hunter2" not in result.output and "Traceback" not in result.output


def test_every_key_of_a_queue_lies_in_its_one_slot(cc: RedisCluster, qname: str) -> None:
    """A full lifecycle touching every kind of key; then every node's keyspace is read: the
    queue's keys are all on the node that owns its slot, and all in that slot."""
    q = Queue(cc, qname, options=QueueOptions(result_ttl_ms=60_000))
    q.set_limits(concurrency=3)
    q.set_limits(lane="tenant", concurrency=1, rate=(10, 1000))
    ids = q.enqueue_many(
        [JobSpec("a", 1), JobSpec("b", 2, lane="tenant"), JobSpec("c", 3, delay_ms=60_000),
         JobSpec("d", 4, key="dedup"), JobSpec("e", 5, priority=-2), JobSpec("f", 6)]
    )  # fmt: skip
    q.repeat("nightly", "n", every_ms=3_600_000)
    claimed = q.claim(3, 30_000)
    q.complete_with_result(claimed[0].id, claimed[0].token, {"ok": 1})
    q.fail(claimed[1].id, claimed[1].token, "boom", retry=False)
    q.cancel(ids[5], "no longer wanted")
    assert q.result(claimed[0].id) == {"ok": 1}
    slot = key_slot(QueueKeys.of(qname).metrics.encode())
    home = owner(cc, qname)
    found: Counter[str] = Counter()
    for node in cc.get_primaries():
        for key in node.redis_connection.scan_iter(match=f"*{qname}*", count=1000):
            assert key_slot(key.encode()) == slot, key
            found[node.name] += 1
    assert set(found) == {home} and found[home] >= 10, found
    assert_consistent(cc, qname)


def test_scripts_are_reloaded_on_the_owning_node_after_a_flush(
    curl: str, cc: RedisCluster, qname: str
) -> None:
    durable = QueueOptions(durability="replica", durability_timeout_ms=10_000)
    with Queue.from_url(curl, qname, options=durable) as q:
        q.enqueue("warm", 0)
        node_client(cc, QueueKeys.of(qname).metrics).script_flush()
        job = q.enqueue("after", 1)  # the durable pipeline: EVALSHA + WAIT on the node
        node_client(cc, QueueKeys.of(qname).metrics).script_flush()
        q.enqueue_many([("many", i) for i in range(2500)])  # pipelined chunks
        node_client(cc, QueueKeys.of(qname).metrics).script_flush()
        claimed = q.claim(10, 30_000)
        assert claimed[0].id != job or claimed[0].name == "after"
        for c in claimed:
            q.complete(c.id, c.token)
        assert q.counts()["completed"] == 10

    async def run_async() -> None:
        aq = AsyncQueue.from_url(curl, qname)
        try:
            node_client(cc, QueueKeys.of(qname).metrics).script_flush()
            await aq.enqueue("async", 2)
            assert (await aq.counts())["pending"] == 2 + 2500 - 10 + 1
        finally:
            await aq.close()

    asyncio.run(run_async())


def test_replica_durability_waits_on_the_queues_own_node(
    curl: str, cc: RedisCluster, qname: str
) -> None:
    with Queue.from_url(curl, qname, options=QueueOptions(durability="replica")) as q:
        q.enqueue("j", 1)
        assert q.counts()["pending"] == 1
    too_many = QueueOptions(durability="replica", durability_replicas=2)
    q2 = Queue.from_url(curl, qname + "-2", options=too_many)
    with q2, pytest.raises(UnsafeServer, match="replica"):
        q2.enqueue("j", 1)
    assert not list(cc.scan_iter(match=f"*{qname}-2*"))  # refused before any key was written


async def test_one_worker_serves_queues_on_every_primary(
    curl: str, cc: RedisCluster, qname: str
) -> None:
    names = queues_on_every_primary(cc, qname)
    assert len({owner(cc, n) for n in names}) == 3
    for n in names:
        with Queue.from_url(curl, n) as q:
            q.enqueue_many([("job", i) for i in range(50)])
    seen: list[tuple[str, int]] = []
    w = Worker(names, url=curl, options=WorkerOptions(burst=True, concurrency=20))

    @w.handler("job")
    def job(payload: int, ctx: Any) -> None:
        seen.append((ctx.queue, payload))

    await asyncio.wait_for(w.run(), HANG)
    assert Counter(q for q, _ in seen) == {n: 50 for n in names}
    for n in names:
        assert_consistent(cc, n)


def _migrate_slot(cc: RedisCluster, queue: str) -> tuple[str, str]:
    """Move the queue's slot to another primary with Valkey's atomic slot migration; returns
    (from, to) node names once the cluster routes the slot to its new owner."""
    slot = key_slot(QueueKeys.of(queue).metrics.encode())
    source = cc.get_node_from_key(QueueKeys.of(queue).metrics)
    target = next(n for n in cc.get_primaries() if n.name != source.name)
    target_id = target.redis_connection.execute_command("CLUSTER", "MYID")
    source.redis_connection.execute_command(
        "CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", slot, slot, "NODE", target_id
    )
    deadline = time.monotonic() + HANG
    while True:
        slots = target.redis_connection.execute_command("CLUSTER", "SLOTS")
        if any(int(lo) <= slot <= int(hi) and int(n[1]) == target.port for lo, hi, n, *_ in
               slots):  # fmt: skip
            return source.name, target.name
        assert time.monotonic() < deadline, "the slot never moved"
        time.sleep(0.05)


def test_a_queues_slot_moves_to_another_node_mid_run(
    cluster: ClusterServer, curl: str, cc: RedisCluster, qname: str
) -> None:
    """A producer enqueuing and a worker processing while the queue's slot migrates (Valkey's
    atomic slot migration): every acknowledged job runs exactly once, none is lost."""
    if "MIGRATESLOTS" not in str(cc.get_default_node().redis_connection.execute_command(
            "CLUSTER", "HELP")):  # fmt: skip
        pytest.skip("no atomic slot migration on this server (Valkey 9 has it)")
    acked: list[str] = []
    runs: Counter[str] = Counter()
    stop = threading.Event()

    def produce() -> None:
        with Queue.from_url(curl, qname) as q:
            while not stop.is_set() and len(acked) < 3000:
                acked.extend(q.enqueue_many([("j", None) for _ in range(20)]))

    producer = threading.Thread(target=produce)
    producer.start()
    w = Worker([qname], url=curl, options=WorkerOptions(concurrency=20, lease_ms=5_000))

    @w.handler("j")
    def j(payload: Any, ctx: Any) -> None:
        runs[ctx.id] += 1

    async def scenario() -> tuple[str, str]:
        task = asyncio.create_task(w.run())
        while len(runs) < 200:
            await asyncio.sleep(0.01)
        moved = await asyncio.to_thread(_migrate_slot, cc, qname)
        await asyncio.to_thread(producer.join, HANG)
        deadline = time.monotonic() + HANG
        while len(runs) < len(acked):
            assert time.monotonic() < deadline, (len(runs), len(acked))
            await asyncio.sleep(0.05)
        w.stop()
        await asyncio.wait_for(task, HANG)
        return moved

    try:
        source, target = asyncio.run(scenario())
    finally:
        stop.set()
        producer.join(HANG)
    fresh = sync_client(curl, decode_responses=True)  # its slot map is read now
    assert source != target and owner(fresh, qname) == target  # type: ignore[arg-type]
    fresh.close()
    assert set(runs) == set(acked) and max(runs.values()) == 1
    print(f"\nslot moved {source} -> {target} mid-run: {len(acked)} acknowledged, "
          f"{len(runs)} run once each")  # fmt: skip
    assert_consistent(cc, qname)
    with Queue.from_url(curl, qname) as q:
        assert q.counts()["completed"] == len(acked)


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_the_demo_loses_nothing_on_a_cluster(cluster_server: ClusterServer, tmp_path: Path) -> None:
    """`emq demo --url <a node>`: its worker processes, kill, freeze and poison job on the
    cluster; every check of its summary holds."""
    env = {k: v for k, v in os.environ.items() if k not in ("EMQ_URL", "EMQ_HOME")}
    done = subprocess.run(
        [sys.executable, "-c", "from emq.cli.main import main; main()", "demo", "--json",
         "--url", cluster_server.url()],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["ok"] is True and all(c["ok"] for c in summary["checks"]), summary
