"""Keyspace layout 2: one stream entry per script call (docs/events.md, Entries), read back by
every reader as one event per job at its own position, and ``emq upgrade`` moving a queue there
(docs/keyspace.md, Layout versions)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from emq import EmqError, Queue, QueueOptions
from emq.archive import Archive
from emq.cli.main import cli
from emq.lua.scripts import run
from emq.model.events import Event, parse_id
from emq.model.layout import LAYOUT
from emq.model.records import Answer
from emq.observe.registry import WORKERS, worker_key

from .test_headers import SAMPLES

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")

CLOCKED = re.compile(r"^\d{10,}$")  # tokens, deadlines, until: the server clock's, not the story's


def story(events: list[Event]) -> list[tuple[str, str, dict[str, str]]]:
    """What happened, without the clock: the same calls tell the same story in both layouts."""
    jobs: dict[str | None, str] = {None: ""}  # ids minted in the run: named by first sight
    return [
        (
            e.event,
            jobs.setdefault(e.job, f"job{len(jobs)}"),
            {k: "<t>" if CLOCKED.match(v) else v for k, v in e.fields.items()},
        )
        for e in events
    ]


def layout_one(client: redis.Redis, q: Queue) -> Queue:
    """``q`` as a queue of layout 1: an emq before layout 2 made it (its meta without the
    field) or stamped it 1; either way this emq serves it in layout 1 until upgraded."""
    client.hset(q.core.keys.meta, "layout", "1")
    return q


def test_a_call_of_many_jobs_is_one_entry_and_each_job_has_its_position(
    queue: Queue, client: redis.Redis
) -> None:
    ids = [str(j) for j in queue.enqueue_many([("send", {"n": n}) for n in range(5)])]
    assert client.xlen(queue.core.keys.events) == 1
    assert client.hget(queue.core.keys.meta, "layout") == str(LAYOUT), "a new queue: layout 2"
    events = list(queue.events())
    assert [(e.event, e.job) for e in events] == [("enqueued", i) for i in ids]
    ms, seq = parse_id(events[0].id)
    assert [e.id for e in events] == [f"{ms}-{seq + i}" for i in range(5)]
    queue.enqueue("one")  # a call of one event is an entry of the usual shape, above them all
    (last,) = client.xrevrange(queue.core.keys.events, count=1)
    assert last[1]["event"] == "enqueued" and parse_id(last[0]) > parse_id(events[-1].id)


def test_a_reader_resumes_inside_an_entry_with_exactly_the_events_above(queue: Queue) -> None:
    queue.enqueue_many([("send", None)] * 4)
    queue.enqueue_many([("send", None)] * 3)
    every = list(queue.events())
    for cut in range(len(every)):
        assert list(queue.events(after=every[cut].id)) == every[cut + 1 :], cut
    assert list(queue.events(after="$")) == []


@pytest.mark.parametrize("name", sorted(set(SAMPLES) - {"node_lease", "upgrade"}))
def test_every_script_tells_the_same_story_in_both_layouts(
    name: str, url: str, client: redis.Redis
) -> None:
    call = SAMPLES[name]
    queue = re.match(r"emq:\{(.+?)\}:", call.keys[0])[1]  # type: ignore[index]
    told = []
    for layout in (1, LAYOUT):
        q = Queue.from_url(url, queue)
        try:
            if layout == 1:
                layout_one(client, q)
            first = SAMPLES["enqueue"]  # the sample job, so most calls find something to move
            run(q.client, first.script, first.keys, first.args)
            q.claim(count=2, lease_ms=60_000)
            q.enqueue("x")
            try:
                run(q.client, call.script, call.keys, call.args)
            except EmqError as exc:  # a refusal is the same in both layouts
                told.append([("refused", type(exc).__name__, {})])
                continue
            told.append(story(list(q.events())))
        finally:
            q.obliterate(force=True)
            for key in client.scan_iter(match=f"{q.core.keys.prefix}*"):
                client.delete(key)  # the resend marks too: the next round sends the same calls
            q.close()
    assert told[0] == told[1]


def test_the_event_cap_counts_jobs_events(url: str, qname: str, client: redis.Redis) -> None:
    q = Queue.from_url(url, qname, options=QueueOptions(events_maxlen=300))
    try:
        for _ in range(20):
            q.enqueue_many([("send", None)] * 100)
        kept = len(list(q.events()))
        assert 300 <= kept <= 300 + 300 // 10 + 100 + 100, kept  # the cap, its slack, one entry
        assert client.xlen(q.core.keys.events) < 10
    finally:
        q.obliterate(force=True)
        q.close()


def test_the_archiver_folds_an_entry_it_reads_in_part_and_trims_none_of_it_early(
    queue: Queue, tmp_path: Path
) -> None:
    jobs = [str(j) for j in queue.enqueue_many([("send", None)] * 7)]
    held = queue.claim(count=7, lease_ms=60_000)
    archive = Archive(queue, tmp_path / "floor.db", batch=3)  # cuts both entries in pieces
    totals = archive.catch_up()
    assert totals.folded == 14
    queue.complete_many([(j.id, j.token) for j in held])
    archive.catch_up()
    for job in jobs:
        names = [e.event for e in queue.history(job, floor=tmp_path / "floor.db")]
        assert names == ["enqueued", "claimed", "completed"], names
    archive.close()


def test_upgrade_moves_a_queue_once_and_keeps_its_jobs_and_events(
    queue: Queue, url: str, client: redis.Redis
) -> None:
    layout_one(client, queue)
    before = [str(queue.enqueue("send")) for _ in range(3)]
    old = list(queue.events())
    runner = CliRunner()
    out = runner.invoke(cli, ["upgrade", queue.name, "--json", "--url", url])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output) == {"queue": queue.name, "from": 1, "to": LAYOUT}
    again = runner.invoke(cli, ["upgrade", queue.name, "--url", url])
    assert again.exit_code == 0 and "already in keyspace layout" in again.output
    assert list(queue.events()) == old
    held = queue.claim(count=3, lease_ms=60_000)
    assert sorted(j.id for j in held) == sorted(before)
    assert queue.complete_many([(j.id, j.token) for j in held]) == [Answer.COMPLETED] * 3
    assert [e.event for e in queue.history(before[0])] == ["enqueued", "claimed", "completed"]


def test_upgrade_is_refused_while_an_older_worker_serves_the_queue(
    queue: Queue, client: redis.Redis, url: str
) -> None:
    entry: dict[str, Any] = {  # what a worker of the release before layout 2 writes
        "id": "old-host:41:abcd", "host": "old-host", "pid": 41, "queues": [queue.name],
        "concurrency": 4, "running": 0, "started_ms": 1, "beat_ms": 2, "version": "0.1.0",
    }  # fmt: skip
    layout_one(client, queue)
    client.set(worker_key(entry["id"]), json.dumps(entry), px=30_000)
    client.zadd(WORKERS, {entry["id"]: time.time() * 1000 + 30_000})
    try:
        out = CliRunner().invoke(cli, ["upgrade", queue.name, "--url", url])
        assert out.exit_code == 3, out.output  # refused: a worker is live (docs/cli.md)
        told = [line for line in out.output.splitlines() if line]
        assert len(told) == 1 and told[0].startswith("error: ") and "old-host:41" in told[0]
        assert client.hget(queue.core.keys.meta, "layout") == "1", "nothing was written"
        forced = CliRunner().invoke(cli, ["upgrade", queue.name, "--force", "--url", url])
        assert forced.exit_code == 0, forced.output
        assert client.hget(queue.core.keys.meta, "layout") == str(LAYOUT)
    finally:
        client.delete(worker_key(entry["id"]))
        client.zrem(WORKERS, entry["id"])


def test_free_text_never_splits_an_entry(queue: Queue) -> None:
    """An error message holding the separators that join an entry's events is stored with them
    written out; a cancel reason holding one is refused before anything is written."""
    queue.enqueue_many([("send", None), ("send", None)])
    held = queue.claim(count=2, lease_ms=60_000)
    queue.fail_many([(j.id, j.token, "bad\x1erecord\x1funit", False, None) for j in held])
    dead = [e for e in queue.events() if e.event == "dead"]
    assert [e.job for e in dead] == [j.id for j in held]
    assert {e.fields["error"] for e in dead} == {"bad\\x1erecord\\x1funit"}
    with pytest.raises(EmqError, match="record or unit separator"):
        queue.cancel(queue.enqueue("send"), reason="no\x1e")
    assert [e.event for e in queue.events()][-1] == "enqueued"
