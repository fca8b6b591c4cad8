"""The one error tree of emq.

Every refusal a script can make is an error reply ``EMQ<CLASS> detail``; :func:`from_reply`
maps it to exactly one subclass of :class:`EmqError`. Input that is refused before any key is
written raises a subclass of :class:`InvalidInput` (also a ``ValueError``).
"""

from __future__ import annotations


class EmqError(Exception):
    """Root of every error emq raises on purpose."""


class LeaseLost(EmqError):
    """The caller no longer holds the job's lease: its token is stale, the lease lapsed, or the
    job left ``active``. Nothing was changed; a worker must discard its result."""


class WrongState(EmqError):
    """The job exists but is not in a location that allows the requested transition."""


class NotWaiting(WrongState):
    """An edit of a waiting job (``promote``, ``reschedule``, ``set_priority``,
    ``update_payload``) found the job neither pending nor scheduled (active, dead, completed);
    the message names its state. Nothing was changed."""


class JobNotFound(EmqError):
    """No row exists for the job id."""


class JobDead(EmqError):
    """``Queue.result``: the job ended dead (its attempts spent, a permanent failure, stalled
    too often); ``error`` is its ``last_error``. Redriving it makes it live again."""

    def __init__(self, message: str, error: str = "") -> None:
        super().__init__(message)
        self.error = error


class JobCancelled(JobDead):
    """``Queue.result``: the job was cancelled (it is dead with the ``cancelled`` field);
    ``error`` is its ``last_error`` (``cancelled`` or ``cancelled: <reason>``)."""


class ResultTimeout(EmqError, TimeoutError):
    """``Queue.result``: the job did not end within ``timeout_s``. It is still live; nothing
    was changed. Also a builtin :class:`TimeoutError`."""


class CancelRequested(EmqError):
    """``Queue.extend``: the job's lease was extended, but a cancel was asked for
    (``Queue.cancel``): stop the job and ``fail`` it; it then ends dead, cancelled."""


class DuplicateConflict(EmqError):
    """An enqueue reused an existing id with a different name or payload. Nothing was written."""


class ScriptError(EmqError):
    """A script failed in a way that is not a documented refusal (a bug: please report it)."""


class ServerError(EmqError):
    """The embedded server could not be started, found or stopped."""


class ServerUnreachable(EmqError, ConnectionError):
    """The server could not be reached (refused, reset, timed out, restarting). The call may
    or may not have been applied; idempotent calls can be re-sent. The redis-py error is
    chained as ``__cause__``. Also a builtin :class:`ConnectionError`."""


class ServerRefused(EmqError):
    """The server answered but refused to run the call for a reason of its own state, not of
    the input: out of memory, busy with a long script, a read-only replica, a failed disk
    write, missing ACL permission. Nothing was applied. ``reason`` is the server's error
    class (``OOM``, ``BUSY``, ``READONLY``, ``MISCONF``, ``NOPERM``, ...)."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class AuthenticationFailed(ServerRefused):
    """The server refused the login: a wrong or missing password or user name in the URL (or
    the client's settings), or a user that is disabled. Nothing was sent; it does not pass by
    itself, so it is not a :class:`ServerUnreachable` (not a ``ConnectionError``): fix the
    credentials. ``reason`` is ``AUTH``; the message never holds the password. The redis-py
    error is chained as ``__cause__``."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            f"the server refused the login (wrong or missing password or user name): {detail}",
            "AUTH",
        )


class ServerOutOfMemory(ServerRefused):
    """The server is at ``maxmemory`` and refused a write. Nothing was applied (a script that
    may grow memory is refused whole, before it runs); retry once memory is freed. What frees
    it still runs there (docs/guarantees.md, "At maxmemory"): ``remove``, ``drain``,
    ``obliterate``, the dead-letter purge, and a worker's lease renewals."""


class WorkerFailed(EmqError):
    """A component of a worker (claim loop, heartbeat, maintenance, acknowledgements) failed
    with an error that is not a server error (a bug). The worker stopped claiming, handed back
    what it could and its run raised this (the CLI exits non-zero, so a supervisor restarts
    it); leases it could not settle lapse and the sweep recovers those jobs. The original
    exception is chained as ``__cause__``."""


class UnsafeServer(EmqError):
    """The server is configured in a way that breaks emq's guarantees (an evicting
    ``maxmemory-policy``, or a durability setting it cannot provide)."""


class ReplicasMissing(UnsafeServer, ServerRefused):
    """``durability="replica"`` on a server with fewer replicas connected than it waits for,
    or on a replica. Nothing was written. It can pass by itself (a replica resyncing, a
    failover under way), so it is also a :class:`ServerRefused` (``reason`` ``NOREPLICAS``, as
    the server's own ``min-replicas-to-write`` says): a running worker retries it with backoff
    instead of stopping."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "NOREPLICAS")


class LayoutTooNew(EmqError):
    """The queue's keyspace was written in a newer layout than this emq reads and writes
    (docs/keyspace.md, Layout versions): a newer emq made or upgraded it. Every script and
    read refuses such a queue before it writes anything, so an older process never changes
    what it does not understand. Upgrade emq in this process."""


class InvalidInput(EmqError, ValueError):
    """Input refused before any key was written."""


class InvalidName(InvalidInput):
    """A queue or job name breaks its grammar."""


class InvalidId(InvalidInput):
    """A job id is not a branded emq id."""


class InvalidPayload(InvalidInput):
    """A payload is not JSON-serialisable or exceeds the size limit."""


class InvalidOption(InvalidInput):
    """An option (lease, count, priority, ...) is out of range."""


class InvalidArguments(InvalidPayload, TypeError):
    """A task's arguments do not fit its function (docs/tasks.md): a missing, unknown or extra
    argument, or a value that is not JSON or does not build its parameter's class. Nothing was
    written. Also a builtin :class:`TypeError`, as a direct call would raise."""


class TaskNotBound(InvalidOption):
    """A task was enqueued with no queue to send it to (docs/tasks.md, Where a task is sent):
    its ``Tasks`` was given no URL and no queue (``Tasks.bind``), and no ``using(queue=...)``
    named one. Nothing was sent."""


class InvalidUrl(InvalidInput):
    """A server URL cannot be used."""


class ConflictInBatch(InvalidId, DuplicateConflict):
    """One explicit job id stands for two different jobs in one ``enqueue_many`` batch.
    Refused before anything is sent; also a :class:`DuplicateConflict`."""


_BY_CLASS: dict[str, type[EmqError]] = {
    "EMQSTALE": LeaseLost,
    "EMQSTATE": WrongState,
    "EMQNOTWAITING": NotWaiting,
    "EMQNOJOB": JobNotFound,
    "EMQCONFLICT": DuplicateConflict,
    "EMQKIND": InvalidId,
    "EMQARG": InvalidOption,
}


def layout_too_new(detail: str) -> LayoutTooNew:
    """``EMQLAYOUT <prefix> <stored> <mine> ...`` -> the one line a user reads."""
    prefix, stored, mine = [*detail.split(), "?", "?", "?"][:3]
    queue = prefix.removeprefix("emq:{").removesuffix("}:")
    return LayoutTooNew(
        f"queue {queue!r} is in keyspace layout {stored}, written by a newer emq; this emq "
        f"reads and writes layouts 1 to {mine} only and changed nothing: upgrade emq in every "
        f"process that serves the queue (docs/keyspace.md, Layout versions)"
    )


# Error classes a server uses when it refuses a call because of its own state.
SERVER_REFUSALS = ("OOM", "BUSY", "READONLY", "MISCONF", "NOPERM", "LOADING", "MASTERDOWN",
                   "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS", "NOTBUSY")  # fmt: skip


def from_reply(message: str) -> EmqError | None:
    """Map an error reply to its exception, or None if it is neither an emq refusal nor a
    server refusal (then it is a bug: :class:`ScriptError`)."""
    head, _, detail = message.partition(" ")
    if head == "EMQLAYOUT":
        return layout_too_new(detail)
    cls = _BY_CLASS.get(head)
    if cls is not None:
        return cls(detail or head)
    if (
        head == "NOPERM"
        or "ACL failure in script" in message
        or ("can't run this command or subcommand" in message)
    ):
        return ServerRefused(
            f"the server refused the call for lack of an ACL permission (NOPERM); see "
            f"docs/security.md for what each role needs: {message}",
            "NOPERM",
        )
    if head == "OOM" or "OOM command not allowed" in message:
        return ServerOutOfMemory(
            f"the server is out of memory (maxmemory reached) and refused a write; nothing was "
            f"applied; free memory (remove, drain, obliterate and the dead-letter purge still "
            f"run) or raise maxmemory: {message}",
            "OOM",
        )
    if head in SERVER_REFUSALS:
        return ServerRefused(f"the server refused the call ({head}): {message}", head)
    return None
