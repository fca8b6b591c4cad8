"""A job's page and the actions on a job (docs/dashboard.md, Job).

- ``GET /queues/{queue}/jobs/{job_id}``: the job's row (its times on the server's clock,
  each with how long ago or how soon: created, runs at, claimed, lease ends, completed,
  died), payload, error and result; its timeline (``history()``: the archive floor and the
  live tail, or the live tail only when the floor is not here, saying why; a run of progress
  events one line, :mod:`emq.dashboard.timeline`); its flow parent
  and children; its ``ctx.log`` lines (the newest :data:`LOG_LINES_SHOWN`, escaped, each cut
  to 2,000 characters; shown for a completed job whose row is gone too, and from the floor
  once they expired); the actions its
  state allows (:data:`JOB_ACTIONS`).
- ``POST /queues/{queue}/jobs/{job_id}/redrive|cancel|promote|remove``: through
  :func:`~emq.dashboard.web.action_form` (403 before anything changes when read-only or
  without the session's CSRF token), then a 303 back to the job's page with a flash message
  saying what happened, or why nothing did.
"""

from __future__ import annotations

import asyncio

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..errors import EmqError, InvalidInput
from ..model.events import Event
from ..model.ids import check_id
from ..model.records import Job
from ..queue._async.queue import AsyncQueue
from .timeline import collapse
from .web import action_form, dash, done, render

LOG_LINES_SHOWN = 500  # a job's newest log lines on its page (it keeps at most 1,000)

# the actions each state allows on the job page (emq.model.states.TRANSITIONS)
JOB_ACTIONS: dict[str, tuple[str, ...]] = {
    "pending": ("cancel", "remove"),
    "scheduled": ("promote", "cancel", "remove"),
    "active": ("cancel", "remove"),
    "waiting": ("cancel", "remove"),
    "dead": ("redrive", "remove"),
}


def _parent_link(job: Job | None, queue: str) -> tuple[str, str] | None:
    """(queue, id) of a flow child's parent (``<id>@<queue>`` when in another queue)."""
    parent = job.fields.get("parent") if job else None
    if not parent:
        return None
    pid, _, pqueue = parent.partition("@")
    return (pqueue or queue, pid)


async def _timeline(request: Request, q: AsyncQueue, job_id: str) -> tuple[list[Event], str]:
    try:
        return await q.history(job_id, floor=dash(request).floor(q.name)), ""
    except EmqError as exc:  # archived but no floor here: the live tail only
        return [e async for e in q.events() if e.job == job_id], str(exc)


async def server_ms(q: AsyncQueue) -> int:
    """The server's clock (ms): a page shows every time of a job on it, ``now_ms`` too."""
    seconds, micros = await q.client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def job_page(request: Request) -> Response:
    name = request.path_params["queue"]
    q = dash(request).queue(name)
    try:
        job_id = check_id(request.path_params["job_id"])
    except InvalidInput:
        raise HTTPException(404, "no such job") from None
    job, (timeline, note), children, logs, now_ms = await asyncio.gather(
        q.job(job_id), _timeline(request, q, job_id), q.children(job_id),
        q.job_logs(job_id, floor=dash(request).floor(q.name)), server_ms(q),
    )  # fmt: skip
    if job is None and not timeline and not logs:
        raise HTTPException(404, "no such job")
    context = {
        "queue": name,
        "job_id": job_id,
        "job": job,
        "timeline": collapse(timeline),
        "timeline_note": note,
        "actions": JOB_ACTIONS.get(job.state, ()) if job else (),
        "parent": _parent_link(job, name),
        "children": children,
        "logs": logs[-LOG_LINES_SHOWN:],
        "logs_unlisted": max(0, len(logs) - LOG_LINES_SHOWN),
        "now_ms": now_ms,
    }
    return render(request, "job.html", context)


async def job_action(request: Request) -> Response:
    await action_form(request)
    name, action = request.path_params["queue"], request.url.path.rsplit("/", 1)[1]
    q = dash(request).queue(name)
    try:
        job_id = check_id(request.path_params["job_id"])
    except InvalidInput:
        raise HTTPException(404, "no such job") from None
    back = f"/queues/{name}/jobs/{job_id}"
    try:
        if action == "redrive":
            message = "redriven to pending" if await q.redrive(job_id) else "was not dead"
        elif action == "cancel":
            message = f"cancel: {await q.cancel(job_id, 'cancelled from the dashboard')}"
        elif action == "promote":
            message = "promoted to pending" if await q.promote(job_id) else "was pending already"
        elif action == "remove":
            message = f"removed (it was {await q.remove(job_id)})"
        else:
            raise HTTPException(404, "no such action")
    except EmqError as exc:
        message = f"{action} refused: {exc}"
    return done(request, back, f"{job_id} {message}")
