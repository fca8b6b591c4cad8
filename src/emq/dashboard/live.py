"""Live counts: one sampler per app, and ``GET /events`` (server-sent events).

The sampler reads the counts (and paused flag) of the queues that any open ``/events``
connection watches once per :data:`INTERVAL_S`, for all of them together; connections only
wait for the next reading, so N open pages cost the server what one does. Every
:data:`HISTORY_EVERY` ticks it also reads every queue and keeps the lifetime counters
(completed, failed) for :data:`HISTORY_S`, from which the overview draws throughput and
failure rate. An event is sent to a connection only when its queues' counts changed; a closed
connection ends its generator (and its subscription) at once.

Each event is ``event: counts`` with ``data: {"<queue>": {"pending": N, ..., "paused": 0|1}}``:
the first one holds every watched queue, each later one the queues whose counts changed.
A connection watching every queue (the overview) also gets ``event: charts`` each time the
chart samples move (every :data:`HISTORY_EVERY` ticks), with :meth:`Live.charts` per queue
(up to :data:`MAX_CHARTS` queues).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections import Counter, deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import StreamingResponse

from ..calls.call import COUNT_FIELDS, decode_counts
from ..model.ids import minted_at_ms
from ..model.states import Location
from ..server.clients import is_cluster_client

if TYPE_CHECKING:
    from .web import Dash

log = logging.getLogger("emq.dashboard")

INTERVAL_S = 1.0
HISTORY_EVERY = 5  # ticks between readings of every queue for the charts
HISTORY_S = 600  # the charts' window
NAMES_EVERY = 10  # ticks between re-reading the queue names
KEEPALIVE_S = 15.0
SHOWN = ("pending", "active", "schedule", "waiting", "dead", "completed")
ALL = "*"
CHUNK = 100  # queues per round trip of the sampler
MAX_WATCHED = 200  # queues one /events connection may name
MAX_CHARTS = 200  # above this many queues the overview's charts are drawn on load only
OLDEST_SCAN = 50  # pending ids looked at for the oldest waiting job (the first in order)


@dataclass(frozen=True, slots=True)
class Sample:
    ms: int
    completed: int
    failed: int


class Live:
    """The app's sampler and its subscribers (module doc)."""

    def __init__(self, dash: Dash) -> None:
        self.dash = dash
        self.counts: dict[str, dict[str, int]] = {}
        self.version = 0
        self.names: list[str] = []
        self.history: dict[str, deque[Sample]] = {}
        self._watched: Counter[str] = Counter()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._tick = 0
        self.charts_version = 0
        self.closed = False

    def start(self) -> None:
        """Start the sampler once (from the serving loop); later calls do nothing."""
        if self._task is None and not self.closed:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        self.closed = True
        self._changed.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        failing = False  # logged once per outage, not once a second
        while not self.closed:
            try:
                await self.sample()
            except Exception as exc:  # a server hiccup must not end the live page
                if not failing:
                    log.warning("dashboard: cannot read the counts (%s); retrying", exc)
                failing = True
            else:
                if failing:
                    log.warning("dashboard: reading the counts again")
                failing = False
            await asyncio.sleep(INTERVAL_S)

    async def sample(self) -> None:
        """One tick: read the watched queues (every queue when it is time for the charts)."""
        tick, self._tick = self._tick, self._tick + 1
        if tick % NAMES_EVERY == 0 or not self.names:
            self.note_names(await self.dash.queue_names(), replace=True)
        charts = tick % HISTORY_EVERY == 0
        if charts or ALL in self._watched:
            wanted = set(self.names) | set(self._watched)
        else:
            wanted = set(self._watched)
        wanted.discard(ALL)
        if not wanted:
            return
        readings = await read_counts(self.dash, sorted(wanted))
        now = int(time.time() * 1000)
        for name, counts in readings.items():
            self.counts[name] = counts
            if charts:
                h = self.history.setdefault(name, deque(maxlen=HISTORY_S // HISTORY_EVERY + 1))
                h.append(Sample(now, counts["completed"], counts["failed"]))
        self.charts_version += int(charts)
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    def note_names(self, names: list[str], *, replace: bool = False) -> None:
        """Queue names a page has just read (so its rows update live at once), or the
        sampler's own reading of every name (``replace``)."""
        self.names = sorted(set(names) if replace else set(self.names) | set(names))

    async def stream(self, queues: list[str]) -> AsyncIterator[str]:
        """The SSE text of one connection watching ``queues`` (empty: every queue)."""
        watch = queues or [ALL]
        self._watched.update(watch)
        self.start()
        wanted = set(queues)
        sent: dict[str, dict[str, int]] | None = None
        charted = self.charts_version  # the page drew the charts as they are now
        try:
            yield "retry: 2000\n\n"
            while not self.closed:
                changed = self._changed
                if sent is None and self.version == 0:
                    with contextlib.suppress(Exception):  # the sampler's loop logs and retries
                        await self.sample()  # the first connection: read now, not in a second
                names = wanted or set(self.names)
                shown = {
                    n: {k: c[k] for k in (*SHOWN, "paused")}
                    for n, c in self.counts.items()
                    if n in names
                }
                news = (
                    shown if sent is None else {n: c for n, c in shown.items() if sent.get(n) != c}
                )
                if sent is None or news:
                    sent = shown
                    yield f"event: counts\ndata: {json.dumps(news, sort_keys=True)}\n\n"
                if not wanted and charted != self.charts_version and len(names) <= MAX_CHARTS:
                    charted = self.charts_version
                    lines = {n: self.charts(n) for n in sorted(names) if n in self.history}
                    yield f"event: charts\ndata: {json.dumps(lines, ensure_ascii=False)}\n\n"
                try:
                    await asyncio.wait_for(changed.wait(), KEEPALIVE_S)
                except TimeoutError:
                    yield ": keepalive\n\n"
        finally:
            self._watched.subtract(watch)
            self._watched += Counter()  # drop the names no connection watches any more

    def charts(self, name: str) -> dict[str, str]:
        """The overview's two charts of ``name``: the latest figure as text, the points of
        each line (see :meth:`rates`), each drawn to its own top, and that top as its scale
        (``through_max``, ``failing_max``: "max 12.5/s", "max 4%"; empty while collecting)."""
        through, failing = self.rates(name)
        return {
            "through": f"{through[-1]:.1f}/s" if through else "collecting…",
            "failing": f"{100 * failing[-1]:.0f}%" if failing else "collecting…",
            "through_points": spark(through),
            "failing_points": spark(failing),
            "through_max": f"max {max(through):.1f}/s" if through else "",
            "failing_max": f"max {100 * max(failing):.0f}%" if failing else "",
        }

    def rates(self, name: str) -> tuple[list[float], list[float]]:
        """Throughput (completed per second) and failure rate (failed / (completed +
        failed), 0..1) per sampling interval over the window, oldest first."""
        h = list(self.history.get(name, ()))
        through: list[float] = []
        failing: list[float] = []
        for a, b in itertools.pairwise(h):
            dt = max(1, b.ms - a.ms) / 1000
            done, failed = max(0, b.completed - a.completed), max(0, b.failed - a.failed)
            through.append(done / dt)
            failing.append(failed / (done + failed) if done + failed else 0.0)
        return through, failing


async def read_counts(
    dash: Dash, names: list[str], *, oldest: bool = False
) -> dict[str, dict[str, int]]:
    """``counts()`` plus ``paused`` (0 or 1) of each queue, :data:`CHUNK` queues per round
    trip, each chunk read at one instant (one MULTI), ``pending`` with the packed jobs; a
    queue in lane mode then reads its lanes for ``pending``, as ``counts()`` does. With
    ``oldest``, ``oldest_ms`` is when the oldest of the first :data:`OLDEST_SCAN` waiting
    jobs in claim order was minted (0: none waits); a queue with packed jobs reads them
    after the MULTI, merged as ``Queue.jobs`` merges them."""
    out: dict[str, dict[str, int]] = {}
    width = len(Location) + 4 + int(oldest)
    step = 1 if is_cluster_client(dash.client) else CHUNK  # a MULTI holds one slot on a cluster
    for start in range(0, len(names), step):
        chunk = names[start : start + step]
        async with dash.client.pipeline(transaction=True) as p:
            for name in chunk:
                k = dash.queue(name).core.keys
                for loc in Location:
                    p.zcard(k.location(loc.value))
                p.hmget(k.metrics, list(COUNT_FIELDS))
                p.hmget(k.meta, ["lanes", "paused"])
                p.hlen(k.outbox)
                p.hlen(k.packed)
                if oldest:
                    p.zrange(k.pending, 0, OLDEST_SCAN - 1)
            replies = await p.execute()
        for i, name in enumerate(chunk):
            part = replies[i * width : (i + 1) * width]
            sizes = part[: len(Location)]
            metrics, (lanes, paused), outbox, packed, *ids = part[len(Location) :]
            counts = decode_counts(sizes, metrics, outbox)
            counts["pending"] += int(packed)
            q = dash.queue(name)
            if lanes == "1":
                counts = await q.counts()
            if oldest and (lanes == "1" or packed):  # merged in claim order, as Queue.jobs does
                ids = [await q._pending_ids(0, OLDEST_SCAN, None)]
            out[name] = {**counts, "paused": int(paused == "1")}
            if oldest:
                out[name]["oldest_ms"] = min(map(minted_at_ms, ids[0]), default=0)
    return out


def spark(values: list[float], width: int = 120, height: int = 28, top: float | None = None) -> str:
    """The ``points`` of an SVG polyline drawing ``values`` in a ``width`` x ``height`` box
    (numbers only, so it is safe in an attribute)."""
    if not values:
        return ""
    values = values * 2 if len(values) == 1 else values  # one reading: a level line
    most = top if top is not None else max(max(values), 1e-9)
    step = width / max(1, len(values) - 1)
    return " ".join(
        f"{i * step:.1f},{height - 1 - (height - 2) * min(v, most) / most:.1f}"
        for i, v in enumerate(values)
    )


async def events(request: Request) -> StreamingResponse:
    """``GET /events?queue=A&queue=B``: counts of those queues (all without ``queue``)."""
    live: Live = request.app.state.live
    queues = [q for q in request.query_params.getlist("queue") if q]
    if len(queues) > MAX_WATCHED:
        raise HTTPException(400, f"watch at most {MAX_WATCHED} queues (none: every queue)")
    for name in queues:
        request.app.state.dash.queue(name)  # 404 for a bad name
    headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
    return StreamingResponse(live.stream(queues), media_type="text/event-stream", headers=headers)
