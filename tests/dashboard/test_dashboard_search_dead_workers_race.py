"""The dashboard's search, dead-letter, workers and race-lab pages over HTTP: the app served
by uvicorn on a free loopback port (in a thread) against the real servers. Each page renders
with the contract markup; search finds a job by a word of its payload; a bulk redrive of a
filter runs to "done" with progress and moves exactly the matching jobs; a read-only
dashboard refuses the bulk POST and changes nothing; hostile error text is escaped."""

from __future__ import annotations

import html
import json
import re
import time
from typing import Any

import httpx

from emq import Queue
from emq.observe import registry

from ..support.helpers import assert_consistent, make_dead
from .test_dashboard import csrf, serve

HTML = {"accept": "text/html"}
BOUND_S = 60.0  # bounds a hang, never a speed
HOSTILE = "<script>window.x=1</script></td><img src=x onerror=alert(1)>"


def wait_done(client: httpx.Client, op: str) -> dict[str, Any]:
    """Poll ``/bulk/<op>`` until it says finished; every reading's progress only grows."""
    last = -1
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        d: dict[str, Any] = client.get(f"/bulk/{op}", headers={"accept": "application/json"}).json()
        assert d["done"] >= last
        last = d["done"]
        if d["finished"]:
            return d
        time.sleep(0.05)
    raise AssertionError("the bulk move did not finish")


def test_every_page_renders_with_the_contract_markup(url: str, queue: Queue) -> None:
    make_dead(queue, [("mail", {"to": "ada"})] * 3, "smtp refused\n  at send()")
    with serve(url) as c:
        for path, marks in {
            "/search": ['<form id="search"', 'name="queue"', 'name="q"', 'name="state"',
                        'name="name"', 'name="since"', 'name="until"'],
            f"/queues/{queue.name}/dead": ['id="groups"', 'data-error="smtp refused"',
                                           'data-action="bulk-redrive"',
                                           'data-action="bulk-purge"', "<td data-count>3</td>"],
            "/workers": ['<table id="workers"'],
            "/race": ['<form id="race"', 'data-action="race-run"'],
        }.items():  # fmt: skip
            r = c.get(path)
            assert r.status_code == 200, (path, r.text[:500])
            page = r.text
            assert '<main id="main">' in page and "<h1>" in page and "<nav" in page, path
            for mark in marks:
                assert mark in page, (path, mark)
        assert c.get("/queues/not a queue!/dead").status_code == 404
        assert c.get("/bulk/nope", headers={"accept": "application/json"}).status_code == 404


def test_search_finds_a_job_by_a_word_of_its_payload(url: str, queue: Queue) -> None:
    wanted = str(queue.enqueue("invoice", {"note": "overdue wombat invoice"}))
    queue.enqueue("invoice", {"note": "paid in full"})
    with serve(url) as c:
        r = c.get("/search", params={"queue": queue.name, "q": "wombat"})
        assert r.status_code == 200, r.text[:500]
        rows = re.findall(r'<tr data-job="([^"]+)" data-source="(live|floor|both)"', r.text)
        assert rows == [(wanted, "live")]
        assert f'href="/queues/{queue.name}/jobs/{wanted}"' in r.text
        by_id = c.get("/search", params={"queue": "", "q": wanted})
        assert re.findall(r'<tr data-job="([^"]+)"', by_id.text) == [wanted]
        bad = c.get("/search", params={"q": "x", "since": "yesterday"})
        assert bad.status_code == 400 and "not a time" in bad.text


def test_a_bulk_redrive_through_http_completes_with_progress(url: str, queue: Queue) -> None:
    wanted = make_dead(queue, [("mail", {"i": i}) for i in range(600)], "smtp refused")
    others = make_dead(queue, [("sms", {"i": i}) for i in range(4)], "smtp refused")
    with serve(url) as c:
        form = {"csrf": csrf(c), "error": "smtp refused", "name": "mail"}
        r = c.post(f"/queues/{queue.name}/dead/redrive", data=form)
        assert r.status_code == 303
        op = r.headers["location"].split("?op=")[1]
        page = c.get(r.headers["location"])
        assert 'id="bulk-progress"' in page.text and 'id="bulk-status"' in page.text
        d = wait_done(c, op)
        assert (d["total"], d["done"], d["moved"], d["skipped"]) == (600, 600, 600, 0)
        assert d["status"].endswith("done") and d["error"] == ""
        page = c.get(f"/queues/{queue.name}/dead?op={op}").text
        assert (
            '<progress id="bulk-progress" aria-labelledby="bulk-title" value="600" max="600">'
            in page
        )
        assert re.search(r'id="bulk-status"[^>]*>[^<]*done</p>', page)

        asked = c.post(f"/queues/{queue.name}/dead/purge", data={"csrf": csrf(c), "name": "sms"},
                       headers={"accept": "application/json"})  # fmt: skip
        assert asked.status_code == 202
        assert wait_done(c, asked.json()["op"])["moved"] == 4
    assert {j.id for j in queue.jobs("pending", 0, 1000)} == set(wanted)
    assert queue.counts()["dead"] == 0 and all(queue.job(i) is None for i in others)


def test_read_only_refuses_the_bulk_post_and_shows_no_action(url: str, queue: Queue) -> None:
    make_dead(queue, [("x", None)] * 2, "boom")
    with serve(url, read_only=True) as c:
        for path in (f"/queues/{queue.name}/dead", "/race", "/search", "/workers"):
            r = c.get(path)
            assert r.status_code == 200 and "data-action=" not in r.text, path
        token = csrf(c)
        for path in (f"/queues/{queue.name}/dead/redrive", f"/queues/{queue.name}/dead/purge",
                     "/race/run"):  # fmt: skip
            r = c.post(path, data={"csrf": token, "scenario": "two-sweeps", "mode": "atomic"})
            assert r.status_code == 403, path
    assert queue.counts()["dead"] == 2


def test_a_post_without_the_csrf_field_changes_nothing(url: str, queue: Queue) -> None:
    make_dead(queue, [("x", None)], "boom")
    with serve(url) as c:
        csrf(c)
        r = c.post(f"/queues/{queue.name}/dead/purge", data={"csrf": "forged"})
        assert r.status_code == 403
    assert queue.counts()["dead"] == 1


def test_hostile_error_text_is_escaped(url: str, queue: Queue, client: Any) -> None:
    (job,) = make_dead(queue, [("evil", {"p": HOSTILE})], HOSTILE)
    with serve(url) as c:
        page = c.get(f"/queues/{queue.name}/dead").text
        assert "<script>window.x" not in page and "<img src=x" not in page
        assert html.escape(HOSTILE, quote=True) in page  # the group's data-error attribute
        found = c.get("/search", params={"queue": queue.name, "q": "script"}).text
        assert f'data-job="{job}"' in found
        assert "<script>window.x" not in found and "<img src=x" not in found
        r = c.post(f"/queues/{queue.name}/dead/redrive", data={"csrf": csrf(c), "error": HOSTILE})
        op = r.headers["location"].split("?op=")[1]
        assert wait_done(c, op)["moved"] == 1
    row = queue.job(job)
    assert row is not None and row.state == "pending"
    assert_consistent(client, queue.name)


def test_the_race_lab_runs_on_the_server_and_shows_trace_and_readout(url: str) -> None:
    with serve(url) as c:
        r = c.post("/race/run", data={"csrf": csrf(c), "scenario": "two-sweeps", "mode": "both"})
        assert r.status_code == 303 and "/race?run=" in r.headers["location"]
        page = c.get(r.headers["location"]).text
        assert 'id="race-trace"' in page and 'id="race-readout"' in page
        assert page.count('<table class="race"') == 2  # atomic and naive
        assert "EVALSHA" in page or "evalsha" in page.lower()
        assert re.search(r'<li data-scenario="two-sweeps" data-mode="naive">.+', page)
        bad = c.post("/race/run", data={"csrf": csrf(c), "scenario": "nope", "mode": "both"})
        assert bad.status_code == 303 and "run=" not in bad.headers["location"]


def test_the_workers_page_lists_a_registered_worker(url: str, client: Any) -> None:
    info = registry.WorkerInfo(
        id="host-a:4242:abcdef12", host="host-a", pid=4242, queues=("mail", "<b>x</b>"),
        concurrency=8, running=3, started_ms=int(time.time() * 1000) - 60_000,
        beat_ms=int(time.time() * 1000), version="test", batches=(("embed", 50, 200),),
        filling=7,
    )  # fmt: skip
    registry.publish(client, info, 30_000)
    try:
        with serve(url) as c:
            page = c.get("/workers").text
        assert '<tr data-worker="host-a:4242:abcdef12">' in page
        assert "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page
        assert json.dumps(3) in page
        assert 'title="batch_wait_ms 200">embed &le; 50</span> (7 filling)' in page
    finally:
        client.delete(registry.worker_key(info.id))
        client.zrem(registry.WORKERS, info.id)
