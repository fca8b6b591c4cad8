"""The dashboard's details, over HTTP against the real servers (docs/dashboard.md, Pages): a
job's run of progress events is one timeline line with its count; the confirmation's buttons
are named for what they do; dead letters merge by their normalised error and show an example;
the overview's sparklines say their scale; a cancelled job is not a failure in the failure
rate; a location's listing says "page N of M"."""

from __future__ import annotations

import re
import time
from collections import deque
from html import unescape

import pytest
import redis

from emq import Queue
from emq.dashboard.live import Live, Sample
from emq.dashboard.timeline import EARLIER_SHOWN, collapse, progress_text
from emq.dashboard.web import Dash
from emq.model.events import Event

from ..support.helpers import make_dead
from .test_dashboard import BOUND_S, post, serve

pytestmark = pytest.mark.servers("valkey", "redis")

JSON = {"accept": "application/json"}


def updates_of(page: str) -> list[int]:
    """The ``data-updates`` of each collapsed progress line of a job page."""
    return [int(n) for n in re.findall(r'<li data-event="progress" data-updates="(\d+)">', page)]


# --- a run of progress events is one line -------------------------------------------------------


def test_a_run_of_progress_events_is_one_line_with_the_latest_and_its_count(
    url: str, queue: Queue, qname: str
) -> None:
    job = queue.enqueue("import", {"rows": 240})
    (c,) = queue.claim(1)
    for i in range(EARLIER_SHOWN + 20):
        queue.set_progress(job, c.token, {"done": i + 1, "of": 240})
    assert queue.cancel(job, "enough") == "requested"  # a line between two runs
    for i in range(3):
        queue.set_progress(job, c.token, 200 + i)
    events = [e.event for e in queue.history(job)]
    assert events.count("progress") == EARLIER_SHOWN + 23  # every one is in the story
    with serve(url) as s:
        page = s.get(f"/queues/{qname}/jobs/{job}").text
    assert updates_of(page) == [EARLIER_SHOWN + 20, 3]
    timeline = page[page.index('<ol id="timeline">') :]
    lines = re.findall(r'<li data-event="([a-z_]+)"', timeline)
    assert lines == ["enqueued", "claimed", "progress", "cancel_requested", "progress"]
    assert '<span class="progress-value">120 of 240 (50%)</span>' in page  # the latest value
    assert '<span class="progress-value">202</span>' in page
    assert timeline.count("<li data-update>") == EARLIER_SHOWN + 2  # the earlier, on a click
    assert f"and {EARLIER_SHOWN + 19 - EARLIER_SHOWN} older, not listed" in page
    assert "119 earlier updates</summary>" in page


def test_collapse_keeps_a_lone_progress_event_and_every_other_event() -> None:
    def ev(n: int, name: str, **fields: str) -> Event:
        return Event(f"{n}-0", name, "JOB0000000000a", fields)

    run = [ev(4, "progress", progress="1"), ev(5, "progress", progress="2")]
    shown = collapse([ev(1, "claimed"), ev(2, "progress", progress="7"), ev(3, "retrying"), *run])
    assert [(e.event.event, e.updates) for e in shown] == [
        ("claimed", 1), ("progress", 1), ("retrying", 1), ("progress", 2)
    ]  # fmt: skip
    assert (shown[3].first_ms, shown[3].value, shown[3].earlier) == (4, "2", ((4, "1"),))
    assert progress_text('{"done": 3, "of": 4}') == "3 of 4 (75%)"
    assert progress_text('{"pct": 87}') == '{"pct": 87}'
    assert progress_text("not json") == "not json"
    assert progress_text('"' + "x" * 500 + '"').endswith("…")


# --- the confirmation's buttons say what they do -------------------------------------------------


def test_the_cancel_confirmation_names_its_two_actions(url: str, queue: Queue, qname: str) -> None:
    running = queue.enqueue("work", None)
    (c,) = queue.claim(1)
    assert c.id == running
    waiting = queue.enqueue("work", None)
    with serve(url) as s:
        page = s.get(f"/queues/{qname}/jobs/{running}").text
        form = re.search(
            rf'<form method="post" action="/queues/{qname}/jobs/{running}/cancel"[^>]*>', page
        )
        assert form is not None, page
        assert 'data-yes="Cancel job"' in form[0] and 'data-no="Keep running"' in form[0]
        page = s.get(f"/queues/{qname}/jobs/{waiting}").text
        assert 'data-yes="Cancel job" data-no="Keep job"' in page  # a job not running yet
        assert 'data-yes="Delete job" data-no="Keep job"' in page  # remove
        page = s.get(f"/queues/{qname}").text
        assert 'data-yes="Pause queue" data-no="Keep running"' in page
        assert 'data-yes="Delete waiting jobs" data-no="Keep them"' in page
        assert "data-cancel autofocus>Go back</button>" in page  # the default: no "Cancel"


# --- dead letters merge by their normalised error ------------------------------------------------


def test_dead_letters_that_differ_in_ids_and_emails_are_one_group_with_an_example(
    url: str, queue: Queue, qname: str
) -> None:
    for n, who in enumerate(["ada", "grace", "linus"]):
        make_dead(queue, [("mail", {"n": n})], f"no inbox {n + 40} for {who}@example.com")
    make_dead(queue, [("disk", None)], "disk full")
    key = "no inbox <n> for <email>"
    with serve(url) as s:
        page = s.get(f"/queues/{qname}/dead").text
        rows = [unescape(e) for e in re.findall(r'<tr data-error="([^"]*)">', page)]
        assert rows == [key, "disk full"]
        assert "4 dead jobs in 2 groups" in page
        example = re.search(r'<span class="example" data-example>e.g. <q>([^<]*)</q>', page)
        assert example is not None and unescape(example[1]) in {
            f"no inbox {n + 40} for {w}@example.com"
            for n, w in enumerate(["ada", "grace", "linus"])
        }
        assert page.count("data-example") == 1  # "disk full" is its own example

        r = post(s, f"/queues/{qname}/dead/redrive", error=key)  # the group's key, as listed
        assert r.status_code == 303
        op = r.headers["location"].split("op=")[1]
        deadline = time.monotonic() + BOUND_S
        while not (got := s.get(f"/bulk/{op}", headers=JSON).json())["finished"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert (got["moved"], got["skipped"], got["error"]) == (3, 0, "")
    assert queue.counts()["dead"] == 1 and queue.counts()["pending"] == 3


# --- the sparklines' scale, and cancels are not failures ----------------------------------------


def test_the_overview_sparklines_label_their_scale(url: str, queue: Queue, qname: str) -> None:
    queue.enqueue("work", None)
    with serve(url) as s:
        live: Live = s.app.state.live  # type: ignore[attr-defined]
        live.history[qname] = deque(  # 10 s of 10/s then 2/s with a failure for each
            [Sample(0, 0, 0), Sample(5_000, 50, 0), Sample(10_000, 60, 10)]
        )
        page = s.get("/").text
    row = page[page.index(f'<tr data-queue="{qname}"') :]
    row = row[: row.index("</tr>")]
    assert '<span class="scale" data-scale>max 10.0/s</span>' in row
    assert '<span class="scale" data-scale>max 50%</span>' in row
    assert 'aria-label="completed per second: ' in row and "(max 10.0/s)" in row


def cancelled(client: redis.Redis, queue: Queue) -> int:
    """The queue's ``cancelled`` counter (jobs a cancel ended; ``counts()`` leaves it out)."""
    return int(client.hget(queue.core.keys.metrics, "cancelled") or 0)


async def test_a_cancelled_running_job_is_not_counted_as_a_failure(
    url: str, queue: Queue, client: redis.Redis
) -> None:
    """A running job's cancel ends through ``fail`` (its worker stops it): it is counted in
    ``cancelled``, not in ``failed``, so the failure rate (failed / finished) stays 0."""
    queue.enqueue_many([("work", i) for i in range(4)])
    claimed = queue.claim(4)
    live = Live(Dash(url))
    try:
        for _ in range(5):  # a chart sample every HISTORY_EVERY ticks: at ticks 0 and 5
            await live.sample()
        for c in claimed[:3]:
            queue.complete(c.id, c.token)
        doomed = claimed[3]
        assert queue.cancel(doomed.id, "not needed") == "requested"
        ended = queue.fail(doomed.id, doomed.token, "cancelled: not needed", retry=False)
        assert ended == "cancelled"
        await live.sample()
        through, failing = live.rates(queue.name)
        charts = live.charts(queue.name)
    finally:
        await live.dash.close()
    counts = queue.counts()
    assert (counts["completed"], counts["failed"], cancelled(client, queue)) == (3, 0, 1)
    assert len(failing) == 1 and failing == [0.0] and through[0] > 0
    assert charts["failing"] == "0%" and charts["failing_max"] == "max 0%"


# --- "page N of M" ----------------------------------------------------------------------------


def test_a_listing_says_page_n_of_m(url: str, queue: Queue, qname: str) -> None:
    queue.enqueue_many([("work", i) for i in range(120)])  # 50 a page: 3 pages
    for c in queue.claim(2):
        queue.complete(c.id, c.token)  # none kept: completed lists 0, the lifetime count is 2
    with serve(url) as s:
        first = s.get(f"/queues/{qname}").text
        last = s.get(f"/queues/{qname}", params={"page": 3}).text
        beyond = s.get(f"/queues/{qname}", params={"page": 9}).text
        done = s.get(f"/queues/{qname}", params={"location": "completed"}).text
    assert 'data-pages="3">Page 1 of 3</span>' in first and 'rel="next"' in first
    assert "pending jobs, page 1 of 3 (118 in all)" in first
    assert 'data-pages="3">Page 3 of 3</span>' in last and 'rel="next"' not in last
    assert last.count("<tr data-job=") == 18
    assert "Page 9 of 3" in beyond and "No pending jobs on this page" in beyond
    assert "Page 1 of 1" in done and "completed jobs, page 1 of 1 (0 in all)" in done


# --- the queue's stored settings ----------------------------------------------------------------


def test_the_queue_page_shows_the_settings_stored_with_the_queue(
    url: str, queue: Queue, qname: str
) -> None:
    queue.enqueue("x")
    with serve(url) as c:
        page = c.get(f"/queues/{qname}").text
        assert '<p id="settings">None stored: each process uses its own options.</p>' in page
        queue.configure(result_ttl_ms=3_600_000, keep_completed=(86_400_000, 100), max_attempts=5)
        page = c.get(f"/queues/{qname}").text
    shown = dict(re.findall(r"<dt>(\w+)</dt><dd>([^<]*)</dd>", page.split('id="settings"')[1]))
    assert shown == {
        "result_ttl_ms": "1h 00m",
        "keep_completed": "100 jobs for 24h 00m",
        "max_attempts": "5",
    }
