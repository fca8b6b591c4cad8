"""``ctx.log`` on real servers: lines from sync and async handlers kept with the job after it
completed (its row gone), fenced by the lease token, capped per job and per line, kept the
queue's ``log_ttl_ms``, gone with an obliterate (docs/control.md, Job logs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from emq import (
    JobContext,
    JobLog,
    JobNotFound,
    LeaseLost,
    Queue,
    QueueOptions,
    Worker,
    WorkerOptions,
)
from emq.calls.logs import MAX_LINE_BYTES, MAX_LINES, encode_line
from emq.cli.main import cli

from ..support.helpers import expire_leases, expiring

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")


def burst(queue: Queue) -> Worker:
    return Worker(queue, options=WorkerOptions(burst=True, concurrency=2))


def test_lines_of_sync_and_async_handlers_outlive_the_row_in_order(
    queue: Queue, client: redis.Redis
) -> None:
    sync_id, async_id = queue.enqueue("sync", {"n": 3}), queue.enqueue("async", {"n": 2})
    w = burst(queue)

    @w.handler("sync")
    def sync(payload: Any, ctx: JobContext) -> None:
        for i in range(payload["n"]):
            ctx.log(f"sync line {i}")
        ctx.log({"not": "a string"})  # str() of it

    @w.handler("async")
    async def async_(payload: Any, ctx: JobContext) -> None:
        for i in range(payload["n"]):
            ctx.log(f"async line {i}")

    w.run_sync(handle_signals=False)
    assert queue.counts()["completed"] == 2
    assert queue.job(sync_id) is None and queue.job(async_id) is None  # the rows are gone
    logs = queue.job_logs(sync_id)
    assert [x.line for x in logs] == [
        "sync line 0", "sync line 1", "sync line 2", "{'not': 'a string'}"
    ]  # fmt: skip
    assert {x.attempt for x in logs} == {1} and all(x.at_ms > 0 for x in logs)
    assert all(isinstance(x, JobLog) for x in logs)
    assert [str(x) for x in queue.job_logs(async_id)] == ["async line 0", "async line 1"]
    ttl = client.pttl(queue.core.keys.logs(sync_id))
    assert 0 < ttl <= QueueOptions().log_ttl_ms
    assert queue.job_logs(queue.enqueue("never-ran")) == []


def test_the_ttl_is_the_queue_setting(url: str, qname: str, client: redis.Redis) -> None:
    with Queue.from_url(url, qname, options=QueueOptions(log_ttl_ms=60_000)) as q:
        job = q.enqueue("x")
        (claimed,) = q.claim(1, lease_ms=30_000)
        q.append_logs(job, claimed.token, ["one", 2])
        assert 0 < client.pttl(q.core.keys.logs(job)) <= 60_000
        assert q.stored_settings()["log_ttl_ms"] == 60_000
        q.configure(log_ttl_ms=5_000)
        q.append_logs(job, claimed.token, ["three"])
        assert 0 < client.pttl(q.core.keys.logs(job)) <= 5_000
        assert [x.line for x in q.job_logs(job)] == ["one", "2", "three"]


def test_a_stale_token_is_refused_and_writes_nothing(queue: Queue, client: redis.Redis) -> None:
    job = queue.enqueue("x")
    (first,) = queue.claim(1, lease_ms=30_000)
    queue.append_logs(job, first.token, ["from the first attempt"])
    expire_leases(client, queue.name)
    queue.sweep_stalled()
    (second,) = queue.claim(1, lease_ms=30_000)
    assert second.token != first.token
    with pytest.raises(LeaseLost):
        queue.append_logs(job, first.token, ["stale"])
    queue.append_logs(job, second.token, ["from the second attempt"])
    logs = queue.job_logs(job)
    assert [(x.attempt, x.line) for x in logs] == [
        (1, "from the first attempt"), (2, "from the second attempt")
    ]  # fmt: skip
    queue.complete(job, second.token)
    with pytest.raises(JobNotFound):
        queue.append_logs(job, second.token, ["after the end"])
    assert len(queue.job_logs(job)) == 2


def test_a_job_keeps_its_newest_lines_and_a_long_line_is_cut(queue: Queue) -> None:
    job = queue.enqueue("chatty")
    w = burst(queue)

    @w.handler("chatty")
    def chatty(payload: Any, ctx: JobContext) -> None:
        for i in range(MAX_LINES + 50):
            ctx.log(i)
        ctx.log("é" * MAX_LINE_BYTES)

    w.run_sync(handle_signals=False)
    lines = [x.line for x in queue.job_logs(job)]
    assert len(lines) == MAX_LINES
    assert lines[0] == "51" and lines[-2] == str(MAX_LINES + 49)  # the oldest were trimmed
    assert len(lines[-1].encode()) <= MAX_LINE_BYTES
    assert lines[-1].startswith("éé")
    assert lines[-1].endswith(f"[truncated from {2 * MAX_LINE_BYTES} bytes]")


def test_encode_line_keeps_short_lines_and_cuts_whole_characters() -> None:
    assert encode_line("hi") == "hi" and encode_line(3) == "3"
    assert encode_line("\ud800") == "\\ud800"  # a lone surrogate, escaped
    cut = encode_line("€" * 10_000)
    assert len(cut.encode()) <= MAX_LINE_BYTES and "\ufffd" not in cut


def test_obliterate_leaves_no_log_key(queue: Queue, client: redis.Redis) -> None:
    done, waiting = queue.enqueue("x"), queue.enqueue("x")
    for c in queue.claim(2, lease_ms=30_000):
        queue.append_logs(c.id, c.token, [f"line of {c.id}"])
    queue.complete(done, queue.job(done).token)  # its row goes, its log stays
    queue.fail(waiting, queue.job(waiting).token, "again", delay_ms=60_000)
    assert client.exists(queue.core.keys.logs(done), queue.core.keys.logs(waiting)) == 2
    queue.obliterate()
    prefix = queue.core.keys.prefix
    assert [k for k in client.scan_iter(match=prefix + "*") if not expiring(k)] == []


def test_remove_deletes_the_job_logs(queue: Queue, client: redis.Redis) -> None:
    job = queue.enqueue("x")
    (c,) = queue.claim(1, lease_ms=30_000)
    queue.append_logs(job, c.token, ["a line"])
    queue.remove(job)
    assert client.exists(queue.core.keys.logs(job)) == 0


def test_emq_job_logs_prints_the_lines_of_a_completed_job(url: str, queue: Queue) -> None:
    job = queue.enqueue("x")
    (c,) = queue.claim(1, lease_ms=30_000)
    queue.append_logs(job, c.token, ["first line", "second <b>line</b>"])
    queue.complete(job, c.token)
    runner = CliRunner()
    out = runner.invoke(cli, ["job", queue.name, job, "--logs", "--url", url])
    assert out.exit_code == 0, out.output
    assert "first line" in out.output and "second <b>line</b>" in out.output
    assert out.output.index("first line") < out.output.index("second")
    as_json = runner.invoke(cli, ["job", queue.name, job, "--logs", "--json", "--url", url])
    assert as_json.exit_code == 0, as_json.output
    shown = json.loads(as_json.output)
    assert [x["line"] for x in shown["logs"]] == ["first line", "second <b>line</b>"]
    assert shown["logs"][0]["attempt"] == 1 and shown["found"] is False
    markup = queue.enqueue("x")
    (c,) = queue.claim(1, lease_ms=30_000)
    queue.append_logs(markup, c.token, ["[bold]literal[/bold]"])
    live = runner.invoke(cli, ["job", queue.name, markup, "--logs", "--url", url])
    assert live.exit_code == 0 and "[bold]literal[/bold]" in live.output  # printed as is
    assert "state: active" in live.output and "logs: 1 line(s)" in live.output
    plain = runner.invoke(cli, ["job", queue.name, markup, "--url", url])
    assert "literal" not in plain.output  # no --logs: no read of them
    unknown = runner.invoke(cli, ["job", queue.name, "JOB0000000000A", "--logs", "--url", url])
    assert unknown.exit_code == 2 and "no log lines of it" in unknown.output


def test_every_line_of_many_short_jobs_lands_before_their_acks(
    queue: Queue, client: redis.Redis
) -> None:
    """The lines of a send in flight land before the acks of their jobs (which would make
    them 'gone'): 2,000 one-line jobs, every line stored."""
    ids = queue.enqueue_many([("one", i) for i in range(2_000)])
    w = Worker(queue, options=WorkerOptions(burst=True, concurrency=50))

    @w.handler("one")
    async def one(payload: Any, ctx: JobContext) -> None:
        ctx.log(f"job {payload}")

    w.run_sync(handle_signals=False)
    with client.pipeline(transaction=False) as p:
        for job in ids:
            p.llen(queue.core.keys.logs(job))
        assert p.execute() == [1] * len(ids)


def test_the_archive_keeps_an_ended_jobs_lines_after_they_expire(
    url: str, queue: Queue, client: redis.Redis, tmp_path: Path
) -> None:
    from emq.archive import Archive

    floor = tmp_path / "floor.sqlite3"
    done, dead, quiet = queue.enqueue("x"), queue.enqueue("x", max_attempts=1), queue.enqueue("x")
    for c in queue.claim(3, lease_ms=30_000):
        if c.id != quiet:
            queue.append_logs(c.id, c.token, [f"{c.id} says", "bye"])
    queue.complete(done, queue.job(done).token)
    queue.fail(dead, queue.job(dead).token, "boom")
    archive = Archive(queue, floor)
    try:
        archive.catch_up()
    finally:
        archive.release()
        archive.floor.close()
    client.delete(queue.core.keys.logs(done), queue.core.keys.logs(dead))  # as if expired
    assert queue.job_logs(done) == []  # no floor at the default path
    for job in (done, dead):
        kept = queue.job_logs(job, floor=floor)
        assert [x.line for x in kept] == [f"{job} says", "bye"] and kept[0].attempt == 1
        assert kept[0].at_ms > 0
    assert queue.job_logs(quiet, floor=floor) == []  # still running: nothing copied
    out = CliRunner().invoke(
        cli, ["history", queue.name, done, "--logs", "--floor", str(floor), "--url", url]
    )
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[-2:][0].endswith(f"#1         {done} says")
    assert "completed" in out.output


def test_a_queue_with_log_ttl_0_keeps_no_lines_and_configure_sets_it(
    url: str, qname: str, client: redis.Redis
) -> None:
    runner = CliRunner()
    bad = runner.invoke(cli, ["configure", qname, "--log-ttl-ms", "-1", "--url", url])
    assert bad.exit_code == 2 and "log_ttl_ms" in bad.output and "Traceback" not in bad.output
    set_ = runner.invoke(cli, ["configure", qname, "--log-ttl-ms", "0", "--url", url, "--json"])
    assert set_.exit_code == 0 and json.loads(set_.output) == {"log_ttl_ms": 0}
    with Queue.from_url(url, qname) as q:
        job = q.enqueue("x")
        w = burst(q)

        @w.handler("x")
        def x(payload: Any, ctx: JobContext) -> None:
            ctx.log("not kept")

        w.run_sync(handle_signals=False)
        assert q.counts()["completed"] == 1
        assert q.job_logs(job) == [] and client.exists(q.core.keys.logs(job)) == 0
