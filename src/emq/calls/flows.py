"""Flows: a parent job that waits for its children (docs/flows.md).

The I/O-free half: :func:`flow_plan` validates a whole tree before anything is sent and
:func:`flow_steps` builds the ``enqueue_flow`` script calls that admit it: one per queue the
tree touches, each all or nothing, parents' steps first. A node with children waits in
``waiting`` until its last child finishes; the finishing scripts (complete, fail,
sweep_stalled, cancel, remove) keep the bookkeeping in the same step as the child's own
change (``flow_child_done``, ``lua/includes/flows.lua``), and a child in another queue
reaches its parent through its queue's outbox (below).

**The outbox**: how a flow's child tells a parent in another queue (docs/flows.md).

A script can touch one slot only, and two queues may live on two cluster nodes. So a
child's end whose parent is in another queue is recorded in the child's own slot, in its
queue's ``outbox`` HASH, in the same step as the end itself (``flow_child_done``,
``lua/includes/flows.lua``); likewise a waiting parent cancelled or removed leaves a
``cancel:`` entry for each child in another queue (``cancel_children``,
``lua/includes/cancel.lua``). Delivery is a second, idempotent step,
run by the maintenance beat of the queue that holds the outbox: :func:`plan` reads the
entries, each ``done:`` entry is counted in the parent's slot by ``deliver_flow.lua``
(only while the child is unfinished there, so a replay counts nothing), each ``cancel:``
entry is a ``cancel`` of the child in its queue, and only then are the entries deleted.
A crash between the steps delays the parent; it never loses or double-counts a child.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import DuplicateConflict, InvalidOption
from ..model.checks import shown
from ..model.ids import check_id
from ..model.keys import QueueKeys, check_queue_name
from ..model.records import JobSpec
from .call import Arg, Call
from .control import Cancel, cancel_call, check_reason
from .jobs import QueueCore

POLICIES = ("fail_parent", "ignore", "continue")
"""What a child's death does to its parent: ``fail_parent`` (the default: a parent that
combines its children's results should not run on a partial set unless asked to), ``ignore``
(counted as finished; the parent runs and sees it dead), ``continue`` (the parent waits
until the child is redriven and completes)."""

MAX_FLOW_CHILDREN = 10_000  # jobs under the root, all levels: one step admits them all


@dataclass(frozen=True, slots=True)
class Flow:
    """A node of a tree: ``job`` runs after every one of ``children`` finished."""

    job: JobSpec
    children: Sequence[JobSpec | Flow] = ()


@dataclass(frozen=True, slots=True)
class FlowIds:
    """The ids ``enqueue_flow`` admitted, in the shape of the tree given: ``id`` is the
    node's, ``children`` the ids of its children in the order given (a leaf has none);
    ``queue`` is the queue the node was admitted to."""

    id: str
    children: tuple[FlowIds, ...] = ()
    queue: str = ""


@dataclass(frozen=True, slots=True)
class Child:
    """One child of a parent, as ``ctx.children()`` gives it: ``status`` is ``""`` while it
    is unfinished, else ``completed``, ``dead``, ``removed`` or ``cancelled``; ``result`` is
    its return value (None when it sent none); ``queue`` is its queue when it is not the
    parent's (None when it is)."""

    id: str
    status: str
    result: Any = None
    queue: str | None = None


@dataclass(slots=True)
class _Node:
    group: list[Arg]  # [id, name, payload, priority, max_attempts, lane, lifo]
    parent: int  # index of the parent node, -1 for the root
    policy: str
    queue: str
    children: list[int] = field(default_factory=list)
    level: int = 0  # how many times the path from the root changes queue


def chain(*jobs: JobSpec | Flow) -> Flow:
    """``chain(a, b, c)``: ``b`` runs after ``a`` finished, ``c`` after ``b``; each reads the
    one before with ``ctx.children()``. The first may be a whole ``Flow`` (it finishes, all
    of it, before the second runs); the others are ``JobSpec``. A link that dies fails the
    rest (``on_failure="fail_parent"``, unless the link says otherwise)."""
    if len(jobs) < 2:
        raise InvalidOption("chain needs at least two jobs")
    link: JobSpec | Flow = jobs[0]
    for job in jobs[1:]:
        if not isinstance(job, JobSpec):
            raise InvalidOption(f"only a chain's first job may be a Flow, got {shown(job)}")
        link = Flow(job, [link])
    assert isinstance(link, Flow)
    return link


def group(jobs: Sequence[JobSpec | Flow], then: JobSpec) -> Flow:
    """``group([a, b, c], then=d)``: ``a``, ``b`` and ``c`` run in parallel and ``d`` runs
    once all of them finished (a chord), reading their results with ``ctx.children()``."""
    if not isinstance(then, JobSpec):
        raise InvalidOption(f"a group's then= must be a JobSpec, got {shown(then)}")
    return Flow(then, list(jobs) if isinstance(jobs, Sequence) else jobs)


def flow_plan(core: QueueCore, parent: JobSpec, children: Sequence[JobSpec | Flow]) -> list[_Node]:
    """Validate the whole tree (a parent before its children); raises InvalidInput before
    anything is written. The nodes' ids are '' until minted (unless given). A job without
    ``queue=`` is in its parent's queue; the root is in ``core``'s."""
    if not isinstance(parent, JobSpec):
        raise InvalidOption(f"a flow's parent must be a JobSpec, got {shown(parent)}")
    if isinstance(children, (str, bytes)) or not isinstance(children, Sequence) or not children:
        raise InvalidOption("enqueue_flow needs a non-empty list of children (JobSpec or Flow)")
    if parent.queue is not None and parent.queue != core.name:
        raise InvalidOption(
            f"the parent names queue {shown(parent.queue)}: a flow's parent is in the queue "
            f"enqueue_flow is called on ({core.name!r})"
        )
    nodes: list[_Node] = []

    def add(spec: JobSpec, up: int, kids: Sequence[JobSpec | Flow]) -> None:
        if spec.delay_ms or spec.key is not None:
            raise InvalidOption("delay_ms and key are not supported in a flow yet")
        queue, level = core.name, 0
        if up >= 0:
            queue, level = nodes[up].queue, nodes[up].level
            if spec.queue is not None and spec.queue != queue:
                queue, level = check_queue_name(spec.queue), level + 1
            if spec.on_failure not in POLICIES:
                raise InvalidOption(
                    f"on_failure must be one of {', '.join(POLICIES)}, got {shown(spec.on_failure)}"
                )
        g = core.job_group(
            spec.name, spec.payload, 0, spec.priority, spec.max_attempts, None, spec.id,
            spec.lane, spec.lifo,
        )  # fmt: skip
        me = len(nodes)
        group = [g[0], g[1], g[2], g[3], g[4], g[7], g[8]]
        nodes.append(_Node(group, up, spec.on_failure, queue, level=level))
        if len(nodes) > MAX_FLOW_CHILDREN + 1:
            raise InvalidOption(f"at most {MAX_FLOW_CHILDREN:,} jobs under one flow's parent")
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


def _ref(node: _Node, queue: str) -> str:
    """How a script of ``queue`` names ``node``: its id, with ``@<queue>`` when it is not
    in ``queue``."""
    return str(node.group[0]) if node.queue == queue else f"{node.group[0]}@{node.queue}"


def flow_steps(core: QueueCore, nodes: list[_Node], trace: str = "") -> list[Call[int]]:
    """The enqueue_flow calls of a planned tree whose ids are all set: one per queue and
    level (a level counts the queue changes from the root), in level order, so every
    parent's step runs before its children's (a child's end never arrives before its
    parent exists). A tree in one queue is one call. ``trace``: the producer span's W3C
    traceparent, stored in every row ('' none: docs/observability.md)."""
    steps: dict[tuple[int, str], list[_Node]] = {}
    for n in nodes:
        steps.setdefault((n.level, n.queue), []).append(n)
    calls: list[Call[int]] = []
    for (_, queue), members in sorted(steps.items(), key=lambda item: item[0][0]):
        k = QueueKeys.of(queue)
        args: list[Arg] = [k.prefix, core.options.events_maxlen, trace]
        for n in members:
            parent = "" if n.parent < 0 else _ref(nodes[n.parent], queue)
            kids = [nodes[i] for i in n.children]
            remote = " ".join(_ref(kid, queue) for kid in kids if kid.queue != queue)
            args += [*n.group, parent, n.policy, len(kids), remote]
        keys = [k.pending, k.location("waiting"), k.events, k.wake, k.meta]
        calls.append(Call("enqueue_flow", keys, args, int))
    return calls


def given_ids(nodes: list[_Node]) -> list[tuple[str, str]]:
    """The (row key, parent it must name) of each node whose id the caller gave (before
    minting): what :func:`judge_given` compares, so a flow spanning queues is refused
    before its first step when some of its given ids exist and some do not."""
    out = []
    for n in nodes:
        if n.group[0]:
            parent = "" if n.parent < 0 else _ref(nodes[n.parent], n.queue)
            out.append((QueueKeys.of(n.queue).job(str(n.group[0])), parent))
    return out


def given_packed(nodes: list[_Node]) -> list[tuple[str, str]]:
    """The (``packed`` key, id) of each node whose id the caller gave, in the order of
    :func:`given_ids`: a given id that waits packed (layout 3, no row) exists as well, a job
    without a parent."""
    return [(QueueKeys.of(n.queue).packed, str(n.group[0])) for n in nodes if n.group[0]]


def judge_given(given: list[tuple[str, str]], found: list[str | None], total: int) -> None:
    """Raise DuplicateConflict unless no given id exists, or every job of the flow exists
    with the parent given (a resend: its steps then admit nothing). ``found`` holds each
    given row's ``parent`` field ('' for a row without one, None for no row)."""
    pairs = list(zip(given, found, strict=True))
    there = [key for (key, _), have in pairs if have is not None]
    if not there:
        return
    clash = [key for (key, want), have in pairs if have not in (None, want)]
    if clash or len(there) != total:
        key = (clash or there)[0]
        raise DuplicateConflict(
            f"{key.rsplit(':', 1)[1]} exists (with another parent, or in a flow of another "
            "shape): nothing was written"
        )


def flow_ids(nodes: list[_Node], at: int = 0) -> FlowIds:
    """The tree of ids of planned (and minted) nodes, from node ``at``."""
    node = nodes[at]
    return FlowIds(str(node.group[0]), tuple(flow_ids(nodes, i) for i in node.children), node.queue)


def decode_children(statuses: dict[str, str], results: dict[str, str]) -> list[Child]:
    """``ctx.children()``: flow:<id> and flow:<id>:results read together, in id order. A
    child in another queue is named ``<id>@<queue>`` there."""
    out = []
    for name, status in sorted(statuses.items()):
        cid, _, queue = name.partition("@")
        result = json.loads(results[name]) if name in results else None
        out.append(Child(cid, status, result, queue or None))
    return out


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
