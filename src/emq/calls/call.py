"""The vocabulary every call builder shares: :class:`Call` (one script invocation and the
decoder of its reply), the checks of names and free text, and the decoders of replies that
several families read (answers, rows, counts). No I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..errors import InvalidName, InvalidOption
from ..model.checks import check_int, shown
from ..model.ids import check_id, minted_at_ms
from ..model.records import Answer, Job, UnreadablePayload
from ..model.states import Location

T = TypeVar("T")
Arg = str | int | float
Hold = tuple[str, int, int, int, str]  # (id, token, delay_ms, hold_ms, lane or "*")

JOB_NAME = re.compile(r"[A-Za-z0-9._:/-]{1,128}")
MAX_BATCH = 1_000
MAX_CHUNK = 10_000
MAX_ERROR_CHARS = 4_096
PRIORITY_RANGE = (-(2**31), 2**31 - 1)


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One script invocation: which script, its KEYS and ARGV, and how to read its reply."""

    script: str
    keys: list[str]
    args: list[Arg]
    decode: Callable[[Any], T]


_VALID_NAMES: set[str] = set()  # job names already checked (bounded: names repeat)


def check_job_name(name: object) -> str:
    if name.__class__ is str and name in _VALID_NAMES:
        return name
    if not isinstance(name, str) or not JOB_NAME.fullmatch(name):
        raise InvalidName(
            f"job name {shown(name)} is invalid: use 1-128 characters from A-Z a-z 0-9 . _ : / -"
        )
    if len(_VALID_NAMES) < 4096:
        _VALID_NAMES.add(name)
    return name


def check_text(what: str, value: object, most: int) -> str:
    """A non-empty string of at most ``most`` characters that encodes as UTF-8 (no lone
    surrogates), or :class:`InvalidOption` saying what to fix."""
    if not isinstance(value, str) or not 0 < len(value) <= most:
        raise InvalidOption(
            f"{what} must be a non-empty string of at most {most}, got {shown(value)}"
        )
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidOption(
                f"{what} {shown(value)} is not valid Unicode (a lone surrogate?): {exc}"
            ) from None
    return value


def clean_text(value: object, most: int) -> str:
    """``str(value)`` cut to ``most`` characters, with any lone surrogate written as a
    backslash escape, and the record and unit separators (U+001E, U+001F, which join the events
    of a stream entry: emq.model.events) as ``\\x1e`` and ``\\x1f``: free text (an error
    message) is kept, never refused."""
    text = str(value)[:most]
    if "\x1e" in text or "\x1f" in text:
        text = text.replace("\x1e", "\\x1e").replace("\x1f", "\\x1f")
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")


def decode_payload(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def stored_payload(text: str | None) -> Any:
    """A stored job's payload, as a claim or a read returns it: an :class:`UnreadablePayload`
    if its text is not JSON, so one damaged row never stops a claim that leased it with
    others, nor a listing that holds it."""
    try:
        return decode_payload(text)
    except ValueError as exc:
        return UnreadablePayload(str(text)[:200], str(exc))


def _pairs(items: Iterable[tuple[str, int]]) -> list[Arg]:
    args: list[Arg] = []
    for job_id, token in items:
        args += [check_id(job_id), check_int("token", token, 1, 2**62)]
    if not args:
        raise InvalidOption("at least one (job_id, token) pair is required")
    if len(args) > 2 * MAX_BATCH:
        raise InvalidOption(f"at most {MAX_BATCH} jobs per call")
    return args


_ANSWERS: dict[str, Answer] = {a.value: a for a in Answer}  # a dict lookup: no Enum call


def decode_answers(reply: list[Any]) -> list[Answer]:
    return [_ANSWERS[x] for x in reply]


def decode_job(
    job_id: str,
    row: dict[str, str],
    run_at: float | None = None,
    deadline: float | None = None,
    packed: str | None = None,
) -> Job | None:
    """A :class:`Job` from an ``HGETALL`` reply and the job's ``ZSCORE`` in ``schedule``
    (``run_at``) and in ``active`` (``deadline``), read with it; without a row, from its
    entry in ``packed`` (layout 3, :func:`packed_row`) read with them; None if it has
    neither (completed, removed)."""
    if not row:
        if packed is None:
            return None
        row = packed_row(packed)
    return Job(
        id=job_id,
        state=row.get("state", ""),
        name=row.get("name", ""),
        payload=stored_payload(row.get("payload")),
        attempts=int(row.get("attempts", 0)),
        stalled=int(row.get("stalled", 0)),
        token=int(row.get("token", 0)),
        priority=int(row.get("priority", 0)),
        max_attempts=int(row.get("max_attempts", 0)),
        created_at=int(row.get("created_at") or minted_at_ms(job_id)),
        last_error=row.get("last_error"),
        fields=row,
        run_at_ms=None if run_at is None else int(run_at),
        lease_deadline_ms=None if deadline is None else int(deadline),
    )


def split_packed(entry: str) -> tuple[str, str, str, str] | None:
    """``(name, max_attempts, trace, payload)`` of a packed entry, split on its first three
    spaces only (the payload is JSON text that may hold spaces; an empty trace leaves two
    spaces in a row), or None if it is not in that shape (a name outside the grammar, a
    max_attempts that is not a decimal integer)."""
    parts = entry.split(" ", 3)
    if len(parts) != 4:
        return None
    name, attempts, trace, payload = parts
    if not JOB_NAME.fullmatch(name) or not (attempts.isascii() and attempts.isdigit()):
        return None
    return name, attempts, trace, payload


def packed_row(entry: str) -> dict[str, str]:
    """The row a packed entry stands for: exactly the fields a script writes when it unpacks
    the job (``state`` pending, ``name``, ``payload``, ``priority`` 0, ``max_attempts``, and
    ``trace`` unless empty), so a packed job reads as the same :class:`Job` as its row would.
    An entry not in the packed shape (written by hand) is kept whole as the payload, with no
    name: the job still reads (its payload as unreadable, unless the text is JSON) and one
    damaged entry never fails a listing."""
    parts = split_packed(entry)
    if parts is None:
        return {"state": "pending", "payload": entry}
    name, attempts, trace, payload = parts
    row = {
        "state": "pending",
        "name": name,
        "payload": payload,
        "priority": "0",
        "max_attempts": attempts,
    }
    if trace:
        row["trace"] = trace
    return row


COUNT_FIELDS = ("completed", "failed", "dead", "recovered")


def decode_counts(
    sizes: Sequence[int], metrics: Sequence[str | None], outbox: int = 0
) -> dict[str, int]:
    """``counts()``: the size of each location, the lifetime counters, the outbox's size."""
    out = {loc.value: int(n) for loc, n in zip(Location, sizes, strict=True)}
    for name, value in zip(COUNT_FIELDS, metrics, strict=True):
        out["dead_total" if name == "dead" else name] = int(value or 0)
    out["outbox"] = int(outbox)
    return out
