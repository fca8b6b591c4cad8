"""The outbox: how a flow's child tells a parent in another queue (docs/flows.md).

A script can touch one slot only, and two queues may live on two cluster nodes. So a
child's end whose parent is in another queue is recorded in the child's own slot, in its
queue's ``outbox`` HASH, in the same step as the end itself (prelude ``flow_child_done``);
likewise a waiting parent cancelled or removed leaves a ``cancel:`` entry for each child
in another queue (prelude ``cancel_children``). Delivery is a second, idempotent step,
run by the maintenance beat of the queue that holds the outbox: :func:`plan` reads the
entries, each ``done:`` entry is counted in the parent's slot by ``deliver_flow.lua``
(only while the child is unfinished there, so a replay counts nothing), each ``cancel:``
entry is a ``cancel`` of the child in its queue, and only then are the entries deleted.
A crash between the steps delays the parent; it never loses or double-counts a child.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .calls import Arg, Call, QueueCore
from .cancel import Cancel, cancel_call, check_reason
from .ids import check_id
from .keys import QueueKeys

BATCH = 500  # entries read and delivered per call of deliver_outbox
ENDS = ("completed", "dead", "cancelled", "removed")  # a child's end, as flow_child_done writes it


@dataclass(slots=True)
class Plan:
    """What one read of an outbox asks for: ``done`` groups of ``deliver_flow`` per parent
    queue, ``cancels`` as (queue, job id, reason), and ``fields``, the entries to delete
    once all of it was sent (``broken`` ones, unreadable, are deleted unsent)."""

    done: dict[str, list[Arg]] = field(default_factory=dict)
    cancels: list[tuple[str, str, str]] = field(default_factory=list)
    fields: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Delivered:
    """One round of delivery: ``entries`` sent (and deleted), ``counted`` of them new to
    their parent (a replay counts 0), ``cancels`` sent, ``broken`` entries dropped."""

    entries: int = 0
    counted: int = 0
    cancels: int = 0
    broken: tuple[str, ...] = ()


def plan(entries: dict[str, str]) -> Plan:
    """Sort the raw outbox entries (field -> JSON) into deliveries."""
    out = Plan()
    for name, text in entries.items():
        try:
            entry = json.loads(text)
            queue = QueueKeys.of(entry["q"]).queue  # each value checked here, so an entry
            if name.startswith("done:"):  # written by hand can never stop a beat later
                if entry["s"] not in ENDS or not isinstance(entry["r"], str):
                    raise ValueError(name)
                group: list[Arg] = [check_id(entry["p"]), str(entry["c"]), entry["s"],
                                    str(entry["f"]), entry["r"]]  # fmt: skip
                out.done.setdefault(queue, []).extend(group)
            elif name.startswith("cancel:"):
                out.cancels.append((queue, check_id(entry["j"]), check_reason(entry["r"])))
            else:
                raise ValueError(name)
        except (ValueError, KeyError, TypeError):  # InvalidInput is a ValueError
            out.broken.append(name)
            continue
        out.fields.append(name)
    return out


def deliver_call(core: QueueCore, parent_queue: str, groups: list[Arg]) -> Call[int]:
    """The ``deliver_flow`` call that counts ``groups`` in ``parent_queue``'s slot."""
    k = QueueKeys.of(parent_queue)
    keys = [k.pending, k.events, k.wake, k.meta]
    return Call("deliver_flow", keys, [k.prefix, core.options.events_maxlen, *groups], int)


def cancel_in(core: QueueCore, queue: str, job_id: str, reason: str) -> Call[Cancel]:
    """The ``cancel`` of a child in ``queue`` that a cancelled parent asked for."""
    return cancel_call(QueueCore(queue, core.options), job_id, reason)
