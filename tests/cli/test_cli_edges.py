"""Small edges of the command line a newcomer met, each against real servers: a URL with an
option nobody takes, a closed stdout, a negative ``-n``, a missing extra, a pause that changes
nothing, and docs that said otherwise than the code (docs/cli.md, docs/events.md)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest
from click.testing import CliRunner

from emq import AsyncQueue, InvalidUrl, Queue
from emq.cli.main import cli

ROOT = Path(__file__).parents[2]
CLI = "from emq.cli.main import main; main()"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


def one_error(code: int, out: str, *needles: str) -> str:
    lines = out.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), out
    assert "Traceback" not in out and all(n in lines[0] for n in needles), out
    return lines[0]


# -- URLs: an option or a db that does not parse is InvalidUrl, never a TypeError ------------


def _with(url: str, tail: str, password: str | None = None) -> str:
    """``url`` (the suite's server, its password kept) with its path and query replaced."""
    u = urlparse(url)
    netloc = u.netloc if password is None else f":{password}@{u.hostname}:{u.port}"
    return f"{u.scheme}://{netloc}{tail}"


@pytest.mark.parametrize(
    ("tail", "needle"),
    [
        ("/0?foo=bar", "unknown query option 'foo'"),
        ("/0?socket_timeout=abc", "bad value for 'socket_timeout'"),
        ("/0?db=x", "bad value for 'db'"),
        ("/0?ssl_ca_certs=/ca.crt", "it is a TLS option: use a rediss://"),
        ("/abc", "only a database number may follow"),
        ("/0/extra", "only a database number may follow"),
    ],
)
def test_a_url_emq_cannot_use_is_one_line_and_invalid_url(url: str, tail: str, needle: str) -> None:
    """Before: ``?foo=bar`` was a TypeError from deep in redis-py, ``socket_timeout=abc`` a
    ValueError (a traceback from the CLI), and ``/abc`` was silently db 0."""
    secret = "s3cret-Pa55"
    bad = _with(url, tail, secret)
    with pytest.raises(InvalidUrl, match=re.escape(needle)):
        Queue.from_url(bad, "q")
    code, out = run("stats", "--url", bad)
    line = one_error(code, out, needle)
    assert secret not in line and ":***@" in line


def test_the_options_redis_py_reads_still_work(url: str, queue: Queue) -> None:
    queue.enqueue("a", None)
    good = _with(url, "/0?socket_timeout=7.5&health_check_interval=0&client_name=emq-cli")
    code, out = run("stats", queue.name, "--url", good, "--json")
    assert code == 0 and json.loads(out)["pending"] == 1, out


# -- a closed stdout ends a command quietly ---------------------------------------------------


def _into_a_closed_pipe(url: str, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``emq ARGS`` with stdout a pipe whose reader has already gone (``| head -0``)."""
    reader, writer = os.pipe()
    os.close(reader)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), EMQ_URL=url, EMQ_HOME=str(home))
    try:
        return subprocess.run(
            [sys.executable, "-c", CLI, *args], stdout=writer, stderr=subprocess.PIPE,
            env=env, text=True, timeout=60,
        )  # fmt: skip
    finally:
        os.close(writer)


def test_a_closed_stdout_is_a_quiet_exit_not_a_server_diagnosis(
    url: str, queue: Queue, tmp_path: Path
) -> None:
    """Before: ``emq events tail Q | head -1`` said "cannot reach the server ...: Broken pipe"
    and exited 2; a table (Rich) exited 1."""
    queue.enqueue_many([("a", i) for i in range(3)])
    job = str(queue.enqueue("b", None))
    for args in (["events", "tail", queue.name], ["history", queue.name, job, "--json"],
                 ["stats", queue.name]):  # fmt: skip
        done = _into_a_closed_pipe(url, tmp_path, *args)
        assert (done.returncode, done.stderr) == (141, ""), (args, done.stderr)


def test_events_tail_refuses_a_negative_count(url: str, queue: Queue) -> None:
    """Before: ``-n -5`` printed nothing and exited 0."""
    queue.enqueue("a", None)
    code, out = run("events", "tail", queue.name, "-n", "-5", "--url", url)
    one_error(code, out, "-n/--last is -5")
    code, out = run("events", "tail", queue.name, "-n", "0", "--url", url)
    assert code == 0 and out == ""
    code, out = run("events", "tail", queue.name, "-n", "1", "--url", url, "--json")
    assert code == 0 and json.loads(out)["event"] == "enqueued"


# -- the archive checks its extra before it makes a file ---------------------------------------


def test_an_s3_target_without_boto3_leaves_no_floor(
    url: str, qname: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: ``archive run --ship s3://...`` refused, but had made an empty floor first."""
    monkeypatch.setitem(sys.modules, "boto3", None)  # as if the extra were not installed
    floor = tmp_path / "f.sqlite3"
    for args in (
        ["archive", "run", qname, "--once", "--ship", "s3://b/x", "--url", url],
        ["archive", "ship", qname, "--to", "s3://b/x"],
        ["archive", "restore", qname, "--from", "s3://b/x"],
    ):
        code, out = run(*args, "--floor", str(floor))
        one_error(code, out, "pip install 'emq[s3]'")
        assert not floor.exists(), args


# -- pause and resume write an event only when something changed -------------------------------


@pytest.mark.servers("valkey", "redis", "cluster")
def test_a_second_pause_or_resume_writes_no_event(url: str, queue: Queue) -> None:
    """docs/events.md: an event exists only if its transition happened. Before, pausing a
    paused queue (or lane) and resuming a running one each appended an event."""
    queue.enqueue("a", None)
    for args, said in [
        (["pause", queue.name], "paused"),
        (["pause", queue.name], "(was already paused)"),
        (["resume", queue.name], "resumed"),
        (["resume", queue.name], "(was already resumed)"),
        (["pause", queue.name, "--lane", "t"], "paused"),
        (["pause", queue.name, "--lane", "t"], "(was already paused)"),
        (["resume", queue.name, "--lane", "t"], "resumed"),
        (["resume", queue.name, "--lane", "t"], "(was already resumed)"),
    ]:
        code, out = run(*args, "--url", url)
        assert code == 0 and out.strip().endswith(said), out
    events = [e.event for e in queue.events() if e.event != "enqueued"]
    assert events == ["paused", "resumed", "lane_paused", "lane_resumed"]
    assert not queue.is_paused()


# -- the docs say what the code does -----------------------------------------------------------


async def test_the_events_example_follows_and_a_bare_tail_ends(aqueue: AsyncQueue) -> None:
    """docs/events.md's example followed the stream with ``after="$"`` alone, which ends at
    once: following takes ``follow=True``."""
    example = next(
        ln
        for ln in (ROOT / "docs" / "events.md").read_text().splitlines()
        if "aqueue.events(" in ln
    )
    assert 'aqueue.events(after="$", follow=True)' in example, example
    await aqueue.enqueue("old", None)
    assert [e async for e in aqueue.events(after="$")] == []  # ends at once: nothing new

    async def first_new() -> str:
        async for e in aqueue.events(after="$", follow=True):
            return str(e.job)
        raise AssertionError("a follow ended")

    follower = asyncio.create_task(first_new())
    sent: list[str] = []
    deadline = asyncio.get_running_loop().time() + 30  # bounds a hang only
    while not follower.done():  # enqueue until the follower, once past "$", sees one
        assert asyncio.get_running_loop().time() < deadline, "the follower saw nothing"
        sent.append(str(await aqueue.enqueue("new", None)))
        await asyncio.wait([follower], timeout=0.1)
    assert follower.result() in sent
    await aqueue.close()


def test_queue_option_says_it_is_refused_with_a_worker() -> None:
    """docs/cli.md said ``-q`` defaults to "the Worker's own", which read as an override."""
    code, out = run("worker", "--help")
    assert code == 0 and "refused with a Worker" in " ".join(out.split()), out
    row = next(ln for ln in (ROOT / "docs" / "cli.md").read_text().splitlines() if "`-q," in ln)
    assert "the Worker's own" not in row and "refused" in row, row
