"""``emq dead-letters QUEUE [groups|redrive|purge]``: the dead jobs of QUEUE grouped by error
(:func:`emq.calls.deadletters.error_key`, the dashboard's grouping: numbers, ids, emails and
hex strings made placeholders, one example each), and redrive or purge of every dead job that
matches a filter (:mod:`emq.queue._sync.deadletters`).

The filter: ``--error`` (a group as ``groups`` shows it, or any error text of it),
``--error-contains``, ``--name``, ``--since`` / ``--until`` (when the job died). ``redrive``
and ``purge`` move the matching jobs in chunks of ``--chunk`` (one script step per job: a stop
mid-way leaves each job moved or still dead); with no filter at all they need ``--all``. A job
someone else moved meanwhile is skipped and counted as such.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from ..calls.deadletters import BULK_CHUNK, DeadFilter, Group
from ..model.checks import parse_when
from ..queue._sync import deadletters as dl
from .common import (
    emit_json,
    err_console,
    json_option,
    open_queue,
    row,
    say,
    show,
    table,
    url_option,
)

NAMES_SHOWN = 3


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _names(g: Group) -> str:
    shown = [f"{name or '(none)'} {n}" for name, n in g.names[:NAMES_SHOWN]]
    more = len(g.names) - NAMES_SHOWN
    return ", ".join(shown) + (f", +{more} more" if more > 0 else "")


def _filter(
    error: str | None, contains: str | None, name: str | None, since: str | None, until: str | None
) -> DeadFilter:
    now = int(time.time() * 1000)
    return DeadFilter(
        error=error,
        error_contains=contains,
        name=name,
        since_ms=parse_when(since, now),
        until_ms=parse_when(until, now),
    )


@click.command("dead-letters")
@click.argument("queue")
@click.argument(
    "action", type=click.Choice(["groups", "redrive", "purge"]), default="groups", required=False
)
@click.option(
    "--error", metavar="TEXT", help="Only this error's group (as listed, or any text of it)."
)
@click.option("--error-contains", metavar="TEXT", help="Only errors containing TEXT (any case).")
@click.option("--name", metavar="NAME", help="Only jobs named NAME.")
@click.option("--since", metavar="WHEN", help="Died at or after WHEN: ms, ISO time, or 15m/2h/3d.")
@click.option("--until", metavar="WHEN", help="Died before WHEN (same forms).")
@click.option("--all", "take_all", is_flag=True, help="redrive/purge with no filter: every job.")
@click.option("--keep-counters", is_flag=True, help="redrive: keep attempts and stalled.")
@click.option("--chunk", type=click.IntRange(1, 1000), default=BULK_CHUNK, show_default=True,
              help="Jobs moved per server step.")  # fmt: skip
@url_option
@json_option
def dead_letters(
    queue: str, action: str, error: str | None, error_contains: str | None, name: str | None,
    since: str | None, until: str | None, take_all: bool, keep_counters: bool, chunk: int,
    url: str | None, as_json: bool,
) -> None:  # fmt: skip
    """Dead jobs of QUEUE grouped by error; redrive or purge every one matching a filter."""
    f = _filter(error, error_contains, name, since, until)
    if action != "groups" and f.empty and not take_all:
        raise click.UsageError(f"{action} with no filter takes every dead job: add --all")
    with open_queue(url, queue) as q:
        if action == "groups":
            groups = dl.groups(q, f)
            if as_json:
                emit_json({"queue": queue, "groups": [g.as_dict() for g in groups]})
                return
            t = table(f"{queue} / dead, by error", "count", "error", "example", "names", "newest",
                      "oldest")  # fmt: skip
            for g in groups:
                example = "" if g.example == g.error else g.example
                row(t, g.count, g.error, example, _names(g), _when(g.newest_ms), _when(g.oldest_ms))
            show(t)
            say(f"{sum(g.count for g in groups)} dead job(s) in {len(groups)} group(s)")
            return
        with Progress(
            TextColumn(f"{action} ({f.describe()})"),
            BarColumn(),
            MofNCompleteColumn(),
            console=err_console,
            transient=True,
            disable=as_json or not err_console.is_terminal,
        ) as bar:
            task = bar.add_task(action, total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            if action == "redrive":
                result = dl.redrive(
                    q, f, chunk=chunk, keep_counters=keep_counters, progress=progress
                )
            else:
                result = dl.purge(q, f, chunk=chunk, progress=progress)
    if as_json:
        emit_json({"queue": queue, "action": action, **result.as_dict()})
    else:
        verb = "redriven to pending" if action == "redrive" else "purged"
        say(
            f"{action}: {result.matched} matched ({f.describe()}), {result.moved} {verb}, "
            f"{result.skipped} skipped (moved by someone else meanwhile)"
        )


def register(group: click.Group) -> None:
    group.add_command(dead_letters)
