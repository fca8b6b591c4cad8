"""``emq configure``: the settings stored with a queue (docs/control.md, Queue settings),
which every process that serves the queue uses: shown, or changed for all of them."""

from __future__ import annotations

from typing import Any

import click

from ..errors import InvalidOption
from .common import emit_json, json_option, open_queue, say, url_option


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


def register(group: click.Group) -> None:
    group.add_command(configure)
