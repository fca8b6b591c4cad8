"""Search over a queue's live rows and its floor (emq.archive.search, docs/search.md), on real
servers:
each criterion on live rows, the floor after the live events were trimmed by the real
archiver, the floor schema's upgrade from version 1, hostile query text, bad input, the CLI."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from emq import AsyncQueue, Queue
from emq.archive import Archive, Floor, LocalDir, restore, ship
from emq.archive.floor import SCHEMA
from emq.archive.search import Hit, SearchQuery, asearch, search
from emq.cli.main import cli
from emq.errors import EmqError, InvalidId, InvalidName, InvalidOption
from emq.model.checks import parse_when
from emq.model.events import Event, id_after
from emq.queue._sync.stream import read_range

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")


def ids(hits: list[Hit]) -> list[str]:
    return [h.job_id for h in hits]


def fail_dead(queue: Queue, error: str) -> str:
    (c,) = queue.claim(1)
    assert queue.fail(c.id, c.token, error, retry=False) == "dead"
    return c.id


def test_live_search_by_each_criterion(queue: Queue, tmp_path: Path) -> None:
    dead = str(queue.enqueue("invoice", {"note": "overdue Quokka invoice"}))
    fail_dead(queue, "smtp 550 mailbox gone")
    running = str(queue.enqueue("charge", {"memo": "bilby"}))
    queue.claim(1)
    waiting = str(queue.enqueue("charge", {"card": "4242", "memo": "wombat"}))
    later = str(queue.enqueue("report", {"memo": "numbat"}, delay_ms=600_000))
    nofloor = tmp_path / "none.sqlite3"

    def find(**kw: object) -> list[str]:
        hits = search(queue, SearchQuery(**kw), floor=nofloor)  # type: ignore[arg-type]
        assert all(h.source == "live" for h in hits)
        return ids(hits)

    assert find(text="quokka") == [dead]  # a payload word, any case
    assert find(text="MAILBOX 550") == [dead]  # error words, any order
    assert find(text="quok*") == [dead]  # a prefix
    assert find(text="quok") == []  # a word is whole unless it ends in *
    assert find(job_id=waiting) == [waiting]
    assert find(text=later) == [later]  # a text that is an id finds that job
    assert sorted(find(name="charge")) == sorted([running, waiting])
    assert find(state="active") == [running]
    assert find(state="scheduled") == find(state="schedule") == [later]
    assert find(state="dead", text="invoice") == [dead]
    assert find(name="charge", text="wombat") == [waiting]
    assert find(name="charge", state="dead") == []
    hit = search(queue, SearchQuery(job_id=dead), floor=nofloor)[0]
    assert (hit.name, hit.state, hit.error) == ("invoice", "dead", "smtp 550 mailbox gone")
    assert "Quokka" in hit.snippet
    every = search(queue, SearchQuery(), floor=nofloor)
    assert set(ids(every)) == {dead, running, waiting, later}
    newest = max(h.ms for h in every)
    assert find(since_ms=newest + 1) == []
    assert set(find(until_ms=newest)) == {dead, running, waiting, later}
    assert len(find(limit=2)) == 2
    laned = str(queue.enqueue("charge", {"memo": "kiwi"}, lane="eu"))  # a lane's pending set
    assert find(text="kiwi") == [laned] and set(find(state="pending")) == {waiting, laned}


def archived_dead_job(queue: Queue, client: redis.Redis, floor: Path) -> str:
    """A job retried once then dead, its events folded by the real archiver and trimmed."""
    job = str(queue.enqueue("invoice", {"note": "overdue quokka invoice"}, max_attempts=2))
    (c,) = queue.claim(1)
    assert queue.fail(c.id, c.token, "smtp 451", delay_ms=0) == "scheduled"
    queue.promote_due()
    (c,) = queue.claim(1)
    assert queue.fail(c.id, c.token, "smtp 550 mailbox gone") == "dead"
    queue.enqueue("later", {"n": 1})  # the stream's last entry (kept by MINID)
    archive = Archive(queue, floor)
    assert archive.catch_up().trimmed > 0
    archive.close()
    assert [e for e in read_range(client, queue.core.keys) if e.job == job] == []
    return job


def test_floor_finds_a_dead_job_after_its_live_events_were_trimmed(
    queue: Queue, client: redis.Redis, tmp_path: Path
) -> None:
    floor = tmp_path / "floor.sqlite3"
    job = archived_dead_job(queue, client, floor)
    (hit,) = search(queue, SearchQuery(text="quokka"), floor=floor)
    assert (hit.job_id, hit.source, hit.state) == (job, "both", "dead")
    queue.remove(job)  # now only the floor knows it
    for query in (
        SearchQuery(text="quokka"),
        SearchQuery(text="mailbox gone"),
        SearchQuery(text="451"),  # the first attempt's error, in its retrying event
        SearchQuery(job_id=job),
        SearchQuery(text=job),
        SearchQuery(text=f"{job} mailbox"),  # the id is a word of the index too
        SearchQuery(name="invoice"),
        SearchQuery(name="invoice", text="smtp"),
        SearchQuery(state="dead"),
    ):
        hits = search(queue, query, floor=floor)
        assert ids(hits) == [job], query
        assert hits[0].source == "floor" and hits[0].name == "invoice"
    # the floor's state is its last event's: removed is not folded yet, so it was dead
    archive = Archive(queue, floor)
    archive.catch_up()
    archive.close()
    (hit,) = search(queue, SearchQuery(job_id=job), floor=floor)
    assert (hit.state, hit.error) == ("removed", "smtp 550 mailbox gone")
    assert ids(search(queue, SearchQuery(state="removed"), floor=floor)) == [job]
    assert search(queue, SearchQuery(state="dead"), floor=floor) == []
    assert search(queue, SearchQuery(text="quokka", name="other"), floor=floor) == []
    t = hit.ms
    assert ids(search(queue, SearchQuery(text="quokka", since_ms=t - 60_000), floor=floor))
    assert search(queue, SearchQuery(text="quokka", since_ms=t + 60_000), floor=floor) == []


def test_a_version_1_floor_is_upgraded_and_indexed(queue: Queue, tmp_path: Path) -> None:
    job = str(queue.enqueue("invoice", {"note": "overdue quokka invoice"}))
    fail_dead(queue, "card declined")
    path = tmp_path / "v1.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    for statement in SCHEMA.split(";\n"):
        if statement.strip():
            db.execute(statement)
    meta = [("schema_version", "1"), ("queue", queue.name), ("floor_id", "f" * 32)]
    db.executemany("INSERT INTO floor_meta VALUES (?, ?)", [*meta, ("created_ms", "1")])
    rows = [(*e.key, e.id, e.job, e.event, json.dumps(e.fields)) for e in queue.events()]
    db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)", rows)
    db.execute("PRAGMA user_version = 1")
    db.close()
    ro = Floor(path, queue=queue.name, readonly=True)  # read-only: read as it is
    assert (ro.schema, ro.has_fts) == (1, False)
    queue.remove(job)
    (hit,) = search(queue, SearchQuery(text="quokka"), floor=ro)  # no index: scanned
    assert (hit.job_id, hit.source) == (job, "floor")
    ro.close()
    f = Floor(path, queue=queue.name)  # opened for writing: upgraded, backfilled
    assert (f.schema, f.has_fts) == (2, True)
    with f.reading() as conn:
        assert conn.execute(
            "SELECT value FROM floor_meta WHERE key = 'schema_version'"
        ).fetchone() == ("2",)
        found = conn.execute("SELECT count(*) FROM events_fts WHERE events_fts MATCH 'quokka'")
        assert found.fetchone() == (1,)
    assert ids(search(queue, SearchQuery(text="declined"), floor=f)) == [job]
    with f.reading() as conn:  # the rare ends are read through their index, newest first
        sql = (
            "EXPLAIN QUERY PLAN SELECT job FROM events WHERE event IN ('dead', 'cancelled',"
            " 'removed') AND event = 'dead' AND ms BETWEEN 0 AND 9 ORDER BY ms DESC, seq DESC"
        )
        plan = str(conn.execute(sql).fetchall())
        assert "events_ended" in plan and "ORDER BY" not in plan
    f.close()


def fts_rows(f: Floor, word: str) -> int:
    with f.reading() as db:
        sql = "SELECT count(*) FROM events_fts WHERE events_fts MATCH ?"
        return int(db.execute(sql, (f'"{word}"',)).fetchone()[0])


def test_the_index_is_written_by_the_fold_once_and_in_its_transaction(
    queue: Queue, tmp_path: Path
) -> None:
    f = Floor(tmp_path / "f.sqlite3", queue=queue.name)
    job = str(queue.enqueue("invoice", {"note": "quokka"}))
    fail_dead(queue, "card declined")
    events = list(queue.events())
    assert f.fold(events) == len(events)
    assert f.fold(events) == 0 and f.fold(events[1:]) == 0  # re-folded: indexed once
    assert (fts_rows(f, "quokka"), fts_rows(f, "invoice"), fts_rows(f, "declined")) == (1, 2, 1)
    assert fts_rows(f, job) == 2  # the job id is a word of its enqueued and dead events
    w = f.watermark()
    bad = Event(id_after(events[-1].id), "retrying", job, {"error": 5})  # type: ignore[dict-item]
    with pytest.raises(TypeError):  # the index refuses it: rows and W roll back with it
        f.fold([bad, Event(id_after(bad.id), "claimed", job, {"attempts": "2"})])
    assert (f.count(), f.watermark()) == (len(events), w)
    ship(f, LocalDir(tmp_path / "shipped"), segment_size=2, flush=True)
    fresh = Floor(tmp_path / "restored.sqlite3", queue=queue.name)
    restore(LocalDir(tmp_path / "shipped"), fresh)  # a restored floor is indexed too
    assert fts_rows(fresh, "quokka") == 1
    queue.remove(job)
    assert ids(search(queue, SearchQuery(text="quokka declined"), floor=fresh)) == [job]
    f.close()
    fresh.close()


def test_case_and_accents_do_not_matter(queue: Queue, tmp_path: Path) -> None:
    job = str(queue.enqueue("facture", {"note": "Crème brûlée au CAFÉ"}))
    fail_dead(queue, "Délai dépassé")
    floor = tmp_path / "f.sqlite3"
    archive = Archive(queue, floor)
    archive.catch_up()
    archive.close()
    for text in ("creme", "BRULEE cafe", "café", "delai depasse", "DÉPASSÉ", "caf*"):
        (hit,) = search(queue, SearchQuery(text=text), floor=floor)
        assert (hit.job_id, hit.source) == (job, "both"), text
    queue.remove(job)
    (hit,) = search(queue, SearchQuery(text="brulee delai"), floor=floor)
    assert (hit.job_id, hit.source) == (job, "floor")


def test_hostile_query_text_is_words_only(queue: Queue, tmp_path: Path) -> None:
    floor = tmp_path / "f.sqlite3"
    job = str(queue.enqueue("x", {"t": 'say "NEAR" (AND) quokka*'}))
    fail_dead(queue, 'bad ") NOT')
    archive = Archive(queue, floor)
    archive.catch_up()
    archive.close()
    hostile = ['"', "*", "NEAR", ")", '" OR "', "NEAR(a b)", "quokka)", "col:quokka", "^", "-"]
    hostile += ["AND OR NOT", "'; DROP TABLE events; --", "\x00", "ü" * 2000, "a*b*", "*x"]
    for text in hostile:
        try:
            search(queue, SearchQuery(text=text[:1000]), floor=floor)
        except EmqError as exc:  # pragma: no cover - the assertion names the text
            pytest.fail(f"{text!r} raised {exc!r}")
    assert ids(search(queue, SearchQuery(text='"near"'), floor=floor)) == [job]
    assert ids(search(queue, SearchQuery(text="quokka)"), floor=floor)) == [job]
    assert ids(search(queue, SearchQuery(text='") not'), floor=floor)) == [job]


def test_bad_input_is_refused_with_a_clear_error(url: str, queue: Queue) -> None:
    with pytest.raises(InvalidName, match="queue name"):
        Queue.from_url(url, "bad name!")
    cases = [
        (SearchQuery(limit=0), InvalidOption, "limit"),
        (SearchQuery(limit=10_001), InvalidOption, "limit"),
        (SearchQuery(limit="5"), InvalidOption, "limit"),  # type: ignore[arg-type]
        (SearchQuery(state="sleeping"), InvalidOption, "unknown state"),
        (SearchQuery(job_id="nope"), InvalidId, "job id"),
        (SearchQuery(since_ms=5, until_ms=4), InvalidOption, "after"),
        (SearchQuery(since_ms="yesterday"), InvalidOption, "since_ms"),  # type: ignore[arg-type]
        (SearchQuery(text="x" * 1001), InvalidOption, "text"),
        (SearchQuery(name=""), InvalidOption, "name"),
    ]
    for query, error, words in cases:
        with pytest.raises(error, match=words):
            search(queue, query)
    with pytest.raises(InvalidOption, match="not a time"):
        parse_when("next tuesday")
    assert parse_when("2h", now_ms=10_000_000) == 10_000_000 - 7_200_000
    assert parse_when("2026-12-01T08:00") == 1_796_112_000_000


async def test_asearch_is_the_twin_of_search(
    queue: Queue, aqueue: AsyncQueue, client: redis.Redis, tmp_path: Path
) -> None:
    floor = tmp_path / "floor.sqlite3"
    job = archived_dead_job(queue, client, floor)
    for query in (SearchQuery(text="quokka"), SearchQuery(state="dead"), SearchQuery()):
        assert await asearch(aqueue, query, floor=floor) == search(queue, query, floor=floor)
    (hit,) = await asearch(aqueue, SearchQuery(text="quokka"), floor=floor)
    assert (hit.job_id, hit.source) == (job, "both")
    await aqueue.close()


def test_cli_search(url: str, queue: Queue, client: redis.Redis, tmp_path: Path) -> None:
    floor = tmp_path / "floor.sqlite3"
    job = archived_dead_job(queue, client, floor)
    run = CliRunner().invoke
    base = ["search", queue.name, "--url", url, "--floor", str(floor)]
    out = run(cli, [*base, "quokka", "--json"])
    assert out.exit_code == 0, out.output
    (row,) = [json.loads(line) for line in out.output.splitlines()]
    assert (row["job_id"], row["source"], row["state"]) == (job, "both", "dead")
    out = run(cli, [*base, "mailbox", "--state", "dead", "--name", "invoice", "--since", "1h"])
    assert out.exit_code == 0 and job in out.output and "smtp 550" in out.output
    out = run(cli, [*base, "nothing-like-this"])
    assert out.exit_code == 0 and "no jobs" in out.output
    out = run(cli, [*base, "x", "--state", "sleeping"])
    assert out.exit_code == 2 and "unknown state" in out.output
    out = run(cli, [*base, "x", "--since", "soon"])
    assert out.exit_code == 2 and "not a time" in out.output


def test_a_long_jobs_progress_events_do_not_hide_its_state(queue: Queue, tmp_path: Path) -> None:
    job = queue.new_id()
    steps = [Event("1796000000000-0", "enqueued", job, {"attempts": "0", "name": "crunch",
                                                        "state": "pending"}),
             Event("1796000000001-0", "claimed", job, {"attempts": "1", "token": "7"})]  # fmt: skip
    steps += [
        Event(f"1796000000002-{i}", "progress", job, {"progress": str(i)}) for i in range(600)
    ]
    with Floor(tmp_path / "f.sqlite3", queue=queue.name) as f:
        f.fold(steps)
        (hit,) = search(queue, SearchQuery(job_id=job), floor=f)
    assert (hit.state, hit.name, hit.source) == ("active", "crunch", "floor")
