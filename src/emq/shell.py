"""What ``Queue`` and ``AsyncQueue`` share that does no I/O: id minting state, job specs,
lease-result checks."""

from __future__ import annotations

import random
import threading
import weakref
from collections.abc import Iterable
from typing import Any

import redis

from .calls import Arg, QueueCore
from .config import QueueOptions
from .errors import InvalidOption, LeaseLost
from .ids import NODES, Minter
from .records import JobSpec

DEFAULT_LEASE_MS = 30_000
CHUNK = 1000  # jobs per enqueue script call: one indivisible step each
WINDOW = 4  # enqueue chunks in flight at once (pipelined, or on separate connections)
# Idempotent calls (enqueue: the ids are minted before sending; claim: it carries a request
# id) are re-sent with the same arguments while the server is unreachable, after these waits.
RESEND_DELAYS_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2)
UNREACHABLE: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    ConnectionError,
    TimeoutError,
)

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
    others = random.sample(range(NODES), 32)
    return ([minter.node] if minter.node is not None else []) + others


def expect(held: bool | int | str, job_id: str, what: str) -> None:
    if held in (False, 0, "lost"):
        raise LeaseLost(f"{what} refused: the lease on {job_id} is no longer held by this token")


class ShellBase:
    def __init__(self, name: str, options: QueueOptions | None) -> None:
        self.core = QueueCore(name, options)

    @property
    def name(self) -> str:
        return self.core.name

    def _groups(self, jobs: Iterable[JobSpec | tuple[str, Any]]) -> list[list[Arg]]:
        """Validate every job (before anything is sent) into its ARGV group."""
        group = self.core.job_group
        out: list[list[Arg]] = []
        for job in jobs:
            if job.__class__ is tuple and len(job) == 2:
                out.append(group(job[0], job[1]))
            elif isinstance(job, JobSpec):
                out.append(self.core.job_spec(job))
            else:
                raise InvalidOption(
                    f"each job must be a JobSpec or a (name, payload) pair, got {job!r}"
                )
        return out

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
