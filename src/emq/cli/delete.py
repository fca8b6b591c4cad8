"""Deleting from the command line: ``obliterate`` (a whole queue), ``remove`` (one job) and
``forget`` (a name left among the known queues).

``emq obliterate QUEUE`` asks before it deletes anything: on a terminal it shows the queue's
counts and waits for a yes; off a terminal (a script, a pipe, cron) it is refused unless
``--yes`` is given, so nothing deletes a queue by accident. A queue with leased jobs is refused
unless ``--force`` (their workers' acks then answer that the job is gone), exit 3; a name that
is neither a known queue nor holds any key (a typo) is refused, exit 2, with nothing written.
Once the queue's keys are gone its name leaves the known queues (``Queue.obliterate``), so
``emq stats``, the dashboard and ``/metrics`` stop listing it.
"""

from __future__ import annotations

import sys

import click

from ..errors import InvalidOption, JobNotFound, WrongState
from ..model.keys import check_queue_name
from ..server.clients import close_client
from .common import (
    connect,
    emit_json,
    json_option,
    open_routed,
    require_queue,
    resolve_url,
    say,
    url_option,
)
from .exits import StillLive
from .guard import declined


def _summary(counts: dict[str, int]) -> str:
    parts = [f"{counts.get(k, 0)} {k}" for k in ("pending", "schedule", "active", "dead")]
    extra = [f"{counts[k]} {k}" for k in ("waiting", "completed") if counts.get(k)]
    return ", ".join(parts + extra)


@click.command()
@click.argument("queue")
@click.option("--yes", "-y", is_flag=True, help="Do not ask (needed when stdin is no terminal).")
@click.option("--force", is_flag=True, help="Delete leased jobs too (their workers' acks fail).")
@url_option
@json_option
def obliterate(queue: str, yes: bool, force: bool, url: str | None, as_json: bool) -> None:
    """Delete QUEUE: every job in every state, its events, counters, limits and schedules,
    then forget its name (emq stats, the dashboard and /metrics stop listing it).

    \b
    Asks first on a terminal; off a terminal it is refused without --yes. A queue with
    leased jobs is refused unless --force (exit 3); a queue that is not there, exit 2."""
    with open_routed(url, queue) as q:
        require_queue(q.client, queue, "nothing deleted")
        if not yes and not sys.stdin.isatty():
            raise InvalidOption(
                f"obliterate deletes every job of {queue!r} and cannot be undone; stdin is not "
                "a terminal to ask on: pass --yes to confirm"
            )
        if not yes:
            counts = q.counts()
            asked = f"Delete queue {queue!r} ({_summary(counts)}) and everything it holds?"
            if not click.confirm(asked, err=True):
                declined(click.get_current_context(), f"queue {queue!r} was not deleted")
        try:
            deleted = q.obliterate(force=force)
        except WrongState:  # the script's refusal, said once in the command line's words
            raise StillLive(
                f"{queue} has leased jobs: stop its workers first, or pass --force to delete "
                "them too (their workers' acks then fail); nothing deleted"
            ) from None
    if as_json:
        emit_json({"queue": queue, "deleted": deleted, "obliterated": True})
    else:
        say(f"{queue}: obliterated, {deleted} job(s) deleted")


@click.command()
@click.argument("queue")
@click.argument("job_id", metavar="ID")
@url_option
@json_option
def remove(queue: str, job_id: str, url: str | None, as_json: bool) -> None:
    """Delete job ID of QUEUE wherever it is (waiting, scheduled, leased, dead or a kept
    completed job); an unknown id is one error line, exit 2.

    \b
    A leased job's worker learns it at its next heartbeat or ack (LeaseLost); a flow's
    child counts as removed for its parent (docs: flows.md)."""
    with open_routed(url, queue) as q:
        try:
            where = q.remove(job_id)
        except JobNotFound:
            raise JobNotFound(
                f"no job {job_id} in {queue} (a completed job is deleted unless it was kept)"
            ) from None
    if as_json:
        emit_json({"id": job_id, "removed": True, "from": where})
    else:
        say(job_id, f" removed (it was {where})")


@click.command()
@click.argument("queues", metavar="QUEUE...", nargs=-1, required=True)
@url_option
@json_option
def forget(queues: tuple[str, ...], url: str | None, as_json: bool) -> None:
    """Remove QUEUE from the known queues (emq stats, the dashboard, /metrics); refused for a
    queue that still has jobs, events, counters or settings (obliterate it first).

    \b
    A worker that still serves QUEUE lists it again on its next beat."""
    from ..queue._sync.queue import Queue

    for name in queues:
        check_queue_name(name)  # every name checked before any is forgotten
    client = connect(resolve_url(url))
    try:
        refused = [name for name in queues if not Queue(client, name).forget()]
    finally:
        close_client(client)
    if refused:
        raise StillLive(
            f"not forgotten: {', '.join(refused)} still has keys (jobs, events, counters or "
            "settings): obliterate it first (emq obliterate QUEUE)"
            + (f"; forgotten: {', '.join(q for q in queues if q not in refused)}"
               if len(refused) < len(queues) else "")
        )  # fmt: skip
    if as_json:
        emit_json({"forgotten": list(queues)})
    else:
        say(f"forgotten: {', '.join(queues)}")


def register(group: click.Group) -> None:
    for command in (obliterate, remove, forget):
        group.add_command(command)
