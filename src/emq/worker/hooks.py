"""How features join a held job's story: a short list of hooks per event (dramatiq's
middleware is the model), holding only the hooks that have something to do.

The events, in the order of a job's story (:mod:`.execute`):

- ``on_claimed(queue, jobs)``: a claim leased ``jobs`` (once per claim reply);
- ``on_start(job)``: its handler is about to start;
- ``on_outcome(job, outcome) -> outcome``: its attempt's outcome is decided; a hook may
  replace it (a cancelled job's is a ``fail``, whatever it was), and the next hook sees the
  replacement;
- ``before_ack(leases)``: a batch of acks is about to be sent (awaited);
- ``on_acked(batch)``: a batch of acks has landed.

The features, in the order each event calls them: the debug log of starts
(:class:`LogStarts`, with debug logging on at the run's start), the flows outbox
(:class:`Outbox`), cancels (:class:`~.cancels.Cancels`), metrics and tracing
(:class:`~.observe.Observer`, when a metrics endpoint is set or OpenTelemetry is active),
progress (:class:`~.progress.Progress`). The first two and the observer are in the lists
from the start or never; the others join when they first have work (a job whose parent is in
another queue completes, a job is cancelled, a handler reports progress), and cancels leave
again when no cancelled job is held. A worker with none of these walks empty tuples only.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from ..model.records import Claimed
from .heartbeat import Lease
from .held import Held
from .log import event
from .outcome import Ack, ChildComplete, Outcome

EVENTS = ("on_claimed", "on_start", "on_outcome", "before_ack", "on_acked")


class Hook:
    """One feature's part in the story; override only the events it needs (the others are
    never called: :class:`Hooks` lists a hook under an event only if it overrides it)."""

    def on_claimed(self, queue: str, jobs: list[Claimed]) -> None:
        """A claim of ``queue`` leased ``jobs``."""

    def on_start(self, job: Held) -> None:
        """``job``'s handler is about to start."""

    def on_outcome(self, job: Held, outcome: Outcome) -> Outcome:
        """``job``'s outcome is decided: return it, or what to send instead."""
        return outcome

    async def before_ack(self, leases: list[Lease]) -> None:
        """The acks of ``leases`` are about to be sent."""

    def on_acked(self, batch: list[Ack]) -> None:
        """The acks of ``batch`` have landed."""


class Hooks:
    """The hooks of one run, per event (an attribute named for it): a tuple of the methods of
    the joined hooks that override it, in the order the hooks were added. Changed only on the
    event loop; the story reads a tuple once per event (empty: nothing to call)."""

    def __init__(self) -> None:
        self._order: list[Hook] = []
        self._joined: set[Hook] = set()
        self.on_claimed: tuple[Callable[[str, list[Claimed]], None], ...] = ()
        self.on_start: tuple[Callable[[Held], None], ...] = ()
        self.on_outcome: tuple[Callable[[Held, Outcome], Outcome], ...] = ()
        self.before_ack: tuple[Callable[[list[Lease]], Awaitable[None]], ...] = ()
        self.on_acked: tuple[Callable[[list[Ack]], None], ...] = ()

    def add(self, hook: Hook, *, joined: bool) -> None:
        """Give ``hook`` its place in the order; ``joined``: in the lists from now on."""
        self._order.append(hook)
        if joined:
            self.join(hook)

    def join(self, hook: Hook) -> None:
        if hook not in self._joined:
            self._joined.add(hook)
            self._rebuild()

    def leave(self, hook: Hook) -> None:
        if hook in self._joined:
            self._joined.discard(hook)
            self._rebuild()

    def _rebuild(self) -> None:
        on = [h for h in self._order if h in self._joined]
        for name in EVENTS:
            base = getattr(Hook, name)
            setattr(
                self,
                name,
                tuple(getattr(h, name) for h in on if getattr(type(h), name) is not base),
            )


class LogStarts(Hook):
    """The ``run`` record (debug level) of each started job."""

    def __init__(self, log: logging.Logger) -> None:
        self._log = log

    def on_start(self, job: Held) -> None:
        c = job.claimed
        event(self._log, "debug", "job started", "run", queue=job.queue, job=c.id, name=c.name)


class Outbox(Hook):
    """A flow's child whose parent is in another queue leaves its end in its own queue's
    outbox when its completion lands; the maintenance beat delivers it. So once such a
    completion is decided, the next batch of acks to land pokes the beat (``poke``), and the
    parent hears of it in milliseconds rather than a beat (docs/flows.md). Joins the story
    when the first such child returns (:meth:`expect`) and stays for the run."""

    def __init__(self, hooks: Hooks, poke: Callable[[], None]) -> None:
        self._hooks = hooks
        self._poke = poke
        self._written = False

    def expect(self) -> None:
        """A child whose parent is in another queue returned: join the story."""
        self._hooks.join(self)

    def on_outcome(self, job: Held, outcome: Outcome) -> Outcome:
        if type(outcome) is ChildComplete and "@" in (job.claimed.parent or ""):
            self._written = True  # its parent is in another queue: deliver soon
        return outcome

    def on_acked(self, batch: list[Ack]) -> None:
        if self._written:
            self._written = False
            self._poke()
