"""The dashboard in a real browser: headless Chromium (Debian's) driven by Playwright, against
the real ``emq dashboard`` command on the embedded Valkey (one server kind keeps this fast).

What an operator does, end to end: find a dead job whose live events were archived and
trimmed by a word of its payload, read its whole timeline, redrive it; bulk-redrive 2,000 dead
jobs that match a filter; pause and resume; watch counts change without reloading (the one
time bound here: 2 s, for the "about a second" of docs/dashboard.md, Live updates); see a
hostile payload as text; a read-only dashboard that shows no action and refuses a forged one;
a dashboard off loopback that refuses every page until the token is given; Tab reaches the
actions; a phone width needs no sideways scroll.
Screenshots of every page are saved as artefacts (``browser_support.screenshot``).

The markup these tests rely on (keep it stable when editing the templates): ``<main id="main">``
with one ``<h1>``; the overview's ``tr[data-queue][data-paused]`` with ``td[data-count=LOC]``;
the queue page's ``#jobs tr[data-job]``; the job page's ``#payload``, ``#error`` and
``#timeline li[data-event]`` (a run of progress events one ``li[data-updates=N]`` with its
earlier values in a ``<details>``); ``form#search`` (fields ``queue``, ``q``) and ``#results
tr[data-job][data-source]``; the dead letters' ``#groups tr[data-error]`` with ``td[data-count]``,
``#bulk-progress`` and ``#bulk-status`` (ending in "done"); ``#workers tr[data-worker]``;
``form#race`` and ``#race-readout``; ``form#login input[name=token]``; every action a
``button[data-action=NAME]``, a dangerous one confirmed in ``dialog#confirm`` by
``button[data-confirm]`` (``button[data-cancel]`` backs out; each is named by the form's
``data-yes`` / ``data-no``: "Cancel job" / "Keep running"); ``#flash`` after an action.

Skipped without chromium or playwright unless ``EMQ_REQUIRE_BROWSER=1`` (``browser_support``).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from emq import Permanent, Queue, Worker
from emq.archive import Archive
from emq.calls.control import encode_progress
from emq.embedded.standalone import EmbeddedServer, valkey_binary
from emq.queue._sync.stream import read_range

from ..support.browser import (
    DESKTOP,
    PHONE,
    Dashboard,
    artifacts_dir,
    chromium,
    dashboard,
    non_loopback_ipv4,
    require_browser,
    screenshot,
)
from ..support.helpers import make_dead

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TOKEN = "browser-test-token-5f1c"
ACTIONS = "button[data-action]"
PAGES_OF = ("/", "/search", "/workers", "/race")  # pages that need no queue or job


# --- fixtures: one Valkey, one browser, one dashboard per set of options --------------------


@pytest.fixture(scope="module")
def valkey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    require_browser()
    srv = EmbeddedServer(tmp_path_factory.mktemp("browser-valkey"), binary=valkey_binary())
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def url(valkey: EmbeddedServer) -> str:
    """Overrides the suite's ``url``: every browser test runs on the one embedded Valkey."""
    return valkey.url()


@pytest.fixture(scope="module")
def floor_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("floor")


@pytest.fixture(scope="module")
def browser(valkey: EmbeddedServer) -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def board(url: str, floor_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    log = tmp_path_factory.mktemp("board") / "dashboard.log"
    with dashboard(url, log, args=["--floor-dir", str(floor_dir)]) as d:
        yield d


@pytest.fixture(scope="module")
def ro_board(url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    log = tmp_path_factory.mktemp("ro-board") / "dashboard.log"
    with dashboard(url, log, args=["--read-only"]) as d:
        yield d


@contextmanager
def opened(browser: Any, board: Dashboard, viewport: dict[str, int] = DESKTOP) -> Iterator[Any]:
    """A fresh browser context (own cookies) on ``board``; yields its page."""
    context = browser.new_context(viewport=viewport, base_url=board.base)
    context.set_default_timeout(20_000)  # bounds a hang, never a speed
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture
def page(browser: Any, board: Dashboard) -> Iterator[Any]:
    with opened(browser, board) as p:
        yield p


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return artifacts_dir(tmp_path_factory)


# --- helpers --------------------------------------------------------------------------------


def expect(locator: Any) -> Any:
    """Playwright's ``expect``, retrying for up to 20 s unless told (a hang bound)."""
    from playwright.sync_api import expect as pw_expect

    pw_expect.set_options(timeout=20_000)
    return pw_expect(locator)


def act(page: Any, selector: str) -> None:
    """Click an action button, confirm it if it opens ``dialog#confirm``, and wait for the
    page's ``#flash`` (any flash shown before the click is removed first)."""
    page.evaluate("document.getElementById('flash')?.remove()")
    page.locator(selector).first.click()
    confirm = page.locator("dialog#confirm[open] button[data-confirm]")
    flash = page.locator("#flash")
    expect(confirm.or_(flash).first).to_be_visible()
    if confirm.is_visible():
        confirm.click()
    expect(flash).to_be_visible()


def fill(page: Any, field: Any, value: str) -> None:
    """Set a form field, whether it is an ``<input>`` or a ``<select>``."""
    if field.evaluate("el => el.tagName") == "SELECT":
        field.select_option(value)
    else:
        field.fill(value)


def csrf_of(page: Any) -> str | None:
    """The session's CSRF token as the page holds it: a form's ``csrf`` field or, on a page
    without forms, its ``emq_csrf`` cookie (the field must equal it)."""
    field = page.locator("input[name=csrf]")
    if field.count():
        return str(field.first.get_attribute("value"))
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    return cookies.get("emq_csrf")


NO_SCRIPT_RAN = """() => ({
  flag: window.__pwned === undefined ? null : String(window.__pwned),
  scripts: [...document.scripts].filter(s => s.textContent.includes('__pwned')).length,
  handlers: document.querySelectorAll('[onerror], [onload], #broke').length,
})"""


def assert_inert(page: Any) -> None:
    assert page.evaluate(NO_SCRIPT_RAN) == {"flag": None, "scripts": 0, "handlers": 0}


# --- a dead job, archived and trimmed: found, read whole, redriven --------------------------


def trimmed_dead_job(queue: Queue, client: redis.Redis, floor_dir: Path) -> tuple[str, list[str]]:
    """A job that failed, was retried and died, whose events the real archiver folded into
    the floor the dashboard reads and then trimmed from the live stream: (its id, the names
    of its events in order, from ``history()``)."""
    job = str(queue.enqueue("invoice", {"note": "overdue quokka invoice"}, max_attempts=2))
    (c,) = queue.claim(1)
    assert queue.fail(c.id, c.token, "smtp 451", delay_ms=0) == "scheduled"
    queue.promote_due()
    (c,) = queue.claim(1)
    assert queue.fail(c.id, c.token, "smtp 550 mailbox gone") == "dead"
    queue.enqueue("later", {"n": 1})  # the stream's last entry (kept by MINID) is not the job's
    floor = floor_dir / f"{queue.name}.sqlite3"
    archive = Archive(queue, floor)
    assert archive.catch_up().trimmed > 0
    archive.close()
    assert [e for e in read_range(client, queue.core.keys) if e.job == job] == []
    steps = [e.event for e in queue.history(job, floor=floor)]
    assert len(steps) >= 5
    return job, steps


def test_search_finds_a_dead_job_by_a_word_of_its_payload_after_its_events_were_trimmed(
    page: Any, queue: Queue, client: redis.Redis, floor_dir: Path
) -> None:
    job, _ = trimmed_dead_job(queue, client, floor_dir)
    page.goto("/search")
    form = page.locator("form#search")
    fill(page, form.locator("[name=queue]"), queue.name)
    form.locator("[name=q]").fill("quokka")
    form.locator("[name=q]").press("Enter")
    hit = page.locator(f'#results tr[data-job="{job}"]')
    expect(hit).to_be_visible()
    assert hit.get_attribute("data-source") in ("floor", "both")
    assert page.locator("#results tr[data-job]").count() == 1
    hit.locator("a").first.click()
    expect(page.locator("#timeline")).to_be_visible()
    assert f"/queues/{queue.name}/jobs/{job}" in page.url


def test_the_job_page_shows_every_step_of_an_archived_job_and_redrives_it_to_pending(
    page: Any, queue: Queue, client: redis.Redis, floor_dir: Path
) -> None:
    job, steps = trimmed_dead_job(queue, client, floor_dir)
    page.goto(f"/queues/{queue.name}/jobs/{job}")
    shown = page.locator("#timeline li[data-event]").evaluate_all(
        "els => els.map(e => e.dataset.event)"
    )
    assert shown == steps
    expect(page.locator("#error")).to_contain_text("smtp 550 mailbox gone")
    expect(page.locator("#payload")).to_contain_text("overdue quokka invoice")

    act(page, 'button[data-action="redrive"]')
    row = queue.job(job)
    assert row is not None and row.state == "pending"
    assert job in {j.id for j in queue.jobs("pending")}


HOLDER = "importer-1:4121:3e1a9b2c"  # the registry id of the worker that holds the import


def running_with_progress(queue: Queue, updates: int) -> str:
    """A job that failed once, was retried and now runs, having reported ``updates`` progress
    values (one script call: each value its own ``progress`` event, as a worker's flusher
    sends them twice a second); returns its id."""
    job = str(queue.enqueue("import", {"file": "customers-2026-11.csv", "rows": 276_000},
                            max_attempts=3))  # fmt: skip
    (c,) = queue.claim(1)
    assert queue.fail(c.id, c.token, "connection reset by peer", delay_ms=0) == "scheduled"
    queue.promote_due()
    (c,) = queue.claim(1, lease_ms=600_000, worker=HOLDER)
    values = [encode_progress({"done": 1_000 * (i + 1), "of": 276_000}) for i in range(updates)]
    stored = queue.set_progress_many([(job, c.token, v) for v in values])
    assert all(isinstance(at, int) for at in stored)
    return job


def test_an_active_jobs_progress_is_one_line_and_its_cancel_dialog_names_both_choices(
    page: Any, queue: Queue
) -> None:
    job = running_with_progress(queue, 240)  # two minutes at the default interval
    page.goto(f"/queues/{queue.name}/jobs/{job}")
    lines = page.locator("#timeline > li[data-event]")
    shown = lines.evaluate_all("els => els.map(e => e.dataset.event)")
    assert shown == ["enqueued", "claimed", "retrying", "promoted", "claimed", "progress"], shown
    run = page.locator('#timeline li[data-event="progress"][data-updates="240"]')
    expect(run).to_contain_text("240,000 of 276,000 (87%)")
    expect(page.locator('dd[data-field="worker"] a[href="/workers"]')).to_have_text(HOLDER)
    expect(run).to_contain_text("240 updates")
    earlier = run.locator("li[data-update]")
    expect(earlier.first).to_be_hidden()  # closed until asked
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height <= 2 * DESKTOP["height"], height  # it was about 8,900 px
    run.locator("summary").click()
    expect(earlier.first).to_be_visible()
    assert earlier.count() == 100 and "139 older" in run.inner_text()

    page.locator('button[data-action="cancel"]').click()
    dialog = page.locator("dialog#confirm[open]")
    expect(dialog).to_be_visible()
    expect(dialog.locator("button[data-confirm]")).to_have_text("Cancel job")
    expect(dialog.locator("button[data-cancel]")).to_have_text("Keep running")
    dialog.locator("button[data-cancel]").click()  # backs out: nothing changes
    expect(page.locator("dialog#confirm[open]")).to_have_count(0)
    row = queue.job(job)
    assert row is not None and row.state == "active" and row.cancel_requested is None

    act(page, 'button[data-action="cancel"]')
    expect(page.locator("#flash")).to_contain_text("cancel: requested")
    row = queue.job(job)
    assert row is not None and row.cancel_requested == "cancelled from the dashboard"


def test_bulk_redrive_of_a_filter_of_2000_dead_jobs_completes(page: Any, queue: Queue) -> None:
    make_dead(queue, [("mail", {"i": i}) for i in range(2000)], "smtp refused")
    others = make_dead(queue, [("mail", {"j": j}) for j in range(5)], "disk full")
    assert queue.counts()["dead"] == 2005

    page.goto(f"/queues/{queue.name}/dead")
    group = page.locator('#groups tr[data-error="smtp refused"]')
    expect(group.locator("td[data-count]")).to_have_text(re.compile(r"^\s*2,?000\s*$"))
    expect(page.locator('#groups tr[data-error="disk full"] td[data-count]')).to_have_text(
        re.compile(r"^\s*5\s*$")
    )
    button = group.locator('button[data-action="bulk-redrive"]')
    button.click()
    confirm = page.locator("dialog#confirm[open] button[data-confirm]")
    status = page.locator("#bulk-status")
    expect(confirm.or_(status).first).to_be_visible()
    if confirm.is_visible():
        confirm.click()
    expect(status).to_have_text(re.compile(r"done\s*$"), timeout=90_000)  # a hang bound
    progress = page.locator("progress#bulk-progress")
    assert progress.get_attribute("value") == progress.get_attribute("max") == "2000"
    counts = queue.counts()
    assert (counts["dead"], counts["pending"]) == (5, 2000)
    assert {j.id for j in queue.jobs("dead")} == set(others)


def test_pause_toggles_on_the_queue_page_and_shows_on_the_overview(page: Any, queue: Queue) -> None:
    queue.enqueue("x", None)
    page.goto(f"/queues/{queue.name}")
    act(page, 'button[data-action="pause"]')
    assert queue.is_paused()
    expect(page.locator('button[data-action="resume"]')).to_be_visible()
    assert page.locator('button[data-action="pause"]').count() == 0
    page.goto("/")
    expect(page.locator(f'tr[data-queue="{queue.name}"]')).to_have_attribute("data-paused", "1")

    page.goto(f"/queues/{queue.name}")
    act(page, 'button[data-action="resume"]')
    assert not queue.is_paused()
    expect(page.locator('button[data-action="pause"]')).to_be_visible()
    page.goto("/")
    expect(page.locator(f'tr[data-queue="{queue.name}"]')).to_have_attribute("data-paused", "0")


def test_overview_counts_update_live_within_2_s(page: Any, queue: Queue) -> None:
    queue.enqueue("x", None)
    with page.expect_response(lambda r: "/events" in r.url):  # the live stream is connected
        page.goto("/")
    row = page.locator(f'tr[data-queue="{queue.name}"]')
    expect(row.locator('td[data-count="pending"]')).to_have_text(re.compile(r"^\s*1\s*$"))
    queue.enqueue_many([("x", i) for i in range(3)])
    expect(row.locator('td[data-count="pending"]')).to_have_text(
        re.compile(r"^\s*4\s*$"),
        timeout=2_000,  # within 2 s of a change (docs/dashboard.md, Live updates)
    )
    queue.claim(1)
    expect(row.locator('td[data-count="active"]')).to_have_text(
        re.compile(r"^\s*1\s*$"), timeout=2_000
    )
    expect(row.locator('td[data-count="pending"]')).to_have_text(
        re.compile(r"^\s*3\s*$"), timeout=2_000
    )


HOSTILE = {
    "html": "<script>window.__pwned = 1</script>",
    "cell": "</td></tr></table><b id=broke>broke out</b>",
    "img": '<img src=x onerror="window.__pwned = 2">',
    "big": "A" * 100_000,
}
HOSTILE_ERROR = "<script>window.__pwned = 3</script></td><img src=x onerror=alert(1)>"


def test_a_hostile_payload_and_error_render_as_text_on_every_page(page: Any, queue: Queue) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    (job,) = make_dead(queue, [("evil", HOSTILE)], HOSTILE_ERROR)
    queue.enqueue("evil", HOSTILE)  # one pending too

    page.goto(f"/queues/{queue.name}/jobs/{job}")
    assert_inert(page)
    assert json.loads(page.locator("#payload").inner_text()) == HOSTILE  # all of it, as text
    assert HOSTILE_ERROR in page.locator("#error").inner_text()

    shown = {  # each page and what it must show of the two hostile jobs
        f"/queues/{queue.name}?location=dead": f'#jobs tr[data-job="{job}"]',
        f"/queues/{queue.name}": "#jobs tr[data-job]",
        f"/queues/{queue.name}/dead": "#groups tr[data-error] td[data-count]",
        f"/search?queue={queue.name}&q=broke": f'#results tr[data-job="{job}"]',
        "/": f'tr[data-queue="{queue.name}"] td[data-count="dead"]',
    }
    for path, selector in shown.items():
        resp = page.goto(path)
        assert resp is not None and resp.status == 200, path
        expect(page.locator(selector)).to_have_count(1)
        assert_inert(page)
    assert dialogs == []


# --- safety: read-only, off loopback ----------------------------------------------------------


def test_read_only_shows_no_action_and_refuses_a_forged_post(
    browser: Any, ro_board: Dashboard, queue: Queue
) -> None:
    (dead,) = make_dead(queue, [("x", {"a": 1})], "boom")
    queue.enqueue("y", None)
    with opened(browser, ro_board) as page:
        token = None
        for path in (
            "/",
            f"/queues/{queue.name}",
            f"/queues/{queue.name}/jobs/{dead}",
            f"/queues/{queue.name}/dead",
            f"/queues/{queue.name}?location=dead",
            "/search",
            "/workers",
            "/race",
        ):
            resp = page.goto(path)
            assert resp is not None and resp.status == 200, path
            assert page.locator(ACTIONS).count() == 0, path
            token = token or csrf_of(page)
        assert token, "no page of the read-only dashboard set a CSRF token"
        forged = {"csrf": token}
        for path in (
            f"/queues/{queue.name}/pause",
            f"/queues/{queue.name}/drain",
            f"/queues/{queue.name}/jobs/{dead}/redrive",
            f"/queues/{queue.name}/jobs/{dead}/remove",
            f"/queues/{queue.name}/dead/redrive",
            f"/queues/{queue.name}/dead/purge",
            "/race/run",
        ):
            resp = page.request.post(path, form=forged, max_redirects=0)
            assert resp.status == 403, (path, resp.status)
    assert not queue.is_paused()
    counts = queue.counts()
    assert (counts["dead"], counts["pending"]) == (1, 1)


@pytest.fixture(scope="module")
def token_board(url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A dashboard bound to a non-loopback local address (traffic to it stays on this
    machine), which requires EMQ_DASHBOARD_TOKEN. On a machine with no such address, the
    same token mode on loopback (a token set, every page needs it wherever it is bound)."""
    host = non_loopback_ipv4() or "127.0.0.1"
    log = tmp_path_factory.mktemp("token-board") / "dashboard.log"
    with dashboard(url, log, host=host, env={"EMQ_DASHBOARD_TOKEN": TOKEN}) as d:
        yield d


def test_off_loopback_every_page_is_refused_without_the_token_and_loads_with_it(
    browser: Any, token_board: Dashboard, queue: Queue
) -> None:
    job = str(queue.enqueue("x", {"secret": "s3cr3t-payload"}))
    paths = [
        *PAGES_OF,
        f"/queues/{queue.name}",
        f"/queues/{queue.name}/jobs/{job}",
        f"/queues/{queue.name}/dead",
        "/metrics",
        "/events",
    ]
    with opened(browser, token_board) as page:
        for path in paths:
            resp = page.request.get(path, max_redirects=0)
            assert resp.status in (401, 403, 302, 303, 307), (path, resp.status)
            assert b"s3cr3t-payload" not in resp.body() and queue.name.encode() not in resp.body()
        resp = page.request.post(f"/queues/{queue.name}/pause", form={"csrf": ""}, max_redirects=0)
        assert resp.status in (401, 403, 302, 303), resp.status
        assert not queue.is_paused()

        page.goto(f"/queues/{queue.name}")  # in the browser: the token form, asked once
        assert "/login" in page.url
        field = page.locator('form#login input[name="token"]')
        field.fill("not-the-token")
        with page.expect_navigation():
            field.press("Enter")
        expect(page.locator("form#login")).to_be_visible()
        assert page.request.get("/", max_redirects=0).status == 401

        field.fill(TOKEN)
        with page.expect_navigation():
            field.press("Enter")
        expect(page.locator("main#main h1")).to_be_visible()
        assert page.url.endswith(f"/queues/{queue.name}")  # back to the page it asked for
        for path in paths[:-2]:
            resp = page.goto(path)
            assert resp is not None and resp.status == 200, path
            expect(page.locator("main#main h1")).to_be_visible()
        page.goto(f"/queues/{queue.name}/jobs/{job}")
        expect(page.locator("#payload")).to_contain_text("s3cr3t-payload")


# --- keyboard, accessible names, phone width ------------------------------------------------

NAME_OF = """el => (el.getAttribute('aria-label') || (el.labels && el.labels.length
  ? [...el.labels].map(l => l.textContent).join(' ') : '') || el.textContent
  || el.getAttribute('title') || el.getAttribute('value') || '').trim()"""

FOCUSED = """() => { const el = document.activeElement;
  if (!el || el === document.body) return null;
  return {tag: el.tagName, action: el.dataset.action || null, href: el.getAttribute('href'),
          name: (NAME_OF)(el)}; }""".replace("NAME_OF", NAME_OF)


def tab_through(page: Any, limit: int = 120) -> list[dict[str, Any]]:
    """Press Tab until focus comes back to the first element reached (at most ``limit``)."""
    seen: list[dict[str, Any]] = []
    for _ in range(limit):
        page.keyboard.press("Tab")
        focused = page.evaluate(FOCUSED)
        if focused is None:
            continue
        if seen and focused == seen[0]:
            break
        seen.append(focused)
    return seen


def tab_to(page: Any, action: str, limit: int = 120) -> None:
    """Press Tab until the button of ``action`` has the focus (at most ``limit`` times)."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement?.dataset?.action") == action:
            return
    raise AssertionError(f"Tab never reached button[data-action={action}]")


def test_the_main_actions_are_reachable_with_tab_and_have_accessible_names(
    page: Any, queue: Queue
) -> None:
    (dead,) = make_dead(queue, [("x", None)], "boom")
    queue.enqueue("y", None)
    page.goto(f"/queues/{queue.name}")
    reached = tab_through(page)
    actions = {f["action"] for f in reached if f["action"]}
    assert {"pause", "drain"} <= actions, reached
    assert all(f["name"] for f in reached), [f for f in reached if not f["name"]]
    names = {f["name"] for f in reached if f["tag"] == "A"}
    assert {"Overview", "Search", "Workers", "Race lab"} <= names, names

    # by keyboard alone: Escape backs out of a drain; pause goes through its confirmation
    tab_to(page, "drain")
    page.keyboard.press("Enter")
    if page.locator("dialog#confirm[open]").count():
        page.keyboard.press("Escape")
        expect(page.locator("dialog#confirm[open]")).to_have_count(0)
        assert queue.counts()["pending"] == 1
    page.goto(f"/queues/{queue.name}")
    tab_to(page, "pause")
    page.keyboard.press("Enter")
    if page.locator("dialog#confirm[open]").count():
        confirm = page.locator("dialog#confirm button[data-confirm]")
        for _ in range(5):  # bounded: the dialog holds two or three controls
            if confirm.evaluate("el => el === document.activeElement"):
                break
            page.keyboard.press("Tab")
        page.keyboard.press("Enter")
    expect(page.locator('button[data-action="resume"]')).to_be_visible()
    assert queue.is_paused()

    page.goto(f"/queues/{queue.name}/jobs/{dead}")
    reached = tab_through(page)
    assert "redrive" in {f["action"] for f in reached}, reached
    assert all(f["name"] for f in reached), [f for f in reached if not f["name"]]

    page.goto(f"/queues/{queue.name}/dead")
    reached = tab_through(page)
    assert {"bulk-redrive", "bulk-purge"} <= {f["action"] for f in reached}, reached
    assert all(f["name"] for f in reached), [f for f in reached if not f["name"]]

    page.goto("/search")
    unlabelled = page.locator("form#search input, form#search select").evaluate_all(
        f"els => els.filter(e => e.type !== 'hidden' && e.type !== 'submit' && !({NAME_OF})(e))"
        ".map(e => e.name)"
    )
    assert unlabelled == []


def test_a_phone_width_needs_no_horizontal_scroll(
    browser: Any, board: Dashboard, queue: Queue
) -> None:
    (dead, *_) = make_dead(queue, [("x", {"to": "a" * 300})] * 3, "SMTP 550 mailbox gone " * 8)
    queue.enqueue_many([("x", i) for i in range(12)])
    with opened(browser, board, PHONE) as page:
        page.goto("/")
        expect(page.locator(f'tr[data-queue="{queue.name}"]')).to_have_count(1)
        for path in ("/", f"/queues/{queue.name}", f"/queues/{queue.name}/jobs/{dead}",
                     f"/queues/{queue.name}/dead", "/search", "/workers", "/race"):  # fmt: skip
            resp = page.goto(path)
            assert resp is not None and resp.status == 200, path
            width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
            assert width[0] <= width[1], (path, width)


# --- screenshots of every page, on a server of their own with realistic data -----------------

SHOP = "emails"
UPDATING = os.environ.get("EMQ_UPDATE_SCREENSHOTS") == "1"


def realistic_data(url: str, floor_dir: Path) -> str:
    """Four queues in the states an operator meets; returns the id of a job that was tried
    three times and died (its events folded into the floor, its live tail trimmed)."""
    emails = Queue.from_url(url, SHOP)
    people = ["ada", "grace", "linus", "margaret", "ken", "barbara", "edsger", "frances"]
    emails.enqueue_many(
        [
            ("welcome", {"to": f"{p}.{i}@example.com", "template": "welcome-v2"})
            for i in range(40)
            for p in people
        ]
    )
    for n, c in enumerate(emails.claim(200, lease_ms=60_000)):
        if n % 10 == 3:
            emails.fail(c.id, c.token, "SMTP 550 5.1.1 mailbox unavailable", retry=False)
        elif n % 10 == 7:
            emails.fail(c.id, c.token, "timeout after 30 s talking to smtp.example.com")
        elif n % 25 == 11:
            emails.fail(c.id, c.token, "template welcome-v2: missing field 'name'", retry=False)
        else:
            emails.complete(c.id, c.token)
    job = str(emails.enqueue("welcome", {"to": "grace@example.com", "template": "welcome-v2"},
                             priority=-1, max_attempts=3))  # fmt: skip
    for attempt in range(3):
        (c,) = emails.claim(1)
        emails.fail(c.id, c.token, f"timeout after 30 s (attempt {attempt + 1})", delay_ms=0)
        emails.promote_due()
    emails.claim(6, lease_ms=600_000)  # six running now
    for i in range(12):
        emails.enqueue("digest", {"week": 48, "to": f"team{i}@example.com"}, delay_ms=3_600_000)
    Archive(emails, floor_dir / f"{SHOP}.sqlite3").catch_up()
    emails.enqueue("receipt", {"order": 1042, "to": "ada@example.com"})  # a live tail
    emails.configure(result_ttl_ms=86_400_000, max_attempts=5)  # what its workers all use

    thumbs = Queue.from_url(url, "thumbnails")
    thumbs.enqueue_many(
        [("resize", {"image": f"img/{i:05}.jpg", "sizes": [64, 256]}) for i in range(1800)]
    )
    thumbs.pause()
    hooks = Queue.from_url(url, "webhooks")
    hooks.enqueue_many([("deliver", {"url": f"https://hooks.example.com/{i}"}) for i in range(9)])
    for q in (emails, thumbs, hooks):
        q.close()
    return job


@contextmanager
def live_traffic(url: str, seconds: float) -> Iterator[int]:
    """Two real workers (each keeps its entry in the registry), one on ``invoices`` and
    ``webhooks``, one on ``webhooks``, fed charges and deliveries for ``seconds`` (a charge
    is declined now and then) so the overview has rates to draw; yields how many workers."""
    stop = threading.Event()
    workers = [
        Worker(["invoices", "webhooks"], url=url, concurrency=8),
        Worker(["webhooks"], url=url, concurrency=4),
    ]

    def deliver(payload: Any) -> None:
        stop.wait(0.1)

    def charge(payload: Any) -> None:
        stop.wait(0.05)
        if payload["amount_eur"] == 23:
            raise Permanent("card_declined: insufficient funds")

    for w in workers:
        w.register("deliver", deliver)
    workers[0].register("charge", charge)

    def feed() -> None:
        invoices, hooks = Queue.from_url(url, "invoices"), Queue.from_url(url, "webhooks")
        for n in range(0, int(seconds * 50), 10):  # about 50 charges and 25 deliveries a second
            if stop.is_set():
                break
            charges = [{"customer": f"cus_{n + i:04}", "amount_eur": 19 + (n + i) % 7}
                       for i in range(10)]  # fmt: skip
            invoices.enqueue_many([("charge", c) for c in charges])
            hooks.enqueue_many([("deliver", {"url": f"https://hooks.example.com/{n + i}"})
                                for i in range(5)])  # fmt: skip
            stop.wait(0.2)
        invoices.close()
        hooks.close()

    threads = [threading.Thread(target=w.run_sync, kwargs={"handle_signals": False})
               for w in workers] + [threading.Thread(target=feed)]  # fmt: skip
    for t in threads:
        t.start()
    try:
        yield len(workers)
    finally:
        stop.set()
        for w in workers:
            w.stop()
        for t in threads:
            t.join(30)


def test_screenshots_of_every_page(browser: Any, tmp_path: Path, artifacts: Path) -> None:
    """Every page on a server of its own with realistic data (docs/dashboard.md shows them).
    With EMQ_UPDATE_SCREENSHOTS=1 traffic runs ~30 s first, so the charts have a line."""
    srv = EmbeddedServer(tmp_path / "valkey", binary=valkey_binary())
    srv.start()
    floor = tmp_path / "floor"
    try:
        job = realistic_data(srv.url(), floor)
        with Queue.from_url(srv.url(), "imports") as imports:
            importing = running_with_progress(imports, 240)
        with (
            dashboard(srv.url(), tmp_path / "log", args=["--floor-dir", str(floor)]) as board,
            live_traffic(srv.url(), 40 if UPDATING else 2) as n_workers,
            opened(browser, board) as page,
        ):
            page.goto("/")  # starts the sampler
            if UPDATING:
                page.wait_for_timeout(30_000)  # for the charts only, not a check
            shots = {
                "overview": "/",
                "queue": f"/queues/{SHOP}",
                "job": f"/queues/{SHOP}/jobs/{job}",
                "search": f"/search?queue={SHOP}&q=grace",
                "dead": f"/queues/{SHOP}/dead",
                "workers": "/workers",
            }
            for name, path in shots.items():
                resp = page.goto(path)
                assert resp is not None and resp.status == 200, path
                expect(page.locator("main#main h1")).to_be_visible()
                if name == "queue":
                    expect(page.locator("dl#settings")).to_contain_text("max_attempts5")
                if name == "workers":
                    expect(page.locator("#workers tr[data-worker]")).to_have_count(n_workers)
                screenshot(page, name, artifacts, full=name == "job")
            page.goto(f"/queues/imports/jobs/{importing}")  # its progress: one line
            expect(page.locator('#timeline li[data-updates="240"]')).to_be_visible()
            screenshot(page, "job-progress", artifacts, full=True)
            page.locator('button[data-action="cancel"]').click()
            expect(page.locator("dialog#confirm[open] button[data-cancel]")).to_have_text(
                "Keep running"
            )
            screenshot(page, "cancel", artifacts)
            page.locator("dialog#confirm button[data-cancel]").click()
            page.goto("/race")
            page.locator("form#race").locator("button, input[type=submit]").first.click()
            expect(page.locator("#race-readout")).not_to_be_empty(timeout=60_000)
            screenshot(page, "race", artifacts, full=True)
    finally:
        srv.stop()
    names = ("overview", "queue", "job", "job-progress", "cancel", "search", "dead", "workers",
             "race")  # fmt: skip
    assert {p.name for p in artifacts.glob("dashboard-*.png")} >= {
        f"dashboard-{n}.png" for n in names
    }
