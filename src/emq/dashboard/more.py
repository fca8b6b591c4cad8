"""The search and workers pages, and the routes of the dead-letter and race-lab pages
(:mod:`~emq.dashboard.deadletters`, :mod:`~emq.dashboard.race`); ``create_app`` includes
:data:`routes` through its hook.

- ``GET /search?queue=&q=&state=&name=&since=&until=``: :func:`emq.archive.search.asearch` over the
  live rows and the archive floor of one queue, or of every queue (at most
  :data:`SEARCH_QUEUES`) when ``queue`` is empty; ``q`` is a job id or words of the payload
  or error text; ``since`` / ``until`` are ms, an ISO time (UTC) or an age (``2h``).
- ``GET /workers``: the live workers from the registry (:func:`emq.observe.registry.alist_workers`).

Nothing here writes; every value shown is escaped by the templates.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..errors import EmqError, InvalidInput
from ..model.checks import parse_when
from ..model.ids import check_id
from ..model.keys import QueueKeys
from . import deadletters, race
from .web import dash, render

SEARCH_QUEUES = 50  # an empty queue field searches at most this many queues
SEARCH_LIMIT = 50
SEARCH_FIELDS = ("queue", "q", "state", "name", "since", "until")
STATES = ("pending", "schedule", "active", "waiting", "dead", "completed", "cancelled", "removed")


@dataclass(frozen=True, slots=True)
class Found:
    """A search hit and the queue it was found in."""

    queue: str
    hit: Any  # emq.archive.search.Hit


def _query(form: dict[str, str], now_ms: int) -> Any:
    """The :class:`emq.archive.search.SearchQuery` of the form (InvalidInput on bad input)."""
    query_cls = import_module("emq.archive.search").SearchQuery
    q = form["q"].strip()
    job_id = None
    if q:
        try:
            job_id = check_id(q)
        except InvalidInput:
            job_id = None
    return query_cls(
        text=None if job_id or not q else q,
        job_id=job_id,
        name=form["name"].strip() or None,
        state=form["state"] or None,
        since_ms=parse_when(form["since"], now_ms),
        until_ms=parse_when(form["until"], now_ms),
        limit=SEARCH_LIMIT,
    )


async def _search(request: Request, names: list[str], query: Any) -> list[Found]:
    asearch = import_module("emq.archive.search").asearch
    d = dash(request)

    async def one(name: str) -> list[Found]:
        q = d.queue(name)
        return [Found(name, h) for h in await asearch(q, query, floor=d.floor(name))]

    found = [f for part in await asyncio.gather(*(one(n) for n in names)) for f in part]
    found.sort(key=lambda f: (-int(f.hit.ms), f.queue, f.hit.job_id))
    return found[:SEARCH_LIMIT]


async def _holders(request: Request, names: list[str], job_id: str) -> list[str]:
    """The known queues that hold a live row for ``job_id`` (one pipelined EXISTS each), so
    an id is found in any queue, not only in the first :data:`SEARCH_QUEUES`."""
    d = dash(request)
    async with d.client.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.exists(QueueKeys(name).job(job_id))
        found = await pipe.execute()
    return [name for name, n in zip(names, found, strict=True) if n]


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


async def workers_page(request: Request) -> Response:
    try:
        alist_workers = import_module("emq.observe.registry").alist_workers
    except (ImportError, AttributeError):
        context: dict[str, Any] = {"workers": [], "problem": "No worker registry in this emq."}
        return render(request, "workers.html", context, status=501)
    workers = await alist_workers(dash(request).client)
    workers = sorted(workers, key=lambda w: (w.host, w.pid, w.id))
    context = {
        "workers": workers,
        "running": sum(w.running for w in workers),
        "wall_ms": int(time.time() * 1000),
    }
    return render(request, "workers.html", context)


routes: list[BaseRoute] = [
    Route("/search", search_page),
    Route("/workers", workers_page),
    *deadletters.ROUTES,
    *race.ROUTES,
]
