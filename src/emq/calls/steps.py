"""Durable steps, I/O-free: what a step's name and result may be, and the builder of
``step.lua`` with the reading of its reply (docs/steps.md).

- **A name** is a string of 1 to :data:`MAX_STEP_NAME` characters with no control
  character (so it never holds the separators of a stream entry, emq.model.events), unique
  within its job: it names the row field ``step:<name>``.
- **A result** is what a handler's return value may be (:func:`encode_step_result`: JSON,
  at most the queue's ``max_payload_bytes``); refused before anything is sent.
- **Recorded** in one script call fenced by the lease token, with a ``step`` event; a
  failed step only appends ``step_failed`` (fenced too), nothing in the row. A name the row
  has recorded already is refused by the script (:class:`~emq.errors.WrongState`).
"""

from __future__ import annotations

import unicodedata
from typing import Any

from ..errors import InvalidOption, InvalidPayload
from ..model.checks import check_int, shown
from ..model.ids import check_id
from ..model.payloads import encode_payload
from ..model.records import Answer
from .call import Arg, Call, check_text, clean_text
from .jobs import QueueCore

MAX_STEP_NAME = 200  # characters of a step's name
MAX_STEP_ERROR = 1_000  # characters of a failed step's error kept in its event
OK, FAILED = "ok", "failed"  # step.lua's modes

_ANSWERS = {a.value: a for a in Answer}


def check_step_name(name: object) -> str:
    """A step's name: 1 to :data:`MAX_STEP_NAME` characters, valid Unicode, no control
    character; else :class:`~emq.errors.InvalidOption` saying what to fix."""
    text = check_text("a step's name", name, MAX_STEP_NAME)
    if not text.isprintable() and any(unicodedata.category(c) == "Cc" for c in text):
        raise InvalidOption(f"a step's name must hold no control character, got {shown(name)}")
    return text


def encode_step_result(value: Any, limit: int) -> str:
    """A step's return value as JSON text (a handler's result's rules, at most ``limit``
    bytes: the queue's ``max_payload_bytes``), or :class:`InvalidPayload` saying what to fix."""
    try:
        return encode_payload(value, limit, any_keys=True)
    except InvalidPayload as exc:
        message = str(exc).replace("payload", "step's result", 1)
        raise InvalidPayload(f"the step's return value is not recorded: {message}") from None


def step_call(
    core: QueueCore, job_id: str, token: int, name: str, text: str, took_ms: int, *, ok: bool
) -> Call[int | Answer]:
    """Record a finished step (``ok``: ``text`` is its result's JSON text, from
    :func:`encode_step_result`) or a failed one (``text``: its error, cut to
    :data:`MAX_STEP_ERROR`): when (server ms), or ``Answer.LOST`` / ``Answer.GONE``."""
    k = core.keys
    value = text if ok else clean_text(text, MAX_STEP_ERROR)
    args: list[Arg] = [
        k.prefix,
        core.options.events_maxlen,
        check_id(job_id),
        check_int("token", token, 1, 2**62),
        OK if ok else FAILED,
        check_step_name(name),
        value,
        check_int("took_ms", took_ms, 0),
    ]
    return Call("step", [k.active, k.events], args, _decode_recorded)


def _decode_recorded(reply: Any) -> int | Answer:
    return reply if reply.__class__ is int else _ANSWERS[reply]
