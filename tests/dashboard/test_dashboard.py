"""The dashboard over HTTP: the app served by uvicorn on a free loopback port (in a thread),
against the real servers. Pages render with the markup the browser tests rely on, actions
change state, every refusal (CSRF, origin, read-only, token, non-loopback Host) changes
nothing, hostile data is escaped, and ``/events`` pushes counts."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from click.testing import CliRunner

from emq import JobSpec, Queue
from emq.archive.archiver import Archive
from emq.cli.main import cli
from emq.dashboard import security
from emq.dashboard.app import create_app
from emq.dashboard.live import read_counts
from emq.dashboard.web import Dash
from emq.embedded.standalone import free_port
from emq.model.ids import minted_at_ms

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")

HTML = {"accept": "text/html"}
TOKEN = "dashboard-token-for-tests-0123456789"
BOUND_S = 30.0  # bounds a hang, never a speed


@contextlib.contextmanager
def serve(
    url: str, wrap: Callable[[Any], Any] | None = None, **options: Any
) -> Iterator[httpx.Client]:
    """The dashboard for ``url`` on a free loopback port; a client on it (HTML accepted).
    ``wrap``: uvicorn serves ``wrap(app)`` (a test's ASGI wrapper around the whole app)."""
    app = create_app(url, **options)
    port = free_port()
    config = uvicorn.Config(
        wrap(app) if wrap else app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + BOUND_S
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "dashboard did not start"
        time.sleep(0.02)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, headers=HTML, timeout=BOUND_S) as client:
            client.app = app  # type: ignore[attr-defined]
            yield client
    finally:
        server.should_exit = True
        thread.join(BOUND_S)


def csrf(client: httpx.Client) -> str:
    """The session's CSRF token (a page visit sets its cookie)."""
    if "emq_csrf" not in client.cookies:
        client.get("/login")
    return client.cookies["emq_csrf"]


def post(client: httpx.Client, path: str, **form: str) -> httpx.Response:
    return client.post(path, data={"csrf": csrf(client), **form})


def make_dead(queue: Queue, payload: Any = None, error: str = "boom") -> str:
    job_id = queue.enqueue("work", payload, max_attempts=1)
    (claimed,) = queue.claim()
    assert claimed.id == job_id
    assert queue.fail(job_id, claimed.token, error) == "dead"
    return job_id


def test_pages_render_with_the_contract_markup(url: str, queue: Queue, qname: str) -> None:
    dead = make_dead(queue, {"n": 3}, "it broke")
    pending = queue.enqueue("work", {"n": 1})
    scheduled = queue.enqueue("later", {"n": 2}, delay_ms=600_000)
    with serve(url) as c:
        page = c.get("/").text
        assert f'<tr data-queue="{qname}" data-paused="0">' in page
        assert '<td data-count="pending">1</td>' in page
        assert '<td data-count="dead">1</td>' in page
        assert '<td data-count="schedule">1</td>' in page
        for label, href in [("Overview", "/"), ("Search", "/search"), ("Workers", "/workers")]:
            assert f'<a href="{href}"' in page and label in page
        assert '<main id="main">' in page and "<h1>Overview</h1>" in page
        page = c.get(f"/queues/{qname}").text
        assert 'id="counts"' in page and 'id="jobs"' in page
        assert f'<tr data-job="{pending}">' in page and 'data-action="pause"' in page
        assert 'data-action="drain"' in page and 'id="confirm"' in page
        page = c.get(f"/queues/{qname}", params={"location": "schedule"}).text
        assert f'<tr data-job="{scheduled}">' in page
        page = c.get(f"/queues/{qname}/jobs/{dead}").text
        assert 'id="row"' in page and '<pre id="payload">' in page
        assert '<pre id="error">it broke</pre>' in page
        events = [e.event for e in queue.history(dead)]
        assert events[:2] == ["enqueued", "claimed"] and events[-1] == "dead"
        for name in events:
            assert f'<li data-event="{name}">' in page
        assert 'data-action="redrive"' in page and 'data-action="remove"' in page
        assert 'data-action="promote"' not in page
        page = c.get(f"/queues/{qname}/jobs/{scheduled}").text
        assert 'data-action="promote"' in page and 'data-action="redrive"' not in page
        assert c.get(f"/queues/{qname}/jobs/JOB00000000000").status_code == 404
        assert c.get("/queues/bad%20name").status_code == 404
        assert c.get("/healthz").text == "ok\n"
        headers = c.get("/").headers
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert headers["x-frame-options"] == "DENY"
        assert c.get("/static/app.js").status_code == 200


def test_job_timeline_joins_the_floor_and_the_live_tail(
    url: str, queue: Queue, qname: str, tmp_path: Path
) -> None:
    dead = make_dead(queue, {"n": 1}, "first failure")
    archive = Archive(queue, tmp_path / f"{qname}.sqlite3")
    archive.catch_up()
    archive.close()
    assert "enqueued" not in [e.event for e in queue.events()]  # trimmed: only in the floor
    assert queue.redrive(dead)
    with serve(url, floor_dir=str(tmp_path)) as c:
        page = c.get(f"/queues/{qname}/jobs/{dead}").text
        shown = [line.split('"')[1] for line in page.split("<li data-event=")[1:]]
        assert shown == ["enqueued", "claimed", "dead", "redriven"]
    with serve(url) as c:  # no floor here: the live tail, and why
        page = c.get(f"/queues/{qname}/jobs/{dead}").text
        assert '<li data-event="redriven">' in page and "Live events only" in page
        assert '<li data-event="enqueued">' not in page


def test_a_flow_job_links_its_parent_and_children(url: str, queue: Queue, qname: str) -> None:
    other = qname + "-b"
    ids = queue.enqueue_flow(JobSpec("parent"), [JobSpec("a"), JobSpec("b", queue=other)])
    here, there = ids.children
    with serve(url) as c:
        page = c.get(f"/queues/{qname}/jobs/{ids.id}").text
        assert 'id="children"' in page
        assert f'<a href="/queues/{qname}/jobs/{here.id}">' in page
        assert f'<a href="/queues/{other}/jobs/{there.id}">' in page
        page = c.get(f"/queues/{other}/jobs/{there.id}").text
        assert f'<a href="/queues/{qname}/jobs/{ids.id}">' in page
        page = c.get(f"/queues/{qname}/jobs/{here.id}").text
        assert f'<a href="/queues/{qname}/jobs/{ids.id}">' in page


def test_the_queue_page_shows_lanes_limits_and_repeats(url: str, queue: Queue, qname: str) -> None:
    queue.enqueue("work", None, lane="tenant-1")
    queue.set_limits(concurrency=7, rate=(50, 1_000))
    queue.set_limits(lane="tenant-1", weight=3)
    queue.repeat("nightly", "report", cron="0 3 * * *", tz="Europe/Berlin")
    with serve(url) as c:
        page = c.get(f"/queues/{qname}").text
    assert '<tr data-lane="tenant-1">' in page and 'id="lanes"' in page
    assert "<dd>7</dd>" in page and "50 per 1000 ms" in page
    assert '<tr data-repeat="nightly">' in page and "<code>0 3 * * *</code> (Europe/Berlin)" in page


def test_paging_links(url: str, queue: Queue, qname: str) -> None:
    queue.enqueue_many([("work", i) for i in range(51)])
    with serve(url) as c:
        first = c.get(f"/queues/{qname}").text
        assert 'rel="next"' in first and 'rel="prev"' not in first
        second = c.get(f"/queues/{qname}", params={"page": 2}).text
        assert 'rel="prev"' in second and 'rel="next"' not in second
        assert second.count("<tr data-job=") == 1


def test_actions_change_state(url: str, queue: Queue, qname: str) -> None:
    dead = make_dead(queue)
    scheduled = queue.enqueue("later", None, delay_ms=600_000)
    waiting = queue.enqueue("work", None)
    doomed = queue.enqueue("work", None)
    with serve(url) as c:
        r = post(c, f"/queues/{qname}/pause")
        assert r.status_code == 303 and r.headers["location"] == f"/queues/{qname}"
        assert queue.is_paused()
        page = c.get(f"/queues/{qname}").text
        assert 'role="status" id="flash"' in page and "paused" in page
        assert 'data-action="resume"' in page and 'data-paused="1"' in page
        post(c, f"/queues/{qname}/resume")
        assert not queue.is_paused()
        post(c, f"/queues/{qname}/jobs/{dead}/redrive")
        assert queue.job(dead).state == "pending"  # type: ignore[union-attr]
        post(c, f"/queues/{qname}/jobs/{scheduled}/promote")
        assert queue.job(scheduled).state == "pending"  # type: ignore[union-attr]
        post(c, f"/queues/{qname}/jobs/{waiting}/cancel")
        assert queue.job(waiting).state == "dead"  # type: ignore[union-attr]
        post(c, f"/queues/{qname}/jobs/{doomed}/remove")
        assert queue.job(doomed) is None
        r = post(c, f"/queues/{qname}/jobs/{doomed}/redrive")  # gone: a message, no change
        assert r.status_code == 303
        post(c, f"/queues/{qname}/drain")
        assert queue.counts()["pending"] == 0


def test_refused_posts_change_nothing(url: str, queue: Queue, qname: str) -> None:
    queue.enqueue("x", None)  # a queue there is (a name with no keys is 404)
    with serve(url) as c:
        token = csrf(c)
        assert c.post(f"/queues/{qname}/pause").status_code == 403
        assert c.post(f"/queues/{qname}/pause", data={"csrf": "wrong"}).status_code == 403
        other = httpx.Client(base_url=str(c.base_url), cookies={"emq_csrf": "a"})
        with other:  # a valid token of another session
            assert other.post(f"/queues/{qname}/pause", data={"csrf": token}).status_code == 403
        evil = {"origin": "http://evil.example"}
        r = c.post(f"/queues/{qname}/pause", data={"csrf": token}, headers=evil)
        assert r.status_code == 403
        referer = {"referer": "http://evil.example/page"}
        r = c.post(f"/queues/{qname}/pause", data={"csrf": token}, headers=referer)
        assert r.status_code == 403
        assert c.get("/", headers={"host": "evil.example"}).status_code == 403
        assert not queue.is_paused()
        same = {"origin": str(c.base_url).rstrip("/")}
        assert c.post(f"/queues/{qname}/pause", data={"csrf": token}, headers=same).is_redirect
        assert queue.is_paused()


def test_read_only_renders_no_action_and_refuses_posts(url: str, queue: Queue, qname: str) -> None:
    dead = make_dead(queue)
    with serve(url, read_only=True) as c:
        for path in ["/", f"/queues/{qname}", f"/queues/{qname}/jobs/{dead}"]:
            page = c.get(path).text
            assert "data-action" not in page and 'method="post"' not in page, path
        token = csrf(c)
        for action in ["pause", "drain"]:
            assert c.post(f"/queues/{qname}/{action}", data={"csrf": token}).status_code == 403
        r = c.post(f"/queues/{qname}/jobs/{dead}/redrive", data={"csrf": token})
        assert r.status_code == 403
        assert c.post("/anything/else", data={"csrf": token}).status_code == 403
    assert not queue.is_paused() and queue.job(dead).state == "dead"  # type: ignore[union-attr]


def test_token_guards_every_page(url: str, queue: Queue, qname: str) -> None:
    queue.enqueue("x", None)  # a queue there is (a name with no keys is 404)
    with serve(url, token=TOKEN) as c:
        r = c.get(f"/queues/{qname}")
        assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")
        assert c.get("/events", headers={"accept": "text/event-stream"}).status_code == 401
        assert c.get("/metrics", headers={"accept": "*/*"}).status_code == 401
        assert c.post(f"/queues/{qname}/pause", data={"csrf": csrf(c)}).status_code == 401
        assert c.get("/healthz").status_code == 200
        login = c.get("/login").text
        assert 'id="login"' in login and 'name="token"' in login
        r = c.post("/login", data={"csrf": csrf(c), "token": "wrong", "next": "/"})
        assert r.status_code == 401 and TOKEN not in r.text and "emq_auth" not in c.cookies
        r = c.post("/login", data={"token": TOKEN, "next": "/"})  # no CSRF field
        assert r.status_code == 403 and "emq_auth" not in c.cookies
        r = c.post("/login", data={"csrf": csrf(c), "token": TOKEN, "next": f"/queues/{qname}"})
        assert r.status_code == 303 and r.headers["location"] == f"/queues/{qname}"
        assert TOKEN not in r.text and TOKEN not in c.cookies["emq_auth"]
        assert "set-cookie" in r.headers and "samesite=strict" in r.headers["set-cookie"].lower()
        assert "httponly" in r.headers["set-cookie"].lower()
        page = c.get(f"/queues/{qname}")
        assert page.status_code == 200 and TOKEN not in page.text
        assert post(c, f"/queues/{qname}/pause").status_code == 303
        assert queue.is_paused()
        bearer = {"authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=str(c.base_url), headers=bearer) as scraper:
            assert scraper.get("/healthz").status_code == 200
            assert scraper.get("/").status_code == 200
        with httpx.Client(base_url=str(c.base_url)) as stranger:  # any Host with a token
            assert stranger.get("/", headers={"host": "dash.example"}).status_code == 401


def test_a_server_that_does_not_answer_is_a_503_without_its_password() -> None:
    url = f"redis://:hunter2-secret@127.0.0.1:{free_port()}/0"
    with serve(url) as c:
        for path in ["/", "/queues/q", "/healthz"]:
            r = c.get(path)
            assert r.status_code == 503 and "does not answer" in r.text, path
            assert "hunter2" not in r.text


def test_security_helpers() -> None:
    for host in ["127.0.0.1", "127.8.0.1", "::1", "[::1]", "localhost", "::ffff:127.0.0.1"]:
        assert security.is_loopback(host), host
    for host in ["0.0.0.0", "192.168.1.2", "example.com", "", "::", "localhost.evil.example"]:
        assert not security.is_loopback(host), host
    assert security.host_name("[::1]:8080") == "::1"
    assert security.host_name("127.0.0.1:80") == "127.0.0.1"
    for bad in [None, "", "//evil.example/x", "http://evil.example", "/\\evil", "x"]:
        assert security.safe_next(bad) == "/"
    assert security.safe_next("/queues/a?location=dead") == "/queues/a?location=dead"
    assert security.session_value("a") != security.session_value("b")
    assert len(security.session_value("a")) == 64


def test_cli_refuses_a_public_host_without_a_token() -> None:
    runner = CliRunner()
    r = runner.invoke(cli, ["dashboard", "--host", "0.0.0.0"], env={"EMQ_DASHBOARD_TOKEN": ""})
    assert r.exit_code == 2 and "EMQ_DASHBOARD_TOKEN" in r.output
    r = runner.invoke(cli, ["dashboard", "--host", "10.1.2.3"], env={"EMQ_DASHBOARD_TOKEN": "x"})
    assert r.exit_code == 2 and "too short" in r.output


def test_cli_says_how_to_install_the_web_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    """One ``error:`` line and exit 2, as every refusal (docs/cli.md); it was click's
    ``Error:`` and exit 1."""
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if the extra were not installed
    r = CliRunner().invoke(cli, ["dashboard"])
    assert r.exit_code == 2, r.output
    assert r.output == "error: the dashboard needs uvicorn: pip install 'emq[dashboard]'\n"


def test_hostile_payload_and_error_render_as_text(url: str, queue: Queue, qname: str) -> None:
    hostile = "<script>alert('x')</script></td></tr></table><img src=x onerror=alert(1)>"
    big = "A" * 100_000
    dead = make_dead(queue, {"text": hostile, "big": big}, error=hostile)
    queue.enqueue("work", {"text": hostile})
    text = queue.enqueue("work", "42")  # a string payload stays a string
    with serve(url) as c:
        for path in [f"/queues/{qname}/jobs/{dead}", f"/queues/{qname}?location=dead"]:
            page = c.get(path).text
            assert "<script>alert" not in page and "<img src=x" not in page, path
            assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&lt;/td&gt;" in page, path
            assert page.count("<table") == page.count("</table>"), path
        page = c.get(f"/queues/{qname}/jobs/{dead}").text
        assert big in page
        assert '<pre id="payload">&#34;42&#34;</pre>' in c.get(f"/queues/{qname}/jobs/{text}").text
        start = page.index('<pre id="payload">')
        assert "<" not in page[start + len('<pre id="payload">') : page.index("</pre>", start)]


async def test_the_sampler_reads_what_counts_reads(url: str, queue: Queue, qname: str) -> None:
    other = Queue.from_url(url, qname + "-lanes")
    try:
        make_dead(queue)
        queue.enqueue("work", None, delay_ms=600_000)
        queue.pause()
        other.enqueue_many([("work", i) for i in range(3)])
        other.enqueue("work", None, lane="tenant-1")
        d = Dash(url)
        try:
            got = await read_counts(d, [qname, other.name])
        finally:
            await d.close()
        assert got[qname] == {**queue.counts(), "paused": 1}
        assert got[other.name] == {**other.counts(), "paused": 0}
        assert got[other.name]["pending"] == 4
        d = Dash(url)
        try:
            got = await read_counts(d, [qname, other.name], oldest=True)
        finally:
            await d.close()
        assert got[qname]["oldest_ms"] == 0  # nothing pending
        first = other.jobs("pending", 0, 10)
        assert got[other.name]["oldest_ms"] == min(minted_at_ms(j.id) for j in first)
    finally:
        other.obliterate(force=True)
        other.close()


def test_charts_of_throughput_and_failure_rate() -> None:
    from emq.dashboard.live import Live, Sample

    live = Live(Dash("redis://127.0.0.1:1/0"))
    assert live.charts("q")["through"] == "collecting…"
    live.history["q"] = deque(
        [Sample(0, 0, 0), Sample(5_000, 50, 0), Sample(10_000, 60, 10), Sample(15_000, 60, 10)]
    )
    through, failing = live.rates("q")
    assert through == [10.0, 2.0, 0.0] and failing == [0.0, 0.5, 0.0]
    charts = live.charts("q")
    assert charts["through"] == "0.0/s" and charts["failing"] == "0%"
    points = [p.split(",") for p in charts["through_points"].split()]
    assert [float(x) for x, _ in points] == [0.0, 60.0, 120.0]
    assert float(points[0][1]) < float(points[1][1]) < float(points[2][1])  # 10/s is highest


def sse_counts(lines: Iterator[str]) -> dict[str, Any]:
    """The data of the next ``counts`` event of an SSE line stream."""
    event = None
    for line in lines:
        if line.startswith("event:"):
            event = line.split(":", 1)[1].strip()
        elif line.startswith("data:") and event == "counts":
            data: dict[str, Any] = json.loads(line.split(":", 1)[1])
            return data
    raise AssertionError("the event stream ended")


def test_the_overview_stream_covers_a_queue_newer_than_the_app(url: str, qname: str) -> None:
    with serve(url) as c:
        live = c.app.state.live  # type: ignore[attr-defined]
        with Queue.from_url(url, qname) as queue:
            queue.enqueue("work", None)
        assert qname in c.get("/").text
        assert qname in live.names  # the page told the sampler, before its next names reading
        with c.stream("GET", "/events") as r:
            lines = r.iter_lines()
            deadline = time.monotonic() + BOUND_S
            while qname not in (got := sse_counts(lines)):
                assert time.monotonic() < deadline
        assert got[qname]["pending"] == 1


def test_events_push_counts_of_the_watched_queue(url: str, queue: Queue, qname: str) -> None:
    queue.enqueue("work", None)
    with serve(url) as c:
        live = c.app.state.live  # type: ignore[attr-defined]
        with c.stream("GET", "/events", params={"queue": qname}) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            lines = r.iter_lines()
            first = sse_counts(lines)
            assert first[qname]["pending"] == 1 and first[qname]["paused"] == 0
            queue.enqueue("work", None)
            queue.pause()
            deadline = time.monotonic() + BOUND_S
            while True:  # each event is a change; the sampler reads once per second
                counts = sse_counts(lines)[qname]
                if counts["pending"] == 2 and counts["paused"] == 1:
                    break
                assert time.monotonic() < deadline
            assert live._watched[qname] == 1
        deadline = time.monotonic() + BOUND_S
        while live._watched[qname]:  # the closed connection ended its subscription
            assert time.monotonic() < deadline, "the closed stream still watches"
            time.sleep(0.05)


def test_metrics_endpoint(url: str, queue: Queue) -> None:
    queue.enqueue("work", None)
    with serve(url) as c:
        r = c.get("/metrics", headers={"accept": "*/*"})
    from prometheus_client.parser import text_string_to_metric_families

    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    families = list(text_string_to_metric_families(r.text))
    labelled = {s.labels.get("queue") for f in families for s in f.samples}
    assert queue.name in labelled
