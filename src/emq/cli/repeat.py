"""``emq repeat QUEUE list|add|remove``: a queue's repeating schedules (docs/control.md).

``add`` is ``Queue.repeat``: idempotent by key (the same flags again change nothing, not even
the next tick), bad flags one error line and exit 2 with nothing written; ``remove`` of a key
that is not there is one error line and exit 2 too.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import click

from ..calls.repeats import CATCH_UPS, Repeat
from .common import emit_json, json_option, open_queue, row, say, show, table, url_option
from .exits import NotFound
from .lanes import server_ms
from .queues import read_payload


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _every(r: Repeat) -> str:
    return f"every {r.every_ms} ms" if r.every_ms is not None else f"cron {r.cron} ({r.tz})"


def repeat_dict(r: Repeat, now: int) -> dict[str, Any]:
    """One schedule as ``--json`` prints it: the fields of :class:`emq.calls.repeats.Repeat` plus
    ``next_in_ms`` (from the server's now)."""
    return asdict(r) | {"next_in_ms": max(0, r.next_ms - now)}


@click.group()
@click.argument("queue")
@click.pass_context
def repeat(ctx: click.Context, queue: str) -> None:
    """QUEUE's repeating jobs and cron schedules: list, add, remove."""
    ctx.obj = queue


@repeat.command("list")
@url_option
@json_option
@click.pass_obj
def list_(queue: str, url: str | None, as_json: bool) -> None:
    """List the schedules, soonest next tick first (times UTC, server clock)."""
    with open_queue(url, queue) as q:
        found = q.repeats()
        now = server_ms(q)
    if as_json:
        emit_json({"queue": queue, "now_ms": now, "repeats": [repeat_dict(r, now) for r in found]})
        return
    if not found:
        say(queue, ": no repeating schedules")
        return
    t = table(f"{queue} / repeats", "key", "job", "when", "lane", "next (UTC)", "last job")
    for column in ("fired", "skipped"):
        t.add_column(column, justify="right")
    for r in found:
        row(t, r.key, r.name, _every(r), r.lane or "", _when(r.next_ms), r.last_id or "",
            r.fired, r.skipped)  # fmt: skip
    show(t)


@repeat.command()
@click.argument("key")
@click.argument("name")
@click.option("--every-ms", type=int, default=None, metavar="MS", help="A tick every MS ms.")
@click.option("--cron", default=None, metavar="EXPR", help="Five cron fields, e.g. '0 3 * * *'.")
@click.option("--tz", default="UTC", show_default=True, help="The cron's IANA time zone.")
@click.option("--payload", default="null", metavar="JSON", help="JSON text, - (stdin) or @PATH.")
@click.option("--lane", default=None, help="The jobs' lane (default: the default lane).")
@click.option("--priority", type=int, default=0, help="Lower runs first (default 0).")
@click.option("--max-attempts", type=int, default=None, help="Attempts before dead.")
@click.option("--start-at-ms", type=int, default=None, metavar="MS", help="First tick, Unix ms.")
@click.option(
    "--catch-up", type=click.Choice(CATCH_UPS), default="latest", show_default=True,
    help="After a downtime: fire the latest missed tick only, or all (1,000 a call).",
)  # fmt: skip
@url_option
@json_option
@click.pass_obj
def add(
    queue: str, key: str, name: str, every_ms: int | None, cron: str | None, tz: str,
    payload: str, lane: str | None, priority: int, max_attempts: int | None,
    start_at_ms: int | None, catch_up: str, url: str | None, as_json: bool,
) -> None:  # fmt: skip
    """Register (or update) schedule KEY: a job NAME at every tick (--every-ms or --cron)."""
    data = read_payload(payload)
    with open_queue(url, queue) as q:
        r = q.repeat(
            key, name, data, every_ms=every_ms, cron=cron, tz=tz, lane=lane, priority=priority,
            max_attempts=max_attempts, start_at_ms=start_at_ms, catch_up=catch_up,
        )  # fmt: skip
        now = server_ms(q)
    if as_json:
        emit_json({"queue": queue, "repeat": repeat_dict(r, now)})
    else:
        say(queue, " repeat ", r.key, ": ", r.name, " ", _every(r), ", next ", _when(r.next_ms))


@repeat.command()
@click.argument("key")
@url_option
@json_option
@click.pass_obj
def remove(queue: str, key: str, url: str | None, as_json: bool) -> None:
    """Remove schedule KEY: no tick of it fires after this (its jobs stay). An unknown KEY is
    one error line, exit 2."""
    with open_queue(url, queue) as q:
        removed = q.unrepeat(key)
    if not removed:
        raise NotFound(f"no repeating schedule {key!r} on {queue} (emq repeat {queue} list)")
    if as_json:
        emit_json({"queue": queue, "key": key, "removed": removed})
    else:
        say(queue, " repeat ", key, ": removed")


def register(group: click.Group) -> None:
    group.add_command(repeat)
