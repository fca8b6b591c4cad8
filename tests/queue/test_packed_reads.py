"""Reads of a layout-3 queue whose waiting jobs are partly packed (an entry of ``packed``, no
row, the id in ``ready``), built by hand with raw commands: ``job``, ``counts``, the pending
listing in claim order and its pages, search, the metrics and the invariant checker see a
packed job as the pending job its row would be, and never count ``ready``'s tombstones."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import redis

from emq import AsyncQueue, Queue
from emq.archive.search import SearchQuery, search
from emq.calls.call import packed_row
from emq.model.ids import EPOCH_MS, encode, minted_at_ms
from emq.model.keys import QueueKeys
from emq.observe.prometheus import read_queues
from emq.server.discovery import has_keys

from ..support.helpers import assert_consistent, locations, where

pytestmark = pytest.mark.servers("valkey", "redis")  # raw keys of one queue, no cluster path

TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
MINTED = EPOCH_MS + 86_400_000  # a day after the id epoch


def minted(n: int) -> str:
    """The id minted ``n`` ms after :data:`MINTED` (node 0, sequence 0): ids sort by ``n``."""
    return encode((MINTED + n - EPOCH_MS) << 22)


@dataclass(frozen=True)
class Waiting:
    """The hand-built queue: its ids in claim order, and which are packed."""

    order: list[str]
    packed: dict[str, str]
    tombstone: str


def build(client: redis.Redis, queue: str) -> Waiting:
    """Rows at priority -1, 0 and 5 in ``pending``, three packed jobs between them, a
    tombstone of a claimed job in ``ready``, and the id of the row at priority 0 in ``ready``
    too (it was packed, then unpacked by a call that touched it by id)."""
    k = QueueKeys.of(queue)
    first, p1, row0, p2, gone, p3, last = (minted(n) for n in range(1, 8))
    client.hset(k.meta, "layout", "3")
    for job_id, priority in ((first, -1), (row0, 0), (last, 5)):
        client.hset(k.job(job_id), mapping={"state": "pending", "name": "row.job",
                    "payload": "{}", "priority": str(priority), "max_attempts": "5"})  # fmt: skip
        client.zadd(k.pending, {job_id: priority})
    packed = {
        p1: "send.mail 5  {}",
        p2: f'send.mail 7 {TRACE} {{"to": "a b", "n": [1, 2]}}',
        p3: "other:job/x 3  null",
    }
    client.hset(k.packed, mapping=packed)
    client.rpush(k.ready, p1, row0, gone, p2, p3)
    return Waiting([first, p1, row0, p2, p3, last], packed, gone)


def test_a_packed_entry_decodes_as_the_row_unpack_writes() -> None:
    assert packed_row('a.b 3  {"x": "y z"}') == {
        "state": "pending", "name": "a.b", "payload": '{"x": "y z"}', "priority": "0",
        "max_attempts": "3",
    }  # fmt: skip
    assert packed_row(f"n 1 {TRACE} [1, 2]")["trace"] == TRACE
    assert packed_row("not packed") == {"state": "pending", "payload": "not packed"}


def test_job_reads_a_packed_job_as_its_row(queue: Queue, client: redis.Redis) -> None:
    w = build(client, queue.name)
    packed_id = w.order[3]
    job = queue.job(packed_id)
    assert job is not None
    assert (job.state, job.name, job.payload, job.priority, job.max_attempts) == (
        "pending", "send.mail", {"to": "a b", "n": [1, 2]}, 0, 7,
    )  # fmt: skip
    assert (job.attempts, job.stalled, job.token, job.lane, job.run_at_ms) == (0, 0, 0, None, None)
    assert job.created_at == minted_at_ms(packed_id) == MINTED + 4
    assert job.fields["trace"] == TRACE
    untraced = queue.job(w.order[1])
    assert untraced is not None and "trace" not in untraced.fields
    assert queue.job(w.tombstone) is None
    k = queue.core.keys  # unpack it as a script does: the same Job from its row
    client.hset(k.job(packed_id), mapping=packed_row(w.packed[packed_id]))
    client.zadd(k.pending, {packed_id: 0})
    client.hdel(k.packed, packed_id)
    assert queue.job(packed_id) == job


def test_counts_add_packed_jobs_and_never_ready(queue: Queue, client: redis.Redis) -> None:
    w = build(client, queue.name)
    assert queue.counts()["pending"] == len(w.order) == 6
    assert client.llen(queue.core.keys.ready) == 5  # its length is not a count


def test_pending_lists_in_claim_order_and_pages(queue: Queue, client: redis.Redis) -> None:
    w = build(client, queue.name)
    assert [j.id for j in queue.jobs("pending")] == w.order
    assert [j.id for j in queue.jobs("pending", lane="default")] == w.order
    assert queue.jobs("pending", lane="other") == []
    pages = [queue.jobs("pending", offset, 2) for offset in range(0, 8, 2)]
    assert [j.id for page in pages for j in page] == w.order
    assert [j.id for j in queue.jobs("pending", 1, 3)] == w.order[1:4]
    assert [j.name for j in queue.jobs("pending", 3, 1)] == ["send.mail"]


async def test_the_async_twin_reads_packed_jobs(aqueue: AsyncQueue, client: redis.Redis) -> None:
    w = build(client, aqueue.name)
    try:
        assert [j.id for j in await aqueue.jobs("pending", 2, 3)] == w.order[2:5]
        assert (await aqueue.counts())["pending"] == 6
        assert (await aqueue.job(w.order[3])) == Queue(client, aqueue.name).job(w.order[3])
    finally:
        await aqueue.close()


def test_the_checker_accepts_packed_jobs(queue: Queue, client: redis.Redis) -> None:
    w = build(client, queue.name)
    locs = assert_consistent(client, queue.name)
    assert locs["pending"] == set(w.order) == locations(client, queue.name)["pending"]
    assert where(client, queue.name, w.order[1]) == ["pending"]
    assert where(client, queue.name, w.tombstone) == []


def test_the_checker_refuses_a_packed_id_in_a_set(queue: Queue, client: redis.Redis) -> None:
    w = build(client, queue.name)
    client.zadd(queue.core.keys.active, {w.order[1]: 1})
    client.hset(queue.core.keys.job(w.order[1]), "state", "active")
    assert where(client, queue.name, w.order[1]) == ["active", "pending"]
    with pytest.raises(AssertionError, match="packed and also in active"):
        assert_consistent(client, queue.name)


def test_the_checker_refuses_a_packed_id_with_a_row(queue: Queue, client: redis.Redis) -> None:
    w = build(client, queue.name)
    client.hset(queue.core.keys.job(w.order[3]), "stalled", 1)
    with pytest.raises(AssertionError, match="packed and also has a row"):
        assert_consistent(client, queue.name)


def test_search_metrics_and_discovery_see_packed_jobs(queue: Queue, client: redis.Redis) -> None:
    w = build(client, queue.name)
    hits = search(queue, SearchQuery(name="other:job/x"))
    assert [(h.job_id, h.state) for h in hits] == [(w.order[4], "pending")]
    assert [h.job_id for h in search(queue, SearchQuery(job_id=w.order[3]))] == [w.order[3]]
    (sample,) = read_queues(client, [queue.name], MINTED + 10_000)
    assert sample.sizes["pending"] == 6 and sample.oldest_age_s == 9.999
    k = queue.core.keys
    client.delete(k.pending, k.meta, *(k.job(i) for i in w.order))
    assert has_keys(client, queue.name)  # its packed jobs are left: the queue is not forgotten
