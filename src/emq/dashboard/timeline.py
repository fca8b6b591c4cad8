"""A job's timeline as the job page shows it (docs/dashboard.md, Job): every event of
``history()`` in order, except that a run of consecutive ``progress`` events is one entry, the
latest value with how many updates it stands for, its earlier values listed (newest first, at
most :data:`EARLIER_SHOWN`) in a ``<details>`` that opens on a click.

A running job reports progress up to twice a second (``progress_interval_ms``, 500 ms by
default), so two minutes of it made about 240 lines; collapsed, the
events that tell its story (claimed, retrying, cancel_requested, dead...) stay in view.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from ..model.events import Event

PROGRESS = "progress"
EARLIER_SHOWN = 100  # earlier values of one run listed when it is opened
VALUE_CHARS = 160  # a progress value's text is cut here (the event's field is up to 64 KiB)


@dataclass(frozen=True, slots=True)
class Entry:
    """One line of the timeline: ``event`` (a run's latest), ``updates`` (how many progress
    events it stands for; 1 for any other event), ``first_ms`` (when the run's first was
    appended), ``value`` (the latest progress as text), ``earlier`` ((ms, value) of the run's
    earlier events, newest first, at most :data:`EARLIER_SHOWN`) and ``unlisted`` (how many
    earlier ones that leaves out)."""

    event: Event
    updates: int = 1
    first_ms: int = 0
    value: str = ""
    earlier: tuple[tuple[int, str], ...] = ()
    unlisted: int = 0


def progress_text(text: str | None) -> str:
    """A progress value (the event's JSON text) in words: the documented ``{"done": n, "of":
    m}`` as ``n of m (p%)`` (``5,120 of 10,000 (51%)``), anything else (a number, a string, any
    JSON) as compact JSON text, cut at :data:`VALUE_CHARS`."""
    try:
        value = json.loads(text or "null")
    except ValueError:
        value = text
    if isinstance(value, dict) and set(value) == {"done", "of"}:
        done, of = value["done"], value["of"]
        numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (done, of))
        if numbers and of > 0:
            return f"{done:,} of {of:,} ({100 * done / of:.0f}%)"
    shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return shown if len(shown) <= VALUE_CHARS else shown[: VALUE_CHARS - 1] + "…"


def collapse(events: Iterable[Event]) -> list[Entry]:
    """``events`` in order, each run of two or more consecutive ``progress`` events made one
    :class:`Entry` (module doc)."""
    out: list[Entry] = []
    run: list[Event] = []

    def flush() -> None:
        if len(run) == 1:
            out.append(Entry(run[0]))
        elif run:
            earlier = run[-2::-1]
            out.append(
                Entry(
                    run[-1],
                    updates=len(run),
                    first_ms=run[0].time_ms,
                    value=progress_text(run[-1].fields.get(PROGRESS)),
                    earlier=tuple(
                        (e.time_ms, progress_text(e.fields.get(PROGRESS)))
                        for e in earlier[:EARLIER_SHOWN]
                    ),
                    unlisted=max(0, len(earlier) - EARLIER_SHOWN),
                )
            )
        run.clear()

    for e in events:
        if e.event == PROGRESS:
            run.append(e)
            continue
        flush()
        out.append(Entry(e))
    flush()
    return out
