"""Lanes and limits without I/O: lane names, the calls of ``set_limits``, ``pause``/``resume``
of a lane and ``lanes()``, and what their replies mean (docs/lanes.md).

A lane is a fair-share group inside one queue. Claim serves the lanes that have waiting jobs
by stride scheduling (a lane of weight 3 gets three turns for every one of a lane of weight 1),
and never past a limit: concurrency counts what is really leased (the queue's ``active``, a
lane's ``lane:<L>:active``), a rate allows at most ``max`` claims in any ``per_ms`` window of
server time. Every limit lives on the server, so the whole fleet shares it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import EmqError, InvalidName, InvalidOption
from .checks import check_int, shown

LANE_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")
DEFAULT_LANE = "default"
MAX_WEIGHT = 1_000
MAX_LIMIT = 1_000_000
MAX_RATE_WINDOW_MS = 86_400_000  # one day
Rate = tuple[int, int]  # (max claims, per_ms)


def check_lane(lane: object) -> str:
    """The lane's name as the keyspace holds it: ``''`` for the default lane (``None`` or
    ``"default"``), else a name of 1-128 characters from ``A-Z a-z 0-9 . _ -``."""
    if lane is None or lane == DEFAULT_LANE:
        return ""
    if not isinstance(lane, str) or not LANE_NAME.fullmatch(lane):
        raise InvalidName(
            f"lane name {shown(lane)} is invalid: use 1-128 characters from A-Z a-z 0-9 . _ -"
        )
    return lane


def lane_arg(lane: object) -> str:
    """A lane named in a call about lanes: ``"default"`` for the default lane."""
    return check_lane(lane) or DEFAULT_LANE


def check_rate(what: str, rate: object) -> Rate:
    """``(max, per_ms)`` with 1 <= max <= 1,000,000 and 1 ms <= per_ms <= one day; ``None`` or
    ``0`` clears the limit (returned as ``(0, 0)``)."""
    if rate is None or rate == 0:
        return (0, 0)
    if not isinstance(rate, tuple) or len(rate) != 2:
        raise InvalidOption(
            f"{what} must be a (max, per_ms) pair such as (50, 1000) for 50 a second, or None "
            f"to clear it; got {shown(rate)}"
        )
    most = check_int(f"{what} max", rate[0], 1, MAX_LIMIT)
    per = check_int(f"{what} per_ms", rate[1], 1, MAX_RATE_WINDOW_MS, "ms")
    return (most, per)


def _limit(what: str, value: object) -> int:
    return 0 if value is None else check_int(what, value, 0, MAX_LIMIT)


def limits_args(
    *,
    concurrency: int | None,
    rate: Rate | None,
    lane: str | None,
    lane_concurrency: int | None,
    lane_rate: Rate | None,
    weight: int | None,
) -> list[str | int]:
    """ARGV[3..] of set_limits.lua, validated: the target's whole set of limits."""
    target = None if lane is None else lane_arg(lane)
    if target is not None and (lane_concurrency is not None or lane_rate is not None):
        raise InvalidOption(
            "lane_concurrency and lane_rate are the queue's defaults for every lane: set them "
            "without lane=, and a lane's own limits with concurrency= and rate= and lane="
        )
    if target is None and weight is not None:
        raise InvalidOption("weight is a lane's share of turns: give lane= with it")
    w = 1 if weight is None else check_int("weight", weight, 1, MAX_WEIGHT)
    most, per = check_rate("rate", rate)
    lane_most, lane_per = check_rate("lane_rate", lane_rate)
    return [
        target or "",
        _limit("concurrency", concurrency),
        most,
        per,
        w,
        _limit("lane_concurrency", lane_concurrency),
        lane_most,
        lane_per,
    ]


@dataclass(frozen=True, slots=True)
class Limits:
    """A queue's limits: ``concurrency`` (leased at once), ``rate`` (``(max, per_ms)``), and
    the defaults every lane without its own gets; 0 / None = no limit."""

    concurrency: int = 0
    rate: Rate | None = None
    lane_concurrency: int = 0
    lane_rate: Rate | None = None
    paused: bool = False
    held_until_ms: int = 0  # a handler's RateLimited holds the whole queue until then
    limited_until_ms: int = 0  # the queue's rate refused claims until then (last time it did)
    active: int = 0


@dataclass(frozen=True, slots=True)
class Lane:
    """One lane as ``Queue.lanes()`` read it. ``concurrency`` and ``rate`` are its own limits
    (0 / None: the queue's per-lane defaults apply); ``next_at_ms`` is when it may be served
    again (a rate slot or a handler's hold, server clock), None if it may be served now;
    ``full``: parked at its concurrency limit until one of its jobs finishes."""

    name: str
    pending: int
    active: int
    weight: int = 1
    concurrency: int = 0
    rate: Rate | None = None
    paused: bool = False
    next_at_ms: int | None = None
    full: bool = False


def _rate(text: str) -> Rate | None:
    if not text:
        return None
    most, per = text.split(":")
    return (int(most), int(per)) if int(most) else None


def decode_lanes(reply: list[Any]) -> tuple[Limits, list[Lane]]:
    """The reply of lanes.lua as the queue's :class:`Limits` and its lanes, by name (the
    default lane first)."""
    now = int(reply[0])
    limits = Limits(
        concurrency=int(reply[3]),
        rate=_rate(reply[4]),
        lane_concurrency=int(reply[5]),
        lane_rate=_rate(reply[6]),
        paused=reply[2] == 1,
        held_until_ms=int(reply[7]) if int(reply[7]) >= now else 0,
        limited_until_ms=int(reply[9]) if int(reply[9]) > now else 0,
        active=int(reply[8]),
    )
    lanes: list[Lane] = []
    for i in range(10, len(reply), 7):
        name, waiting, leased, conf, later, full, _pass = reply[i : i + 7]
        weight, conc, most, per, paused = (conf or "1 0 0 0 0").split(" ")
        held = int(float(later)) if later else 0
        lanes.append(
            Lane(
                name=name,
                pending=int(waiting),
                active=int(leased),
                weight=int(float(weight)),
                concurrency=int(conc),
                rate=(int(most), int(per)) if int(most) else None,
                paused=paused == "1",
                next_at_ms=held if held > now else None,
                full=int(full) == 1,
            )
        )
    lanes.sort(key=lambda lane: (lane.name != DEFAULT_LANE, lane.name))
    return limits, lanes


class RateLimited(EmqError):
    """Raised by a handler that was told to slow down (a remote 429): the job goes back to
    pending without spending an attempt, and its lane (``lane=None``: the job's own lane; or
    the lane named; or, with ``whole_queue=True``, the whole queue) gets no claims for
    ``retry_in_ms``, fleet-wide."""

    def __init__(self, retry_in_ms: int, lane: str | None = None, *, whole_queue: bool = False):
        self.retry_in_ms = check_int("retry_in_ms", retry_in_ms, 1, MAX_RATE_WINDOW_MS, "ms")
        self.lane = None if lane is None else lane_arg(lane)
        self.whole_queue = bool(whole_queue)
        target = "the queue" if whole_queue else f"lane {self.lane or '(its own)'}"
        super().__init__(f"rate limited: hold {target} for {self.retry_in_ms} ms")
