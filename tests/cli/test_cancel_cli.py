"""`emq cancel QUEUE ID [--reason TEXT] [--json]` through click's runner on real servers."""

from __future__ import annotations

import json

import redis
from click.testing import CliRunner

from emq import Queue
from emq.cli.main import cli

from ..support.helpers import where


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_cancel_prints_each_answer(url: str, qname: str, queue: Queue) -> None:
    job = queue.enqueue("x", None)
    code, out = run("cancel", qname, job, "--reason", "not needed", "--url", url)
    assert code == 0 and out.startswith(f"{job} cancelled: it will never run"), out
    assert queue.job(job).cancelled == "not needed"  # type: ignore[union-attr]
    code, out = run("cancel", qname, job, "--url", url, "--json")
    assert code == 0 and json.loads(out) == {"id": job, "answer": "cancelled"}
    running = queue.enqueue("y", None)
    queue.claim(lease_ms=5_000)
    code, out = run("cancel", qname, running, "--url", url, "--json")
    assert json.loads(out)["answer"] == "requested"


def test_cancel_refusals_are_one_line_and_write_nothing(
    url: str, qname: str, queue: Queue, client: redis.Redis
) -> None:
    job = queue.enqueue("x", None)
    for args in (["nope"], [queue.new_id()], [job, "--reason", "x" * 1001]):
        result = CliRunner().invoke(cli, ["cancel", qname, *args, "--url", url])
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
    assert where(client, qname, job) == ["pending"]
