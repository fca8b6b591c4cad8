"""One vocabulary of listed places for the command line and the dashboard
(``emq.model.states.LISTING``), on real servers: every word ``emq jobs QUEUE STATE`` takes is a
``?location=`` of the queue's page, listing the same jobs. Before, ``?location=scheduled``
answered 404 while ``emq jobs QUEUE scheduled`` listed the scheduled jobs."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from emq import Queue
from emq.cli.main import cli
from emq.model.states import LISTED, LISTING

from .test_dashboard import serve

pytestmark = pytest.mark.servers("valkey")


def test_every_word_of_emq_jobs_is_a_location_of_the_dashboard(url: str, queue: Queue) -> None:
    later = queue.enqueue("later", None, delay_ms=3_600_000)
    command = cli.get_command(None, "jobs")  # type: ignore[arg-type]
    assert command is not None
    (choice,) = [p.type for p in command.params if p.name == "location"]
    assert list(choice.choices) == list(LISTING)  # type: ignore[attr-defined]
    assert set(LISTING.values()) == set(LISTED)
    with serve(url) as c:
        for word in LISTING:
            assert c.get(f"/queues/{queue.name}?location={word}").status_code == 200, word
        page = c.get(f"/queues/{queue.name}?location=scheduled")  # the state's name
        assert later in page.text and "schedule jobs, page 1 of 1" in page.text
        assert c.get(f"/queues/{queue.name}?location=nowhere").status_code == 404
    done = CliRunner().invoke(cli, ["jobs", queue.name, "scheduled", "--url", url, "--json"])
    assert [j["id"] for j in json.loads(done.output)["jobs"]] == [later]
