"""``durability="replica"`` on the suite's local cluster (3 primaries, 1 replica each): a flow
whose queues live on different primaries is confirmed, step by step, by the node that ran
each step (docs/guarantees.md, Durability on a cluster). A replica is frozen (SIGSTOP) or cut
off (SIGSTOP and ``CLIENT KILL TYPE replica``) to make one node unable to confirm; it is
thawed in a ``finally`` and the test waits until its primary counts it again."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis
from redis.cluster import RedisCluster

from emq import AsyncQueue, JobSpec, Queue, QueueOptions
from emq.embedded.cluster import EmbeddedCluster
from emq.errors import ReplicasMissing
from emq.model.keys import QueueKeys
from emq.server.durability import NotDurable

from ..support.flows_check import check_flows
from ..support.helpers import assert_consistent

pytestmark = pytest.mark.servers("cluster")

HANG = 60.0
DURABLE = QueueOptions(durability="replica", durability_timeout_ms=5_000)
IMPATIENT = QueueOptions(durability="replica", durability_timeout_ms=300)


def _port(cc: RedisCluster, queue: str) -> int:
    return int(cc.get_node_from_key(QueueKeys.of(queue).metrics).port)


def on_two_primaries(cc: RedisCluster, base: str) -> tuple[str, str]:
    """Two queue names (parent's, children's) whose slots are on different primaries."""
    parent = f"{base}-p"
    for i in range(1_000):
        kids = f"{base}-c{i}"
        if _port(cc, kids) != _port(cc, parent):
            return parent, kids
    raise AssertionError("no two queue names on different primaries")


def _wait(cond: object, what: str) -> None:
    deadline = time.monotonic() + HANG
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@contextmanager
def replica_stopped(cluster: EmbeddedCluster, primary_port: int, cut: bool) -> Iterator[None]:
    """Freeze the replica of the primary on ``primary_port``; ``cut``: also drop its link, so
    the primary counts no replica at all (what a probe sees as a missing replica)."""
    nodes = cluster.nodes()
    primary = next(n for n in nodes if n._state()["port"] == primary_port)
    p = redis.Redis.from_url(primary.url(), decode_responses=True)
    replica = next(
        n for n in nodes
        if redis.Redis.from_url(n.url(), decode_responses=True)
        .info("replication").get("master_port") == primary_port
    )  # fmt: skip
    pid = replica._state()["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        if cut:
            p.execute_command("CLIENT", "KILL", "TYPE", "replica")
            _wait(lambda: int(p.info("replication")["connected_slaves"]) == 0, "the cut")
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
        _wait(lambda: int(p.info("replication")["connected_slaves"]) == 1, "the replica back")
        _wait(lambda: p.execute_command("WAIT", 1, 1_000) == 1, "the replica acknowledging")
        p.close()


def test_a_delivery_is_confirmed_by_the_parents_node(
    cluster_server: object, url: str, client: redis.Redis, qname: str
) -> None:
    """The outbox of the children's queue is delivered to the parent's slot; with the
    parent's replica frozen, the delivery is not confirmed, so the entries stay; once it
    acknowledges again, the next beat delivers them and the parent runs."""
    cluster = cluster_server.cluster  # type: ignore[attr-defined]
    assert isinstance(client, RedisCluster)
    pname, cname = on_two_primaries(client, qname)
    with Queue.from_url(url, pname, options=DURABLE) as parents:
        parts = [JobSpec("part", i, queue=cname) for i in range(3)]
        ids = [parents.enqueue_flow(JobSpec("sum"), parts) for _ in range(2)]
    with Queue.from_url(url, cname, options=IMPATIENT) as kids:
        for job in kids.claim(6):
            kids.complete(job.id, job.token)
        outbox = kids.core.keys.outbox
        assert client.hlen(outbox) == 6
        with replica_stopped(cluster, _port(client, pname), cut=False):
            with pytest.raises(NotDurable, match="0 of the 1 replica"):
                kids.deliver_outbox()
            assert client.hlen(outbox) == 6  # applied on the parent's node, not confirmed: kept
        delivered = kids.deliver_outbox()  # confirmed now; its first send counted already
        assert (delivered.entries, client.hlen(outbox)) == (6, 0)
    with Queue.from_url(url, pname, options=DURABLE) as parents:
        assert {parents.job(i.id).state for i in ids} == {"pending"}
        for job in parents.claim(2):
            parents.complete(job.id, job.token)
        assert parents.counts()["completed"] == 2
        for name in (pname, cname):
            assert_consistent(client, name)
            check_flows(client, name)


@pytest.mark.parametrize("shell", ["sync", "async"])
async def test_a_flow_is_refused_when_a_childs_node_cannot_confirm(
    cluster_server: object, url: str, client: redis.Redis, qname: str, shell: str
) -> None:
    """The children's node has no replica: the flow is refused before its first step, so
    nothing is written in either queue, as a durable enqueue there is refused."""
    cluster = cluster_server.cluster  # type: ignore[attr-defined]
    assert isinstance(client, RedisCluster)
    pname, cname = on_two_primaries(client, f"{qname}-{shell}")
    flow = (JobSpec("sum"), [JobSpec("part", i, queue=cname) for i in range(3)])
    with replica_stopped(cluster, _port(client, cname), cut=True):
        if shell == "sync":
            with (
                Queue.from_url(url, pname, options=DURABLE) as q,
                pytest.raises(ReplicasMissing, match="has 0 connected"),
            ):
                q.enqueue_flow(*flow)
        else:
            async with AsyncQueue.from_url(url, pname, options=DURABLE) as aq:
                with pytest.raises(ReplicasMissing, match="has 0 connected"):
                    await aq.enqueue_flow(*flow)
    for name in (pname, cname):
        keys = QueueKeys.of(name)
        assert list(client.scan_iter(match=keys.prefix + "job:*")) == []  # nothing written
    with Queue.from_url(url, pname, options=DURABLE) as q:  # the replica is back: admitted
        ids = q.enqueue_flow(*flow)
        assert q.job(ids.id).state == "waiting"
    for name in (pname, cname):
        assert_consistent(client, name)
        check_flows(client, name)
