"""Job states and the transition graph: the one place docs, CLI and tests read them from.

A job's location set is the truth; the row's ``state`` mirrors it. ``completed`` is not a
location: completing a job deletes its row and counts it in ``metrics``.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    PENDING = "pending"
    ACTIVE = "active"
    SCHEDULED = "scheduled"
    DEAD = "dead"
    COMPLETED = "completed"
    WAITING = "waiting"


class Location(StrEnum):
    """The sorted sets a live job id can be a member of (exactly one at a time)."""

    PENDING = "pending"
    ACTIVE = "active"
    SCHEDULE = "schedule"
    DEAD = "dead"
    WAITING = "waiting"  # a flow's parent, waiting on its children (docs/flows.md)


STATE_OF_LOCATION: dict[Location, JobState] = {
    Location.PENDING: JobState.PENDING,
    Location.ACTIVE: JobState.ACTIVE,
    Location.SCHEDULE: JobState.SCHEDULED,
    Location.DEAD: JobState.DEAD,
    Location.WAITING: JobState.WAITING,
}

LISTED: tuple[str, ...] = ("pending", "active", "schedule", "waiting", "dead", "completed")
"""Where a queue's jobs are listed from (``Queue.jobs``, ``emq jobs``, the dashboard's tabs,
in this order): every :class:`Location` and ``completed``, the kept completed jobs."""

LISTING: dict[str, str] = {
    **{str(place): str(place) for place in LISTED},
    **{str(STATE_OF_LOCATION[loc]): str(loc) for loc in Location},
}
"""The one vocabulary of a listing, for the command line and the dashboard alike: each place
of :data:`LISTED` by its own name or by its jobs' state (``scheduled`` lists ``schedule``),
mapped to the place's name."""


def listing(word: str) -> str | None:
    """The place of :data:`LISTED` that ``word`` names (see :data:`LISTING`), else None."""
    return LISTING.get(word)


# transition -> (from states, to states). Each entry is one Lua script in emq/lua/.
TRANSITIONS: dict[str, tuple[frozenset[JobState], frozenset[JobState]]] = {
    "enqueue": (frozenset(), frozenset({JobState.PENDING, JobState.SCHEDULED})),
    # a flow (docs/flows.md): its parents wait, its leaves are pending; a parent leaves
    # waiting in the step that finishes its last child (complete, fail, sweep_stalled,
    # cancel, remove)
    "enqueue_flow": (frozenset(), frozenset({JobState.WAITING, JobState.PENDING})),
    # a flow's parent told of its children in other queues (the outbox, docs/flows.md)
    "deliver_flow": (frozenset({JobState.WAITING}), frozenset({JobState.PENDING, JobState.DEAD})),
    "claim": (frozenset({JobState.PENDING, JobState.SCHEDULED}), frozenset({JobState.ACTIVE})),
    "extend": (frozenset({JobState.ACTIVE}), frozenset({JobState.ACTIVE})),
    "complete": (frozenset({JobState.ACTIVE}), frozenset({JobState.COMPLETED})),
    "fail": (frozenset({JobState.ACTIVE}), frozenset({JobState.SCHEDULED, JobState.DEAD})),
    "delay": (frozenset({JobState.ACTIVE}), frozenset({JobState.PENDING, JobState.SCHEDULED})),
    "promote": (frozenset({JobState.SCHEDULED}), frozenset({JobState.PENDING})),
    "sweep_stalled": (frozenset({JobState.ACTIVE}), frozenset({JobState.PENDING, JobState.DEAD})),
    "redrive": (frozenset({JobState.DEAD}), frozenset({JobState.PENDING, JobState.WAITING})),
    "remove": (
        frozenset(
            {JobState.PENDING, JobState.ACTIVE, JobState.SCHEDULED, JobState.DEAD, JobState.WAITING}
        ),
        frozenset(),
    ),
    "drain": (frozenset({JobState.PENDING, JobState.SCHEDULED}), frozenset()),
    # edits of one waiting job (docs/control.md): refused unless pending or scheduled
    "promote_job": (frozenset({JobState.SCHEDULED}), frozenset({JobState.PENDING})),
    "reschedule": (
        frozenset({JobState.PENDING, JobState.SCHEDULED}),
        frozenset({JobState.PENDING, JobState.SCHEDULED}),
    ),
    "set_priority": (
        frozenset({JobState.PENDING, JobState.SCHEDULED}),
        frozenset({JobState.PENDING, JobState.SCHEDULED}),
    ),
    "update_payload": (
        frozenset({JobState.PENDING, JobState.SCHEDULED}),
        frozenset({JobState.PENDING, JobState.SCHEDULED}),
    ),
    "progress": (frozenset({JobState.ACTIVE}), frozenset({JobState.ACTIVE})),
    # a repeating schedule's due tick makes a new waiting job (docs/control.md)
    "fire_repeats": (frozenset(), frozenset({JobState.PENDING})),
    # waiting or scheduled -> dead (cancelled); active stays active with a cancel requested
    # (its worker's fail, or the sweep, then makes it dead: see fail and sweep_stalled)
    "cancel": (
        frozenset({JobState.PENDING, JobState.SCHEDULED, JobState.ACTIVE, JobState.WAITING}),
        frozenset({JobState.DEAD, JobState.ACTIVE}),
    ),
}
