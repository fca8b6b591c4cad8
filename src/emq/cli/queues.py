"""Commands on one queue: enqueue, sweep, stats, jobs, job, dead, pause, resume, drain."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..errors import InvalidPayload
from ..model.config import MAX_STALLED
from ..model.records import STEP_FIELD, Job
from ..model.states import LISTING, STATE_OF_LOCATION, Location
from ..server.clients import close_client
from ..server.discovery import queue_names
from .common import (
    connect,
    emit_json,
    json_option,
    one_line,
    open_queue,
    open_routed,
    resolve_url,
    row,
    say,
    show,
    table,
    url_option,
)
from .exits import NotFound
from .lanes import stats_limits
from .times import iso, relative, when

if TYPE_CHECKING:
    from rich.table import Table

    from ..queue._sync.partitions import PartitionedQueue
    from ..queue._sync.queue import Queue


def _job_dict(job: Job) -> dict[str, Any]:
    d = asdict(job)
    d.pop("fields")
    d["worker"] = job.worker
    d["steps"] = [asdict(s) for s in job.steps]
    return d


# the time a listing of a state shows beside each job's age: its header, the job's time
DUE: dict[str, tuple[str, Callable[[Job], int | None]]] = {
    "scheduled": ("runs at", lambda j: j.run_at_ms),
    "active": ("lease ends", lambda j: j.lease_deadline_ms),
    "dead": ("died", lambda j: j.died_at),
    "completed": ("completed", lambda j: j.completed_at),
}


def server_now(q: Queue | PartitionedQueue) -> int:
    """The server's clock, ms: every time a job shows is on it."""
    seconds, micros = q.client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _jobs_table(title: str, state: str, jobs: list[Job], now: int) -> Table:
    due = DUE.get(state)
    heads = ["id", "name", "state", "attempts", "stalled", "created", *(due[:1] if due else ())]
    t = table(title, *heads, "last_error")
    t.columns[0].no_wrap = True  # an id is copied whole: the other columns give way first
    for j in jobs:
        at = [when(due[1](j), now)] if due else []
        row(t, j.id, j.name, j.state, j.attempts, j.stalled, relative(j.created_at, now), *at,
            one_line(j.last_error or ""))  # fmt: skip
    return t


# what `emq job` calls the worker in a job's row: the holder of an active lease, else the
# worker of its latest attempt
_HOLDER = {True: "held by", False: "last worker"}


def _job_times(job: Job) -> list[tuple[str, int | None]]:
    """What ``emq job`` shows of a job's times, in its life's order (None: not applicable)."""
    return [
        ("created", job.created_at),
        ("runs at", job.run_at_ms),
        ("claimed", job.claimed_at),
        ("lease ends", job.lease_deadline_ms),
        ("progress at", job.progress_at),
        ("completed", job.completed_at),
        ("died", job.died_at),
    ]


def read_payload(arg: str) -> Any:
    """PAYLOAD as JSON text, ``-`` (read stdin) or ``@PATH`` (read a file); UTF-8."""
    source = "PAYLOAD"
    try:
        if arg == "-":
            source = "stdin"
            text = sys.stdin.buffer.read().decode("utf-8")
        elif arg.startswith("@"):
            source = f"payload file {arg[1:]!r}"
            text = Path(arg[1:]).read_bytes().decode("utf-8")
        else:
            text = arg
    except OSError as exc:
        raise InvalidPayload(f"cannot read {source}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InvalidPayload(f"{source} is not UTF-8 text: {exc.reason}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidPayload(f"{source} is not valid JSON: {exc}") from None


@click.command()
@click.argument("queue")
@click.argument("name")
@click.argument("payload", required=False, default="null")
@click.option("--delay-ms", type=int, default=0, help="Run no earlier than this many ms from now.")
@click.option("--priority", type=int, default=0, help="Lower runs first (default 0).")
@click.option("--max-attempts", type=int, default=None, help="Attempts before dead (default 3).")
@click.option("--key", default=None, help="Dedup key: one live job per key.")
@click.option("--lane", default=None, help="The job's lane (default: the default lane).")
@click.option("--lifo", is_flag=True, help="Ahead of the jobs waiting at its priority.")
@url_option
@json_option
def enqueue(
    queue: str, name: str, payload: str, delay_ms: int, priority: int,
    max_attempts: int | None, key: str | None, lane: str | None, lifo: bool, url: str | None,
    as_json: bool,
) -> None:  # fmt: skip
    """Enqueue job NAME with a JSON PAYLOAD on QUEUE.

    PAYLOAD is JSON text (default null), - to read it from stdin, or @PATH to read a file."""
    data = read_payload(payload)
    with open_routed(url, queue) as q:
        job_id = q.enqueue(
            name, data, delay_ms=delay_ms, priority=priority, max_attempts=max_attempts, key=key,
            lane=lane, lifo=lifo,
        )  # fmt: skip
    if as_json:
        emit_json({"id": job_id, "created": job_id.created})
    else:
        say(job_id, "" if job_id.created else " (already there: not re-created)")


@click.command()
@click.argument("queue")
@click.option(
    "--max-stalled",
    type=int,
    default=MAX_STALLED,
    show_default=True,
    help="Stall count at which a job is dead-lettered; 0 = never.",
)
@click.option("--limit", type=int, default=100, show_default=True, help="Leases per script call.")
@url_option
@json_option
def sweep(queue: str, max_stalled: int, limit: int, url: str | None, as_json: bool) -> None:
    """Recover expired leases on QUEUE (to pending, or dead past --max-stalled)."""
    with open_queue(url, queue) as q:
        r = q.sweep_all(max_stalled=max_stalled, limit=limit)
    if as_json:
        emit_json({"recovered": r.recovered, "dead": r.dead})
    else:
        say(f"recovered {len(r.recovered)}, dead-lettered {len(r.dead)}")


@click.command()
@click.argument("queue", required=False)
@click.option(
    "--partitions", "show_parts", is_flag=True, help="A row per partition of a partitioned queue."
)
@url_option
@json_option
def stats(queue: str | None, show_parts: bool, url: str | None, as_json: bool) -> None:
    """Counts per location for QUEUE, or for every queue on the server, and the limits of
    each queue that has any (docs: lanes.md).

    A partitioned queue is one row, its partitions' counts summed (docs: partitions.md)."""
    from .partitions import fold, partitioned_stats

    resolved = resolve_url(url)
    client = connect(resolved)
    try:
        names, parted = fold(client, [queue] if queue else queue_names(client), parts=not queue)
        result: dict[str, dict[str, Any]] = {}
        notes: dict[str, str] = {}  # the limits line of each queue that has one
        for name in names:
            if name in parted:
                result[name], rows, note = partitioned_stats(client, name, show_parts)
                result.update(rows)
            else:
                with open_queue(resolved, name) as q:
                    limits, note = stats_limits(q)
                    result[name] = {**q.counts(), "limits": limits}
                    result[name]["settings"] = q.stored_settings()
            if note:
                notes[name] = note
    finally:
        close_client(client)
    if as_json:
        emit_json(result[queue] if queue and not show_parts else result)
        return
    cols = ["pending", "active", "schedule", "waiting", "dead", "completed", "failed", "recovered"]
    t = table("emq queues", "queue")
    for c in cols:
        t.add_column(c, justify="right")
    for name, counts in result.items():
        row(t, name, *(counts[c] for c in cols))
    show(t)
    for name, note in notes.items():
        say(name, " limits: ", note)
    for name, counts in result.items():
        if counts.get("settings"):  # stored with the queue: what every process uses
            say(name, " settings: ", " ".join(f"{k}={v}" for k, v in counts["settings"].items()))
    for name, counts in result.items():
        if counts["outbox"]:  # a flow's messages to other queues, not yet delivered
            say(name, f" outbox: {counts['outbox']} flow messages wait for a worker's beat")


@click.command()
@click.argument("queue")
@click.argument("location", metavar="STATE", type=click.Choice(list(LISTING)))
@click.option("--offset", type=int, default=0, show_default=True, help="Skip this many first.")
@click.option("--limit", type=int, default=50, show_default=True, help="List at most this many.")
@url_option
@json_option
def jobs(
    queue: str, location: str, offset: int, limit: int, url: str | None, as_json: bool
) -> None:
    """List QUEUE's jobs in STATE (pending, active, scheduled or dead), in the set's order;
    `completed`: the kept completed jobs (keep_completed), newest first.

    \b
    `schedule`, the name of the scheduled jobs' set, is accepted too."""
    where = LISTING[location]
    with open_routed(url, queue) as q:
        found = q.jobs(where, offset, limit)
        now = 0 if as_json else server_now(q)
    if as_json:
        emit_json({"jobs": [_job_dict(j) for j in found]})
    else:
        state = where if where == "completed" else STATE_OF_LOCATION[Location(where)].value
        show(_jobs_table(f"{queue} / {state}", state, found, now))


@click.command()
@click.argument("queue")
@click.argument("job_id")
@click.option("--logs", "with_logs", is_flag=True,
              help="Then its ctx.log lines, oldest first (kept after it ended).")  # fmt: skip
@url_option
@json_option
def job(queue: str, job_id: str, with_logs: bool, url: str | None, as_json: bool) -> None:
    """Show one job: its id, state and times (server clock, UTC), then its row."""
    with open_routed(url, queue) as q:
        found = q.job(job_id)
        logs = [asdict(x) for x in q.job_logs(job_id)] if with_logs else None
        now = 0 if as_json or found is None else server_now(q)
    if found is None:
        if not logs:  # no row, and no lines either: nothing to show (exit 2, as remove)
            raise NotFound(
                f"no job {job_id} in {queue} (a completed job is deleted unless "
                "it was kept)" + ("; and no log lines of it" if with_logs else "")
            )
        if as_json:  # the lines asked for were found: not an error
            emit_json({"id": job_id, "found": False, "logs": logs})
        else:
            say(job_id, ": no such job (completed jobs are deleted)")
            _say_logs(logs)
        return
    if as_json:
        emit_json({**_job_dict(found), **({} if logs is None else {"logs": logs})})
        return
    say(("id", "bold"), ": ", found.id)
    say(("state", "bold"), ": ", found.state)
    if found.worker:  # emq workers lists it while it runs
        say((_HOLDER[found.state == "active"], "bold"), ": ", found.worker)
    for label, ms in _job_times(found):
        if ms is not None:
            say((label, "bold"), ": ", when(ms, now))
    _say_steps(found, now)
    say(("row", "bold"), ":")
    for k, v in sorted(found.fields.items()):
        if not k.startswith(STEP_FIELD):  # shown above, decoded
            say("  ", (k, "bold"), ": ", v)
    _say_logs(logs)


def _say_steps(found: Job, now: int) -> None:
    """The durable steps ``emq job`` shows, in recorded order, each with its time and its
    result's JSON (docs/steps.md); nothing for a job that recorded none."""
    steps = found.steps
    if steps:
        say(("steps", "bold"), f": {len(steps)} recorded")
    for s in steps:
        value = json.dumps(s.result, default=repr)
        say("  ", (when(s.at_ms, now), "dim"), " ", (s.name, "bold"), ": ", one_line(value))


def _say_logs(logs: list[dict[str, Any]] | None) -> None:
    """The lines of ``emq job --logs`` (none asked: nothing)."""
    if logs is None:
        return
    say(("logs", "bold"), f": {len(logs)} line(s)" if logs else ": none (or expired)")
    for x in logs:
        say("  ", (iso(x["at_ms"]), "dim"), f" #{x['attempt']} ", x["line"])


@click.command()
@click.argument("queue")
@click.argument("action", type=click.Choice(["list", "redrive", "purge"]))
@click.argument("ids", nargs=-1)
@click.option("--keep-counters", is_flag=True, help="redrive: keep attempts and stalled.")
@click.option("--limit", type=int, default=50, show_default=True, help="list: how many.")
@url_option
@json_option
def dead(
    queue: str, action: str, ids: tuple[str, ...], keep_counters: bool, limit: int,
    url: str | None, as_json: bool,
) -> None:  # fmt: skip
    """Dead-letter set of QUEUE: list, redrive (IDS or all), purge (IDS or all)."""
    with open_routed(url, queue) as q:
        if action == "list":
            found = q.jobs("dead", 0, limit)
            if as_json:
                emit_json({"jobs": [_job_dict(j) for j in found]})
            else:
                show(_jobs_table(f"{queue} / dead", "dead", found, server_now(q)))
            return
        if action == "redrive":
            n = (
                len(q.redrive_many(list(ids), keep_counters=keep_counters))
                if ids
                else q.redrive_all(keep_counters=keep_counters)
            )
        else:  # each id deleted only while still dead: one redriven meanwhile is left alone
            from ..queue._sync import deadletters
            from ..queue._sync.partitions import PartitionedQueue

            parts = q.partitions() if isinstance(q, PartitionedQueue) else [q]
            n = sum(deadletters.purge(p, only=list(ids) or None).moved for p in parts)
    if as_json:
        emit_json({action: n})
    else:
        say(f"{action}: {n} job(s)")


def _flag_command(name: str, doc: str) -> click.Command:
    @click.command(name=name, help=doc)
    @click.argument("queue")
    @click.option("--lane", default=None, metavar="L", help=f"{name.title()} only this lane.")
    @url_option
    @json_option
    def command(queue: str, lane: str | None, url: str | None, as_json: bool) -> None:
        with open_queue(url, queue) as q:
            changed = q.pause(lane) if name == "pause" else q.resume(lane)
        if as_json:
            emit_json({"queue": queue, "lane": lane, "paused": name == "pause", "changed": changed})
        else:
            target = queue if lane is None else f"{queue} lane {lane}"
            say(f"{target}: {name}d", "" if changed else f" (was already {name}d)")

    return command


@click.command()
@click.argument("queue")
@url_option
@json_option
def drain(queue: str, url: str | None, as_json: bool) -> None:
    """Delete every waiting job (pending and scheduled) of QUEUE."""
    with open_queue(url, queue) as q:
        n = q.drain()
    if as_json:
        emit_json({"drained": n})
    else:
        say(f"drained {n} job(s)")


def register(group: click.Group) -> None:
    for command in (enqueue, sweep, stats, jobs, job, dead, drain):
        group.add_command(command)
    group.add_command(
        _flag_command("pause", "Stop claims on QUEUE, or of one --lane (checked inside the claim).")
    )
    group.add_command(_flag_command("resume", "Let claims on QUEUE (or of one --lane) go on."))
