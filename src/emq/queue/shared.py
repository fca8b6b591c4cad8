"""What ``Queue`` and ``AsyncQueue`` share that does no I/O: id minting state, job specs and
the batch checks made before anything is sent, lease-result checks."""

from __future__ import annotations

import logging
import random
import threading
import time
import weakref
from collections.abc import Iterable
from typing import Any

import redis

from ..calls.call import Arg
from ..calls.jobs import QueueCore
from ..calls.settings import REFRESH_S, conflicts, from_fields, merged
from ..errors import (
    ConflictInBatch,
    InvalidOption,
    InvalidPayload,
    JobNotFound,
    LeaseLost,
    ServerOutOfMemory,
    ServerRefused,
)
from ..model.config import QueueOptions
from ..model.ids import MINT_NODES, Minter
from ..model.records import Answer, EnqueuedId, JobSpec

log = logging.getLogger("emq.queue")
CHUNK = 1000  # jobs per enqueue script call: one indivisible step each
WINDOW = 4  # enqueue chunks in flight at once (pipelined, or on separate connections)
# Idempotent calls (enqueue: the ids are minted before sending; claim: it carries a request
# id) are re-sent with the same arguments while the server is unreachable, after these waits.
# Doubling, capped at 1 s so a failover (a promotion takes ~3 s) is noticed within a second.
RESEND_DELAYS_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0, 1.0)
UNREACHABLE: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    ConnectionError,
    TimeoutError,
)

# The least proto-max-bulk-len a server accepts (1mb): an argument this size or smaller always
# fits, so the server's own limit is read (CONFIG GET, once per pool) only for larger payloads.
BULK_FLOOR = 1024 * 1024
_BULK_LIMITS: weakref.WeakKeyDictionary[object, int | None] = weakref.WeakKeyDictionary()
GROUP_FIELDS = (
    "name", "payload", "priority", "max_attempts", "delay_ms", "key", "lane", "lifo",
)  # fmt: skip

# One id minter (one node lease) per connection pool, shared by every queue on it.
_MINTERS: weakref.WeakKeyDictionary[object, Minter] = weakref.WeakKeyDictionary()
_MINTERS_LOCK = threading.Lock()


def minter_for(pool: object) -> Minter:
    with _MINTERS_LOCK:
        minter = _MINTERS.get(pool)
        if minter is None:
            minter = _MINTERS[pool] = Minter()
        return minter


def lease_candidates(minter: Minter) -> list[int]:
    """Node numbers to try, the held one first: 0..1022 only (1023 names repeat ticks)."""
    others = random.sample(range(MINT_NODES), 32)
    return ([minter.node] if minter.node is not None else []) + others


def known_bulk_limit(pool: object) -> tuple[bool, int | None]:
    """``(known, limit)``: the server's proto-max-bulk-len as read for this pool, if it was."""
    return (True, _BULK_LIMITS[pool]) if pool in _BULK_LIMITS else (False, None)


def remember_bulk_limit(pool: object, reply: object) -> int | None:
    """Keep the limit from a ``CONFIG GET proto-max-bulk-len`` reply for this pool; a reply
    that is not a dict with the value (CONFIG refused by ACL or renamed away) keeps None:
    the limit is then unknown and not asked again."""
    value = reply.get("proto-max-bulk-len") if isinstance(reply, dict) else None
    limit = int(value) if isinstance(value, (str, int)) and str(value).isdigit() else None
    _BULK_LIMITS[pool] = limit
    return limit


def note_landed(exc: BaseException, landed: list[EnqueuedId]) -> None:
    """Attach to an error raised by a later chunk of an ``enqueue_many`` the ids that the
    earlier chunks admitted (``exc.landed``; empty when nothing was)."""
    exc.landed = list(landed)  # type: ignore[attr-defined]
    if landed:
        exc.add_note(
            f"{len(landed)} jobs of this batch were admitted by earlier chunks before this "
            "error (their ids are in the exception's .landed); the rest were not"
        )


def refuse_repeats(groups: list[list[Arg]]) -> None:
    """Refuse a batch where one explicit id stands for two different jobs (the server would
    admit the first chunk and refuse the one with the repeat). An identical repeat is kept: it
    is admitted once and reported as a duplicate, as a retry would be."""
    first: dict[Arg, list[Arg]] = {}
    for group in groups:
        if group[0]:
            seen = first.setdefault(group[0], group)
            if seen is not group and seen[1:] != group[1:]:
                pairs = zip(GROUP_FIELDS, seen[1:], group[1:], strict=True)
                differ = [field for field, a, b in pairs if a != b]
                raise ConflictInBatch(
                    f"job id {group[0]} appears twice in this batch with a different "
                    f"{' and '.join(differ)}; nothing was sent. Give each job its own id (or "
                    "none: emq mints one), or drop the repeat"
                )


def expect(answer: int | Answer, job_id: str, what: str) -> None:
    """Raise for a refused per-job answer: ``LOST`` as LeaseLost, ``GONE`` as JobNotFound."""
    if answer == Answer.LOST:
        raise LeaseLost(f"{what} refused: the lease on {job_id} is no longer held by this token")
    if answer == Answer.GONE:
        raise JobNotFound(
            f"{what} refused: job {job_id} has no row (completed, removed, or never existed)"
        )


class ShellBase:
    def __init__(self, name: str, options: QueueOptions | None) -> None:
        if options is not None and options.partitions > 1:
            from ..calls.partitions import refuse_plain

            refuse_plain(type(self).__name__, name, options.partitions)
        self.core = QueueCore(name, options)
        self._settled_at = -REFRESH_S  # when the stored settings were last read (never yet)
        self._told: set[tuple[str, object, object]] = set()  # the differences warned of

    def _adopt(self, fields: dict[str, str], asked: QueueOptions | None) -> bool:
        """Use the stored settings ``fields`` in place of the process's own; warn once of
        each setting ``asked`` differs in, and of each damaged field. True if the options in
        use changed."""
        self._settled_at = time.monotonic()
        stored, bad = from_fields(fields)
        for name in bad:
            self._tell(name, "damaged", fields.get(name), "")
        if asked is not None:
            for name, (mine, theirs) in conflicts(asked, stored).items():
                self._tell(name, "differs", mine, theirs)
        effective = merged(asked or self.core.options, stored)
        if effective == self.core.options:
            return False
        self.core.options = effective
        return True

    def _unread(self, exc: ServerRefused) -> None:
        """The stored settings could not be read: an ACL without the settings key's commands
        (NOPERM) or a server at maxmemory. The process goes on with its own options, says so
        once, and tries again later; any other refusal (a wrong password) is raised."""
        text = str(exc)
        if not isinstance(exc, ServerOutOfMemory) and "NOPERM" not in text:
            raise exc
        self._settled_at = time.monotonic()
        self._tell("settings", "unread", text, "")

    def _tell(self, name: str, how: str, mine: object, theirs: object) -> None:
        if (name, mine, theirs) in self._told:
            return
        self._told.add((name, mine, theirs))
        queue = self.core.name
        if how == "unread":
            what = (
                f"its stored settings cannot be read, so this process uses its own options "
                f"(docs/security.md has what each role needs): {mine}"
            )
        elif how == "damaged":
            what = f"its stored {name} {mine!r} cannot be read and is ignored; set it again"
        else:
            what = (
                f"this process asked for {name}={mine!r}, but the queue's stored setting is "
                f"{theirs!r}, which every process uses; change it with Queue.configure("
                f"{name}=...) or `emq configure {queue} --{name.replace('_', '-')} ...`"
            )
        log.warning(
            "queue %s: %s", queue, what,
            extra={"emq": {"event": "settings_" + how, "queue": queue, "setting": name}},
        )  # fmt: skip

    @property
    def name(self) -> str:
        return self.core.name

    def _groups(self, jobs: Iterable[JobSpec | tuple[str, Any]]) -> list[list[Arg]]:
        """Validate every job (before anything is sent) into its ARGV group."""
        group = self.core.job_group
        out: list[list[Arg]] = []
        explicit = False
        for job in jobs:
            if job.__class__ is tuple and len(job) == 2:
                out.append(group(job[0], job[1]))
            elif isinstance(job, JobSpec):
                out.append(self.core.job_spec(job))
                explicit = explicit or job.id is not None
            else:
                raise InvalidOption(
                    f"each job must be a JobSpec or a (name, payload) pair, got {job!r}"
                )
        if explicit:
            refuse_repeats(out)
        return out

    def _largest_payload(self, groups: list[list[Arg]]) -> int:
        """Bytes of the largest payload if it is over :data:`BULK_FLOOR` (then the server's own
        limit must be checked), else 0. Free when ``max_payload_bytes`` is at most 1 MiB."""
        if self.core.options.max_payload_bytes <= BULK_FLOOR:
            return 0
        largest = 0
        for group in groups:
            text = str(group[2])
            if len(text) * 4 > BULK_FLOOR:  # may be over 1 MiB in UTF-8
                largest = max(largest, len(text.encode("utf-8")))
        return largest if largest > BULK_FLOOR else 0

    @staticmethod
    def _refuse_oversized(size: int, limit: int | None) -> None:
        """Refuse a payload the server would refuse as too long, before it is sent (the server
        drops the connection, which would otherwise look like an outage and be re-sent)."""
        if limit is not None and size > limit:
            raise InvalidPayload(
                f"payload is {size} bytes encoded, over this server's proto-max-bulk-len of "
                f"{limit} bytes: the server would refuse it; nothing was sent. Store the data "
                "elsewhere and enqueue a reference, keep QueueOptions.max_payload_bytes at or "
                "below the server's limit, or raise the server's proto-max-bulk-len"
            )

    @staticmethod
    def _fill_ids(groups: list[list[Arg]], minted: list[str]) -> bool:
        """Put minted ids into the groups that have none; True if some id came from the caller
        (then chunks are sent one after another, so a conflict stops the rest)."""
        it = iter(minted)
        explicit = False
        for group in groups:
            if group[0]:
                explicit = True
            else:
                group[0] = next(it)
        return explicit

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"
