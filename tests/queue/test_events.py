"""The event stream as a contract: every ``emit(...)`` in every script matches
``emq.model.events.EVENT_FIELDS`` (and docs/events.md names them all), real traffic produces exactly
those fields, and the readers block in ``XREAD`` instead of polling."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from importlib import resources
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from emq import AsyncQueue, JobSpec, Queue
from emq.cli.main import cli
from emq.model.events import EVENT_FIELDS, JOB_EVENTS, OPTIONAL_FIELDS, Event, id_after, parse_id

from ..support.helpers import expire_leases, node_of

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")

DOCS = Path(__file__).resolve().parents[2] / "docs" / "events.md"
HANG = 60.0  # waits poll for a condition: this only bounds a hang, never a speed
QUIET_S = 7.0  # a quiet spell past XREAD BLOCK's 5 s and redis-py's 5 s default read timeout


def _emit_calls(source: str) -> list[list[str]]:
    """The top-level arguments of every ``emit(...)`` call (balanced parentheses)."""
    calls = []
    for m in re.finditer(r"\bemit\(", source):
        if source[m.start() - 9 : m.start()] == "function ":
            continue
        depth, args, cur, i = 1, [], "", m.end()
        while depth:
            ch = source[i]
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if ch == "," and depth == 1:
                args.append(cur.strip())
                cur = ""
            elif depth:
                cur += ch
            i += 1
        args.append(cur.strip())
        calls.append(args)
    return calls


def test_every_emit_in_every_script_matches_the_contract() -> None:
    emitted: set[str] = set()
    lua = resources.files("emq").joinpath("lua")
    for entry in [*lua.iterdir(), *lua.joinpath("includes").iterdir()]:
        if not entry.name.endswith(".lua"):
            continue
        text = re.sub(r"(?m)^\s*--.*$", "", entry.read_text())  # the code, not its notes
        for args in _emit_calls(text):
            assert args[0] == "'event'", (entry.name, args)
            name = args[1].strip("'")
            keys = tuple(a.strip("'") for a in args[2::2])
            assert all(re.fullmatch(r"'[a-z_]+'", a) for a in args[2::2]), (entry.name, args)
            expected = (("job",) if name in JOB_EVENTS else ()) + EVENT_FIELDS[name]
            optional = set(OPTIONAL_FIELDS.get(name, ()))
            assert set(expected) <= set(keys) <= set(expected) | optional, (entry.name, keys)
            assert len(keys) == len(set(keys)), (entry.name, name, keys)
            emitted.add(name)
    assert emitted == set(EVENT_FIELDS)


def test_docs_describe_every_event_and_field() -> None:
    text = DOCS.read_text()
    for name, fields in EVENT_FIELDS.items():
        fields += OPTIONAL_FIELDS.get(name, ())
        row = next((ln for ln in text.splitlines() if ln.startswith(f"| `{name}`")), None)
        assert row is not None, f"docs/events.md has no row for {name}"
        for f in fields:
            assert f"`{f}`" in row, (name, f)


def test_real_traffic_carries_the_documented_fields(queue: Queue, client: redis.Redis) -> None:
    a = queue.enqueue("a", {"x": 1}, max_attempts=1)
    b = queue.enqueue("b", None)
    c = queue.enqueue("c", None, delay_ms=60_000)
    ca, cb = queue.claim(2)
    queue.fail(ca.id, ca.token, "bad")
    queue.delay(cb.id, cb.token, 0)
    (cb,) = queue.claim(1)
    queue.complete(cb.id, cb.token)
    queue.redrive(a)
    (ca,) = queue.claim(1)
    expire_leases(client, queue.name)
    queue.sweep_stalled(max_stalled=5)
    with pytest.raises(Exception):  # noqa: B017 - LeaseLost; its event is what we check
        queue.complete(ca.id, ca.token)
    queue.set_priority(c, 1)  # the edits of a waiting job, and progress
    queue.update_payload(c, 2)
    queue.reschedule(c, 30_000)
    (ce,) = queue.claim(1)
    queue.set_progress(ce.id, ce.token, {"pct": 1})
    queue.record_step(ce.id, ce.token, "charge", {"ok": 1}, took_ms=3)  # step, step_failed
    queue.send_step(ce.id, ce.token, "mail", "ValueError: no", 2, ok=False)
    queue.delay(ce.id, ce.token, 0)  # back to pending, for the drain
    queue.remove(c)
    queue.cancel(queue.enqueue("e", None), "why")  # cancelled (a waiting job)
    queue.pause()
    queue.resume()
    queue.drain()
    queue.set_limits(lane="t", rate=(1, 60_000))
    queue.enqueue_many([("d", 1), JobSpec("d", 2, lane="t"), JobSpec("d", 3, lane="t")])
    leased = queue.claim(3)
    assert [j.lane for j in leased] == [None, "t"]  # then the lane's rate is used up
    queue.cancel(leased[0].id)  # cancel_requested (a leased job)
    queue.pause(lane="t")
    queue.resume(lane="t")
    seen = list(queue.events())
    # repeat_skipped: tests/repeat/test_repeat.py checks its fields
    unseen = {"promoted", "retrying", "missing", "repeat_skipped", "ready"}  # ready: test_flows
    assert {e.event for e in seen} >= set(EVENT_FIELDS) - unseen
    for e in seen:
        assert set(e.fields) == set(EVENT_FIELDS[e.event]), e
        assert (e.job is not None) == (e.event in JOB_EVENTS), e
    dead = next(e for e in seen if e.event == "dead")
    assert (dead.job, dead.fields["name"], json.loads(dead.fields["payload"])) == (a, "a", {"x": 1})
    assert (dead.fields["attempts"], dead.fields["stalled"], dead.fields["error"]) == (
        "1",
        "0",
        "bad",
    )
    assert [e.event for e in queue.events() if e.job == b] == [
        "enqueued", "claimed", "delayed", "claimed", "completed"
    ]  # fmt: skip


def test_stream_ids_order_and_successor() -> None:
    assert parse_id("17-3") < parse_id("17-10") < parse_id("18-0")
    assert id_after("17-3") == "17-4"
    e = Event("5-1", "claimed", "JOB1", {"attempts": "1"})
    assert (e.time_ms, e.to_dict()["fields"]) == (5, {"attempts": "1"})


def _xread_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_xread", {}).get("calls", 0))


def _blocked_clients(client: redis.Redis) -> int:
    return int(client.info("clients")["blocked_clients"])


def _until_blocked(client: redis.Redis, baseline: int) -> None:
    """Wait (a hang bound only) until one more client is blocked than ``baseline``."""
    deadline = time.monotonic() + HANG
    while _blocked_clients(client) <= baseline:
        assert time.monotonic() < deadline, "the reader never blocked in XREAD"
        time.sleep(0.01)


def test_follow_blocks_in_xread_instead_of_polling(queue: Queue, client: redis.Redis) -> None:
    """The new entry is appended only once the reader is blocked in XREAD (so it cannot have
    been counted as old, however slow the machine), and the blocked call returns it."""
    queue.enqueue("old", None)
    got: list[Event] = []
    client = node_of(client, queue.name)  # its INFO counts the blocked reader
    baseline = _blocked_clients(client)

    def later() -> None:
        _until_blocked(client, baseline)
        queue.enqueue("new", None)

    before = _xread_calls(client)
    thread = threading.Thread(target=later)
    thread.start()
    for e in queue.events("$", follow=True):
        got.append(e)
        break
    thread.join()  # its enqueue may still be reading its reply when the event arrives
    assert [e.fields["name"] for e in got] == ["new"]
    assert _xread_calls(client) - before <= 2  # one blocking call waited for the entry


async def test_async_iterator_follows_from_a_position(url: str, queue: Queue) -> None:
    first = queue.enqueue("one", None)
    aq = AsyncQueue.from_url(url, queue.name)
    try:
        start = next(iter(queue.events())).id
        stream = aq.events(after=start, follow=True)

        async def collect() -> list[Event]:
            out = []
            async for e in stream:
                out.append(e)
                if len(out) == 2:
                    break
            await stream.aclose()
            return out

        task = asyncio.create_task(collect())
        (c,) = await aq.claim(1)  # from a fixed position: no need to wait for the reader
        await aq.complete(c.id, c.token)
        got = await asyncio.wait_for(task, HANG)
        assert [(e.event, e.job) for e in got] == [("claimed", first), ("completed", first)]
    finally:
        await aq.close()


async def test_async_iterator_from_now_sees_only_new_events(
    url: str, queue: Queue, client: redis.Redis
) -> None:
    queue.enqueue("before", None)
    aq = AsyncQueue.from_url(url, queue.name)
    client = node_of(client, queue.name)
    try:
        baseline = _blocked_clients(client)
        stream = aq.events("$", follow=True)
        nxt = asyncio.ensure_future(anext(stream))
        await asyncio.to_thread(_until_blocked, client, baseline)  # "$" is resolved by now
        queue.enqueue("after", None)
        e = await asyncio.wait_for(nxt, HANG)
        assert (e.event, e.fields["name"]) == ("enqueued", "after")
        await stream.aclose()
    finally:
        await aq.close()


def test_cli_events_tail_prints_lines_and_json(url: str, queue: Queue) -> None:
    ids = queue.enqueue_many([("mail", i) for i in range(3)])
    runner = CliRunner()
    out = runner.invoke(cli, ["events", "tail", queue.name, "--url", url, "--json"])
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in out.output.splitlines()]
    assert [r["job"] for r in rows] == ids and rows[0]["fields"]["name"] == "mail"
    out = runner.invoke(cli, ["events", "tail", queue.name, "--url", url, "-n", "1"])
    assert out.exit_code == 0 and len(out.output.splitlines()) == 1 and ids[2] in out.output


# -- a follower of a quiet stream keeps waiting ------------------------------------------------


@pytest.mark.servers("valkey", "redis")
async def test_an_async_queue_has_no_read_timeout_unless_its_url_sets_one(
    url: str, qname: str
) -> None:
    """redis-py 8's asyncio client gives up on any read after 5 s by default, so an idle
    ``events(follow=True)`` (one ``XREAD BLOCK 5000`` after another) ended in a TimeoutError;
    emq's clients wait as long as a blocking read asked, as its cluster clients do."""
    for given, expected in (("", None), ("?socket_timeout=7.5", 7.5)):
        aq = AsyncQueue.from_url(url + given, qname)
        try:
            conn = await aq.client.connection_pool.get_connection()
            assert conn.socket_timeout == expected
            await aq.client.connection_pool.release(conn)
        finally:
            await aq.close()


@pytest.mark.slow  # waits past redis-py's default read timeout
async def test_a_follower_of_a_quiet_stream_keeps_waiting(url: str, queue: Queue) -> None:
    aq = AsyncQueue.from_url(url, queue.name)
    try:
        stream = aq.events("$", follow=True)
        nxt = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(QUIET_S)  # longer than one XREAD BLOCK and any default timeout
        assert not nxt.done(), nxt
        queue.enqueue("after", None)
        e = await asyncio.wait_for(nxt, HANG)
        assert (e.event, e.fields["name"]) == ("enqueued", "after")
        await stream.aclose()
    finally:
        await aq.close()
