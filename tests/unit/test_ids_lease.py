"""Node numbers are leases: two live processes never mint under the same one."""

from __future__ import annotations

import redis

from emq import Queue
from emq.model.ids import decode
from emq.model.keys import node_key


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


def test_queues_sharing_a_client_mint_distinct_ids_from_many_threads(
    client: redis.Redis, qname: str
) -> None:
    import sys
    import threading

    queues = [Queue(client, f"{qname}-{i}") for i in range(4)]
    for q in queues:
        q.new_ids(1)  # the lease is taken once, before the threads race on the counter
    minted: list[list[str]] = [[] for _ in queues]

    def mint(i: int) -> None:
        for _ in range(200):
            minted[i] += queues[i].new_ids(50)

    threads = [threading.Thread(target=mint, args=(i,)) for i in range(len(queues))]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    every = [i for ids in minted for i in ids]
    assert len(every) == 40_000 and len(set(every)) == 40_000


def test_a_forked_child_takes_its_own_node(url: str, qname: str) -> None:
    """gunicorn --preload and friends fork after the parent has minted: the child must not
    keep minting under the parent's node number."""
    import multiprocessing as mp

    q = Queue.from_url(url, qname)
    parent_node = _node(q.enqueue("x"))
    ctx = mp.get_context("fork")
    out: mp.Queue = ctx.Queue()
    child = ctx.Process(target=lambda: out.put(_node(q.enqueue("x"))))
    child.start()
    child_node = out.get(timeout=30)
    child.join(timeout=30)
    assert child.exitcode == 0
    assert child_node != parent_node
    assert _node(q.enqueue("x")) == parent_node, "the parent keeps its own lease"
    q.close()
