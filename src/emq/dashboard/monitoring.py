"""What machines ask the dashboard: ``GET /healthz`` (``ok`` when the queue server answers;
open without the token, for a load balancer) and ``GET /metrics`` (the Prometheus text of
every queue, for a scraper with ``Authorization: Bearer <token>``)."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from .web import Dash


async def healthz(request: Request) -> Response:
    await request.app.state.dash.client.ping()
    return PlainTextResponse("ok\n")


async def metrics(request: Request) -> Response:
    """Prometheus text of every queue (emq.observe.prometheus.render_queue_metrics, in a thread)."""
    from ..observe.prometheus import render_queue_metrics

    dash: Dash = request.app.state.dash
    body, content_type = await asyncio.to_thread(render_queue_metrics, dash.url, None)
    return Response(body, media_type=content_type)
