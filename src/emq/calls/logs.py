"""A job's log lines (``ctx.log``), I/O-free: what a line may be, the builder of
``job_log.lua`` and the reading of a stored list (docs/control.md, Job logs).

- **A line** is ``str(value)`` (anything is accepted, as ``print`` would show it), a lone
  surrogate written as a backslash escape; a line over :data:`MAX_LINE_BYTES` of UTF-8 is cut
  to fit with :data:`TRUNCATED` and its full length at the end. Nothing a handler logs is
  refused, and nothing raises.
- **Per job** the list keeps its newest :data:`MAX_LINES` lines: older ones are trimmed on
  the write that passes the cap (the worker's unsent buffer keeps the same bound).
- **Stored** as ``logs:<id>``, one ``<server ms> <attempt> <line>`` each, oldest first, kept
  ``log_ttl_ms`` (a queue setting) after the last write; written only under the attempt's
  lease token (a stale attempt's lines are refused, like its progress).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidOption
from ..model.checks import check_int
from ..model.config import MAX_KEEP_MS
from ..model.ids import check_id
from ..model.records import Answer
from .call import MAX_BATCH, Arg, Call
from .jobs import QueueCore

MAX_LINES = 1_000  # lines kept per job; the oldest are trimmed
MAX_LINE_BYTES = 8_192  # UTF-8 bytes of one stored line, the truncation marker included
TRUNCATED = "... [truncated from {} bytes]"

_ANSWERS = {a.value: a for a in Answer}


@dataclass(frozen=True, slots=True)
class JobLog:
    """One line of a job's log: ``line`` as the handler gave it (maybe truncated),
    ``at_ms`` when the server stored it (server clock; a line reaches the server at most one
    ``progress_interval_ms`` after ``ctx.log``), ``attempt`` the attempt that logged it."""

    at_ms: int
    attempt: int
    line: str

    def __str__(self) -> str:
        return self.line


def encode_line(value: Any) -> str:
    """The stored text of a logged ``value``: ``str(value)``, valid UTF-8, at most
    :data:`MAX_LINE_BYTES` bytes (cut with :data:`TRUNCATED` otherwise)."""
    text = value if value.__class__ is str else str(value)
    if text.isascii():
        if len(text) <= MAX_LINE_BYTES:
            return text
        data = text.encode("ascii")
    else:
        data = text.encode("utf-8", "backslashreplace")
        if len(data) <= MAX_LINE_BYTES:
            return data.decode("utf-8")
    marker = TRUNCATED.format(len(data))
    cut = data[: MAX_LINE_BYTES - len(marker)].decode("utf-8", "ignore")  # whole characters
    return cut + marker


def job_log(core: QueueCore, items: Iterable[tuple[str, int, str]]) -> Call[list[int | Answer]]:
    """Append lines (from :func:`encode_line`) to held jobs' logs, each ``(id, token, line)``,
    oldest first: per line when it was stored (server ms), or ``Answer.LOST`` /
    ``Answer.GONE`` (not written). Kept the queue's ``log_ttl_ms`` (at least 1 ms here: a
    queue whose setting is 0 sends nothing)."""
    k = core.keys
    ttl = check_int("log_ttl_ms", max(core.options.log_ttl_ms, 1), 1, MAX_KEEP_MS, "ms")
    args: list[Arg] = [k.prefix, MAX_LINES, ttl]
    for job_id, token, line in items:
        if len(line) > MAX_LINE_BYTES or (
            not line.isascii() and len(line.encode("utf-8", "surrogatepass")) > MAX_LINE_BYTES
        ):
            raise InvalidOption(f"a log line is at most {MAX_LINE_BYTES} bytes: encode_line it")
        args += [check_id(job_id), check_int("token", token, 1, 2**62), line]
    if len(args) == 3:
        raise InvalidOption("job_log needs at least one (job_id, token, line)")
    if len(args) > 3 + 3 * MAX_BATCH:
        raise InvalidOption(f"at most {MAX_BATCH} lines per job_log call")
    return Call("job_log", [k.active, k.logs_index], args, _decode_stored)


def _decode_stored(reply: list[Any]) -> list[int | Answer]:
    return [x if x.__class__ is int else _ANSWERS[x] for x in reply]


def decode_logs(items: Iterable[str]) -> list[JobLog]:
    """A stored ``logs:<id>`` list, oldest first. An item not in the stored shape (written
    by hand) is kept whole as its line, with time and attempt 0."""
    out = []
    for item in items:
        at, _, rest = item.partition(" ")
        attempt, _, line = rest.partition(" ")
        if at.isdigit() and attempt.isdigit():
            out.append(JobLog(int(at), int(attempt), line))
        else:
            out.append(JobLog(0, 0, item))
    return out
