"""The overview, queue and job pages, and the actions on a queue or a job.

Every action is a POST through :func:`~emq.dashboard.web.action_form` (403 before anything
changes when read-only or without the session's CSRF token) and ends in a 303 back to its
page with a flash message saying what happened, or why nothing did.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import EmqError, InvalidInput
from ..model.events import Event
from ..model.ids import check_id
from ..model.lanes import DEFAULT_LANE
from ..model.records import Job
from ..queue._async.queue import AsyncQueue
from .live import SHOWN, Live, read_counts
from .web import action_form, dash, done, render

LOCATIONS = ("pending", "active", "schedule", "waiting", "dead", "completed")
PAGE_SIZE = 50
MAX_PAGE = 1_000  # a listing reads its set from the start: deeper, use search
QUEUE_ACTIONS = ("pause", "resume", "drain")
# the actions each state allows on the job page (emq.model.states.TRANSITIONS)
JOB_ACTIONS: dict[str, tuple[str, ...]] = {
    "pending": ("cancel", "remove"),
    "scheduled": ("promote", "cancel", "remove"),
    "active": ("cancel", "remove"),
    "waiting": ("cancel", "remove"),
    "dead": ("redrive", "remove"),
}


async def _server_ms(request: Request) -> int:
    seconds, micros = await dash(request).client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _queue_summary(request: Request, name: str, counts: dict[str, int], now_ms: int) -> Any:
    live: Live = request.app.state.live
    oldest = counts["oldest_ms"]
    return {
        "name": name,
        "counts": counts,
        "paused": bool(counts["paused"]),
        "oldest_ms": max(0, now_ms - oldest) if oldest else None,
        "charts": live.charts(name),
    }


async def overview(request: Request) -> Response:
    request.app.state.live.start()
    d = dash(request)
    names, now_ms = await asyncio.gather(d.queue_names(), _server_ms(request))
    request.app.state.live.note_names(names)
    counts = await read_counts(d, names, oldest=True)
    queues = [_queue_summary(request, n, counts[n], now_ms) for n in names]
    return render(request, "overview.html", {"queues": queues, "shown": SHOWN})


def _page_number(text: str | None) -> int:
    try:
        return max(1, min(int(text or 1), MAX_PAGE))
    except ValueError:
        return 1


async def queue_page(request: Request) -> Response:
    request.app.state.live.start()
    name = request.path_params["queue"]
    q = dash(request).queue(name)
    location = request.query_params.get("location", "pending")
    if location not in LOCATIONS:
        raise HTTPException(404, "no such location")
    page = _page_number(request.query_params.get("page"))
    offset = (page - 1) * PAGE_SIZE
    counts, paused, lanes, limits, jobs, repeats = await asyncio.gather(
        q.counts(),
        q.is_paused(),
        q.lanes(),
        q.limits(),
        q.jobs(location, offset, PAGE_SIZE + 1),
        q.repeats(),
    )
    context = {
        "queue": name,
        "counts": counts,
        "paused": paused,
        "lanes": lanes if any(lane.name != DEFAULT_LANE for lane in lanes) else [],
        "limits": limits,
        "location": location,
        "locations": LOCATIONS,
        "jobs": jobs[:PAGE_SIZE],
        "page": page,
        "has_next": len(jobs) > PAGE_SIZE,
        "repeats": repeats,
        "shown": SHOWN,
    }
    return render(request, "queue.html", context)


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


async def job_page(request: Request) -> Response:
    name = request.path_params["queue"]
    q = dash(request).queue(name)
    try:
        job_id = check_id(request.path_params["job_id"])
    except InvalidInput:
        raise HTTPException(404, "no such job") from None
    job, (timeline, note), children = await asyncio.gather(
        q.job(job_id), _timeline(request, q, job_id), q.children(job_id)
    )
    if job is None and not timeline:
        raise HTTPException(404, "no such job")
    context = {
        "queue": name,
        "job_id": job_id,
        "job": job,
        "timeline": timeline,
        "timeline_note": note,
        "actions": JOB_ACTIONS.get(job.state, ()) if job else (),
        "parent": _parent_link(job, name),
        "children": children,
    }
    return render(request, "job.html", context)


async def queue_action(request: Request) -> Response:
    await action_form(request)
    name, action = request.path_params["queue"], request.url.path.rsplit("/", 1)[1]
    q = dash(request).queue(name)
    back = f"/queues/{name}"
    try:
        if action == "pause":
            message = "paused" if await q.pause() else "was already paused"
        elif action == "resume":
            message = "resumed" if await q.resume() else "was not paused"
        elif action == "drain":
            message = f"drained: {await q.drain()} waiting jobs deleted"
        else:
            raise HTTPException(404, "no such action")
    except EmqError as exc:
        message = f"{action} refused: {exc}"
    return done(request, back, f"{name} {message}")


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


ROUTES = [
    Route("/", overview),
    Route("/queues/{queue}", queue_page),
    Route("/queues/{queue}/jobs/{job_id}", job_page),
    *(Route(f"/queues/{{queue}}/{a}", queue_action, methods=["POST"]) for a in QUEUE_ACTIONS),
    *(
        Route(f"/queues/{{queue}}/jobs/{{job_id}}/{a}", job_action, methods=["POST"])
        for a in ("redrive", "cancel", "promote", "remove")
    ),
]
