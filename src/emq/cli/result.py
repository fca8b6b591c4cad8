"""``emq result QUEUE ID [--wait S]``: print a job's kept result (docs/control.md, Results).

Exit codes: 0 the result was printed (JSON text, one line); 1 the job ended dead or was
cancelled (its error is printed); 3 it is still live after ``--wait`` seconds (0 by default:
no wait). An unknown id, a completed job whose result was not kept (or has expired) and bad
input are one error line and exit code 2, as for every command.
"""

from __future__ import annotations

import json

import click

from ..errors import JobCancelled, JobDead, ResultTimeout
from .common import emit_json, json_option, one_line, open_routed, say, url_option
from .exits import LIVE, NO


@click.command()
@click.argument("queue")
@click.argument("job_id", metavar="ID")
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=0.0,
    metavar="S",
    help="Wait up to S seconds for the job to end (default 0: answer now).",
)
@url_option
@json_option
def result(queue: str, job_id: str, wait_s: float, url: str | None, as_json: bool) -> None:
    """Print the result of job ID on QUEUE (kept when the queue or its handler sets
    result_ttl_ms), waiting up to --wait seconds for it to end."""
    with open_routed(url, queue) as q:
        try:
            value = q.result(job_id, timeout_s=wait_s)
        except JobDead as exc:
            state = "cancelled" if isinstance(exc, JobCancelled) else "dead"
            if as_json:
                emit_json({"id": job_id, "state": state, "error": exc.error})
            else:
                say(job_id, f" ended {state}: ", one_line(exc.error))
            raise SystemExit(NO) from None
        except ResultTimeout as exc:
            if as_json:
                emit_json({"id": job_id, "state": "live", "waited_s": wait_s})
            else:
                say(str(exc))
            raise SystemExit(LIVE) from None
    if as_json:
        emit_json({"id": job_id, "state": "completed", "result": value})
    else:
        click.echo(json.dumps(value, ensure_ascii=False))


def register(group: click.Group) -> None:
    group.add_command(result)
