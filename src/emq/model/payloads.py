"""Payloads as JSON text: what an enqueue accepts, refused before anything is sent.

A payload is accepted only if a worker gets back exactly what was given (up to JSON's own
conversion of tuples into lists):

- it is JSON-serialisable, with no NaN or infinity, and its text is valid Unicode;
- every key of every dict in it is a string (``{1: 'a'}`` would come back as ``{'1': 'a'}``);
  a handler's result and a progress value (``any_keys=True``) may have other keys, as long as
  none is lost in JSON form (``{1: 'a', '1': 'b'}`` would come back as ``{'1': 'b'}``);
- it nests at most :data:`MAX_DEPTH` lists and dicts deep, so any worker can decode it (Python's
  decoder recurses per level: a payload that can be written but not read would fail every claim
  that takes it);
- its UTF-8 text fits the queue's ``max_payload_bytes``.

The checks beyond encoding cost a few C-level string scans on the JSON text; the exact walk over
the payload runs only when those scans cannot rule a problem out (a dict key that could be a
non-string key, or more than :data:`MAX_DEPTH` containers).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import InvalidPayload

MAX_DEPTH = 256  # nesting levels of lists and dicts a payload may have

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
# A non-string key (int, float, bool, None) is written as "<digit or ->...", "true", "false" or
# "null" followed by ':'. No match in the text: every key was a string, so none can collide.
_MAYBE_NON_STR_KEY = re.compile(r'"(?:[-0-9][^"]*|true|false|null)":')
_CONTAINERS = (dict, list, tuple)


def encode_payload(payload: Any, limit: int, *, any_keys: bool = False) -> str:
    """The payload's JSON text, or :class:`InvalidPayload` saying what to fix. ``any_keys``:
    a dict key may be a number, a bool or None (written as a string) unless two collide."""
    try:
        text = _dumps(payload)
    except (TypeError, ValueError) as exc:
        raise InvalidPayload(f"payload is not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise InvalidPayload(
            f"payload nests lists and dicts too deeply to encode; at most {MAX_DEPTH} "
            "levels are accepted (flatten it, or store it elsewhere and enqueue a reference)"
        ) from None
    cls = payload.__class__
    if cls is dict and text.find("{", 1) < 0:  # a flat dict: only its own keys can collide
        try:
            "".join(payload)  # TypeError unless every key is a str
        except TypeError:
            _refuse_bad_shape(payload, any_keys)
        if len(text) > 2 * MAX_DEPTH and text.count("[") >= MAX_DEPTH:
            _refuse_bad_shape(payload, any_keys)
    elif cls is not str and isinstance(payload, _CONTAINERS):
        _check_shape(payload, text, any_keys)
    if text.isascii():
        size = len(text)
    else:
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise InvalidPayload(
                f"payload holds text that is not valid Unicode (a lone surrogate?): {exc}"
            ) from None
    if size > limit:
        raise InvalidPayload(
            f"payload is {size} bytes encoded, over the limit of {limit} "
            "(raise QueueOptions.max_payload_bytes or store the data elsewhere)"
        )
    return text


def _check_shape(payload: Any, text: str, any_keys: bool) -> None:
    """Refuse keys that are not strings (or, with ``any_keys``, collide) and over-deep nesting;
    the exact walk runs only when cheap scans of ``text`` cannot rule them out (a '{' or '['
    inside a string only makes them cautious)."""
    dicts = text.count("{")
    if dicts == 0:
        keys_ok = True
    elif dicts == 1 and isinstance(payload, dict):  # the only dict: are its keys all str?
        try:
            "".join(dict.keys(payload))
            keys_ok = True
        except TypeError:
            keys_ok = False
    else:
        keys_ok = _MAYBE_NON_STR_KEY.search(text) is None
    if keys_ok and (len(text) <= 2 * MAX_DEPTH or dicts + text.count("[") <= MAX_DEPTH):
        return
    _refuse_bad_shape(payload, any_keys)


def _refuse_bad_shape(payload: Any, any_keys: bool) -> None:
    problem = shape_problem(payload, any_keys=any_keys)
    if problem:
        raise InvalidPayload(problem)


def shape_problem(payload: Any, *, any_keys: bool = False) -> str | None:
    """The exact check: what is wrong with the payload's shape, or None. Iterative, so any
    depth is walked without recursion."""
    stack: list[tuple[Any, int, tuple[Any, ...]]] = [(payload, 1, ())]
    while stack:
        obj, depth, path = stack.pop()
        if depth > MAX_DEPTH:
            return (
                f"payload nests lists and dicts more than {MAX_DEPTH} levels deep (at "
                f"{_where(path)}); flatten it, or store it elsewhere and enqueue a reference"
            )
        if isinstance(obj, dict):
            items = list(dict.items(obj))
            if not all(isinstance(k, str) for k, _ in items):
                lost = _lost_key(items) if any_keys else _not_a_string(items)
                if lost:
                    return f"payload at {_where(path)}: {lost}"
        else:
            items = list(enumerate(obj))
        for key, value in items:
            if isinstance(value, _CONTAINERS):
                stack.append((value, depth + 1, (path, key)))
    return None


def _json_key(key: Any) -> str:
    """The string JSON writes for a dict key."""
    return key if isinstance(key, str) else str(next(iter(json.loads(_dumps({key: 0})))))


def _not_a_string(items: list[tuple[Any, Any]]) -> str:
    key = next(k for k, _ in items if not isinstance(k, str))
    return (
        f"key {key!r} ({type(key).__name__}) is not a string; JSON object keys are strings, so "
        f"it would come back as {_json_key(key)!r}: use string keys"
    )


def _lost_key(items: list[tuple[Any, Any]]) -> str | None:
    seen: dict[str, Any] = {}
    for key, _ in items:
        name = _json_key(key)
        if name in seen:
            return (
                f"keys {seen[name]!r} and {key!r} both become the JSON key {name!r}, so one "
                "would be lost (JSON object keys are strings); use distinct string keys"
            )
        seen[name] = key
    return None


def _where(path: tuple[Any, ...]) -> str:
    keys: list[Any] = []
    while path:
        path, key = path
        keys.append(key)
    return "payload" + "".join(f"[{k!r}]" for k in reversed(keys))
