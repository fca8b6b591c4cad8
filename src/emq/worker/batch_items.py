"""Typed batch tasks' items: ``@tasks.task(batch_size=N)`` on a function of a list of items.

A batch task's function takes ``list[Item]`` (after an optional ``ctx``, the batch's
:class:`~.batches.BatchContext`); each job carries one item, enqueued with
``task.enqueue(item)`` (checked by mypy against ``Item``). An item annotated with a dataclass
or a pydantic model is stored as its JSON object and rebuilt on the worker, as a task's
argument is (:mod:`.signature`); any other item is stored as it is (it must be JSON). A job
whose stored item cannot be rebuilt fails on its own with no retry; the function is called
with the others (docs/batches.md, Typed batch tasks).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import InvalidArguments, InvalidOption, InvalidPayload
from .batches import BatchContext, BatchResult
from .options import Permanent
from .signature import Signature, _hints, _is_model, _line, _load

T = TypeVar("T")
R = TypeVar("R")


class ItemSignature(Signature):
    """How a batch task's jobs are written and read: one item per job."""

    __slots__ = ("_item",)

    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        self.name = name
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError) as exc:
            raise InvalidOption(f"task {name!r}: its signature cannot be read ({exc})") from None
        hints = _hints(fn)
        self.takes_ctx = (
            bool(params)
            and len(params) == 2
            and (params[0].name == "ctx" or hints.get(params[0].name) is BatchContext)
        )
        rest = params[1:] if self.takes_ctx else params
        if len(rest) != 1 or rest[0].kind not in (
            rest[0].POSITIONAL_ONLY,
            rest[0].POSITIONAL_OR_KEYWORD,
        ):
            raise InvalidOption(
                f"batch task {name!r} takes one list of items (after an optional ctx): "
                f"def {getattr(fn, '__name__', name)}(items: list[Item]) -> ..."
            )  # fmt: skip
        args = typing.get_args(hints.get(rest[0].name))
        item = args[0] if len(args) == 1 else None
        self._item: type | None = item if _is_model(item) else None

    def payload(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One job's item: its JSON object for a model, else the item itself."""
        if len(args) != 1 or kwargs:
            raise InvalidArguments(f"batch task {self.name!r} enqueues one item per job")
        item, cls = args[0], self._item
        if cls is None:
            return item
        return self._dump("item", cls, item)

    def refusal(self, payload: Any, exc: InvalidPayload) -> InvalidPayload:
        return InvalidPayload(f"batch task {self.name!r}: {exc}")

    def load(self, payload: Any) -> Any:
        """A claimed job's item, or :class:`~emq.Permanent` when it cannot be rebuilt."""
        cls = self._item
        if cls is None:
            return payload
        try:
            return _load(cls, payload)
        except Exception as exc:
            raise Permanent(
                f"batch task {self.name!r} cannot read its item as {cls.__name__}: {_line(exc)}"
            ) from None


def batch_handler(sig: ItemSignature, fn: Callable[..., Any], is_async: bool) -> Any:
    """``handler(payloads, ctx)`` as ``Worker.register`` takes it for a batch: each payload
    rebuilt into its item; one that cannot be is failed alone, and the function gets the
    rest, its :class:`BatchResult` indexes mapped back to the batch's."""

    def split(payloads: list[Any]) -> tuple[list[Any], list[int], dict[int, str]]:
        items, kept, bad = [], [], {}
        for i, payload in enumerate(payloads):
            try:
                items.append(sig.load(payload))
                kept.append(i)
            except Permanent as exc:
                bad[i] = str(exc)
        return items, kept, bad

    def call(items: list[Any], ctx: BatchContext, kept: list[int]) -> Any:
        if sig.takes_ctx:
            ctx = BatchContext([ctx.jobs[i] for i in kept])
            return fn(ctx, items)
        return fn(items)

    if is_async:

        async def run_async(payloads: list[Any], ctx: BatchContext) -> Any:
            items, kept, bad = split(payloads)
            value = await call(items, ctx, kept) if items else None
            return _merged(value, kept, bad, len(payloads))

        return run_async

    def run(payloads: list[Any], ctx: BatchContext) -> Any:
        items, kept, bad = split(payloads)
        value = call(items, ctx, kept) if items else None
        return _merged(value, kept, bad, len(payloads))

    return run


def _merged(value: Any, kept: list[int], bad: dict[int, str], size: int) -> Any:
    """The function's return for the jobs it got, as the whole batch's (bad items: fail)."""
    if not bad:
        return value
    result = value if isinstance(value, BatchResult) else None
    if result is None and isinstance(value, list | tuple) and len(value) == len(kept):
        result = BatchResult(results=value)
    if result is None:
        results: list[Any] | None = [value] * size
    else:
        result.check(len(kept))
        results = None
        if result.results is not None:
            results = [None] * size
            for j, i in enumerate(kept):
                results[i] = result.results[j]
    retry = {kept[j]: e for j, e in (result.retry.items() if result else ())}
    fail = {**bad, **{kept[j]: e for j, e in (result.fail.items() if result else ())}}
    return BatchResult(results=results, retry=retry, fail=fail)
