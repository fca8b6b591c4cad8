"""A job's durable steps as operators read them (docs/steps.md): ``emq job`` lists each with
its time and result (``--json``: ``steps``), and the dashboard's job page has a Steps
section, escaped; a job without steps shows neither."""

from __future__ import annotations

import json
from html import unescape

import pytest
from click.testing import CliRunner

from emq import Queue
from emq.cli.main import cli

from ..dashboard.test_dashboard import serve

pytestmark = pytest.mark.servers("valkey", "redis")


def emq(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_emq_job_and_the_job_page_show_the_recorded_steps(
    url: str, queue: Queue, qname: str
) -> None:
    job, plain = queue.enqueue("x"), queue.enqueue("x")
    claimed = {c.id: c for c in queue.claim(2, lease_ms=30_000)}
    token = claimed[job].token
    at = queue.record_step(job, token, "charge card", {"charge": "ch_1"})
    queue.record_step(job, token, "<b>mail</b>", "sent")
    shown = emq("job", qname, job, "--url", url)
    assert "steps: 2 recorded" in shown and 'charge card: {"charge": "ch_1"}' in shown
    assert "step:charge card" not in shown  # the raw fields are not repeated under row
    data = json.loads(emq("job", qname, job, "--url", url, "--json"))
    steps = {s["name"]: s for s in data["steps"]}  # recorded order: by time, then name
    assert steps["charge card"] == {
        "name": "charge card",
        "result": {"charge": "ch_1"},
        "at_ms": at,
    }
    assert "steps" not in emq("job", qname, plain, "--url", url)
    with serve(url) as client:
        page = client.get(f"/queues/{qname}/jobs/{job}").text
        section = page.split('<ol id="steps">')[1].split("</ol>")[0]
        assert 'data-step="charge card"' in section and "ch_1" in unescape(section)
        assert "<b>mail</b>" not in page and "&lt;b&gt;mail&lt;/b&gt;" in page  # escaped
        assert 'id="steps"' not in client.get(f"/queues/{qname}/jobs/{plain}").text
