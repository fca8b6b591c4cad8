"""A queue in a newer keyspace layout is refused, whole, before anything is written
(docs/keyspace.md, Layout versions): by every script, by the reads of ``Queue``, by the
worker and by the command line, each with one line that says what to do."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from emq import LayoutTooNew, Queue
from emq.cli.main import cli
from emq.lua.scripts import SCRIPTS, run
from emq.model.layout import LAYOUT

from .test_headers import SAMPLES

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")

GLOBAL = {"node_lease"}  # the id-minting node leases belong to no queue


def keyspace(client: redis.Redis, prefix: str) -> dict[str, Any]:
    """Every key of a queue with its type and value (DUMP), to compare before and after."""
    return {key: client.dump(key) for key in client.scan_iter(match=f"{prefix}*", count=1000)}


def newer(client: redis.Redis, q: Queue) -> dict[str, Any]:
    """Give ``q`` a few jobs in every location, mark its layout newer, return its keyspace."""
    q.enqueue("a")
    q.enqueue("b", delay_ms=60_000)
    held = q.claim(count=1, lease_ms=60_000)
    q.fail(held[0].id, held[0].token, "boom", retry=False)
    q.enqueue("c")
    q.claim(count=1, lease_ms=60_000)
    q.enqueue("d")
    client.hset(q.core.keys.meta, "layout", str(LAYOUT + 1))
    return keyspace(client, q.core.keys.prefix)


def test_the_lua_and_python_layouts_are_one_number() -> None:
    text = resources.files("emq").joinpath("lua/includes/layout.lua").read_text("utf-8")
    assert re.search(r"(?m)^local LAYOUT = (\d+)$", text)[1] == str(LAYOUT)  # type: ignore[index]


@pytest.mark.parametrize("name", sorted(set(SAMPLES) - GLOBAL))
def test_every_script_refuses_a_newer_layout_and_writes_nothing(
    name: str, url: str, client: redis.Redis
) -> None:
    call = SAMPLES[name]
    queue = re.match(r"emq:\{(.+?)\}:", call.keys[0])[1]  # type: ignore[index]
    q = Queue.from_url(url, queue)  # the queue the sample is built for
    try:
        before = newer(client, q)
        with pytest.raises(
            LayoutTooNew, match=rf"queue '{queue}' is in keyspace layout {LAYOUT + 1}.*upgrade"
        ):
            run(q.client, call.script, call.keys, call.args)
        after = keyspace(client, q.core.keys.prefix)
        assert after == {k: v for k, v in before.items() if k in after}, "nothing written"
        # only a resend mark may go meanwhile: every sample is of one queue, and an earlier
        # test's marks (obliterate leaves them) expire on their own 60 s after their call
        vanished = {k for k in before if k not in after}
        assert {k for k in vanished if ":admitted:" not in k and ":claim:" not in k} == set()
    finally:
        client.hdel(q.core.keys.meta, "layout")
        q.obliterate(force=True)
        q.close()


def test_every_script_of_a_queue_is_sampled() -> None:
    assert set(SCRIPTS) - GLOBAL == set(SAMPLES) - GLOBAL


def test_the_queue_refuses_reads_and_writes_alike(queue: Queue, client: redis.Redis) -> None:
    before = newer(client, queue)
    for attempt in (
        lambda: queue.enqueue("e"),
        lambda: queue.enqueue_many([("e", None), ("f", None)]),
        lambda: queue.claim(),
        lambda: queue.counts(),
        lambda: queue.jobs("pending"),
        lambda: queue.jobs("dead"),
        lambda: queue.job("JOB0000000000A"),
        lambda: queue.pause(),
        lambda: queue.sweep_stalled(),
        lambda: queue.obliterate(force=True),
    ):
        with pytest.raises(LayoutTooNew, match="upgrade emq"):
            attempt()
    assert keyspace(client, queue.core.keys.prefix) == before
    client.hdel(queue.core.keys.meta, "layout")
    assert queue.counts()["pending"] == 1, "the same queue, its layout back: nothing was lost"


def test_the_command_line_and_the_worker_say_it_in_one_line(
    url: str, qname: str, client: redis.Redis
) -> None:
    q = Queue.from_url(url, qname)
    before = newer(client, q)
    for argv in (
        ["stats", qname],
        ["jobs", qname, "pending"],
        ["job", qname, "JOB0000000000A"],
        ["worker", "tests.support.worker_handlers:handlers", "-q", qname, "--burst"],
    ):
        result = CliRunner().invoke(cli, [*argv, "--url", url])
        told = [line for line in result.output.splitlines() if not line.startswith("{")]
        assert result.exit_code == 2 and len(told) == 1, (argv, result.output)  # logs aside
        assert told[0].startswith("error: ") and f"keyspace layout {LAYOUT + 1}" in told[0], told
        assert "upgrade emq" in told[0] and "Traceback" not in result.output
    assert keyspace(client, q.core.keys.prefix) == before
    q.close()
