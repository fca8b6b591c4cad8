"""What ``Queue`` and ``AsyncQueue`` share that does no I/O: id minting state, job specs,
lease-result checks."""

from __future__ import annotations

import random
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from .calls import Arg, JobSpec, QueueCore
from .config import QueueOptions
from .errors import InvalidOption, LeaseLost
from .ids import NODES, Minter

DEFAULT_LEASE_MS = 30_000

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


def as_spec(job: JobSpec | tuple[str, Any]) -> JobSpec:
    if isinstance(job, JobSpec):
        return job
    if isinstance(job, tuple) and len(job) == 2:
        return JobSpec(name=job[0], payload=job[1])
    raise InvalidOption(f"each job must be a JobSpec or a (name, payload) pair, got {job!r}")


def expect(held: bool | int | str, job_id: str, what: str) -> None:
    if held in (False, 0, "lost"):
        raise LeaseLost(f"{what} refused: the lease on {job_id} is no longer held by this token")


class ShellBase:
    def __init__(self, name: str, options: QueueOptions | None) -> None:
        self.core = QueueCore(name, options)

    @property
    def name(self) -> str:
        return self.core.name

    def _groups(self, specs: Sequence[JobSpec]) -> list[list[Arg]]:
        return [self.core.job_spec(spec) for spec in specs]

    def _fill_ids(self, groups: list[list[Arg]], minted: list[str]) -> None:
        it = iter(minted)
        for group in groups:
            if not group[0]:
                group[0] = next(it)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"
