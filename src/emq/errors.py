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


class JobNotFound(EmqError):
    """No row exists for the job id."""


class DuplicateConflict(EmqError):
    """An enqueue reused an existing id with a different name or payload. Nothing was written."""


class ScriptError(EmqError):
    """A script failed in a way that is not a documented refusal (a bug: please report it)."""


class ServerError(EmqError):
    """The embedded server could not be started, found or stopped."""


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


class InvalidUrl(InvalidInput):
    """A server URL cannot be used."""


_BY_CLASS: dict[str, type[EmqError]] = {
    "EMQSTALE": LeaseLost,
    "EMQSTATE": WrongState,
    "EMQNOJOB": JobNotFound,
    "EMQCONFLICT": DuplicateConflict,
    "EMQKIND": InvalidId,
    "EMQARG": InvalidOption,
}


def from_reply(message: str) -> EmqError | None:
    """Map a script error reply to its exception, or None if it is not an emq refusal."""
    head, _, detail = message.partition(" ")
    cls = _BY_CLASS.get(head)
    if cls is None:
        return None
    return cls(detail or head)
