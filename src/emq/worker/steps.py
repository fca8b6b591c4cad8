"""One attempt's durable steps: what ``ctx.step`` and ``await ctx.astep`` do (docs/steps.md).

Guarantees (each one tested against real servers):

- **A recorded step never runs again for its job.** ``fn`` runs, then its result is recorded
  in the job's row in one script call fenced by the lease token (``step.lua``); every later
  run of the job (a retry, a recovery after a stall, after ``ctx.sleep``) gets the recorded
  result back instead of running ``fn``.
- **The step that was running when its worker died runs again**, and a step whose side
  effect happened before its record landed can repeat it (at least once, G6): keep steps
  idempotent.
- **A stale attempt records nothing.** A record refused because this attempt no longer holds
  the lease raises :class:`~emq.errors.LeaseLost` in the handler; the step's value is dropped.
- **A failed step is not recorded**: its exception propagates as usual (the attempt fails and
  retries per its policy) after a ``step_failed`` event is appended (fenced; best effort:
  a refusal or a server error there never hides the step's own exception).
- **Reads are lazy**: the recorded steps are read once per attempt (one ``HGETALL`` of the
  row), on its first step; a handler that uses no step pays nothing.

The value a step returns is the JSON round trip of ``fn``'s value (decoded from the text that
is recorded), on the first run as on every later one, so a handler sees the same value either
way.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import threading
import time
import traceback
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from ..calls.jobs import QueueCore
from ..calls.steps import check_step_name, encode_step_result
from ..errors import EmqError, InvalidOption, LeaseLost
from ..model.records import Answer, Step, UnreadablePayload


class StepStore(Protocol):
    """Where steps are recorded and read: the job's ``AsyncQueue``."""

    core: QueueCore

    async def send_step(
        self, job_id: str, token: int, name: str, text: str, took_ms: int, *, ok: bool
    ) -> int | Answer: ...

    async def job_steps(self, job_id: str) -> tuple[Step, ...]: ...


class Steps:
    """The durable steps of one attempt of one job: the recorded ones (read on first use)
    and the names this attempt has used."""

    __slots__ = ("_id", "_lock", "_loop", "_quiet", "_recorded", "_store", "_token", "_used")

    def __init__(
        self,
        store: StepStore,
        loop: asyncio.AbstractEventLoop,
        job_id: str,
        token: int,
        quiet: tuple[type[BaseException], ...] = (),
    ) -> None:
        self._store = store
        self._quiet = quiet  # raised by a step, never reported as its failure (ctx.sleep)
        self._loop = loop
        self._id = job_id
        self._token = token
        self._recorded: dict[str, Step] | None = None
        self._used: set[str] = set()
        self._lock = threading.Lock()

    def run(self, name: str, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """``ctx.step`` of a sync handler, in its own thread (the server is asked through
        the worker's event loop)."""
        name = self._claim(name)
        if self._recorded is None:
            self._recorded = self._wait(self._read())
        done = self._recorded.get(name)
        if done is not None:
            return _returned(done)
        started = time.monotonic()
        try:
            text = encode_step_result(fn(*args, **kwargs), self._limit)
        except Exception as exc:
            if not isinstance(exc, self._quiet):
                with contextlib.suppress(Exception):
                    self._wait(self._failed(name, exc, started))
            raise
        return self._wait(self._record(name, text, started))

    async def arun(self, name: str, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """``await ctx.astep`` of an async handler, on the worker's event loop; ``fn`` may be
        a coroutine function or a plain one (a plain one runs on the loop: keep it short)."""
        name = self._claim(name)
        if self._recorded is None:
            self._recorded = await self._read()
        done = self._recorded.get(name)
        if done is not None:
            return _returned(done)
        started = time.monotonic()
        try:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
            text = encode_step_result(value, self._limit)
        except Exception as exc:
            if not isinstance(exc, self._quiet):
                with contextlib.suppress(Exception):
                    await self._failed(name, exc, started)
            raise
        return await self._record(name, text, started)

    @property
    def _limit(self) -> int:
        return self._store.core.options.max_payload_bytes

    def _claim(self, name: str) -> str:
        """``name``, checked, and used once per attempt (a second use raises at once)."""
        name = check_step_name(name)
        with self._lock:
            if name in self._used:
                raise InvalidOption(
                    f"step {name!r} ran already in this run of {self._id}: give each step "
                    "of a job its own name"
                )
            self._used.add(name)
        return name

    def _wait(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _read(self) -> dict[str, Step]:
        return {s.name: s for s in await self._store.job_steps(self._id)}

    async def _record(self, name: str, text: str, started: float) -> Any:
        took = _ms_since(started)
        answer = await self._store.send_step(self._id, self._token, name, text, took, ok=True)
        if answer.__class__ is not int:
            raise LeaseLost(
                f"step {name!r} not recorded: the lease on {self._id} (token {self._token}) "
                f"is no longer held ({answer})"
            )
        value = json.loads(text)
        if self._recorded is not None:
            self._recorded[name] = Step(name, value, int(answer))
        return value

    async def _failed(self, name: str, exc: BaseException, started: float) -> None:
        error = "".join(traceback.format_exception_only(exc)).strip()
        await self._store.send_step(
            self._id, self._token, name, error, _ms_since(started), ok=False
        )


def _returned(step: Step) -> Any:
    """A recorded step's result, or :class:`~emq.errors.EmqError` if its stored text is
    damaged (edited by hand): it cannot be returned, and running it again would break the
    promise that a recorded step never runs again."""
    if isinstance(step.result, UnreadablePayload):
        raise EmqError(f"recorded step {step.name!r} is damaged: {step.result.why}")
    return step.result


def _ms_since(started: float) -> int:
    return max(0, round((time.monotonic() - started) * 1000))
