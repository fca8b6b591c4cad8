"""Prometheus: the queues' metrics (emq.observe.prometheus, emq metrics serve|show) and a
worker's own
histograms (Worker(metrics_port=...)), parsed with prometheus_client's text parser."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import urllib.request
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from emq import Backoff, EmqError, Queue, Worker, WorkerOptions
from emq.cli.main import cli
from emq.model.ids import decode, encode
from emq.observe.prometheus import render_queue_metrics, sample
from emq.observe.registry import list_workers

from ..support.helpers import until

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")

FIXED = Backoff(kind="fixed", base_ms=0, jitter=0.0)
LOCATIONS = ("pending", "active", "schedule", "waiting", "dead", "completed")


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as reply:
        body: bytes = reply.read()
    return body


def parse(body: bytes | str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(sample name, sorted labels): value}`` of a text exposition."""
    text = body.decode() if isinstance(body, bytes) else body
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def queue_figures(samples: dict[Any, float], qname: str) -> dict[str, float]:
    """The figures of one queue, named as counts() names them (plus age and paused)."""
    out = {}
    for (name, labels), value in samples.items():
        d = dict(labels)
        if d.get("queue") != qname:
            continue
        if name == "emq_jobs":
            out[d["location"]] = value
        elif m := re.fullmatch(r"emq_jobs_(\w+)_total", name):
            out["dead_total" if m[1] == "dead" else m[1]] = value
        else:
            out[name] = value
    return out


def fill_and_run(url: str, qname: str, **worker: Any) -> Worker:
    """12 jobs done, 3 that fail once then complete, 2 dead at once; one delayed job stays."""
    with Queue.from_url(url, qname) as q:
        q.enqueue_many([("ok", i) for i in range(12)])
        q.enqueue_many([("flaky", i) for i in range(3)])
        q.enqueue_many([("doomed", i) for i in range(2)])
        q.enqueue("ok", "later", delay_ms=600_000)
    tries: dict[int, int] = {}

    def flaky(i: int) -> None:
        tries[i] = tries.get(i, 0) + 1
        if tries[i] == 1:
            raise RuntimeError("first try fails")

    def doomed(i: int) -> None:
        raise RuntimeError("always")

    handlers = {"ok": lambda p: None, "flaky": flaky, "doomed": doomed}
    opts = WorkerOptions(backoff=FIXED, max_attempts=2, **worker)
    return Worker(qname, handlers, url=url, options=opts)


@pytest.mark.timeout(60)
async def test_queue_metrics_match_counts_after_a_worker_run(
    url: str, queue: Queue, qname: str
) -> None:
    w = fill_and_run(url, qname)
    task = asyncio.create_task(w.run())
    await until(lambda: queue.counts()["completed"] >= 15 and queue.counts()["dead"] >= 2, 20,
                "the jobs done")  # fmt: skip
    w.stop()
    await asyncio.wait_for(task, 30)
    queue.enqueue("ok", "waits")
    queue.pause()
    body, ctype = await asyncio.to_thread(render_queue_metrics, url, [qname])
    assert ctype.startswith("text/plain") and "version=" in ctype
    got = queue_figures(parse(body), qname)
    counts = queue.counts()
    assert (counts["completed"], counts["failed"], counts["dead_total"]) == (15, 7, 2)
    for field in (*LOCATIONS, "completed", "failed", "dead_total", "recovered"):
        assert got[field] == counts[field], field
    assert got["cancelled"] == got["missing"] == 0
    assert got["emq_queue_paused"] == 1
    assert 0 <= got["emq_oldest_waiting_age_seconds"] < 600
    queue.resume()
    queue.drain()
    empty = queue_figures(parse(render_queue_metrics(url, [qname])[0]), qname)
    assert empty["emq_oldest_waiting_age_seconds"] == 0 and empty["emq_queue_paused"] == 0
    every = queue_figures(parse(render_queue_metrics(url)[0]), qname)  # every known queue
    assert every["completed"] == 15


def test_the_oldest_waiting_age_reads_the_ids_time(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    # a job whose id was minted 90 s ago (server clock): it has waited that long
    old = encode(decode(queue.new_id()) - (90_000 << 22))
    queue.enqueue("x", id=old)
    queue.enqueue("x", priority=-1)  # claimed first, but younger
    (s,) = sample(client, [qname])
    assert 90 <= s.oldest_age_s < 90 + 60
    assert s.sizes["pending"] == 2 and not s.paused


def test_lanes_count_in_pending_and_in_the_oldest_age(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    old = encode(decode(queue.new_id()) - (30_000 << 22))  # minted 30 s ago
    queue.enqueue("x", id=old, lane="tenant-1")
    queue.enqueue("x", lane="tenant-2")
    queue.enqueue("x")
    (s,) = sample(client, [qname])
    assert s.sizes["pending"] == queue.counts()["pending"] == 3
    assert 30 <= s.oldest_age_s < 30 + 60


@pytest.mark.timeout(60)
async def test_a_worker_serves_its_histograms(url: str, queue: Queue, qname: str) -> None:
    w = fill_and_run(url, qname, metrics_port=0)
    task = asyncio.create_task(w.run())
    await until(lambda: queue.counts()["completed"] >= 15, 20, "the jobs done")
    await until(lambda: queue.counts()["dead_total"] >= 2, 20, "the dead ones")
    host, port = await until(lambda: w.metrics_address, 10, "the endpoint")
    assert host == "127.0.0.1" and port > 0
    mine = [i for i in list_workers(queue.client) if qname in i.queues]
    assert [i.metrics_port for i in mine] == [port]  # the registry names the endpoint
    body = await asyncio.to_thread(fetch, f"http://127.0.0.1:{port}/metrics")
    got = parse(body)

    def count(metric: str, **labels: str) -> float:
        want = {"queue": qname, **labels}
        return sum(v for (n, ls), v in got.items()
                   if n == metric + "_count" and want.items() <= dict(ls).items())  # fmt: skip

    dur = "emq_job_duration_seconds"
    assert count(dur, outcome="completed") == 15
    assert count(dur, name="flaky", outcome="failed") == 3
    assert count(dur, name="doomed", outcome="failed") == 4  # max_attempts=2: two tries each
    assert count("emq_job_wait_seconds") == 17  # first attempts only
    w.stop()
    await asyncio.wait_for(task, 30)
    assert w.metrics_address is None


@pytest.mark.timeout(60)
def test_emq_metrics_serve_and_show(url: str, queue: Queue, qname: str) -> None:
    queue.enqueue_many([("x", i) for i in range(4)])
    shown = CliRunner().invoke(cli, ["metrics", "show", qname, "--url", url])
    assert shown.exit_code == 0, shown.output
    assert queue_figures(parse(shown.output), qname)["pending"] == 4
    env = {**os.environ, "EMQ_URL": url}
    cmd = [
        sys.executable,
        "-c",
        "from emq.cli.main import main; main()",
        "metrics",
        "serve",
        "--port",
        "0",
        "--queue",
        qname,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        port = int(re.search(r":(\d+)/metrics", line)[1])  # type: ignore[index]
        body = fetch(f"http://127.0.0.1:{port}/metrics")
        figures = queue_figures(parse(body), qname)
        assert figures["pending"] == 4 and figures["completed"] == 0
        with pytest.raises(urllib.error.HTTPError, match="404") as refused:
            fetch(f"http://127.0.0.1:{port}/nope")
        refused.value.close()
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


async def test_a_metrics_port_in_use_is_one_clear_error(url: str, qname: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        w = Worker(qname, {"x": lambda p: None}, url=url, metrics_port=port)
        with pytest.raises(
            EmqError, match=f"cannot serve the worker's metrics on 127.0.0.1:{port}"
        ):
            await asyncio.wait_for(w.run(), 30)
    refused = CliRunner().invoke(cli, ["worker", "x:y", "--processes", "2", "--metrics-port", "9"])
    assert refused.exit_code == 2 and "must be 0" in refused.output
