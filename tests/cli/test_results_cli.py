"""`emq result QUEUE ID [--wait S] [--json]` through click's runner against real servers
(docs/cli.md): a kept result, a dead job, a live one, an unknown id, and a wait that ends."""

from __future__ import annotations

import json
import threading
import time

from click.testing import CliRunner

from emq import Queue, QueueOptions
from emq.cli.main import cli


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_result_prints_a_kept_result_or_says_why_not(url: str, qname: str) -> None:
    q = Queue.from_url(url, qname, options=QueueOptions(result_ttl_ms=60_000))
    ok, dead, live = q.enqueue("j", 1), q.enqueue("j", 2), q.enqueue("j", 3)
    claimed = {c.id: c for c in q.claim(2, 30_000)}
    q.complete_with_result(ok, claimed[ok].token, {"sum": 3, "s": "é"})
    q.fail(dead, claimed[dead].token, "ValueError: bad\ntraceback line", retry=False)
    assert run("result", qname, ok, "--url", url) == (0, '{"sum": 3, "s": "é"}\n')
    code, out = run("result", qname, ok, "--url", url, "--json")
    assert code == 0 and json.loads(out) == {
        "id": ok,
        "state": "completed",
        "result": {"sum": 3, "s": "é"},
    }
    code, out = run("result", qname, dead, "--url", url)
    assert code == 1 and "ended dead: ValueError: bad" in out
    code, out = run("result", qname, dead, "--url", url, "--json")
    assert code == 1 and json.loads(out)["error"] == "ValueError: bad\ntraceback line"
    code, out = run("result", qname, live, "--url", url, "--wait", "0.05")
    assert code == 3 and "still pending" in out
    code, out = run("result", qname, live, "--url", url, "--json")
    assert code == 3 and json.loads(out)["state"] == "live"
    code, out = run("result", qname, q.new_id(), "--url", url)
    assert code == 2 and out.startswith("error:") and "not found" in out
    code, out = run("result", qname, "nope", "--url", url)
    assert code == 2 and "invalid" in out
    q.close()


def test_result_wait_returns_once_the_job_completes(url: str, qname: str) -> None:
    q = Queue.from_url(url, qname, options=QueueOptions(result_ttl_ms=60_000))
    job = q.enqueue("j", 5)
    got: list[tuple[int, str]] = []
    t = threading.Thread(
        target=lambda: got.append(run("result", qname, job, "--url", url, "--wait", "60"))
    )
    t.start()
    deadline = time.monotonic() + 60
    while q.client.hget(q.core.keys.job(job), "waiters") != "1" and time.monotonic() < deadline:
        time.sleep(0.005)
    (c,) = q.claim(1, 30_000)
    q.complete_with_result(c.id, c.token, [c.payload])
    t.join(60)
    assert got == [(0, "[5]\n")]
    q.close()


def test_jobs_completed_lists_kept_jobs_newest_first(url: str, qname: str) -> None:
    q = Queue.from_url(url, qname, options=QueueOptions(keep_completed=(60_000, 2)))
    ids = []
    for i in range(3):
        ids.append(q.enqueue("j", i))
        (c,) = q.claim(1, 30_000)
        q.complete(c.id, c.token)
    code, out = run("jobs", qname, "completed", "--url", url, "--json")
    assert code == 0 and [j["id"] for j in json.loads(out)["jobs"]] == ids[:0:-1]
    code, out = run("jobs", qname, "completed", "--url", url)
    assert code == 0 and "completed" in out and ids[2] in out
    q.close()
