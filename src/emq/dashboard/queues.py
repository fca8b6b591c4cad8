"""A queue's page and the actions on a queue (docs/dashboard.md, Queue).

- ``GET /queues/{queue}?location=pending&page=1``: its counts (live), limits, lanes and
  repeating jobs, and the jobs of one location, :data:`PAGE_SIZE` a page (at most
  :data:`MAX_PAGE` pages; "page N of M", :func:`page_count`), with when each was created
  and, by location, when it runs, its lease ends, it died or it completed (server clock, and
  how long ago or how soon).
- ``POST /queues/{queue}/pause|resume|drain``: through
  :func:`~emq.dashboard.web.action_form` (403 before anything changes when read-only or
  without the session's CSRF token), then a 303 back to the queue's page with a flash
  message saying what happened, or why nothing did.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..errors import EmqError
from ..model.lanes import DEFAULT_LANE
from ..model.states import LISTED, listing
from ..queue._async.queue import AsyncQueue
from ..server.discovery import ahas_keys, ais_known
from .jobs import server_ms
from .live import SHOWN
from .web import action_form, age, dash, done, render

PAGE_SIZE = 50
MAX_PAGE = 1_000  # a listing reads its set from the start: deeper, use search


def _page_number(text: str | None) -> int:
    try:
        return max(1, min(int(text or 1), MAX_PAGE))
    except ValueError:
        return 1


def page_count(total: int, page: int, has_next: bool) -> int:
    """How many pages a listing of ``total`` jobs has, at least 1, at most :data:`MAX_PAGE`;
    never fewer than the page shown, plus one when the read found a next one (the size and
    the page are two reads: jobs can arrive in between)."""
    pages = max(1, -(-total // PAGE_SIZE))
    if has_next:
        pages = max(pages, page + 1)
    return min(pages, MAX_PAGE)


async def _location_size(q: AsyncQueue, location: str, counts: dict[str, int]) -> int:
    """How many jobs ``location`` lists: its set's size (``counts()``), or for
    ``completed`` the kept completed jobs (``counts()["completed"]`` is the lifetime count)."""
    if location == "completed":
        return int(await q.client.zcard(q.core.keys.completed))
    return counts[location]


def shown_setting(name: str, value: Any) -> str:
    """A stored queue setting as the queue page shows it (docs/control.md, Queue settings)."""
    if name == "keep_completed":
        return "none" if value is None else f"{value[1]} jobs for {age(value[0])}"
    if name == "result_ttl_ms":
        return age(value) if value else "no results kept"
    if name == "log_ttl_ms":
        return age(value) if value else "logs not kept"
    return str(value)


async def _existing(request: Request, name: str) -> AsyncQueue:
    """The queue ``name``; 404 for a name with no keys that is not among the known queues (a
    typo's page would show an empty queue, and its Pause write keys for a queue nobody sees)."""
    d = dash(request)
    q = d.queue(name)
    if not (await ais_known(d.client, name) or await ahas_keys(d.client, name)):
        raise HTTPException(404, "no such queue")
    return q


async def queue_page(request: Request) -> Response:
    request.app.state.live.start()
    name = request.path_params["queue"]
    q = await _existing(request, name)
    location = listing(request.query_params.get("location", "pending"))
    if location is None:  # the words of `emq jobs` (docs/cli.md): `scheduled` or `schedule`
        raise HTTPException(404, "no such location")
    page = _page_number(request.query_params.get("page"))
    offset = (page - 1) * PAGE_SIZE
    stored = asyncio.ensure_future(q.stored_settings())  # alongside the six reads below
    counts, paused, lanes, limits, jobs, repeats = await asyncio.gather(
        q.counts(),
        q.is_paused(),
        q.lanes(),
        q.limits(),
        q.jobs(location, offset, PAGE_SIZE + 1),
        q.repeats(),
    )
    settings = await stored
    now_ms = await server_ms(q)  # the jobs' times are shown as ages from it
    has_next = len(jobs) > PAGE_SIZE
    total = await _location_size(q, location, counts)
    context = {
        "queue": name,
        "counts": counts,
        "paused": paused,
        "lanes": lanes if any(lane.name != DEFAULT_LANE for lane in lanes) else [],
        "limits": limits,
        "location": location,
        "locations": LISTED,
        "jobs": jobs[:PAGE_SIZE],
        "page": page,
        "has_next": has_next,
        "pages": page_count(total, page, has_next),
        "total": total,
        "repeats": repeats,
        "settings": [(k, shown_setting(k, v)) for k, v in settings.items()],
        "shown": SHOWN,
        "now_ms": now_ms,
    }
    return render(request, "queue.html", context)


async def queue_action(request: Request) -> Response:
    await action_form(request)
    name, action = request.path_params["queue"], request.url.path.rsplit("/", 1)[1]
    q = await _existing(request, name)  # nothing is written for a queue that is not there
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
