"""``emq workers [--json]``: the live workers from the worker registry
(:mod:`emq.observe.registry`)."""

from __future__ import annotations

import time
from dataclasses import asdict

import click

from ..observe.registry import WorkerInfo, list_workers
from .common import connect, emit_json, json_option, resolve_url, row, show, table, url_option


def _ago(ms: int, now_ms: int) -> str:
    s = max(0, now_ms - ms) / 1000
    if s < 120:
        return f"{s:.1f}s ago"
    if s < 7200:
        return f"{s / 60:.0f}m ago"
    return f"{s / 3600:.1f}h ago"


@click.command()
@url_option
@json_option
def workers(url: str | None, as_json: bool) -> None:
    """List the live workers: host, pid, queues, concurrency, jobs running now, last beat."""
    client = connect(resolve_url(url))
    try:
        found = list_workers(client)
    finally:
        client.close()
    if as_json:
        emit_json({"workers": [asdict(w) for w in found]})
        return
    now = int(time.time() * 1000)
    t = table(
        "emq workers", "id", "host", "pid", "queues", "concurrency", "running", "batches",
        "started", "last beat", "version",
    )  # fmt: skip
    for w in found:
        row(t, w.id, w.host, w.pid, ", ".join(w.queues), w.concurrency, w.running,
            _batches(w), _ago(w.started_ms, now), _ago(w.beat_ms, now), w.version)  # fmt: skip
    show(t)


def _batches(w: WorkerInfo) -> str:
    """Its batch handlers as ``name<=size``, and the jobs filling a batch ("-": none)."""
    names = ", ".join(f"{name}<={size}" for name, size, _ in w.batches)
    return f"{names} ({w.filling} filling)" if w.filling else names or "-"


def register(group: click.Group) -> None:
    group.add_command(workers)
