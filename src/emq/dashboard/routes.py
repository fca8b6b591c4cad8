"""Every route of the dashboard, in one table: the dashboard's map.

One line per route: its path, its handler (``module.function``, each module named for the page
it serves) and, for an action, its method; every other route answers GET (and HEAD). The
pages are described in docs/dashboard.md (Pages; Search, dead letters, workers and the race
lab in detail). The security middleware (:class:`emq.dashboard.security.Guard`) runs before
every route: loopback or the token, CSRF, read-only.
"""

from __future__ import annotations

from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from . import deadletters, jobs, live, login, monitoring, overview, queues, race, search, workers
from .web import HERE

POST = ["POST"]

# Matched in this order. No two paths overlap (a {queue}, {job_id} or {op_id} is one path
# segment; /login's GET and POST are one route each), so the order is for the reader: the
# overview, a queue, its jobs, its dead letters, the other pages of the navigation, then
# what the pages load and what machines ask.
ROUTES: list[BaseRoute] = [
    Route("/", overview.overview_page),
    Route("/queues/{queue}", queues.queue_page),
    Route("/queues/{queue}/pause", queues.queue_action, methods=POST),
    Route("/queues/{queue}/resume", queues.queue_action, methods=POST),
    Route("/queues/{queue}/drain", queues.queue_action, methods=POST),
    Route("/queues/{queue}/jobs/{job_id}", jobs.job_page),
    Route("/queues/{queue}/jobs/{job_id}/redrive", jobs.job_action, methods=POST),
    Route("/queues/{queue}/jobs/{job_id}/cancel", jobs.job_action, methods=POST),
    Route("/queues/{queue}/jobs/{job_id}/promote", jobs.job_action, methods=POST),
    Route("/queues/{queue}/jobs/{job_id}/remove", jobs.job_action, methods=POST),
    Route("/queues/{queue}/dead", deadletters.dead_page),
    Route("/queues/{queue}/dead/redrive", deadletters.bulk_action, methods=POST),
    Route("/queues/{queue}/dead/purge", deadletters.bulk_action, methods=POST),
    Route("/bulk/{op_id}", deadletters.bulk_progress),
    Route("/search", search.search_page),
    Route("/workers", workers.workers_page),
    Route("/race", race.race_page),
    Route("/race/run", race.race_run, methods=POST),
    Route("/events", live.events),
    Route("/login", login.login_form),
    Route("/login", login.login, methods=POST),
    Route("/healthz", monitoring.healthz),
    Route("/metrics", monitoring.metrics),
    Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
]
