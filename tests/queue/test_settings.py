"""Queue settings stored with the queue (docs/control.md, Queue settings): the first process
opened with explicit options stores them, every other process uses them, a process that
asked for something else is told once, and ``configure`` changes them for all."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from emq import AsyncQueue, InvalidOption, Queue, QueueOptions, UnsafeServer, Worker, WorkerOptions
from emq.cli.main import cli
from emq.model.keys import QueueKeys

from ..support.helpers import assert_consistent

HANG = 60.0


async def test_a_worker_by_name_keeps_results_for_the_producers_ttl(url: str, qname: str) -> None:
    """The README's Results example: the producer sets result_ttl_ms, the worker knows only
    the queue's name. Before, only the acknowledging process's options counted and the
    result was not kept (JobNotFound ... set result_ttl_ms)."""
    with Queue.from_url(url, qname, options=QueueOptions(result_ttl_ms=60_000)) as q:
        job = q.enqueue("render", {"doc": 7})
        w = Worker(qname, url=url, options=WorkerOptions(burst=True))
        w.register("render", lambda p: {"pages": p["doc"] * 2})
        await asyncio.wait_for(w.run(), HANG)
        assert q.result(job) == {"pages": 14}


async def test_a_process_that_knows_only_the_name_uses_the_stored_settings(
    url: str, qname: str, client: redis.Redis
) -> None:
    asked = QueueOptions(max_attempts=7, keep_completed=(60_000, 10), events_maxlen=500)
    with Queue.from_url(url, qname, options=asked) as producer:
        producer.enqueue("x")
    async with AsyncQueue.from_url(url, qname) as plain:
        used = await plain.settle()
        assert (used.max_attempts, used.keep_completed, used.events_maxlen) == (
            7, (60_000, 10), 500,
        )  # fmt: skip
        job = await plain.enqueue("x")
        stored = await plain.job(job)
        assert stored is not None and stored.max_attempts == 7
    assert_consistent(client, qname)


def test_explicit_options_that_differ_are_told_once_and_the_stored_win(
    url: str, qname: str, caplog: pytest.LogCaptureFixture
) -> None:
    with Queue.from_url(url, qname, options=QueueOptions(result_ttl_ms=60_000)) as first:
        first.enqueue("x")
    caplog.set_level(logging.WARNING, logger="emq.queue")
    with Queue.from_url(url, qname, options=QueueOptions(result_ttl_ms=5)) as second:
        second.enqueue("x")
        second.settle()
        assert second.core.options.result_ttl_ms == 60_000
    told = [r for r in caplog.records if "result_ttl_ms=5" in r.getMessage()]
    assert len(told) == 1, [r.getMessage() for r in caplog.records]
    assert "stored setting is 60000" in told[0].getMessage()
    assert "configure" in told[0].getMessage()


def test_configure_changes_the_settings_of_every_process(url: str, qname: str) -> None:
    with (
        Queue.from_url(url, qname, options=QueueOptions(max_attempts=2)) as a,
        Queue.from_url(url, qname) as b,
    ):
        a.enqueue("x")
        assert b.settle().max_attempts == 2
        assert a.configure(max_attempts=9, result_ttl_ms=1_000).max_attempts == 9
        assert b.settle().max_attempts == 9 and b.core.options.result_ttl_ms == 1_000


def test_a_stored_durability_binds_a_process_opened_without_it(
    url: str, qname: str, client: redis.Redis
) -> None:
    """The suite's servers have no replica: once the queue says durability='replica', a
    process opened with no options is refused as a durable one is, and writes nothing."""
    with Queue.from_url(url, qname) as setter:
        setter.configure(durability="replica")
    with Queue.from_url(url, qname) as plain:
        with pytest.raises(UnsafeServer, match="replica"):
            plain.enqueue("x")
        assert plain.counts()["pending"] == 0
        plain.configure(durability="none")
        plain.enqueue("x")
        assert plain.counts()["pending"] == 1


@pytest.mark.parametrize(
    "changes, says",
    [
        ({}, "at least one of"),
        ({"backoff": None}, "backoff is not a queue setting"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"durability": "disk"}, "durability must be one of"),
        ({"keep_completed": (1, 0)}, "keep_completed max_count"),
    ],
)
def test_configure_refuses_bad_settings_before_writing(
    url: str, qname: str, client: redis.Redis, changes: dict[str, Any], says: str
) -> None:
    with Queue.from_url(url, qname) as q:
        with pytest.raises(InvalidOption, match=says):
            q.configure(**changes)
        assert client.exists(q.core.keys.settings) == 0


def test_a_damaged_stored_setting_is_ignored_and_named(
    url: str, qname: str, client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    with Queue.from_url(url, qname, options=QueueOptions(max_attempts=4)) as q:
        q.enqueue("x")
        client.hset(q.core.keys.settings, "max_attempts", "lots")
    caplog.set_level(logging.WARNING, logger="emq.queue")
    with Queue.from_url(url, qname) as plain:
        assert plain.settle().max_attempts == QueueOptions().max_attempts
        plain.enqueue("x")  # a damaged setting never stops a process
    assert any("max_attempts 'lots' cannot be read" in r.getMessage() for r in caplog.records)


async def test_a_worker_started_first_stores_nothing(
    url: str, qname: str, client: redis.Redis
) -> None:
    """A worker that knows only the name stores no settings (it would pin the defaults over
    the producer's); the producer that comes later does."""
    w = Worker(qname, url=url, options=WorkerOptions(burst=True))
    w.register("render", lambda p: p)
    await asyncio.wait_for(w.run(), HANG)
    assert client.exists(QueueKeys.of(qname).settings) == 0
    with Queue.from_url(url, qname, options=QueueOptions(result_ttl_ms=60_000)) as q:
        q.enqueue("render", 1)
        assert client.hget(q.core.keys.settings, "result_ttl_ms") == "60000"


def test_emq_configure_and_stats_show_and_change_the_stored_settings(
    url: str, qname: str, client: redis.Redis
) -> None:
    runner = CliRunner()
    shown = runner.invoke(cli, ["configure", qname, "--url", url])
    assert shown.exit_code == 0 and "no stored settings" in shown.output
    changed = runner.invoke(
        cli,
        ["configure", qname, "--result-ttl-ms", "60000", "--keep-completed", "1000,5",
         "--url", url, "--json"],
    )  # fmt: skip
    assert changed.exit_code == 0, changed.output
    assert json.loads(changed.output) == {"result_ttl_ms": 60_000, "keep_completed": [1000, 5]}
    bad = runner.invoke(cli, ["configure", qname, "--max-attempts", "0", "--url", url])
    assert bad.exit_code == 2 and "max_attempts" in bad.output and "Traceback" not in bad.output
    with Queue.from_url(url, qname) as q:
        q.enqueue("x")
    stats = runner.invoke(cli, ["stats", qname, "--url", url, "--json"])
    assert json.loads(stats.output)["settings"]["result_ttl_ms"] == 60_000
    table = runner.invoke(cli, ["stats", qname, "--url", url])
    assert "settings: result_ttl_ms=60000 keep_completed=(1000, 5)" in table.output
