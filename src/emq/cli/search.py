"""``emq search QUEUE [TEXT]``: a queue's jobs by text, id, name, state and time, over its
live rows and its floor (:mod:`emq.archive.search`, docs/search.md)."""

from __future__ import annotations

import os
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import click

from ..archive.floor import default_path
from ..archive.search import SearchQuery, search
from ..errors import InvalidOption
from ..model.checks import parse_when
from .common import emit_json, json_option, one_line, open_queue, row, say, show, table, url_option


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _floor(queue: str, floor: str | None) -> Path | None:
    """``--floor`` (which must be a file), else ``$EMQ_HOME/floor/QUEUE.sqlite3`` if any."""
    if floor:
        path = Path(floor)
        if not path.is_file():
            raise InvalidOption(f"no floor at {floor!r} (--floor must name an existing file)")
        return path
    path = default_path(queue, os.environ.get("EMQ_HOME", ".emq"))
    return path if path.is_file() else None


@click.command("search")
@click.argument("queue")
@click.argument("text", required=False)
@click.option("--id", "job_id", default=None, metavar="ID", help="Only this job id.")
@click.option("--state", default=None, help="pending, schedule, active, waiting, dead, "
              "completed, cancelled or removed.")  # fmt: skip
@click.option("--name", default=None, help="Only jobs with this name (exact).")
@click.option("--since", default=None, metavar="WHEN", help="ms, ISO time (UTC) or 15m/2h/7d ago.")
@click.option("--until", default=None, metavar="WHEN", help="Same forms as --since.")
@click.option("--limit", "-n", type=int, default=50, show_default=True, help="Most hits shown.")
@click.option(
    "--floor",
    default=None,
    metavar="PATH",
    help="The SQLite floor (default: $EMQ_HOME/floor/QUEUE.sqlite3 when it exists).",
)
@url_option
@json_option
def search_cmd(
    queue: str, text: str | None, job_id: str | None, state: str | None, name: str | None,
    since: str | None, until: str | None, limit: int, floor: str | None, url: str | None,
    as_json: bool,
) -> None:  # fmt: skip
    """Search QUEUE's jobs by text, id, name, state and time, live rows and archive floor.

    TEXT: words of a payload, an error or a name (word* for a prefix), or a job id. Reads
    the newest 1,000 rows of each location and the floor's full-text index; newest first."""
    query = SearchQuery(
        text=text, job_id=job_id, name=name, state=state, limit=limit,
        since_ms=None if since is None else parse_when(since),
        until_ms=None if until is None else parse_when(until),
    )  # fmt: skip
    path = _floor(queue, floor)
    with open_queue(url, queue) as q:
        hits = search(q, query, floor=path)
    if as_json:
        for h in hits:
            emit_json(asdict(h))
        return
    if not hits:
        say(f"no jobs of {queue} match" + ("" if path else " (live rows only: no floor)"))
        return
    t = table(f"{queue}: {len(hits)} job(s)", "time (UTC)", "job", "where", "state", "name",
              "match", "error")  # fmt: skip
    for h in hits:
        row(t, _when(h.ms), h.job_id, h.source, h.state, h.name or "", one_line(h.snippet),
            one_line(h.error or ""))  # fmt: skip
    show(t)


def register(cli: click.Group) -> None:
    cli.add_command(search_cmd)
