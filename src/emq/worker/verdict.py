"""What the end of an attempt means: the :mod:`.outcome` for a handler's return value, its
exception, or a failure the worker decides (no handler, a timeout, the shutdown). No I/O."""

from __future__ import annotations

from typing import Any

from ..calls.results import encode_result
from ..errors import InvalidPayload
from ..model.lanes import DEFAULT_LANE, RateLimited
from .context import Sleeping
from .held import Held
from .hooks import Outbox
from .options import Permanent, WorkerOptions
from .outcome import COMPLETE, ChildComplete, Complete, Fail, Hold, Sleep, describe, failed


class Verdict:
    """The outcomes of one worker's attempts, by its options and each handler's policy."""

    def __init__(self, options: WorkerOptions, outbox: Outbox) -> None:
        self.default_max = options.max_attempts
        self.default_backoff = options.backoff
        self._outbox = outbox

    def fail(self, job: Held, error: str, why: str, *, retry: bool = True) -> Fail:
        spec = job.spec
        limit = (spec.max_attempts if spec else None) or self.default_max
        backoff = (spec.backoff if spec else None) or self.default_backoff
        return failed(job.claimed.attempts, limit, backoff, error, why, retry=retry)

    def completed(self, job: Held, value: Any) -> Complete | ChildComplete | Fail:
        """The handler returned ``value``: ``COMPLETE``, or, when its handler or its queue
        keeps results, a complete carrying the value's JSON text (a flow's child's always
        carries it, for its parent). A value that is not JSON fails the attempt with no
        retry (the handler ran; its result cannot be kept)."""
        spec, options, parent = job.spec, job.q.core.options, job.claimed.parent
        ttl = options.result_ttl_ms
        if spec is not None and spec.result_ttl_ms is not None:
            ttl = spec.result_ttl_ms
        if not ttl and parent is None:
            return COMPLETE
        try:
            text = encode_result(value, options.max_payload_bytes)
        except InvalidPayload as exc:
            return self.fail(job, str(exc), "bad_result", retry=False)
        if not ttl:  # a flow's child: its result is kept for its parent only
            if "@" in (parent or ""):
                self._outbox.expect()  # its end waits in this queue's outbox
            return ChildComplete(text)
        return Complete(text, ttl)

    def from_exception(self, job: Held, exc: BaseException) -> Fail | Hold | Sleep:
        if isinstance(exc, Sleeping):  # ctx.sleep: given back for that long, no attempt spent
            return Sleep(exc.ms)
        if isinstance(exc, RateLimited):
            lane = "*" if exc.whole_queue else exc.lane or job.claimed.lane or DEFAULT_LANE
            return Hold(str(exc), exc.retry_in_ms, lane)
        if isinstance(exc, Permanent):
            return self.fail(job, describe(exc), "permanent", retry=False)
        return self.fail(job, describe(exc), "error")
