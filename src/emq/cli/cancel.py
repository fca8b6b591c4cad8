"""``emq cancel QUEUE ID``: cancel one job (docs/control.md, Cancellation).

The answer says what happened: ``cancelled`` (it will never run: it is dead, cancelled),
``requested`` (it is running: its worker stops it on its next heartbeat), ``dead`` or
``completed`` (it had already ended: unchanged). An unknown id, a bad id or a bad reason is
one error line and exit code 2, with nothing written.
"""

from __future__ import annotations

import click

from ..calls.control import Cancel
from .common import emit_json, json_option, open_routed, say, url_option

MEANING = {
    Cancel.CANCELLED: "cancelled: it will never run (it is dead, cancelled; redrive runs it)",
    Cancel.REQUESTED: "cancel requested: it is running; its worker stops it on its next "
    "heartbeat and it ends dead, cancelled",
    Cancel.DEAD: "not cancelled: it was already dead",
    Cancel.COMPLETED: "not cancelled: it had already completed",
}


@click.command()
@click.argument("queue")
@click.argument("job_id", metavar="ID")
@click.option("--reason", default="", help="Why (kept on the job, at most 1,000 characters).")
@url_option
@json_option
def cancel(queue: str, job_id: str, reason: str, url: str | None, as_json: bool) -> None:
    """Cancel job ID on QUEUE: a waiting or scheduled job never runs, a running one is stopped
    by its worker."""
    with open_routed(url, queue) as q:
        answer = q.cancel(job_id, reason)
    if as_json:
        emit_json({"id": job_id, "answer": answer.value})
    else:
        say(job_id, " ", MEANING[answer])


def register(group: click.Group) -> None:
    group.add_command(cancel)
