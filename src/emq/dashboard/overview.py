"""The overview: ``GET /``, one row per queue on the server (docs/dashboard.md, Overview).

Each row: the jobs per location and the paused state (updated live by ``GET /events``,
:mod:`emq.dashboard.live`), the age of the oldest waiting job, and the throughput and failure
rate charts of the live sampler.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .live import SHOWN, Live, read_counts
from .web import dash, render


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


async def overview_page(request: Request) -> Response:
    request.app.state.live.start()
    d = dash(request)
    names, now_ms = await asyncio.gather(d.queue_names(), _server_ms(request))
    request.app.state.live.note_names(names)
    counts = await read_counts(d, names, oldest=True)
    queues = [_queue_summary(request, n, counts[n], now_ms) for n in names]
    return render(request, "overview.html", {"queues": queues, "shown": SHOWN})
