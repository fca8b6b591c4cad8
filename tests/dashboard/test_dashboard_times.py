"""The dashboard's job views say when: a scheduled job's run-at, an active job's lease deadline,
a dead job's death, each as a server-clock time and how soon or how long ago, on the job's page
and in its location's listing (over HTTP, the app served by uvicorn, against real servers)."""

from __future__ import annotations

import re

import pytest
import redis

from emq import Queue
from emq.dashboard.web import _ms_time
from emq.model.keys import QueueKeys

from ..support.helpers import assert_consistent
from .test_dashboard import make_dead, serve

pytestmark = pytest.mark.servers("valkey", "redis")


def shown(page: str, field: str, ms: float | None) -> str:
    """The relative part of the time ``field`` shows, after checking its date is ``ms``'s."""
    assert ms is not None
    m = re.search(rf'data-time="{field}"><time datetime="([^"]+)">\1</time> \(([^)]+)\)', page)
    assert m, f"no {field} time in the page"
    assert m[1] == _ms_time(int(ms))
    return m[2]


def test_job_page_and_listing_show_run_at_and_lease_deadline(
    url: str, queue: Queue, qname: str, client: redis.Redis
) -> None:
    k = QueueKeys.of(qname)
    dead = make_dead(queue)
    later = queue.enqueue("later", delay_ms=600_000)
    queue.enqueue("retried")
    (held,) = queue.claim(1, lease_ms=600_000, worker="w-first")
    assert queue.fail(held.id, held.token, "boom", delay_ms=300_000) == "scheduled"
    running = queue.enqueue("running")
    (lease,) = queue.claim(1, lease_ms=600_000, worker="w-holder")
    assert lease.id == running
    soon = re.compile(r"in \d+m \d\ds")  # minutes away: the text, not a speed
    with serve(url) as c:
        page = c.get(f"/queues/{qname}/jobs/{later}").text
        assert soon.fullmatch(shown(page, "run_at", client.zscore(k.schedule, later)))
        assert 'data-time="lease_deadline"' not in page
        page = c.get(f"/queues/{qname}/jobs/{held.id}").text  # a retry in its backoff
        assert soon.fullmatch(shown(page, "run_at", client.zscore(k.schedule, held.id)))
        assert re.fullmatch(r"now|.+ ago", shown(page, "claimed", held.token // 1000))
        assert '<dt>last worker</dt><dd data-field="worker"><a href="/workers">w-first' in page
        page = c.get(f"/queues/{qname}/jobs/{running}").text
        assert soon.fullmatch(shown(page, "lease_deadline", lease.deadline_ms))
        assert '<dt>held by</dt><dd data-field="worker"><a href="/workers">w-holder<' in page
        assert 'data-time="run_at"' not in page
        page = c.get(f"/queues/{qname}/jobs/{dead}").text
        assert shown(page, "died", queue.job(dead).died_at)  # type: ignore[union-attr]

        listing = c.get(f"/queues/{qname}", params={"location": "schedule"}).text
        assert '<th scope="col">Runs at</th>' in listing
        rows = dict(re.findall(r'<tr data-job="(\w+)">(.*?)</tr>', listing))
        assert set(rows) == {later, held.id}
        for job_id, row in rows.items():
            ms = client.zscore(k.schedule, job_id)
            assert soon.fullmatch(shown(row, "run_at_ms", ms))
        listing = c.get(f"/queues/{qname}", params={"location": "active"}).text
        assert '<th scope="col">Lease ends</th>' in listing
        assert soon.fullmatch(shown(listing, "lease_deadline_ms", lease.deadline_ms))
    assert_consistent(client, qname)
