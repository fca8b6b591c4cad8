"""Commands on the event stream and its floor: ``events tail``, ``archive run|status|ship|
restore|release`` and ``history``."""

from __future__ import annotations

import os
import signal
import threading
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, cast

import click

from ..archive import Archive, Floor, Target, Totals, default_path, open_target, restore, ship
from ..errors import InvalidOption
from ..model.events import Event, entries
from .common import emit_json, json_option, one_line, open_queue, row, say, show, table, url_option
from .exits import NotFound


def _floor_path(queue: str, floor: str | None) -> Path:
    """``--floor`` (whose directory must exist: a typo is refused, not created), else
    ``$EMQ_HOME/floor/QUEUE.sqlite3`` (created as needed)."""
    if not floor:
        return default_path(queue, os.environ.get("EMQ_HOME", ".emq"))
    path = Path(floor)
    if path.is_dir():
        raise InvalidOption(f"cannot open the floor {floor!r}: it is a directory, not a file")
    if not path.parent.is_dir():
        raise InvalidOption(
            f"cannot open the floor {floor!r}: {str(path.parent)!r} is not an existing "
            "directory (emq creates no directory for an explicit --floor; create it first)"
        )
    return path


def floor_option(f: Any) -> Any:
    return click.option(
        "--floor",
        default=None,
        metavar="PATH",
        help="The SQLite floor (default: $EMQ_HOME/floor/QUEUE.sqlite3, EMQ_HOME=.emq).",
    )(f)


def segment_option(f: Any) -> Any:
    return click.option(
        "--segment-size",
        type=int,
        default=10_000,
        show_default=True,
        help="Events per shipped segment.",
    )(f)


def endpoint_option(f: Any) -> Any:
    return click.option(
        "--endpoint-url",
        default=None,
        metavar="URL",
        help="S3 endpoint for s3:// targets (MinIO, R2, Tigris); default: boto3's own.",
    )(f)


def traceback_option(f: Any) -> Any:
    return click.option(
        "--traceback",
        "full",
        is_flag=True,
        help="Print multi-line values (an error's traceback) in full, after their event.",
    )(f)


def _line(e: Event, full: bool = False) -> str:
    """One line per event; a multi-line value (a traceback) is cut to one line, or with
    ``full`` printed whole on the lines below the event."""
    when = datetime.fromtimestamp(e.time_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    rest = " ".join(f"{k}={one_line(str(v))}" for k, v in e.fields.items())
    head = f"{e.id:<22} {when}  {e.event:<10} {e.job or '-':<14} {rest}".rstrip()
    long = [f"  {k}:\n{v}".rstrip() for k, v in e.fields.items() if "\n" in str(v).strip()]
    return "\n".join([head, *long]) if full else head


def _print(e: Event, as_json: bool, full: bool = False) -> None:
    if as_json:
        emit_json(e.to_dict())
    else:
        click.echo(_line(e, full))


@click.group()
def events() -> None:
    """Read a queue's event stream."""


@events.command("tail")
@click.argument("queue")
@click.option("--follow", "-f", is_flag=True, help="Keep waiting for new events (XREAD BLOCK).")
@click.option("--last", "-n", type=int, default=20, show_default=True, help="Start this many back.")
@click.option("--after", default=None, metavar="ID", help="Start above this stream id instead.")
@traceback_option
@url_option
@json_option
def tail(
    queue: str, follow: bool, last: int, after: str | None, full: bool, url: str | None,
    as_json: bool,
) -> None:  # fmt: skip
    """Print QUEUE's live events (one line each, or JSON lines with --json)."""
    if last < 0:
        raise InvalidOption(f"-n/--last is {last}: give 0 or more events to start back from")
    q = open_queue(url, queue)
    try:
        if after is None:
            recent = cast(list[Any], q.client.xrevrange(q.core.keys.events, count=max(last, 1)))
            shown = entries(list(reversed(recent)))  # an entry may hold several events
            for e in shown[len(shown) - last :] if last else []:
                _print(e, as_json, full)
            after = shown[-1].id if shown else "0-0"
        for e in q.events(after, follow=follow):
            _print(e, as_json, full)
    except KeyboardInterrupt:
        pass
    finally:
        q.close()


@click.group()
def archive() -> None:
    """Fold the event stream into the durable floor before trimming it."""


def _target(spec: str, endpoint_url: str | None) -> Target:
    return open_target(spec, endpoint_url=endpoint_url)


@archive.command("run")
@click.argument("queue")
@floor_option
@click.option("--every", type=float, default=1.0, show_default=True, help="Seconds between runs.")
@click.option("--once", is_flag=True, help="Catch up once (and ship) then exit.")
@click.option("--batch", type=int, default=10_000, show_default=True, help="Entries per cycle.")
@click.option(
    "--ship", "ship_to", default=None, metavar="TARGET", help="s3://bucket/prefix or DIR."
)
@segment_option
@endpoint_option
@url_option
@json_option
def run(
    queue: str, floor: str | None, every: float, once: bool, batch: int, ship_to: str | None,
    segment_size: int, endpoint_url: str | None, url: str | None, as_json: bool,
) -> None:  # fmt: skip
    """Archive QUEUE: read above W, fold into the floor, cache W, trim MINID W; repeat."""
    target = _target(ship_to, endpoint_url) if ship_to else None  # boto3 before any file
    q = open_queue(url, queue)
    a = Archive(q, _floor_path(queue, floor), batch=batch)

    def report(t: Totals) -> None:
        shipped = ship(a.floor, target, segment_size=segment_size) if target else None
        if as_json:
            out: dict[str, Any] = {
                "cycles": t.cycles,
                "read": t.read,
                "folded": t.folded,
                "trimmed": t.trimmed,
            }
            out |= {"watermark": a.floor.watermark(), "gaps": t.gaps}
            emit_json(out | ({"shipped": shipped.shipped} if shipped else {}))
        elif t.read or t.trimmed or (shipped and shipped.shipped) or t.gaps:
            extra = f", shipped {shipped.shipped} segment(s)" if shipped else ""
            say(
                f"folded {t.folded} (read {t.read}), trimmed {t.trimmed}, "
                f"W={a.floor.watermark()}{extra}"
            )
        for w, first in t.gaps:
            gap = f"events between {w} and {first} were trimmed before this floor folded them"
            say(("gap:", "yellow"), " ", gap)

    stop = threading.Event()
    if once:
        try:
            report(a.catch_up())
        finally:
            a.release_lease()
            a.close()
            q.close()
        return

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    if not as_json:
        say(f"archiving {queue} into {a.floor.path} every {every}s (Ctrl-C stops)")
    try:
        a.run(every, stop, report)
    except KeyboardInterrupt:
        pass
    finally:
        a.close()
        q.close()


@archive.command("status")
@click.argument("queue")
@floor_option
@url_option
@json_option
def status(queue: str, floor: str | None, url: str | None, as_json: bool) -> None:
    """W, the cached W, lag, rows in the floor, stream length."""
    q = open_queue(url, queue)
    a = Archive(q, _floor_path(queue, floor))
    try:
        st = a.status()
    finally:
        a.close()
        q.close()
    if as_json:
        emit_json(st)
        return
    t = table(f"archive of {queue}", "field", "value", show_header=False)
    for k, v in st.items():
        row(t, k, "-" if v is None else v)
    show(t)


@archive.command("ship")
@click.argument("queue")
@click.option("--to", "to", required=True, metavar="TARGET", help="s3://bucket/prefix or DIR.")
@click.option("--flush", is_flag=True, help="Also close the last, partial segment.")
@segment_option
@floor_option
@endpoint_option
@json_option
def ship_cmd(
    queue: str, to: str, flush: bool, segment_size: int, floor: str | None,
    endpoint_url: str | None, as_json: bool,
) -> None:  # fmt: skip
    """Ship QUEUE's closed floor segments to TARGET (create-only, gzip, with manifests)."""
    target = _target(to, endpoint_url)  # boto3 checked before the floor file is made
    with Floor(_floor_path(queue, floor), queue=queue) as f:
        r = ship(f, target, segment_size=segment_size, flush=flush)
    if as_json:
        emit_json({"closed": r.closed, "shipped": r.shipped, "events": r.events})
    else:
        say(f"closed {r.closed}, shipped {r.shipped} segment(s), {r.events} events")


@archive.command("restore")
@click.argument("queue")
@click.option("--from", "source", required=True, metavar="TARGET", help="s3://bucket/prefix|DIR")
@floor_option
@endpoint_option
@json_option
def restore_cmd(
    queue: str, source: str, floor: str | None, endpoint_url: str | None, as_json: bool
) -> None:
    """Rebuild QUEUE's floor (a new, empty one) from the segments shipped to TARGET."""
    target = _target(source, endpoint_url)  # boto3 checked before the floor file is made
    with Floor(_floor_path(queue, floor), queue=queue) as f:
        r = restore(target, f)
        path = f.path
    if as_json:
        emit_json({"segments": r.segments, "events": r.events, "watermark": r.watermark})
    else:
        say(f"restored {r.segments} segment(s), {r.events} events into {path}; W={r.watermark}")


@archive.command("release")
@click.argument("queue")
@floor_option
@url_option
@json_option
def release(queue: str, floor: str | None, url: str | None, as_json: bool) -> None:
    """Stop archiving QUEUE: delete events:archived so the scripts cap the stream again."""
    q = open_queue(url, queue)
    a = Archive(q, _floor_path(queue, floor))
    try:
        a.release()
    finally:
        a.close()
        q.close()
    if as_json:
        emit_json({"queue": queue, "released": True})
    else:
        say(f"retention of {queue}'s events is back with the scripts (MAXLEN cap)")


@click.command("history")
@click.argument("queue")
@click.argument("job_id")
@floor_option
@traceback_option
@click.option("--logs", "with_logs", is_flag=True, help="Then its ctx.log lines (live, or the "
              "floor's copy once they expired).")  # fmt: skip
@url_option
@json_option
def history(
    queue: str, job_id: str, floor: str | None, full: bool, with_logs: bool, url: str | None,
    as_json: bool,
) -> None:  # fmt: skip
    """Every event of JOB_ID: the floor and the live stream merged, in order (one line
    each, or one JSON object per line with --json)."""
    path = _floor_path(queue, floor)
    q = open_queue(url, queue)
    try:
        use = path if floor or path.exists() else None
        found = q.history(job_id, floor=use)
        logs = q.job_logs(job_id, floor=use) if with_logs else []
    finally:
        q.close()
    if not found and not logs:
        raise NotFound(f"no events of {job_id} in {queue} (neither in the stream nor in the "
                       "floor)")  # fmt: skip
    for e in found:
        _print(e, as_json, full)
    for x in logs if with_logs else ():
        if as_json:
            emit_json({"log": x.line, "at_ms": x.at_ms, "attempt": x.attempt})
        else:
            when = datetime.fromtimestamp(x.at_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
            click.echo(f"{'log':<22} {when[:-3]}  #{x.attempt:<9} {x.line}")


def register(cli: click.Group) -> None:
    cli.add_command(events)
    cli.add_command(archive)
    cli.add_command(history)
