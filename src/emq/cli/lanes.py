"""Commands on lanes and limits: ``emq lanes`` and ``emq limits``; the limits line ``emq stats``
prints comes from here too.

``Queue.set_limits`` replaces a target's whole set of limits. ``emq limits`` merges instead:
it reads the current settings, changes only the flags given and sends the full result, so
``emq limits q --rate 50/1000`` keeps the queue's concurrency (docs/lanes.md). The read and
the write are two calls: two ``emq limits`` run at the same instant on the same target may
lose one's change (the last write wins, whole).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

from ..errors import InvalidOption
from ..model.checks import check_int
from ..model.lanes import MAX_LIMIT, MAX_WEIGHT, Lane, Limits, Rate, check_rate, lane_arg
from .common import emit_json, json_option, open_queue, row, say, show, table, url_option

if TYPE_CHECKING:
    from ..queue._sync.queue import Queue

_RATE = re.compile(r"(\d+)/(\d+)")
NONE = "-"


# -- values ------------------------------------------------------------------------------


def parse_rate(flag: str, text: str) -> Rate | None:
    """``MAX/PER_MS`` as ``(max, per_ms)``, checked as the API checks a rate; ``0`` clears
    the limit (None)."""
    if text.strip() == "0":
        return None
    m = _RATE.fullmatch(text.strip())
    if m is None:
        raise InvalidOption(
            f"{flag} must be MAX/PER_MS, such as 50/1000 for 50 claims a second, or 0 to clear "
            f"it; got {text!r}"
        )
    if int(m[1]) == 0:
        raise InvalidOption(f"{flag} max must be at least 1 (0 alone clears it); got {text!r}")
    return check_rate(flag, (int(m[1]), int(m[2])))


def rate_text(rate: Rate | None) -> str:
    return f"{rate[0]}/{rate[1]}" if rate else NONE


def server_ms(q: Queue) -> int:
    """The server's clock, ms: what every hold and rate window is measured on."""
    seconds, micros = q.client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _in(until_ms: int | None, now: int) -> int | None:
    return max(0, until_ms - now) if until_ms else None


def limits_dict(limits: Limits) -> dict[str, Any]:
    """The queue's limits as ``--json`` prints them: the fields of :class:`emq.Limits`, a rate
    as ``[max, per_ms]`` or null."""
    return asdict(limits)


def lane_dict(lane: Lane, now: int) -> dict[str, Any]:
    """One lane as ``--json`` prints it: the fields of :class:`emq.Lane`, plus ``next_in_ms``
    (ms from now until it may be served again; null: now)."""
    return asdict(lane) | {"next_in_ms": _in(lane.next_at_ms, now)}


def any_set(limits: Limits) -> bool:
    """True when the queue has a limit or a per-lane default, is paused or is held."""
    return bool(
        limits.concurrency
        or limits.rate
        or limits.lane_concurrency
        or limits.lane_rate
        or limits.paused
        or limits.held_until_ms
    )


def limits_text(limits: Limits, now: int, *, set_only: bool = False) -> str:
    """The queue's limits in one line, after its count of leased jobs (``set_only``: only
    the limits that are set, for ``emq stats``, whose table counts the leased jobs)."""
    parts = [] if set_only else [f"{limits.active} leased"]
    if limits.concurrency or not set_only:
        parts.append(f"concurrency {limits.concurrency or NONE}")
    if limits.rate or not set_only:
        parts.append(f"rate {rate_text(limits.rate)}")
    if limits.lane_concurrency or not set_only:
        parts.append(f"lane concurrency {limits.lane_concurrency or NONE}")
    if limits.lane_rate or not set_only:
        parts.append(f"lane rate {rate_text(limits.lane_rate)}")
    if limits.paused:
        parts.append("paused")
    if (held := _in(limits.held_until_ms, now)) is not None:
        parts.append(f"held for {held} ms (a handler raised RateLimited)")
    if (limited := _in(limits.limited_until_ms, now)) is not None:
        parts.append(f"rate used up for {limited} ms")
    return ", ".join(parts)


def stats_limits(q: Queue) -> tuple[dict[str, Any], str | None]:
    """What ``emq stats`` adds for a queue: its limits for ``--json``, and a line for people
    when any is set (None otherwise)."""
    limits = q.limits()
    text = limits_text(limits, server_ms(q), set_only=True) if any_set(limits) else None
    return limits_dict(limits), text


def _effective(lane: Lane, limits: Limits, mark: str) -> tuple[str, str]:
    """A lane's concurrency and rate as text: its own, else the queue's per-lane default
    followed by ``mark``, else ``-``."""

    def one(own: Any, default: Any, text: Callable[[Any], str]) -> str:
        if own:
            return text(own)
        return f"{text(default)}{mark}" if default else NONE

    return (
        one(lane.concurrency, limits.lane_concurrency, str),
        one(lane.rate, limits.lane_rate, rate_text),
    )


def _lane_row(lane: Lane, limits: Limits, now: int) -> list[object]:
    wait = _in(lane.next_at_ms, now)
    return [
        lane.name,
        lane.pending,
        lane.active,
        lane.weight,
        *_effective(lane, limits, "*"),
        "yes" if lane.paused else "",
        "now" if wait is None else f"{wait} ms",
        "yes" if lane.full else "",
    ]


def _find(q: Queue, name: str) -> Lane:
    """The lane named (as ``lane_arg`` spells it), or its defaults when it has no waiting or
    leased jobs and no settings of its own."""
    return next((lane for lane in q.lanes() if lane.name == name), Lane(name, 0, 0))


# -- commands ----------------------------------------------------------------------------


@click.command()
@click.argument("queue")
@url_option
@json_option
def lanes(queue: str, url: str | None, as_json: bool) -> None:
    """List QUEUE's lanes and its limits (docs: lanes.md).

    \b
    Every lane with waiting or leased jobs or settings of its own: weight, its concurrency and
    rate (MAX/PER_MS; * = the queue's per-lane default), paused, when it may be served next
    (a rate slot or a handler's hold), and full (parked at its concurrency limit)."""
    with open_queue(url, queue) as q:
        found = q.lanes()
        limits = q.limits()
        now = server_ms(q)
    if as_json:
        emit_json(
            {
                "queue": queue,
                "now_ms": now,
                "limits": limits_dict(limits),
                "lanes": [lane_dict(lane, now) for lane in found],
            }
        )
        return
    if found:
        t = table(f"{queue} / lanes", "lane")
        for column in ("pending", "active", "weight", "concurrency", "rate"):
            t.add_column(column, justify="right")
        for column in ("paused", "next", "full"):
            t.add_column(column)
        for lane in found:
            row(t, *_lane_row(lane, limits, now))
        if any("*" in "".join(_effective(lane, limits, "*")) for lane in found):
            t.caption = "* the queue's per-lane default"
        show(t)
    else:
        say(queue, ": no lanes with waiting or leased jobs or settings of their own")
    say(queue, ": ", limits_text(limits, now))


def _check_flags(
    lane: str | None,
    concurrency: int | None,
    rate: str | None,
    weight: int | None,
    lane_concurrency: int | None,
    lane_rate: str | None,
) -> dict[str, Any]:
    """The flags given, checked as the API would check them but named as flags, before
    anything is read or written."""
    if lane is not None and (lane_concurrency is not None or lane_rate is not None):
        raise InvalidOption(
            "--lane-concurrency and --lane-rate are the queue's defaults for every lane: give "
            "them without --lane (a lane's own limits are --concurrency and --rate)"
        )
    if lane is None and weight is not None:
        raise InvalidOption("--weight is a lane's share of turns: give --lane with it")
    given: dict[str, Any] = {}
    if concurrency is not None:
        given["concurrency"] = check_int("--concurrency", concurrency, 0, MAX_LIMIT)
    if rate is not None:
        given["rate"] = parse_rate("--rate", rate)
    if weight is not None:
        given["weight"] = check_int("--weight", weight, 1, MAX_WEIGHT)
    if lane_concurrency is not None:
        given["lane_concurrency"] = check_int("--lane-concurrency", lane_concurrency, 0, MAX_LIMIT)
    if lane_rate is not None:
        given["lane_rate"] = parse_rate("--lane-rate", lane_rate)
    return given


def _lane_text(lane: Lane, limits: Limits, now: int) -> str:
    conc, rate = _effective(lane, limits, " (the queue's per-lane default)")
    parts = [f"weight {lane.weight}", f"concurrency {conc}", f"rate {rate}"]
    parts.append(f"{lane.pending} pending, {lane.active} leased")
    if lane.paused:
        parts.append("paused")
    if lane.full:
        parts.append("full")
    if (wait := _in(lane.next_at_ms, now)) is not None:
        parts.append(f"next in {wait} ms")
    return ", ".join(parts)


def _merge(q: Queue, lane: str | None, given: dict[str, Any]) -> None:
    """Set the target's limits to its current ones with ``given`` laid over them (the API's
    ``set_limits`` replaces the whole set: what it is not given is cleared)."""
    if lane is None:
        now = q.limits()
        current: dict[str, Any] = {
            "concurrency": now.concurrency,
            "rate": now.rate,
            "lane_concurrency": now.lane_concurrency,
            "lane_rate": now.lane_rate,
        }
        q.set_limits(**(current | given))
    else:
        own = _find(q, lane)
        current = {"concurrency": own.concurrency, "rate": own.rate, "weight": own.weight}
        q.set_limits(lane=lane, **(current | given))


@click.command()
@click.argument("queue")
@click.option("--lane", default=None, metavar="L", help="A lane's limits instead of the queue's.")
@click.option("--concurrency", type=int, metavar="N", help="Most leased at once; 0 clears.")
@click.option("--rate", metavar="MAX/PER_MS", help="At most MAX claims in any PER_MS ms; 0 clears.")
@click.option("--weight", type=int, metavar="W", help="With --lane: its share of turns, 1..1000.")
@click.option(
    "--lane-concurrency", type=int, metavar="N",
    help="Without --lane: the concurrency of every lane without its own; 0 clears.",
)  # fmt: skip
@click.option(
    "--lane-rate", metavar="MAX/PER_MS",
    help="Without --lane: the rate of every lane without its own; 0 clears.",
)  # fmt: skip
@url_option
@json_option
def limits(
    queue: str, lane: str | None, concurrency: int | None, rate: str | None,
    weight: int | None, lane_concurrency: int | None, lane_rate: str | None,
    url: str | None, as_json: bool,
) -> None:  # fmt: skip
    """Show or change the limits of QUEUE, or of one lane with --lane (docs: lanes.md).

    \b
    With no setting flag: show them. With flags: only the limits named change, the others
    are kept (the CLI merges; Queue.set_limits replaces the whole set). 0 clears a limit."""
    name = None if lane is None else lane_arg(lane)
    given = _check_flags(name, concurrency, rate, weight, lane_concurrency, lane_rate)
    with open_queue(url, queue) as q:
        if given:
            _merge(q, name, given)
        after = q.limits()
        found = None if name is None else _find(q, name)
        now = server_ms(q)
    if as_json:
        shown = limits_dict(after) if found is None else lane_dict(found, now)
        emit_json({"queue": queue, "lane": name, "changed": bool(given), "limits": shown})
    elif found is None:
        say(queue, ": ", limits_text(after, now))
    else:
        say(queue, " lane ", found.name, ": ", _lane_text(found, after, now))


def register(group: click.Group) -> None:
    group.add_command(lanes)
    group.add_command(limits)
