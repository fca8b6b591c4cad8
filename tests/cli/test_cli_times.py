"""``emq jobs`` and ``emq job`` say when: a scheduled job's run-at and an active job's lease
deadline, in ``--json`` as server-clock ms and in the tables as ``in 9m 59s
(2025-01-31T12:03:15Z)`` (emq.cli.times), against real servers."""

from __future__ import annotations

import json
import re

import pytest
import redis
from click.testing import CliRunner

from emq import Queue
from emq.cli.main import cli
from emq.cli.times import iso
from emq.model.keys import QueueKeys

from ..support.helpers import assert_consistent

pytestmark = pytest.mark.servers("valkey", "redis")

SOON = r"in \d+m \d\ds"  # minutes away: the text, not a speed


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_jobs_and_job_show_run_at_and_lease_deadline(
    url: str, queue: Queue, qname: str, client: redis.Redis
) -> None:
    k = QueueKeys.of(qname)
    later = queue.enqueue("later", delay_ms=600_000)
    running = queue.enqueue("running")
    (lease,) = queue.claim(1, lease_ms=600_000)
    assert lease.id == running
    run_at = int(client.zscore(k.schedule, later) or 0)

    (listed,) = json.loads(run("jobs", qname, "scheduled", "--url", url, "--json"))["jobs"]
    assert listed["id"] == later and listed["run_at_ms"] == run_at
    assert listed["lease_deadline_ms"] is None
    table = run("jobs", qname, "scheduled", "--url", url)
    assert "runs at" in table and re.search(rf"{SOON} \({re.escape(iso(run_at))}\)", table)

    one = json.loads(run("job", qname, later, "--url", url, "--json"))
    assert one["run_at_ms"] == run_at and one["lease_deadline_ms"] is None
    shown = run("job", qname, later, "--url", url)
    assert shown.startswith(f"id: {later}\nstate: scheduled\n")
    assert re.search(rf"^runs at: {SOON} \({re.escape(iso(run_at))}\)$", shown, re.M)
    assert "lease ends" not in shown

    (active,) = json.loads(run("jobs", qname, "active", "--url", url, "--json"))["jobs"]
    assert active["lease_deadline_ms"] == lease.deadline_ms and active["run_at_ms"] is None
    table = run("jobs", qname, "active", "--url", url)
    assert "lease ends" in table and re.search(
        rf"{SOON} \({re.escape(iso(lease.deadline_ms))}", table
    )
    shown = run("job", qname, running, "--url", url)
    assert shown.startswith(f"id: {running}\nstate: active\n")
    assert "held by" not in shown  # claimed through the API, by no worker
    deadline = rf"^lease ends: {SOON} \({re.escape(iso(lease.deadline_ms))}\)$"
    assert re.search(deadline, shown, re.M)
    assert re.search(
        rf"^claimed: (now|.+ ago) \({re.escape(iso(lease.token // 1000))}\)$", shown, re.M
    )
    assert_consistent(client, qname)
