"""The phase of a held job (emq.worker.phase), no server: every legal arrow is walked through
its method, every other one is refused, and the methods are exactly the arrows of the graph."""

from __future__ import annotations

import itertools

import pytest

from emq.worker.heartbeat import Lease
from emq.worker.phase import ARROWS, METHODS, UNDECIDED, Phase, Phased, PhaseError


def at(phase: Phase) -> Lease:
    lease = Lease("q", "job-1", 7)
    lease.phase = phase
    return lease


def test_a_lease_starts_ready() -> None:
    assert Lease("q", "job-1", 7).phase is Phase.READY


def test_the_methods_are_exactly_the_arrows_of_the_graph() -> None:
    assert set(ARROWS) == set(Phase)
    arrows = {(a, b) for a, targets in ARROWS.items() for b in targets}
    assert set(METHODS.values()) == arrows
    assert len(METHODS) == len(arrows)  # one method per arrow
    for name in METHODS:
        assert callable(getattr(Phased, name))


@pytest.mark.parametrize(("method", "arrow"), sorted(METHODS.items()))
def test_every_legal_arrow_moves_the_phase(method: str, arrow: tuple[Phase, Phase]) -> None:
    source, target = arrow
    job = at(source)
    getattr(job, method)()
    assert job.phase is target


@pytest.mark.parametrize(
    ("method", "phase"),
    [(m, p) for m, p in itertools.product(sorted(METHODS), Phase) if METHODS[m][0] is not p],
)
def test_every_illegal_arrow_is_refused_and_leaves_the_phase(method: str, phase: Phase) -> None:
    job = at(phase)
    with pytest.raises(PhaseError, match=rf"q/job-1 cannot go {phase} -> {METHODS[method][1]}"):
        getattr(job, method)()
    assert job.phase is phase


def test_every_path_ends_in_a_final_phase() -> None:
    """From READY every walk of the arrows ends in ACKED, DROPPED or GIVEN_BACK, and the
    UNDECIDED phases are never entered again once left."""
    finals = {p for p, targets in ARROWS.items() if not targets}
    assert finals == {Phase.ACKED, Phase.DROPPED, Phase.GIVEN_BACK}
    paths = [[Phase.READY]]
    while paths:
        path = paths.pop()
        targets = ARROWS[path[-1]]
        if not targets:
            assert path[-1] in finals
        for nxt in targets:
            assert nxt not in path  # no cycle
            left = any(p in UNDECIDED for p in path) and path[-1] not in UNDECIDED
            assert not (left and nxt in UNDECIDED)
            paths.append([*path, nxt])


def test_a_refusal_names_what_is_legal() -> None:
    with pytest.raises(PhaseError, match="from acked: none, it is final"):
        at(Phase.ACKED).acked()
    with pytest.raises(PhaseError, match="from running: decided, dropped"):
        at(Phase.RUNNING).start()
