"""The dead-letter page of a queue and its bulk actions.

- ``GET /queues/{queue}/dead?name=&contains=&since=&until=&op=``: the dead jobs grouped by
  error (:func:`emq.queue._async.deadletters.groups`), narrowed by the filter; each group offers a
  bulk redrive and a bulk purge of its jobs under the same filter (after a confirmation).
  ``op``: show that bulk move's progress (``<progress id="bulk-progress">`` and
  ``#bulk-status``, polled by ``static/app.js``; the text ends in "done" when it is).
- ``POST /queues/{queue}/dead/redrive|purge`` (CSRF-checked, refused when read-only; fields
  ``error``, ``contains``, ``name``, ``since``, ``until``; no field at all takes every dead
  job): starts the move as a background task on the server, in chunks of 200 ids
  (:mod:`emq.queue._async.deadletters`: a stop mid-way leaves each job moved or still dead; a job
  someone else moved meanwhile is skipped). Answers 303 to the page with ``?op=ID`` (or,
  asked for JSON, 202 ``{"op": ID}``).
- ``GET /bulk/{op_id}``: the move's progress as JSON (``done``, ``total``, ``moved``,
  ``skipped``, ``finished``, ``error``, ``status``).

On a dead set of more than :data:`SAMPLE` jobs the page groups a sample of that many (and
says so); a bulk move always takes every matching job. At most one move runs per queue and
:data:`MAX_RUNNING` in all; the last :data:`KEPT` moves are remembered (in this process
only).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..calls.deadletters import BulkResult, DeadFilter
from ..errors import EmqError
from ..model.checks import parse_when
from ..queue._async import deadletters as adl
from ..queue._async.queue import AsyncQueue
from .web import action_form, dash, done, render

log = logging.getLogger(__name__)
MAX_RUNNING = 4
KEPT = 32
SAMPLE = 100_000  # the page groups at most about this many dead jobs (~1.5 s)
FILTER_FIELDS = ("error", "contains", "name", "since", "until")
VERBS = {"redrive": "redriven to pending", "purge": "purged"}


@dataclass
class BulkOp:
    """One bulk move and how far it got."""

    id: str
    queue: str
    action: str
    what: str  # the filter in words
    total: int | None = None  # None until the matching jobs are counted
    done: int = 0
    moved: int = 0
    skipped: int = 0
    finished: bool = False
    error: str = ""
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    def progress(self, done: int, total: int) -> None:
        self.done, self.total = done, total

    def status(self) -> str:
        head = f"{self.action} of {self.what}"
        if self.error:
            return f"{head} stopped after {self.done:,} jobs: {self.error}"
        if self.finished:
            return (
                f"{head}: {self.moved:,} {VERBS[self.action]}, {self.skipped:,} skipped "
                "(moved by someone else meanwhile) — done"
            )
        if self.total is None:
            return f"{head}: finding the matching dead jobs…"
        return f"{head}: {self.done:,} of {self.total:,} so far…"

    def as_dict(self) -> dict[str, Any]:
        return {
            "op": self.id,
            "queue": self.queue,
            "action": self.action,
            "total": self.total,
            "done": self.done,
            "moved": self.moved,
            "skipped": self.skipped,
            "finished": self.finished,
            "error": self.error,
            "status": self.status(),
        }


def _ops(request: Request) -> dict[str, BulkOp]:
    ops: dict[str, BulkOp] | None = getattr(request.app.state, "bulk_ops", None)
    if ops is None:
        ops = request.app.state.bulk_ops = {}
    return ops


def dead_filter(form: dict[str, str]) -> DeadFilter:
    """The filter of a form or query (raises InvalidOption on a bad time)."""
    now = int(time.time() * 1000)
    return DeadFilter(
        error=form.get("error") or None,
        error_contains=form.get("contains", "").strip() or None,
        name=form.get("name", "").strip() or None,
        since_ms=parse_when(form.get("since"), now),
        until_ms=parse_when(form.get("until"), now),
    )


async def dead_page(request: Request) -> Response:
    name = request.path_params["queue"]
    q = dash(request).queue(name)
    form = {k: request.query_params.get(k, "")[:500] for k in FILTER_FIELDS}
    context: dict[str, Any] = {"queue": name, "form": form, "groups": [], "op": None}
    status = 200
    try:
        f = dead_filter({**form, "error": ""})  # the page lists every group of the filter
        context["groups"], dead = await asyncio.gather(adl.groups(q, f, sample=SAMPLE), q.counts())
        context["sampled"] = dead["dead"] > SAMPLE
    except EmqError as exc:
        context["problem"] = str(exc)
        status = 400
    context["total"] = sum(g.count for g in context["groups"])
    op = _ops(request).get(request.query_params.get("op", ""))
    if op is not None and op.queue == name:
        context["op"] = op
    return render(request, "dead.html", context, status=status)


async def _run(op: BulkOp, q: AsyncQueue, f: DeadFilter) -> None:
    try:
        if op.action == "redrive":
            result: BulkResult = await adl.redrive(q, f, progress=op.progress)
        else:
            result = await adl.purge(q, f, progress=op.progress)
        op.total, op.done = result.matched, result.matched
        op.moved, op.skipped = result.moved, result.skipped
    except Exception as exc:  # shown on the page; every job is still in one place
        log.warning("bulk %s on %s stopped: %s", op.action, op.queue, exc)
        op.error = str(exc)[:300] or type(exc).__name__
    finally:
        op.finished = True


def _start(request: Request, name: str, action: str, f: DeadFilter) -> BulkOp | str:
    """The started move, or why none was started."""
    ops = _ops(request)
    running = [o for o in ops.values() if not o.finished]
    if any(o.queue == name for o in running):
        return "a bulk move is already running on this queue: wait until it is done"
    if len(running) >= MAX_RUNNING:
        return f"{MAX_RUNNING} bulk moves are running already: wait until one is done"
    for old in [o for o in ops.values() if o.finished][: max(0, len(ops) - KEPT + 1)]:
        del ops[old.id]
    op = BulkOp(secrets.token_urlsafe(9), name, action, f.describe())
    op.task = asyncio.get_running_loop().create_task(_run(op, dash(request).queue(name), f))
    ops[op.id] = op
    return op


async def bulk_action(request: Request) -> Response:
    form = await action_form(request)
    name, action = request.path_params["queue"], request.url.path.rsplit("/", 1)[1]
    dash(request).queue(name)  # 404 for a name that is not a queue name
    back = f"/queues/{quote(name, safe='')}/dead"
    wants_json = "application/json" in request.headers.get("accept", "")
    try:
        f = dead_filter(form)
    except EmqError as exc:
        if wants_json:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return done(request, back, f"bulk {action} refused: {exc}")
    started = _start(request, name, action, f)
    if isinstance(started, str):
        if wants_json:
            return JSONResponse({"error": started}, status_code=409)
        return done(request, back, f"bulk {action} not started: {started}")
    if wants_json:
        return JSONResponse({"op": started.id, "progress": f"/bulk/{started.id}"}, 202)
    return done(request, f"{back}?op={started.id}", f"bulk {action} started: {started.what}")


async def bulk_progress(request: Request) -> Response:
    op = _ops(request).get(request.path_params["op_id"])
    if op is None:
        raise HTTPException(404, "no such bulk move (they are kept in memory, the last 32)")
    return JSONResponse(op.as_dict(), headers={"cache-control": "no-store"})
