"""The job page's Logs section, over HTTP against the real servers (docs/dashboard.md, Job):
a job's ``ctx.log`` lines, escaped, oldest first, shown after its row is gone too."""

from __future__ import annotations

import re
from html import unescape

import pytest

from emq import Queue

from .test_dashboard import serve

pytestmark = pytest.mark.servers("valkey", "redis")


def log_lines(page: str) -> list[str]:
    section = page.split('<ol id="logs">')[1].split("</ol>")[0]
    return [unescape(x) for x in re.findall(r"<code>(.*?)</code></li>", section, re.S)]


def test_the_job_page_shows_its_logs_escaped_also_once_its_row_is_gone(
    url: str, queue: Queue, qname: str
) -> None:
    job, quiet = queue.enqueue("x"), queue.enqueue("x")
    (c,) = queue.claim(1, lease_ms=30_000)
    queue.append_logs(job, c.token, ["started", "<script>alert(1)</script>", "done"])
    with serve(url) as client:
        live = client.get(f"/queues/{qname}/jobs/{job}").text
        assert '<h2 id="logs-title">Logs</h2>' in live
        assert log_lines(live) == ["started", "<script>alert(1)</script>", "done"]
        assert "<script>alert(1)</script>" not in live  # escaped
        queue.complete(job, c.token)
        gone = client.get(f"/queues/{qname}/jobs/{job}")
        assert gone.status_code == 200 and "No live row" in gone.text
        assert log_lines(gone.text)[-1] == "done"
        assert 'id="logs"' not in client.get(f"/queues/{qname}/jobs/{quiet}").text
