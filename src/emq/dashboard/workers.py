"""The workers page: ``GET /workers``, the live workers from the registry they keep on the
server (:func:`emq.observe.registry.alist_workers`), sorted by host, pid and id.

Nothing here writes; every value shown is escaped by the template.
"""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response

from ..observe.registry import alist_workers
from .web import dash, render


async def workers_page(request: Request) -> Response:
    workers = await alist_workers(dash(request).client)
    workers = sorted(workers, key=lambda w: (w.host, w.pid, w.id))
    context = {
        "workers": workers,
        "running": sum(w.running for w in workers),
        "wall_ms": int(time.time() * 1000),
    }
    return render(request, "workers.html", context)
