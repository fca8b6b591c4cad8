"""Schedules: the order in which actors take their steps.

A schedule is a string of ``ACTOR.step`` tokens, e.g. ``"A.detect B.detect A.probe B.probe
A.remove A.requeue B.remove B.requeue"``. Running a token runs that actor's commands up to
and including the named step (steps it skipped over run first, in its own order); a token
for an actor that has already finished is a no-op, which is how an actor whose probe said
"not stalled" simply has nothing left to do. Actors the schedule leaves unfinished run to
their end afterwards, in the order they were declared.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from ..errors import InvalidOption
from .forms import WORKER_STEPS, Mode, sweep_steps

ACTOR_NAME = re.compile(r"[A-Z][A-Z0-9]{0,7}")


class ScheduleError(InvalidOption):
    """A schedule names an actor or step that does not exist, or a step an actor has passed."""


@dataclass(frozen=True, slots=True)
class ActorSpec:
    """An actor in a run: a ``sweep`` (whose steps depend on the mode) or a ``worker`` with
    the steps it takes (``claim``, ``lapse``)."""

    name: str
    role: Literal["sweep", "worker"]
    worker_steps: tuple[str, ...] = ("claim",)

    def __post_init__(self) -> None:
        if not ACTOR_NAME.fullmatch(self.name):
            raise ScheduleError(f"actor name {self.name!r} must be a capital letter and digits")
        if self.role == "worker" and not set(self.worker_steps) <= set(WORKER_STEPS):
            raise ScheduleError(f"a worker's steps are {', '.join(WORKER_STEPS)}")

    def steps(self, mode: Mode) -> tuple[str, ...]:
        return sweep_steps(mode) if self.role == "sweep" else self.worker_steps

    @property
    def title(self) -> str:
        return f"{self.role} {self.name}"


@dataclass(frozen=True, slots=True)
class Token:
    actor: str
    step: str

    def __str__(self) -> str:
        return f"{self.actor}.{self.step}"


@dataclass(frozen=True, slots=True)
class Schedule:
    tokens: tuple[Token, ...]

    @classmethod
    def parse(cls, text: str) -> Schedule:
        tokens = []
        for word in text.split():
            actor, dot, step = word.partition(".")
            if not dot or not actor or not step:
                raise ScheduleError(f"schedule token {word!r} is not ACTOR.step")
            tokens.append(Token(actor, step))
        return cls(tuple(tokens))

    def __str__(self) -> str:
        return " ".join(str(t) for t in self.tokens)

    def check(self, actors: Sequence[ActorSpec], mode: Mode) -> None:
        """Raise ScheduleError unless every token names a declared actor and one of its steps."""
        by_name = {a.name: a for a in actors}
        if len(by_name) != len(actors):
            raise ScheduleError("actor names must be unique")
        for token in self.tokens:
            spec = by_name.get(token.actor)
            if spec is None:
                raise ScheduleError(
                    f"{token}: no actor {token.actor!r} (actors: {', '.join(by_name)})"
                )
            if token.step not in spec.steps(mode):
                raise ScheduleError(
                    f"{token}: in {mode} mode {spec.title} has the steps "
                    + ", ".join(spec.steps(mode))
                )


def merges(sequences: dict[str, tuple[str, ...]]) -> Iterator[Schedule]:
    """Every interleaving of the actors' step sequences (each actor's own order kept).

    There are ``(n1 + n2 + ...)! / (n1! n2! ...)`` of them; two naive sweeps of six steps give
    924, and with a one-step worker 12,012.
    """
    names = list(sequences)
    left = {name: 0 for name in names}
    total = sum(len(s) for s in sequences.values())
    order: list[Token] = []

    def walk() -> Iterator[Schedule]:
        if len(order) == total:
            yield Schedule(tuple(order))
            return
        for name in names:
            i = left[name]
            if i < len(sequences[name]):
                order.append(Token(name, sequences[name][i]))
                left[name] = i + 1
                yield from walk()
                left[name] = i
                order.pop()

    return walk()
