"""Flows: a parent job that waits for its children (docs/flows.md).

The I/O-free half: :func:`flow_plan` validates a whole tree before anything is sent and
:func:`flow_call` builds the one ``enqueue_flow`` script call that admits it, all or
nothing. A node with children waits in ``waiting`` until its last child finishes; the
finishing scripts (complete, fail, sweep_stalled, cancel, remove) keep the bookkeeping in
the same step as the child's own change (prelude ``flow_child_done``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .calls import MAX_CHUNK, Arg, Call, QueueCore
from .checks import shown
from .errors import InvalidOption
from .records import JobSpec

POLICIES = ("fail_parent", "ignore", "continue")
"""What a child's death does to its parent: ``fail_parent`` (the default: a parent that
combines its children's results should not run on a partial set unless asked to), ``ignore``
(counted as finished; the parent runs and sees it dead), ``continue`` (the parent waits
until the child is redriven and completes)."""

STATUSES = ("", "completed", "dead", "ignored", "removed", "cancelled")


@dataclass(frozen=True, slots=True)
class Flow:
    """A node of a tree: ``job`` runs after every one of ``children`` finished."""

    job: JobSpec
    children: Sequence[JobSpec | Flow] = ()


@dataclass(frozen=True, slots=True)
class FlowIds:
    """The ids ``enqueue_flow`` admitted, in the shape of the tree given: ``id`` is the
    node's, ``children`` the ids of its children in the order given (a leaf has none)."""

    id: str
    children: tuple[FlowIds, ...] = ()


@dataclass(frozen=True, slots=True)
class Child:
    """One child of a parent, as ``ctx.children()`` gives it: ``status`` is ``""`` while it
    is unfinished, else ``completed``, ``dead``, ``removed`` or ``cancelled``; ``result`` is
    its return value (None when it sent none)."""

    id: str
    status: str
    result: Any = None


@dataclass(slots=True)
class _Node:
    group: list[Arg]  # [id, name, payload, priority, max_attempts, lane, lifo]
    parent: int  # index of the parent node, -1 for the root
    policy: str
    children: list[int] = field(default_factory=list)


def flow_plan(core: QueueCore, parent: JobSpec, children: Sequence[JobSpec | Flow]) -> list[_Node]:
    """Validate the whole tree (a parent before its children); raises InvalidInput before
    anything is written. The nodes' ids are '' until minted (unless given)."""
    if not isinstance(parent, JobSpec):
        raise InvalidOption(f"a flow's parent must be a JobSpec, got {shown(parent)}")
    if isinstance(children, (str, bytes)) or not isinstance(children, Sequence) or not children:
        raise InvalidOption("enqueue_flow needs a non-empty list of children (JobSpec or Flow)")
    nodes: list[_Node] = []

    def add(spec: JobSpec, up: int, kids: Sequence[JobSpec | Flow]) -> None:
        if spec.delay_ms or spec.key is not None:
            raise InvalidOption("delay_ms and key are not supported in a flow yet")
        if up >= 0:
            if spec.queue is not None and spec.queue != core.name:
                raise InvalidOption(
                    f"child {spec.name!r} names queue {spec.queue!r}: children in another "
                    "queue are not supported yet"
                )
            if spec.on_failure not in POLICIES:
                raise InvalidOption(
                    f"on_failure must be one of {', '.join(POLICIES)}, got {shown(spec.on_failure)}"
                )
        g = core.job_group(
            spec.name, spec.payload, 0, spec.priority, spec.max_attempts, None, spec.id,
            spec.lane, spec.lifo,
        )  # fmt: skip
        me = len(nodes)
        nodes.append(_Node([g[0], g[1], g[2], g[3], g[4], g[7], g[8]], up, spec.on_failure))
        if len(nodes) > MAX_CHUNK:
            raise InvalidOption(f"at most {MAX_CHUNK} jobs in one flow")
        if up >= 0:
            nodes[up].children.append(me)
        if isinstance(kids, (str, bytes)) or not isinstance(kids, Sequence):
            raise InvalidOption(f"a Flow's children must be a list, got {shown(kids)}")
        for kid in kids:
            if isinstance(kid, Flow):
                if not isinstance(kid.job, JobSpec):
                    raise InvalidOption(f"a Flow's job must be a JobSpec, got {shown(kid.job)}")
                add(kid.job, me, kid.children)
            elif isinstance(kid, JobSpec):
                add(kid, me, ())
            else:
                raise InvalidOption(f"a child must be a JobSpec or a Flow, got {shown(kid)}")

    add(parent, -1, children)
    ids = [str(n.group[0]) for n in nodes if n.group[0]]
    if len(set(ids)) != len(ids):
        raise InvalidOption("an id repeats in the flow: give each job its own id")
    return nodes


def flow_call(core: QueueCore, nodes: list[_Node]) -> Call[int]:
    """The one enqueue_flow call of a planned tree whose ids are all set."""
    k = core.keys
    args: list[Arg] = [k.prefix, core.options.events_maxlen]
    for n in nodes:
        parent = "" if n.parent < 0 else nodes[n.parent].group[0]
        args += [*n.group, parent, n.policy, len(n.children)]
    keys = [k.pending, k.location("waiting"), k.events, k.wake, k.meta]
    return Call("enqueue_flow", keys, args, int)


def flow_ids(nodes: list[_Node], at: int = 0) -> FlowIds:
    """The tree of ids of planned (and minted) nodes, from node ``at``."""
    node = nodes[at]
    return FlowIds(str(node.group[0]), tuple(flow_ids(nodes, i) for i in node.children))


def decode_children(statuses: dict[str, str], results: dict[str, str]) -> list[Child]:
    """``ctx.children()``: flow:<id> and flow:<id>:results read together, in id order."""
    return [
        Child(cid, status, json.loads(results[cid]) if cid in results else None)
        for cid, status in sorted(statuses.items())
    ]
