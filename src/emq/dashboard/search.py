"""The search page: ``GET /search?queue=&q=&state=&name=&since=&until=``.

:func:`emq.archive.search.asearch` over the live rows and the archive floor of one queue, or
of every queue (at most :data:`SEARCH_QUEUES`) when ``queue`` is empty; ``q`` is a job id or
words of the payload or error text; ``since`` / ``until`` are ms, an ISO time (UTC) or an age
(``2h``).

The archive's search needs Python's ``sqlite3``, which a Python may be built without, so it is
imported when a search runs, not with the dashboard: without it this page answers 501 and
says why, and the dashboard still starts. Nothing here writes; every value shown is escaped
by the template.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from ..errors import EmqError, InvalidInput
from ..model.checks import parse_when
from ..model.ids import check_id
from ..model.keys import QueueKeys
from .web import dash, render

if TYPE_CHECKING:
    from ..archive.search import Hit, SearchQuery

SEARCH_QUEUES = 50  # an empty queue field searches at most this many queues
SEARCH_LIMIT = 50
SEARCH_FIELDS = ("queue", "q", "state", "name", "since", "until")
STATES = ("pending", "schedule", "active", "waiting", "dead", "completed", "cancelled", "removed")


@dataclass(frozen=True, slots=True)
class Found:
    """A search hit and the queue it was found in."""

    queue: str
    hit: Hit


def _query(form: dict[str, str], now_ms: int) -> SearchQuery:
    """The search query of the form (InvalidInput on bad input; ImportError without the
    archive's search, see the module doc)."""
    from ..archive.search import SearchQuery

    q = form["q"].strip()
    job_id = None
    if q:
        try:
            job_id = check_id(q)
        except InvalidInput:
            job_id = None
    return SearchQuery(
        text=None if job_id or not q else q,
        job_id=job_id,
        name=form["name"].strip() or None,
        state=form["state"] or None,
        since_ms=parse_when(form["since"], now_ms),
        until_ms=parse_when(form["until"], now_ms),
        limit=SEARCH_LIMIT,
    )


async def _search(request: Request, names: list[str], query: SearchQuery) -> list[Found]:
    from ..archive.search import asearch

    d = dash(request)

    async def one(name: str) -> list[Found]:
        q = d.queue(name)
        return [Found(name, h) for h in await asearch(q, query, floor=d.floor(name))]

    found = [f for part in await asyncio.gather(*(one(n) for n in names)) for f in part]
    found.sort(key=lambda f: (-int(f.hit.ms), f.queue, f.hit.job_id))
    return found[:SEARCH_LIMIT]


async def _holders(request: Request, names: list[str], job_id: str) -> list[str]:
    """The known queues that hold a live row for ``job_id`` or hold it packed (a pipelined
    EXISTS and HEXISTS each), so an id is found in any queue, not only in the first
    :data:`SEARCH_QUEUES`."""
    d = dash(request)
    async with d.client.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.exists(QueueKeys(name).job(job_id))
            pipe.hexists(QueueKeys(name).packed, job_id)
        found = await pipe.execute()
    pairs = zip(names, found[::2], found[1::2], strict=True)
    return [name for name, row, packed in pairs if row or packed]


async def search_page(request: Request) -> Response:
    form = {k: request.query_params.get(k, "")[:500] for k in SEARCH_FIELDS}
    names = await dash(request).queue_names()
    context: dict[str, Any] = {"form": form, "names": names, "states": STATES, "hits": None}
    asked = any(form[k] for k in SEARCH_FIELDS if k != "queue") or "q" in request.query_params
    status = 200
    if asked:
        try:
            query = _query(form, int(time.time() * 1000))
            targets = [form["queue"]] if form["queue"] else names[:SEARCH_QUEUES]
            if query.job_id and not form["queue"]:  # an id is looked up in every queue
                holders = await _holders(request, names, query.job_id)
                targets = list(dict.fromkeys(holders + targets))
            context["hits"] = await _search(request, targets, query)
            context["searched"] = targets
        except ImportError:
            context["problem"] = "Search is not available here (emq.archive.search is missing)."
            status = 501
        except EmqError as exc:
            context["problem"] = str(exc)
            status = 400
    return render(request, "search.html", context, status=status)
