"""Node numbers are leases: two live processes never mint under the same one."""

from __future__ import annotations

import redis

from emq import Queue
from emq.ids import decode
from emq.keys import node_key


def _node(job_id: str) -> int:
    return (decode(job_id) >> 12) & 1023


def test_each_connection_pool_leases_its_own_node(
    url: str, qname: str, client: redis.Redis
) -> None:
    a = Queue.from_url(url, qname)
    b = Queue.from_url(url, qname)
    ia, ib = a.enqueue("x"), b.enqueue("x")
    na, nb = _node(ia), _node(ib)
    assert na != nb
    assert client.get(node_key(na)) != client.get(node_key(nb))
    assert 0 < client.pttl(node_key(na)) <= 60_000
    a.close()
    b.close()


def test_queues_on_one_client_share_one_node(client: redis.Redis, qname: str) -> None:
    a, b = Queue(client, qname), Queue(client, qname + "-2")
    assert _node(a.enqueue("x")) == _node(b.enqueue("x"))


def test_a_taken_node_is_never_overwritten(url: str, qname: str, client: redis.Redis) -> None:
    q = Queue.from_url(url, qname)
    first = q.enqueue("x")
    node = _node(first)
    client.set(node_key(node), "someone-else", px=60_000)  # as if our lease lapsed and was taken
    q._minter._renew_after = 0  # force a renewal on the next mint
    second = q.enqueue("x")
    assert _node(second) != node
    assert client.get(node_key(node)) == "someone-else"
    q.close()
