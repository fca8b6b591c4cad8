"""Deleting from the command line (docs/cli.md, Deleting): `emq obliterate`, `emq remove` and
`emq forget`, through click's runner (stdin is not a terminal there) and, for the question
asked on a terminal, through a real pseudo-terminal; on real servers.

An obliterated queue is forgotten: `emq stats`, the dashboard and `/metrics` all list the
known queues (`emq.server.discovery.queue_names`), which no longer hold its name."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from emq import Queue
from emq.cli.main import cli
from emq.model.keys import KNOWN_QUEUES
from emq.server.discovery import SCANNED, queue_names

from ..support.helpers import assert_consistent

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")
ROOT = Path(__file__).parents[2]


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def one_error(code: int, out: str, needle: str, exit_code: int = 2) -> None:
    lines = out.strip().splitlines()
    assert code == exit_code and len(lines) == 1 and lines[0].startswith("error: "), out
    assert needle in lines[0] and "Traceback" not in out, out


def keys_of(client: redis.Redis, name: str) -> list[str]:
    return list(client.scan_iter(match=f"emq:{{{name}}}:*", count=1000))


def test_obliterate_off_a_terminal_needs_yes_then_forgets_the_queue(
    url: str, qname: str, queue: Queue, client: redis.Redis
) -> None:
    ids = queue.enqueue_many([("a", 1), ("b", 2), ("c", 3)])
    queue.enqueue("later", None, delay_ms=60_000)
    assert qname in queue_names(client)
    code, out = run("obliterate", qname, "--url", url)
    one_error(code, out, "pass --yes to confirm")
    assert queue.counts()["pending"] == 3 and qname in queue_names(client)  # nothing written
    code, out = run("obliterate", qname, "--yes", "--url", url, "--json")
    assert code == 0 and json.loads(out) == {"queue": qname, "deleted": 4, "obliterated": True}
    left = keys_of(client, qname)  # only the enqueue calls' marks, expiring on their own
    assert all(":admitted:" in k and 0 < client.pttl(k) <= 60_000 for k in left), left
    assert queue.job(ids[0]) is None
    assert qname not in queue_names(client)
    assert qname not in json.loads(run("stats", "--url", url, "--json")[1])


def test_obliterate_with_leased_jobs_needs_force(
    url: str, qname: str, queue: Queue, client: redis.Redis
) -> None:
    client.srem(KNOWN_QUEUES, SCANNED)  # the next listing scans the keys for older queues
    queue.enqueue_many([("a", 1), ("b", 2)])
    queue.claim(1, lease_ms=60_000)
    code, out = run("obliterate", qname, "--yes", "--url", url)
    one_error(code, out, "pass --force", exit_code=3)
    assert queue.counts()["active"] == 1 and queue.counts()["pending"] == 1
    assert_consistent(client, qname)
    code, out = run("obliterate", qname, "--yes", "--force", "--url", url)
    assert code == 0 and out.strip() == f"{qname}: obliterated, 2 job(s) deleted", out
    # the claim's stored reply and the enqueue's mark (docs/keyspace.md) expire on their own
    left = keys_of(client, qname)
    assert sorted(k.split(":")[2] for k in left) == ["admitted", "claim"], left
    assert all(0 < client.pttl(k) <= 60_000 for k in left)
    assert qname not in queue_names(client)


def test_the_api_obliterate_forgets_and_an_enqueue_lists_it_again(
    url: str, qname: str, client: redis.Redis
) -> None:
    with Queue.from_url(url, qname) as q:
        q.enqueue("a", None)
        assert q.obliterate() == 1
        assert qname not in queue_names(client)
        q.enqueue("b", None)  # the object that forgot it lists it again
        assert qname in queue_names(client)
        q.obliterate()
    assert qname not in queue_names(client)
    with Queue.from_url(url, qname) as q:  # and so does a new producer
        q.enqueue("c", None)
    assert qname in queue_names(client)


def test_forget_refuses_a_queue_with_keys_and_forgets_a_bare_name(
    url: str, qname: str, queue: Queue, client: redis.Redis
) -> None:
    queue.enqueue("a", None)
    bare = f"gone-{qname[-8:]}"  # a name left by an older emq's obliterate: no keys
    client.sadd(KNOWN_QUEUES, bare)
    assert bare in queue_names(client)
    code, out = run("forget", qname, bare, "--url", url)
    one_error(code, out, f"not forgotten: {qname} still has keys", exit_code=3)
    assert f"forgotten: {bare}" in out
    assert qname in queue_names(client) and bare not in queue_names(client)
    code, out = run("forget", bare, "--url", url, "--json")
    assert code == 0 and json.loads(out) == {"forgotten": [bare]}
    settled = Queue(client, bare)  # a queue whose only key is its stored settings
    client.hset(settled.core.keys.settings, "max_attempts", "5")
    client.sadd(KNOWN_QUEUES, bare)
    assert settled.forget() is False and bare in queue_names(client)
    code, out = run("forget", "bad name", qname, "--url", url)
    one_error(code, out, "is invalid")
    assert qname in queue_names(client)


def test_remove_deletes_one_job_wherever_it_is(
    url: str, qname: str, queue: Queue, client: redis.Redis
) -> None:
    held, left = queue.enqueue("a", None), queue.enqueue("b", None)
    queue.claim(1, lease_ms=60_000)  # the first is leased now, the second still pending
    code, out = run("remove", qname, held, "--url", url)
    assert code == 0 and out.strip() == f"{held} removed (it was active)", out
    code, out = run("remove", qname, left, "--url", url, "--json")
    assert json.loads(out) == {"id": left, "removed": True, "from": "pending"}
    code, out = run("remove", qname, held, "--url", url)
    one_error(code, out, f"no job {held} in {qname}")
    code, out = run("remove", qname, "not-an-id", "--url", url)
    one_error(code, out, "not-an-id")
    assert queue.counts()["pending"] == queue.counts()["active"] == 0
    assert_consistent(client, qname)


def _on_a_terminal(url: str, qname: str, answer: bytes) -> tuple[int, str]:
    """`emq obliterate QUEUE` with stdin a pseudo-terminal; ``answer`` typed at the prompt."""
    main, side = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    code = "from emq.cli.main import main; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "obliterate", qname, "--url", url],
        stdin=side, stdout=subprocess.PIPE, stderr=side, env=env,
    )  # fmt: skip
    os.close(side)
    seen, deadline = b"", time.monotonic() + 60  # bounds a hang only
    while b"[y/N]" not in seen and time.monotonic() < deadline:
        seen += os.read(main, 4096)
    os.write(main, answer)
    proc.wait(timeout=60)
    try:
        while chunk := os.read(main, 4096):
            seen += chunk
    except OSError:  # EIO: the child closed the terminal
        pass
    os.close(main)
    assert proc.stdout is not None
    with proc.stdout:
        return proc.returncode, (seen + proc.stdout.read()).decode()


def test_obliterate_asks_on_a_terminal(url: str, qname: str, queue: Queue) -> None:
    queue.enqueue_many([("a", 1), ("b", 2)])
    code, out = _on_a_terminal(url, qname, b"n\n")
    assert code == 1 and f"Delete queue '{qname}' (2 pending, 0 schedule" in out, out
    assert "not confirmed" in out and "Aborted" not in out, out
    assert queue.counts()["pending"] == 2
    code, out = _on_a_terminal(url, qname, b"y\n")
    assert code == 0 and f"{qname}: obliterated, 2 job(s) deleted" in out, out
    assert queue.counts()["pending"] == 0
