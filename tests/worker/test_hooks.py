"""The hook lists of a held job's story (emq.worker.hooks), no server: an event lists only the
joined hooks that override it, in the order they were added, and joining or leaving again
changes nothing."""

from __future__ import annotations

from typing import Any

from emq.worker.hooks import EVENTS, Hook, Hooks


class Starts(Hook):
    def on_start(self, job: Any) -> None: ...


class Outcomes(Hook):
    def on_outcome(self, job: Any, outcome: Any) -> Any:
        return outcome

    def on_acked(self, batch: Any) -> None: ...


class Both(Starts, Outcomes):
    pass


def test_an_event_lists_only_the_joined_hooks_that_override_it_in_their_order() -> None:
    hooks = Hooks()
    assert all(getattr(hooks, name) == () for name in EVENTS)
    starts, outcomes, both = Starts(), Outcomes(), Both()
    hooks.add(outcomes, joined=False)
    hooks.add(starts, joined=True)
    hooks.add(both, joined=True)
    assert hooks.on_start == (starts.on_start, both.on_start)
    assert hooks.on_outcome == (both.on_outcome,)
    assert hooks.on_claimed == hooks.before_ack == ()
    hooks.join(outcomes)
    hooks.join(outcomes)
    assert hooks.on_outcome == (outcomes.on_outcome, both.on_outcome)  # the order of add
    assert hooks.on_acked == (outcomes.on_acked, both.on_acked)
    hooks.leave(both)
    hooks.leave(both)
    assert hooks.on_start == (starts.on_start,)
    assert hooks.on_outcome == (outcomes.on_outcome,)
    hooks.leave(starts)
    hooks.leave(outcomes)
    assert all(getattr(hooks, name) == () for name in EVENTS)
