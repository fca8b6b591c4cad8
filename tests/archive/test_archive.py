"""The archiver and the floor against real servers: the cycle, MINID at W, the cache key that
takes retention from the scripts, the lease, the floor's schema, and job history.

The helpers at the top (a producer that logs what it did, and the loss check) are shared by
the other ``test_archive_*`` modules."""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from emq import Queue, QueueOptions
from emq.archive import Archive, ArchiveConflict, Floor, FloorError
from emq.model.events import Event
from emq.model.keys import QueueKeys
from emq.queue._sync.stream import read_range

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")

# --- shared helpers -----------------------------------------------------------------------


class Producer:
    """Real traffic (enqueue a batch, claim it, complete most, fail every fifth for good) and
    a log of every event it caused, as (job, event) pairs: the ground truth for loss checks."""

    def __init__(self, url: str, queue: str, batch: int = 20, layout: int = 1) -> None:
        self.q = Queue.from_url(url, queue)
        if layout == 1:  # one entry per event (docs/keyspace.md, Layout versions): the
            # assertions on entries below count events; layout 2 is covered where it says so
            self.q.client.hset(self.q.core.keys.meta, "layout", "1")
        self.batch = batch
        self.expected: Counter[tuple[str, str]] = Counter()
        self.rounds = 0

    def step(self) -> None:
        ids = self.q.enqueue_many([("work", {"n": self.rounds, "i": i}) for i in range(self.batch)])
        self.expected.update((i, "enqueued") for i in ids)
        claimed = self.q.claim(self.batch, lease_ms=60_000)
        self.expected.update((c.id, "claimed") for c in claimed)
        done = [(c.id, c.token) for c in claimed if not c.id.endswith(("0", "5"))]
        failed = [
            (c.id, c.token, "boom", False, None) for c in claimed if c.id.endswith(("0", "5"))
        ]
        if done:
            ok = self.q.complete_many(done)
            self.expected.update((i, "completed") for (i, _), k in zip(done, ok, strict=True) if k)
        if failed:
            where = self.q.fail_many(failed)
            self.expected.update((f[0], w) for f, w in zip(failed, where, strict=True))
        self.rounds += 1

    def run(self, rounds: int) -> None:
        for _ in range(rounds):
            self.step()

    def close(self) -> None:
        self.q.close()


def union(client: redis.Redis, queue: str, floor: Floor) -> dict[str, Event]:
    """The floor plus the whole live stream, by stream id."""
    out = {e.id: e for e in floor.all_events()}
    out.update((e.id, e) for e in read_range(client, QueueKeys.of(queue)))
    return out


Pairs = Counter[tuple[str, str]]


def loss(client: redis.Redis, queue: str, floor: Floor, expected: Pairs) -> tuple[Pairs, Pairs]:
    """(missing, extra): what the producer caused that neither the floor nor the live stream
    holds, and what they hold more than once or that nobody caused."""
    got = Counter((e.job or "", e.event) for e in union(client, queue, floor).values())
    got = Counter({k: v for k, v in got.items() if k[0]})  # queue events are not logged
    return expected - got, got - expected


@pytest.fixture
def floor_path(tmp_path: Path) -> Path:
    return tmp_path / "floor" / "q.sqlite3"


@pytest.fixture
def producer(url: str, qname: str) -> Iterator[Producer]:
    p = Producer(url, qname)
    yield p
    p.close()


# --- the cycle ----------------------------------------------------------------------------


def test_first_cycle_takes_retention_before_anything_is_read(
    queue: Queue, client: redis.Redis, floor_path: Path
) -> None:
    seen: list[tuple[str, bool]] = []
    key = queue.core.keys.events_archived

    def hook(point: str) -> None:
        seen.append((point, bool(client.exists(key))))

    a = Archive(queue, floor_path, hook=hook)
    r = a.cycle()
    assert (r.read, r.folded, r.watermark, r.trimmed) == (0, 0, None, 0)
    assert seen[0] == ("claimed", True)  # the cache exists before the first read
    assert client.get(key) == "0-0"
    a.close()


def test_scripts_stop_trimming_while_the_cache_exists(
    url: str, qname: str, client: redis.Redis, floor_path: Path
) -> None:
    small = Queue.from_url(url, qname, options=QueueOptions(events_maxlen=10))
    client.hset(small.core.keys.meta, "layout", "1")  # entries counted below: one per event
    small.enqueue_many([("n", i) for i in range(300)])
    assert client.xlen(small.core.keys.events) < 300  # capped by the scripts' MAXLEN ~
    small.obliterate()
    client.hset(small.core.keys.meta, "layout", "1")
    a = Archive(small, floor_path)
    a.cycle()
    small.enqueue_many([("n", i) for i in range(300)])
    assert client.xlen(small.core.keys.events) == 300  # the archiver owns retention now
    a.catch_up()
    assert a.floor.count() == 300
    a.release()  # deleting the cache hands retention back
    small.enqueue_many([("n", i) for i in range(300)])
    assert client.xlen(small.core.keys.events) < 300
    a.close()
    small.close()


def test_minid_at_w_trims_everything_below_w_and_keeps_w(
    queue: Queue, client: redis.Redis, producer: Producer, floor_path: Path
) -> None:
    producer.run(10)
    a = Archive(queue, floor_path, batch=70)
    totals = a.catch_up()
    w = a.floor.watermark()
    assert w is not None and totals.folded == a.floor.count() == sum(producer.expected.values())
    entries = client.xrange(queue.core.keys.events)
    assert [i for i, _ in entries] == [w]  # W itself stays: already folded, the continuity witness
    assert client.get(queue.core.keys.events_archived) == w
    assert loss(client, queue.name, a.floor, producer.expected) == (Counter(), Counter())
    again = a.cycle()
    assert (again.read, again.folded, again.trimmed, again.gap) == (0, 0, 0, None)
    a.close()


def test_a_cycle_is_bounded_by_its_batch(
    queue: Queue, producer: Producer, floor_path: Path
) -> None:
    producer.run(5)
    a = Archive(queue, floor_path, batch=40, chunk=15)
    r = a.cycle()
    assert (r.read, r.folded) == (40, 40)
    assert r.trimmed == 39  # every entry below the new W
    a.close()


def test_a_second_floor_cannot_archive_the_same_queue(
    queue: Queue, producer: Producer, tmp_path: Path
) -> None:
    producer.run(2)
    first = Archive(queue, tmp_path / "a.sqlite3")
    first.cycle()
    other = Archive(queue, tmp_path / "b.sqlite3")
    with pytest.raises(ArchiveConflict, match="another floor"):
        other.cycle()
    assert other.floor.count() == 0
    reopened = Archive(queue, tmp_path / "a.sqlite3")  # the same floor after a restart: fine
    reopened.cycle()
    first.release_lease()
    assert queue.client.get(queue.core.keys.events_archiver) is None
    other.cycle()  # the lease is free: the other floor may take over
    for a in (first, other, reopened):
        a.close()


def test_a_stream_entry_below_w_that_the_floor_lacks_stops_the_trim(
    queue: Queue, client: redis.Redis, producer: Producer, floor_path: Path
) -> None:
    producer.run(2)
    a = Archive(queue, floor_path)
    a.catch_up()
    client.delete(queue.core.keys.events)
    client.xadd(queue.core.keys.events, {"event": "paused"}, id="1-0")  # below W, never folded
    with pytest.raises(ArchiveConflict, match="never folded"):
        a.cycle()
    assert client.xlen(queue.core.keys.events) == 1
    a.close()


def test_status_reports_w_lag_rows_and_stream(
    queue: Queue, producer: Producer, floor_path: Path
) -> None:
    producer.run(3)
    a = Archive(queue, floor_path, batch=50)
    a.cycle()
    st = a.status()
    total = sum(producer.expected.values())
    assert st["watermark"] == st["cached_watermark"] == st["stream_first"]
    assert st["floor_rows"] == 50 and st["lag"] == total - 50
    assert st["stream_length"] == total - 49 and st["lease_holder"] == st["this_floor"]
    a.close()


def test_run_loop_archives_until_stopped_and_releases_the_lease(
    queue: Queue, producer: Producer, floor_path: Path
) -> None:
    a = Archive(queue, floor_path)
    stop = threading.Event()
    ticks: list[int] = []

    def after(t: object) -> None:
        ticks.append(1)
        if len(ticks) >= 3:
            stop.set()

    producer.run(3)
    thread = threading.Thread(target=a.run, args=(0.01, stop, after))
    thread.start()
    thread.join(60)  # a hang bound only: three 10 ms ticks
    assert not thread.is_alive()
    assert a.floor.count() == sum(producer.expected.values())
    assert queue.client.get(queue.core.keys.events_archiver) is None
    a.close()


# --- the floor ----------------------------------------------------------------------------


def test_floor_schema_is_versioned_wal_and_indexed(floor_path: Path) -> None:
    Floor(floor_path, queue="q").close()
    db = sqlite3.connect(floor_path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 2
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    meta = dict(db.execute("SELECT key, value FROM floor_meta").fetchall())
    assert meta["schema_version"] == "2" and meta["queue"] == "q" and len(meta["floor_id"]) == 32
    cols = [r[1] for r in db.execute("PRAGMA table_info(events)")]
    assert cols == ["ms", "seq", "id", "job", "event", "fields"]
    plan = db.execute("EXPLAIN QUERY PLAN SELECT * FROM events WHERE job = 'x'").fetchall()
    assert "events_by_job" in str(plan)
    plan = db.execute("EXPLAIN QUERY PLAN SELECT * FROM events WHERE ms > 5").fetchall()
    assert "PRIMARY KEY" in str(plan)
    db.execute("PRAGMA user_version = 9")
    db.commit()
    db.close()
    with pytest.raises(FloorError, match="schema 9"):
        Floor(floor_path, queue="q")


def test_floor_belongs_to_one_queue(floor_path: Path) -> None:
    Floor(floor_path, queue="q").close()
    with pytest.raises(FloorError, match="floor of queue 'q'"):
        Floor(floor_path, queue="other")


def test_fold_is_idempotent_by_stream_id_and_w_only_moves_forward(floor_path: Path) -> None:
    f = Floor(floor_path, queue="q")
    batch = [Event(f"100-{i}", "claimed", f"JOB{i}", {"attempts": "1"}) for i in range(5)]
    assert f.fold(batch) == 5
    assert f.fold(batch) == 0
    assert f.fold(batch[:2]) == 0
    assert f.watermark() == "100-4" and f.count() == 5
    assert [e.id for e in f.events_between("100-1", "100-3")] == ["100-2", "100-3"]
    assert f.job_events("JOB3") == [batch[3]]
    f.close()


# --- history ------------------------------------------------------------------------------


def test_history_merges_floor_and_live_tail_without_gap_or_duplicate(
    queue: Queue, client: redis.Redis, floor_path: Path
) -> None:
    job = queue.enqueue("long", {"k": 1})
    a = Archive(queue, floor_path, batch=3)
    for n in range(30):
        (c,) = queue.claim(1)
        queue.delay(c.id, c.token)
        if n % 4 == 0:
            a.cycle()
    final = [e.event for e in queue.history(job, floor=a.floor)]
    assert final == ["enqueued"] + ["claimed", "delayed"] * 30
    assert a.floor.job_events(job) and any(
        e.job == job for e in read_range(client, queue.core.keys)
    )
    a.close()


def test_history_read_while_the_archiver_runs_is_always_a_prefix(
    url: str, queue: Queue, floor_path: Path
) -> None:
    job = queue.enqueue("long", None)
    a = Archive(Queue.from_url(url, queue.name), floor_path, batch=5)
    stop = threading.Event()
    thread = threading.Thread(target=a.run, args=(0.0, stop))
    thread.start()
    snapshots = []
    try:
        for _ in range(60):
            (c,) = queue.claim(1)
            queue.delay(c.id, c.token)
            snapshots.append([e.id for e in queue.history(job, floor=floor_path)])
    finally:
        stop.set()
        thread.join(60)
    full = [e.id for e in queue.history(job, floor=floor_path)]
    assert len(full) == 121 and len(set(full)) == 121
    for snap in snapshots:
        assert snap == full[: len(snap)]
    assert a.floor.count() > 0
    a.close()


def test_history_without_a_floor_refuses_once_the_queue_was_trimmed(
    queue: Queue, floor_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no .emq/floor here
    job = queue.enqueue("x", None)
    assert [e.event for e in queue.history(job)] == ["enqueued"]
    a = Archive(queue, floor_path)
    a.catch_up()
    with pytest.raises(Exception, match="pass floor="):
        queue.history(job)
    assert [e.event for e in queue.history(job, floor=floor_path)] == ["enqueued"]
    a.close()


async def test_async_history_equals_sync_history(url: str, queue: Queue, floor_path: Path) -> None:
    from emq import AsyncQueue

    job = queue.enqueue("x", {"a": 1})
    (c,) = queue.claim(1)
    a = Archive(queue, floor_path, batch=1)
    a.cycle()
    queue.complete(c.id, c.token)
    aq = AsyncQueue.from_url(url, queue.name)
    try:
        got = await aq.history(job, floor=floor_path)
    finally:
        await aq.close()
    assert got == queue.history(job, floor=floor_path)
    assert [e.event for e in got] == ["enqueued", "claimed", "completed"]
    a.close()
