# Generated from emq/queue/_async/settings.py by scripts/unasync.py: edit that file instead.
"""``Settings``: the settings stored with a queue (:mod:`emq.calls.settings`), read
by every process that serves it, stored by the first one opened with explicit options, and
changed for all with :meth:`Settings.configure`; and the flags and limits every claim
reads (pause, resume, set_limits). Mixed into ``Queue``."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import redis

from ...calls.call import Arg, Call
from ...calls.jobs import QueueCore
from ...calls.settings import (
    REFRESH_S,
    check_changes,
    from_fields,
    settings_call,
    to_fields,
    upgrade,
)
from ...errors import ServerRefused
from ...lua import scripts
from ...model.config import QueueOptions
from ...model.lanes import Rate
from ...server import durability

T = TypeVar("T")


class Settings:
    """The stored settings of one queue; mixed into ``Queue``, which provides the rest."""

    client: redis.Redis
    core: QueueCore
    _guard: durability.Guard
    _asked: QueueOptions | None
    _settled_at: float

    if TYPE_CHECKING:  # provided by ShellBase (emq.queue.shared)

        def _adopt(self, fields: dict[str, str], asked: QueueOptions | None) -> bool: ...

        def _groups(self, jobs: Iterable[Any]) -> list[list[Arg]]: ...

        def _unread(self, exc: ServerRefused) -> None: ...

        def _run(self, call: Call[T]) -> T: ...  # provided by Queue

    def settle(self) -> QueueOptions:
        """Read the queue's stored settings and use them from now on (docs/control.md, Queue
        settings); a queue that has none gets this process's, if it was opened with
        ``options``. Every call does this by itself, at most every few seconds; returns the
        options in use."""
        if not self._guard.ok:  # a server this process cannot use gets nothing written
            self._guard.check(self.client)
        fields = to_fields(self._asked) if self._asked is not None else {}
        call = settings_call(self.core.keys, "init", fields)
        try:
            reply = scripts.run(self.client, call.script, call.keys, call.args)
        except ServerRefused as exc:  # an ACL without them, a full server: its own options
            self._unread(exc)
            return self.core.options
        if self._adopt(call.decode(reply), self._asked):  # a new durability level, say
            self._guard = durability.Guard(self.core.options, self.core.keys.metrics)
        return self.core.options

    def stored_settings(self) -> dict[str, Any]:
        """The settings stored with the queue (those it has; empty if none), what ``emq
        stats`` and the dashboard show. Writes nothing."""
        call = settings_call(self.core.keys, "init", {})
        reply = scripts.run(self.client, call.script, call.keys, call.args)
        return from_fields(call.decode(reply))[0]

    def configure(self, **changes: Any) -> QueueOptions:
        """Change the queue's stored settings (any of ``events_maxlen``, ``max_attempts``,
        ``durability``, ``durability_replicas``, ``result_ttl_ms``, ``keep_completed``) for
        every process that serves it: this one at once, the others within a few seconds.
        Checked as ``QueueOptions`` checks them, before anything is written."""
        call = settings_call(self.core.keys, "set", check_changes(changes))
        reply = scripts.run(self.client, call.script, call.keys, call.args)
        if self._adopt(call.decode(reply), None):
            self._guard = durability.Guard(self.core.options, self.core.keys.metrics)
        return self.core.options

    def _settled_groups(self, jobs: list[Any], groups: list[list[Arg]]) -> list[list[Arg]]:
        """``groups`` of ``jobs``, built again if the settings read now change them (another
        default ``max_attempts``, say)."""
        if time.monotonic() - self._settled_at > REFRESH_S:
            before = self.core.options
            if self.settle() != before:
                return self._groups(jobs)
        return groups

    def upgrade(self) -> tuple[int, int]:
        """Move the queue to this emq's newest keyspace layout, in one step, and return (the
        layout before, the layout after): (1, 3) or (2, 3) the first time, (3, 3) after. Every
        process that serves the queue must be of an emq that knows the new layout first: an
        older one refuses the queue from then on (docs/keyspace.md, Layout versions; ``emq upgrade``
        checks the worker registry for them). A newer layout is refused (``LayoutTooNew``)."""
        call = upgrade(self.core.keys)
        reply = scripts.run(self.client, call.script, call.keys, call.args)
        return call.decode(reply)

    def _fresh(self) -> None:
        if time.monotonic() - self._settled_at > REFRESH_S:
            self.settle()

    def pause(self, lane: str | None = None) -> bool:
        """Stop claims of the queue, or of one ``lane``; False if it was already paused."""
        return self._run(self.core.pause(lane))

    def resume(self, lane: str | None = None) -> bool:
        """Let claims of the queue (or ``lane``) go on; False if it was not paused."""
        return self._run(self.core.resume(lane))

    def set_limits(
        self,
        *,
        concurrency: int | None = None,
        rate: Rate | None = None,
        lane: str | None = None,
        lane_concurrency: int | None = None,
        lane_rate: Rate | None = None,
        weight: int | None = None,
    ) -> None:
        """Set every limit of the queue (or, with ``lane``, of that lane) at once, fleet-wide:
        ``concurrency`` (leased at once), ``rate`` (``(max, per_ms)``: at most ``max`` claims
        in any ``per_ms`` of server time), ``weight`` (a lane's share of turns), and for the
        queue the defaults of every lane without its own (``lane_concurrency``,
        ``lane_rate``). A limit given as 0 or None is cleared (docs/lanes.md)."""
        limits = dict(concurrency=concurrency, rate=rate, lane=lane, weight=weight)
        limits.update(lane_concurrency=lane_concurrency, lane_rate=lane_rate)
        self._run(self.core.set_limits(**limits))
