"""A task's function as a JSON object of named arguments: plain code, no I/O.

A task's payload is the JSON object of the arguments a call gave, each under its parameter's
name (``send(to="a@b")`` and ``send("a@b")`` both store ``{"to": "a@b"}``); defaults that
were not given are not stored, so the worker applies its own. :class:`Signature` checks a
call against the function's signature before anything is sent (:meth:`Signature.payload`),
and turns a claimed payload back into the call (:meth:`Signature.call_args`).

The shapes it takes (docs/tasks.md, Parameters):

- a first parameter named ``ctx`` or annotated :class:`~emq.JobContext` is the job's context,
  given by the worker, never part of the payload;
- positional-only parameters are stored by name like the others;
- ``**kwargs`` holds the payload's keys that name no parameter;
- ``*args`` is refused when the task is made: a JSON object has no place for unnamed values;
- a parameter annotated with a dataclass (or a pydantic model) is stored as its JSON object
  and rebuilt into its class on the worker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import Any

from ..errors import InvalidArguments, InvalidOption, InvalidPayload
from ..model.payloads import encode_payload
from .child import HandlerRef
from .context import JobContext
from .options import Permanent

_NO_LIMIT = 1 << 62


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """The function's (or dataclass's) resolved annotations. When one cannot be resolved (a
    class named in a string that its module does not define at top level), the others are
    resolved one by one and that one stays a string: it is then not rebuilt."""
    try:
        return typing.get_type_hints(fn)
    except Exception:
        pass
    scope = getattr(fn, "__globals__", None)
    if scope is None:
        scope = vars(inspect.getmodule(fn) or typing)
    out = {}
    for key, ann in getattr(fn, "__annotations__", {}).items():
        try:
            out[key] = eval(ann, scope) if isinstance(ann, str) else ann
        except Exception:
            out[key] = ann
    return out


def _is_model(ann: Any) -> bool:
    """A class whose instances the payload carries as a JSON object: a dataclass, or a
    pydantic model (recognised by its methods, so pydantic is never imported here)."""
    if not isinstance(ann, type):
        return False
    return dataclasses.is_dataclass(ann) or (
        hasattr(ann, "model_validate") and hasattr(ann, "model_dump")
    )


def _is_ctx(name: str, param: inspect.Parameter, ann: Any) -> bool:
    """The first parameter is the job's context: annotated ``JobContext``, or named ``ctx``
    (then unannotated, or annotated ``JobContext`` or ``Any``)."""
    if param.kind not in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
        return False
    if ann is JobContext or (isinstance(ann, str) and ann.rpartition(".")[2] == "JobContext"):
        return True
    if param.name != "ctx":
        return False
    if ann in (param.empty, Any, "Any", "typing.Any"):
        return True
    raise InvalidOption(
        f"task {name!r}: its first parameter ctx is the job's context, so annotate it "
        f"JobContext, not {ann!r} (or rename it to make it an argument)"
    )


class Signature:
    """How one task's function is called from a JSON object (see the module's docstring)."""

    __slots__ = ("_models", "_positional", "_sig", "_var_kw", "name", "takes_ctx")

    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        self.name = name
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError) as exc:
            raise InvalidOption(f"task {name!r}: its signature cannot be read ({exc})") from None
        hints = _hints(fn)
        params = list(sig.parameters.values())
        first = params[0] if params else None
        self.takes_ctx = first is not None and _is_ctx(
            name, first, hints.get(first.name, first.annotation)
        )
        if self.takes_ctx:
            params = params[1:]
        for p in params:
            if p.kind is p.VAR_POSITIONAL:
                raise InvalidOption(
                    f"task {name!r}: *{p.name} cannot be stored in a JSON object of named "
                    "arguments; give each argument a parameter (or take a list)"
                )
        self._sig = sig.replace(parameters=params)
        self._positional = tuple(p.name for p in params if p.kind is p.POSITIONAL_ONLY)
        self._var_kw = next((p.name for p in params if p.kind is p.VAR_KEYWORD), None)
        models = {}
        for p in params:
            ann = hints.get(p.name, p.annotation)
            if p.kind is not p.VAR_KEYWORD and _is_model(ann):
                models[p.name] = ann
        self._models: dict[str, type] = models

    # -- the producer's side --------------------------------------------------------------

    def payload(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The JSON object for a call with ``args`` and ``kwargs``, or
        :class:`~emq.errors.InvalidArguments` naming the task and the argument."""
        try:
            bound = self._sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidArguments(f"task {self.name!r}: {self._misfit(kwargs, exc)}") from None
        given = bound.arguments
        if self._var_kw is None and not self._models:
            return dict(given)
        out: dict[str, Any] = {}
        for key, value in given.items():
            if key == self._var_kw:
                out.update(value)
            elif key in self._models:
                out[key] = self._dump(key, self._models[key], value)
            else:
                out[key] = value
        return out

    def _misfit(self, kwargs: dict[str, Any], exc: TypeError) -> str:
        """Why a call does not fit: an unknown keyword first (``bind`` would only say that a
        required one is missing), then the parameters taken."""
        names = [p for p in self._sig.parameters if p != self._var_kw]
        unknown = [k for k in kwargs if k not in self._sig.parameters]
        why = str(exc)
        if unknown and self._var_kw is None:
            why = f"unknown argument {unknown[0]!r}"
        return f"{why} (it takes: {', '.join(names) or 'no arguments'})"

    def _dump(self, key: str, cls: type, value: Any) -> Any:
        """A model argument as its JSON object; a dict given instead is checked by building
        the class from it."""
        try:
            if not isinstance(value, cls):
                value = _load(cls, value)
            if dataclasses.is_dataclass(value):
                return dataclasses.asdict(value)  # type: ignore[arg-type]
            return value.model_dump(mode="json")
        except Exception as exc:
            raise InvalidArguments(
                f"task {self.name!r}: argument {key!r} cannot be read as {cls.__name__}: "
                f"{_line(exc)}"
            ) from None

    def refusal(self, payload: dict[str, Any], exc: InvalidPayload) -> InvalidPayload:
        """The error for a payload the queue refused: the argument that is not JSON, when one
        alone is at fault (only run on that path); else the queue's own reason, named."""
        for key, value in payload.items():
            try:
                encode_payload({key: value}, _NO_LIMIT)
            except InvalidPayload as one:
                return InvalidArguments(f"task {self.name!r}: argument {key!r}: {one}")
        return InvalidPayload(f"task {self.name!r}: {exc}")

    # -- the worker's side ----------------------------------------------------------------

    def call_args(self, payload: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call for a claimed payload, or :class:`~emq.Permanent` (the job fails with no
        retry: another attempt would get the same payload) when it does not fit."""
        if payload is None:
            payload = {}
        if not isinstance(payload, dict):
            raise Permanent(
                f"task {self.name!r} takes a JSON object of its arguments, got "
                f"{type(payload).__name__}"
            )
        args: list[Any] = []
        if self._positional:
            payload = dict(payload)
            for key in self._positional:
                if key not in payload:
                    break
                args.append(payload.pop(key))
        try:
            bound = self._sig.bind(*args, **payload)
        except TypeError as exc:
            why = self._misfit(payload, exc)
            raise Permanent(f"task {self.name!r} cannot take its payload: {why}") from None
        for key, cls in self._models.items():
            if key in bound.arguments:
                try:
                    bound.arguments[key] = _load(cls, bound.arguments[key])
                except Exception as exc:
                    raise Permanent(
                        f"task {self.name!r} cannot take its payload: argument {key!r} "
                        f"cannot be read as {cls.__name__}: {_line(exc)}"
                    ) from None
        return bound.args, bound.kwargs


def _load(cls: type, value: Any) -> Any:
    """An instance of ``cls`` from its JSON object: a pydantic model validates it; a dataclass
    is built field by field, its fields annotated with dataclasses rebuilt in turn."""
    if not dataclasses.is_dataclass(cls):
        return cls.model_validate(value)  # type: ignore[attr-defined]
    if not isinstance(value, dict):
        raise TypeError(f"expected a JSON object, got {type(value).__name__}")
    hints = _hints(cls)
    fields = {}
    for f in dataclasses.fields(cls):
        if f.name in value:
            ann = hints.get(f.name, f.type)
            item = value[f.name]
            fields[f.name] = _load(ann, item) if _is_model(ann) and item is not None else item
    unknown = set(value) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise TypeError(f"unknown fields {sorted(unknown)}")
    return cls(**fields)


def _line(exc: BaseException) -> str:
    """An error on one line (a pydantic one spans several), at most 300 characters."""
    return " ".join(str(exc).split())[:300] or type(exc).__name__


class ChildTask:
    """A task's handler under ``isolation="process"``: ``handler(payload) -> value``, run in
    the child (:mod:`.children`), which loads the function by its reference (``target``: a
    :class:`~.child.HandlerRef`, or a callable that pickles) and rebuilds the signature from
    it, once per child."""

    __slots__ = ("_fn", "_sig", "name", "target")

    def __init__(self, name: str, target: Any) -> None:
        self.name, self.target = name, target
        self._fn: Callable[..., Any] | None = None
        self._sig: Signature | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (ChildTask, (self.name, self.target))

    def __call__(self, payload: Any) -> Any:
        fn, sig = self._fn, self._sig
        if fn is None or sig is None:
            target = self.target
            fn = self._fn = target.load() if isinstance(target, HandlerRef) else target
            sig = self._sig = Signature(self.name, fn)
        args, kwargs = sig.call_args(payload)
        value = fn(*args, **kwargs)
        return asyncio.run(value) if inspect.iscoroutine(value) else value
