"""The exit codes of every ``emq`` command: one table (docs/cli.md, Exit codes), kept here.

Commands name these instead of numbers, and end a refusal by raising :class:`NotFound` or
:class:`StillLive` (or any emq error), which :func:`emq.cli.guard.guarded` turns into one
``error: ...`` line on stderr and the code below. This module imports nothing heavy: the
command group reads it before any command's module is loaded.
"""

from __future__ import annotations

DONE = 0
"""The command did what it was asked (a service stopped by its first SIGTERM or SIGINT
included: stopping is what it was asked to do)."""

NO = 1
"""The answer is no: a check whose answer is negative (``emq server status``: not running;
``emq race explore|stress``: the atomic form showed an anomaly; ``emq demo``: a job was lost;
``emq result``: the job ended dead or cancelled, no result), or a question at the terminal
answered no (``emq obliterate``). Nothing was changed by the no."""

ERROR = 2
"""An error, said in one ``error: ...`` line: bad usage (an unknown option or command, a
missing argument, a bad choice), bad input, something that is not there (an unknown job id,
queue, schedule or floor), a server that cannot be reached or refuses. Nothing was written."""

LIVE = 3
"""Refused, or not yet, because something is still live: ``emq obliterate`` of a queue with
leased jobs (without ``--force``), ``emq upgrade`` while a worker of an older emq serves the
queue (without ``--force``), ``emq forget`` of a queue that still holds keys, ``emq result``
of a job still running after ``--wait``. Nothing was written."""

INTERRUPTED = 130
"""Interrupted: Ctrl-C (SIGINT) cut a command short, or a second signal forced a service
(``emq worker``, ``emq dashboard``) to stop at once. 128 + SIGINT, as a shell reports it."""

PIPE_CLOSED = 141
"""stdout's reader left (``emq events tail Q | head -1``): 128 + SIGPIPE, what a shell reports
for any program stopped that way; nothing is printed on stderr."""

TABLE: dict[int, str] = {
    DONE: "done",
    NO: "the answer is no",
    ERROR: "an error (usage, input, not found, unreachable)",
    LIVE: "refused or not yet: something is still live",
    INTERRUPTED: "interrupted",
    PIPE_CLOSED: "stdout closed",
}
"""Every code a command may end with, and what it means (docs/cli.md shows the same)."""


class Refusal(Exception):
    """A refusal of the command line, said as one ``error: <message>`` line; the command
    exits :attr:`code`. Nothing was written before it is raised."""

    code = ERROR


class NotFound(Refusal):
    """What the command was pointed at is not there: an unknown queue, job, schedule."""

    code = ERROR


class StillLive(Refusal):
    """Refused because something is still live (see :data:`LIVE`)."""

    code = LIVE
