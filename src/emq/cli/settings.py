"""``emq configure``: the settings stored with a queue (docs/control.md, Queue settings),
which every process that serves the queue uses: shown, or changed for all of them; and
``emq upgrade``: the queue moved to this emq's newest keyspace layout (docs/keyspace.md)."""

from __future__ import annotations

from typing import Any

import click

from ..errors import InvalidOption
from ..model.layout import LAYOUT
from ..observe.registry import list_workers
from .common import emit_json, json_option, open_queue, require_queue, say, url_option
from .exits import StillLive


def _keep(text: str | None) -> tuple[int, int] | None:
    if text is None or text == "none":
        return None
    age, sep, count = text.partition(",")
    if not sep or not age.strip().isdigit() or not count.strip().isdigit():
        raise InvalidOption(f"--keep-completed takes MAX_AGE_MS,MAX_COUNT (or none), got {text!r}")
    return (int(age), int(count))


@click.command()
@click.argument("queue")
@click.option("--result-ttl-ms", type=int, help="Keep a handler's return value this long (0: not).")
@click.option("--keep-completed", metavar="AGE_MS,COUNT", help="Keep the last COUNT completed "
              "jobs for at most AGE_MS; `none` keeps none.")  # fmt: skip
@click.option("--max-attempts", type=int, help="Attempts of a job enqueued without its own.")
@click.option("--events-maxlen", type=int, help="The event stream's cap (0: no events).")
@click.option("--durability", type=click.Choice(["none", "aof", "replica"]),
              help="What each state change waits for (docs: guarantees.md).")  # fmt: skip
@click.option("--durability-replicas", type=int, help="Replicas `replica` waits for.")
@click.option("--log-ttl-ms", type=int, help="Keep a job's ctx.log lines this long after "
              "the last one (0: not kept).")  # fmt: skip
@url_option
@json_option
def configure(
    queue: str,
    result_ttl_ms: int | None,
    keep_completed: str | None,
    max_attempts: int | None,
    events_maxlen: int | None,
    durability: str | None,
    durability_replicas: int | None,
    log_ttl_ms: int | None,
    url: str | None,
    as_json: bool,
) -> None:
    """Show QUEUE's stored settings, or change the ones given for every process that
    serves it (within about 10 s).

    \b
    Each value is checked before anything is written; with no option, nothing is."""
    changes: dict[str, Any] = {
        k: v
        for k, v in {
            "result_ttl_ms": result_ttl_ms,
            "max_attempts": max_attempts,
            "events_maxlen": events_maxlen,
            "durability": durability,
            "durability_replicas": durability_replicas,
            "log_ttl_ms": log_ttl_ms,
        }.items()
        if v is not None
    }
    if keep_completed is not None:
        changes["keep_completed"] = _keep(keep_completed)
    with open_queue(url, queue) as q:
        if changes:
            q.configure(**changes)
        stored = q.stored_settings()
    if as_json:
        emit_json(stored)
        return
    if not stored:
        say(f"{queue}: no stored settings (each process uses its own options)")
        return
    say(f"{queue} settings: " + " ".join(f"{k}={v}" for k, v in stored.items()))


@click.command()
@click.argument("queue")
@click.option(
    "--force",
    is_flag=True,
    help="Upgrade although a live worker of an older emq serves QUEUE (it stops at its next "
    "call, and its running jobs run again).",
)
@url_option
@json_option
def upgrade(queue: str, force: bool, url: str | None, as_json: bool) -> None:
    """Move QUEUE to this emq's newest keyspace layout, in one step (docs: keyspace.md,
    Layout versions).

    \b
    Refused while a live worker of an older emq serves QUEUE, unless --force (exit 3); a
    queue that is not there, exit 2."""
    with open_queue(url, queue) as q:
        require_queue(q.client, queue, "nothing upgraded")
        older = [w for w in list_workers(q.client) if queue in w.queues and w.layout < LAYOUT]
        if older and not force:
            shown = ", ".join(f"{w.host}:{w.pid}" for w in older[:5])
            raise StillLive(
                f"{len(older)} live worker(s) of an older emq serve {queue!r} ({shown}): they "
                f"read and write keyspace layout {min(w.layout for w in older)} only and would "
                "stop at their next call; upgrade them first (or pass --force)"
            )
        before, after = q.upgrade()
    if as_json:
        emit_json({"queue": queue, "from": before, "to": after})
    elif before == after:
        say(f"{queue}: already in keyspace layout {after}; nothing changed")
    else:
        say(f"{queue}: keyspace layout {before} -> {after}")


def register(group: click.Group) -> None:
    group.add_command(configure)
    group.add_command(upgrade)
