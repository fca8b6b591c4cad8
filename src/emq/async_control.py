"""``AsyncControl``: what ``AsyncQueue`` does to single jobs and schedules after they were
enqueued: repeating schedules, cancellation, results, and edits of waiting jobs.

Every change here is one script call (one indivisible step on the server), built by the
I/O-free builders of :mod:`emq.repeats`, :mod:`emq.cancel`, :mod:`emq.results` and
:mod:`emq.edits`; docs/control.md states the guarantees.

The sync twin ``Control`` (of :class:`emq.Queue`) is generated from this file.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio

from .calls import Call, QueueCore


class AsyncControl:
    """Job control of one queue; mixed into ``AsyncQueue``, which provides the client and core."""

    client: redis.asyncio.Redis
    core: QueueCore

    async def _run(self, call: Call[Any]) -> Any:  # provided by AsyncQueue
        raise NotImplementedError

    # -- repeating jobs and cron (emq.repeats) ---------------------------------------------

    # -- cancellation (emq.cancel) ---------------------------------------------------------

    # -- results and completed-job retention (emq.results) ---------------------------------

    # -- edits of a waiting job, progress (emq.edits) ---------------------------------------
