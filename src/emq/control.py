"""``Control``: what ``Queue`` does to single jobs and schedules after they were
enqueued: repeating schedules, cancellation, results, and edits of waiting jobs.

Every change here is one script call (one indivisible step on the server), built by the
I/O-free builders of :mod:`emq.repeats`, :mod:`emq.cancel`, :mod:`emq.results` and
:mod:`emq.edits`; docs/control.md states the guarantees.

Generated from ``async_control.py`` by ``scripts/unasync.py``: edit that file, then run
the script.
"""

from __future__ import annotations

from typing import Any

import redis

from .calls import Call, QueueCore


class Control:
    """Job control of one queue; mixed into ``Queue``, which provides the client and core."""

    client: redis.Redis
    core: QueueCore

    def _run(self, call: Call[Any]) -> Any:  # provided by Queue
        raise NotImplementedError

    # -- repeating jobs and cron (emq.repeats) ---------------------------------------------

    # -- cancellation (emq.cancel) ---------------------------------------------------------

    # -- results and completed-job retention (emq.results) ---------------------------------

    # -- edits of a waiting job, progress (emq.edits) ---------------------------------------
