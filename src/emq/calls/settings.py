"""The settings that describe a queue, stored on the server with it (docs/control.md, Queue
settings): what every process that serves the queue uses, whatever options it was opened
with. No I/O.

**The rule.** The first process that opens the queue with explicit ``QueueOptions`` stores
the queue's settings (:data:`QUEUE_SETTINGS`) in the same step that reads them
(``settings.lua``, mode ``init``): a later process adopts what is stored, so a worker that
knows only the queue's name keeps results for the producer's ``result_ttl_ms``. A process
whose explicit options differ from what is stored is told so once (a warning naming the
settings and the stored values) and uses the stored ones. ``Queue.configure(...)`` (mode
``set``) changes them for every process; the others pick a change up within
:data:`REFRESH_S`. The other options (``backoff``, ``max_payload_bytes``,
``durability_timeout_ms``, ``allow_eviction``, ``partitions``) stay the process's own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import InvalidOption
from ..model.config import QueueOptions
from ..model.keys import QueueKeys
from .call import Call

REFRESH_S = 10.0  # a process reads the stored settings again at most this often
QUEUE_SETTINGS = (
    "events_maxlen",
    "max_attempts",
    "durability",
    "durability_replicas",
    "result_ttl_ms",
    "keep_completed",
    "log_ttl_ms",
)
Stored = dict[str, Any]


def to_fields(options: QueueOptions) -> dict[str, str]:
    """The stored text of each queue setting of ``options``."""
    out = {}
    for name in QUEUE_SETTINGS:
        value = getattr(options, name)
        if name == "keep_completed":
            value = "" if value is None else f"{value[0]} {value[1]}"
        out[name] = str(value)
    return out


def from_fields(fields: dict[str, str]) -> tuple[Stored, list[str]]:
    """The settings a stored hash holds, each checked as ``QueueOptions`` checks it, and the
    names of the fields that could not be read (damaged by hand: ignored, named once)."""
    stored: Stored = {}
    bad = []
    for name in QUEUE_SETTINGS:
        text = fields.get(name)
        if text is None:
            continue
        try:
            value = _parse(name, text)
            QueueOptions(**{name: value})  # the same checks as an explicit option
        except (ValueError, TypeError):  # InvalidOption is a ValueError
            bad.append(name)
            continue
        stored[name] = value
    bad += sorted(set(fields) - set(QUEUE_SETTINGS))
    return stored, bad


def _parse(name: str, text: str) -> Any:
    if name == "durability":
        return text
    if name == "keep_completed":
        if text == "":
            return None
        age, count = text.split(" ")
        return (int(age), int(count))
    return int(text)


def merged(options: QueueOptions, stored: Stored) -> QueueOptions:
    """``options`` with the stored queue settings in place of its own."""
    return dataclasses.replace(options, **stored) if stored else options


def conflicts(explicit: QueueOptions, stored: Stored) -> dict[str, tuple[Any, Any]]:
    """Each queue setting the process asked for that differs from the stored one:
    name -> (asked, stored)."""
    return {
        name: (getattr(explicit, name), value)
        for name, value in stored.items()
        if getattr(explicit, name) != value
    }


def check_changes(changes: dict[str, Any]) -> dict[str, str]:
    """Validate ``Queue.configure(**changes)`` before anything is written: the stored text
    of each change."""
    if not changes:
        raise InvalidOption(f"configure needs at least one of {', '.join(QUEUE_SETTINGS)}")
    unknown = sorted(set(changes) - set(QUEUE_SETTINGS))
    if unknown:
        raise InvalidOption(
            f"{', '.join(unknown)} is not a queue setting; the settings stored with a queue "
            f"are {', '.join(QUEUE_SETTINGS)}"
        )
    checked = QueueOptions(**changes)  # the same checks as an explicit option
    return {k: v for k, v in to_fields(checked).items() if k in changes}


def settings_call(keys: QueueKeys, mode: str, fields: dict[str, str]) -> Call[dict[str, str]]:
    """``init``: store ``fields`` unless the queue has settings; ``set``: replace the given
    fields. Either way the reply is every stored field, read in the same step."""
    args: list[str | int | float] = [mode]
    for name, text in fields.items():
        args += [name, text]
    return Call("settings", [keys.settings, keys.meta], args, _pairs)


def _pairs(reply: list[str]) -> dict[str, str]:
    return dict(zip(reply[::2], reply[1::2], strict=True))


def upgrade(keys: QueueKeys) -> Call[tuple[int, int]]:
    """Move the queue to the newest keyspace layout in one step (``upgrade.lua``); the reply
    is (the layout before, the layout after)."""
    return Call("upgrade", [keys.meta], [keys.prefix], lambda r: (int(r[0]), int(r[1])))
