"""Dead letters grouped by error, and bulk redrive / purge of a filter in bounded chunks, on
the real servers: exactly the matching jobs move, every other job stays where it was, a job
changed by someone else meanwhile is skipped (never moved twice, never deleted from pending),
and every job is in exactly one location afterwards (``assert_consistent``)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
import redis

from emq import AsyncQueue, Queue
from emq.calls.deadletters import NO_ERROR, DeadFilter, error_key
from emq.errors import InvalidOption
from emq.model.checks import parse_when
from emq.queue._async import deadletters as adl
from emq.queue._sync import deadletters as dl

from ..support.helpers import assert_consistent, make_dead

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")


def pending(queue: Queue) -> set[str]:
    return {j.id for j in queue.jobs("pending", 0, 10_000)}


def dead(queue: Queue) -> set[str]:
    return {j.id for j in queue.jobs("dead", 0, 10_000)}


# --- the I/O-free core -----------------------------------------------------------------------


def test_error_key_is_the_first_line_with_whitespace_made_one() -> None:
    assert error_key("smtp  refused\n  at line 3\n") == "smtp refused"
    assert error_key("\n\n   \ttimeout\t after 30 s") == "timeout after <n> s"
    assert error_key(None) == error_key("") == error_key(" \n ") == NO_ERROR
    long = error_key("x" * 1000)
    assert len(long) == 200 and long.endswith("…")


def test_a_filter_checks_its_times_and_matches_name_and_error() -> None:
    with pytest.raises(InvalidOption):
        DeadFilter(since_ms=-1)
    with pytest.raises(InvalidOption):
        DeadFilter(since_ms=10, until_ms=5)
    f = DeadFilter(error="disk full", name="a")
    assert f.matches("a", "disk  full\ntrace") and not f.matches("b", "disk full")
    assert not f.matches("a", "disk full soon")
    assert DeadFilter(error_contains="FULL").matches("x", "disk full")
    assert DeadFilter().empty and not f.empty


def test_a_filter_takes_a_time_range_up_to_the_scan_start() -> None:
    f = DeadFilter(since_ms=5, until_ms=50)
    assert [f.in_time(ms, now_ms=40) for ms in (4, 5, 40, 41)] == [False, True, True, False]
    assert not f.in_time(50, now_ms=100) and f.in_time(49, now_ms=100)


def test_times_are_read_as_ms_iso_or_an_age() -> None:
    now = 1_764_547_200_000  # 2025-12-01T00:00:00Z
    assert parse_when("", now) is None and parse_when(None, now) is None
    assert parse_when("1234", now) == 1234
    assert parse_when("2025-12-01T00:00", now) == now
    assert parse_when("2025-12-01T01:00+01:00", now) == now
    assert parse_when("15m", now) == now - 900_000
    assert parse_when("2h", now) == now - 7_200_000
    with pytest.raises(InvalidOption):
        parse_when("yesterday", now)


# --- on the servers -------------------------------------------------------------------------


def test_groups_by_first_line_with_counts_names_newest_and_oldest(queue: Queue) -> None:
    make_dead(queue, [("mail", {"i": i}) for i in range(3)], "smtp refused\n  at send()")
    make_dead(queue, [("sms", None)], "smtp  refused")
    make_dead(queue, [("disk", None), ("disk", None)], "disk full")
    groups = dl.groups(queue)
    assert [(g.error, g.count) for g in groups] == [("smtp refused", 4), ("disk full", 2)]
    smtp = groups[0]
    assert dict(smtp.names) == {"mail": 3, "sms": 1}
    assert smtp.oldest_ms <= smtp.newest_ms
    assert smtp.newest_id in dead(queue)
    only_sms = dl.groups(queue, DeadFilter(name="sms"))
    assert [(g.error, g.count) for g in only_sms] == [("smtp refused", 1)]
    future = DeadFilter(since_ms=smtp.newest_ms + 10**9)
    assert dl.groups(queue, future) == []


def test_a_sample_bounds_the_grouping_of_a_big_dead_set(queue: Queue) -> None:
    make_dead(queue, [("x", i) for i in range(400)], "boom")
    (whole,) = dl.groups(queue, page=50)
    (part,) = dl.groups(queue, page=50, sample=100)
    assert whole.count == 400 and 100 <= part.count < 400


def test_a_filtered_bulk_redrive_of_2000_moves_exactly_those(
    queue: Queue, client: redis.Redis
) -> None:
    wanted = make_dead(queue, [("mail", {"i": i}) for i in range(2000)], "smtp refused")
    other_name = make_dead(queue, [("sms", {"i": i}) for i in range(7)], "smtp refused")
    other_error = make_dead(queue, [("mail", {"j": j}) for j in range(5)], "disk full")
    waiting = str(queue.enqueue("mail", {"still": "pending"}))
    seen: list[tuple[int, int]] = []

    result = dl.redrive(
        queue,
        DeadFilter(error="smtp refused", name="mail"),
        progress=lambda d, t: seen.append((d, t)),
    )

    assert result.as_dict() == {"matched": 2000, "moved": 2000, "skipped": 0}
    assert seen[0] == (0, 2000) and seen[-1] == (2000, 2000)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert len(seen) == 1 + 2000 // 200  # one call per chunk of 200
    assert pending(queue) == {*wanted, waiting}
    assert dead(queue) == {*other_name, *other_error}
    row = queue.job(wanted[0])
    assert row is not None and row.attempts == 0
    assert_consistent(client, queue.name)


def test_purge_deletes_the_matching_dead_jobs_and_nothing_else(
    queue: Queue, client: redis.Redis
) -> None:
    doomed = make_dead(queue, [("a", i) for i in range(450)], "bad input: field x")
    kept = make_dead(queue, [("a", i) for i in range(3)], "timeout")
    result = dl.purge(queue, DeadFilter(error_contains="BAD INPUT"), chunk=100)
    assert result.as_dict() == {"matched": 450, "moved": 450, "skipped": 0}
    assert dead(queue) == set(kept)
    assert all(queue.job(i) is None for i in doomed[:20])
    assert queue.counts()["dead"] == 3
    assert_consistent(client, queue.name)


def test_a_purge_of_named_ids_leaves_a_job_redriven_meanwhile(
    queue: Queue, client: redis.Redis
) -> None:
    """`emq dead QUEUE purge IDS`: an id that is no longer dead (redriven after it was listed)
    is not deleted; only the ones still dead go."""
    ids = make_dead(queue, [("a", i) for i in range(4)], "boom")
    queue.redrive_many([ids[0]])
    result = dl.purge(queue, only=[*ids, ids[1]])  # a repeat counts once
    assert result.as_dict() == {"matched": 4, "moved": 3, "skipped": 1}
    assert queue.job(ids[0]) is not None and queue.job(ids[0]).state == "pending"  # type: ignore[union-attr]
    assert dead(queue) == set()
    assert_consistent(client, queue.name)


@pytest.mark.parametrize("action", ["redrive", "purge"])
def test_a_job_changed_by_someone_else_during_the_bulk_is_skipped(
    action: str, queue: Queue, url: str, client: redis.Redis
) -> None:
    ids = make_dead(queue, [("x", i) for i in range(500)], "boom")
    other = Queue.from_url(url, queue.name)
    meddled: dict[str, Any] = {}

    def progress(done: int, total: int) -> None:
        if done == 0:  # after the snapshot, before the first chunk
            meddled["redriven"] = other.redrive_many(ids[10:20])
            meddled["removed"] = [other.remove(i) for i in ids[300:305]]
            (c,) = other.claim(1)  # one redriven job is running now
            meddled["running"] = c.id

    try:
        run = dl.redrive if action == "redrive" else dl.purge
        result = run(queue, DeadFilter(error="boom"), chunk=64, progress=progress)
    finally:
        other.close()
    assert result.matched == 500 and result.skipped == 15 and result.moved == 485
    locs = assert_consistent(client, queue.name)
    assert locs["dead"] == set()
    assert meddled["running"] in locs["active"]
    if action == "redrive":
        assert len(locs["pending"]) + len(locs["active"]) == 495
    else:  # the ten redriven by the other client were not deleted from pending
        assert locs["pending"] | locs["active"] == set(ids[10:20])


def test_purge_racing_a_redrive_loop_never_deletes_a_redriven_job(
    queue: Queue, url: str, client: redis.Redis
) -> None:
    ids = make_dead(queue, [("x", i) for i in range(1200)], "boom")
    other = Queue.from_url(url, queue.name)
    redriven: list[str] = []
    stop = threading.Event()

    def meddle() -> None:
        for i in range(0, len(ids), 7):  # bounded: every 7th job, once
            if stop.is_set():
                return
            redriven.extend(other.redrive_many(ids[i : i + 1]))

    t = threading.Thread(target=meddle)
    t.start()
    try:
        result = dl.purge(queue, DeadFilter(name="x"), chunk=50)
    finally:
        stop.set()
        t.join(30)
        other.close()
    locs = assert_consistent(client, queue.name)
    assert locs["pending"] == set(redriven)  # every job the other client redrove is intact
    assert locs["dead"] == set()
    assert result.moved + len(redriven) == 1200


async def test_the_async_twin_groups_and_redrives(aqueue: AsyncQueue, queue: Queue) -> None:
    ids = make_dead(queue, [("n", i) for i in range(30)], "kaput")
    make_dead(queue, [("n", 0)], "other")
    try:
        groups = await adl.groups(aqueue, page=7)  # several pages
        assert {g.error: g.count for g in groups} == {"kaput": 30, "other": 1}
        result = await adl.redrive(aqueue, DeadFilter(error="kaput"), chunk=8)
        assert (result.matched, result.moved) == (30, 30)
    finally:
        await aqueue.close()
    assert pending(queue) == set(ids)


def test_the_cli_lists_groups_and_redrives_a_filter(queue: Queue, url: str) -> None:
    from click.testing import CliRunner

    from emq.cli.main import cli

    smtp = make_dead(queue, [("mail", i) for i in range(4)], "smtp refused\nat line 9")
    disk = make_dead(queue, [("disk", None)], "disk full")
    run = CliRunner().invoke
    out = run(cli, ["dead-letters", queue.name, "--url", url, "--json"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)["groups"]
    assert [(g["error"], g["count"], g["names"]) for g in got] == [
        ("smtp refused", 4, {"mail": 4}),
        ("disk full", 1, {"disk": 1}),
    ]
    text = run(cli, ["dead-letters", queue.name, "--url", url])
    assert text.exit_code == 0 and "smtp refused" in text.output and "5 dead job(s)" in text.output

    refused = run(cli, ["dead-letters", queue.name, "purge", "--url", url])
    assert refused.exit_code == 2 and "--all" in refused.output
    assert dead(queue) == {*smtp, *disk}

    args = ["dead-letters", queue.name, "redrive", "--error", "smtp refused", "--url", url]
    moved = run(cli, [*args, "--json"])
    assert moved.exit_code == 0, moved.output
    assert json.loads(moved.output) == {
        "queue": queue.name, "action": "redrive", "matched": 4, "moved": 4, "skipped": 0
    }  # fmt: skip
    assert pending(queue) == set(smtp) and dead(queue) == set(disk)
    bad = run(cli, ["dead-letters", queue.name, "--since", "yesterday", "--url", url])
    assert bad.exit_code == 2 and "not a time" in bad.output
