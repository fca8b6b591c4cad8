"""``emq flow QUEUE ID``: a flow's tree from job ID down, each node with its state
(docs/flows.md; docs/cli.md).

Reads only, one pipelined round trip per level of the tree: each node's row (``name``,
``state``, ``children_left``, ``on_failure``, ``last_error``), its ``flow:<id>`` HASH (its
children, each with the status the parent counted: ``''`` while unfinished) and its
``flow:<id>:results``; a job waiting packed (no row) shows the fields of its ``packed`` entry,
read with them (a row's own fields, if one was written beside it, win). A child in another
queue is named ``<id>@<queue>`` in its parent's HASH and is read from that queue's keys. A
child whose row is gone (completed and not kept) shows the status its parent counted. The
walk stops at :data:`MAX_NODES` nodes and says so.

Not a snapshot: each level is read at its own moment, so in a moving flow a parent's count
and its child's row may be one step apart. An unknown or invalid id, or an invalid queue
name, is one error line and exit code 2 (a job whose row is gone has no tree to show).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import click
import redis
from rich.text import Text
from rich.tree import Tree

from ..calls.call import packed_row
from ..errors import InvalidInput, JobNotFound
from ..model.checks import MAX_SHOWN, shown
from ..model.ids import check_id
from ..model.keys import QueueKeys, check_queue_name
from ..model.states import JobState
from .common import (
    connect,
    emit_json,
    json_option,
    line,
    one_line,
    resolve_url,
    say,
    show,
    url_option,
)

MAX_NODES = 10_000
ROW_FIELDS = ("name", "state", "children_left", "on_failure", "last_error")
STYLE: dict[str, str] = {
    JobState.PENDING: "cyan",
    JobState.ACTIVE: "blue",
    JobState.SCHEDULED: "magenta",
    JobState.WAITING: "yellow",
    JobState.COMPLETED: "green",
    JobState.DEAD: "red",
    "cancelled": "red",
}


@dataclass(slots=True)
class Node:
    """One job of the tree. ``status`` is what its parent counted (None for the root),
    ``row`` its row's fields (empty when the row is gone), ``omitted`` how many of its
    children were not walked (the node bound), ``invalid`` why its parent's field names no
    job (then nothing of it is read)."""

    id: str
    queue: str
    status: str | None = None
    result: Any = None
    row: dict[str, str] = field(default_factory=dict)
    children: list[Node] = field(default_factory=list)
    omitted: int = 0
    invalid: str = ""

    @property
    def state(self) -> str:
        if self.invalid:
            return "invalid"
        return self.row.get("state") or self.status or "gone"

    def as_dict(self) -> dict[str, Any]:
        left = self.row.get("children_left")
        return {
            "id": self.id,
            "queue": self.queue,
            "name": self.row.get("name"),
            "state": self.state,
            "row": bool(self.row),
            "status": self.status,
            "children_left": int(left) if left is not None and left.isdigit() else None,
            "on_failure": self.row.get("on_failure"),
            "last_error": self.row.get("last_error"),
            "result": self.result,
            "invalid": self.invalid or None,
            "children": [c.as_dict() for c in self.children],
            "children_omitted": self.omitted,
        }


def _result(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _children(node: Node, statuses: dict[str, str], results: dict[str, str]) -> list[Node]:
    """``node``'s children as its flow HASH names them, in field order (ids sort by age)."""
    out = []
    for key, status in sorted(statuses.items()):
        cid, _, other = key.partition("@")
        child = Node(cid, other or node.queue, status, _result(results.get(key)))
        try:
            check_id(cid)
            check_queue_name(child.queue)
        except InvalidInput as exc:
            child.invalid = f"field {shown(key)}: {exc}"
        out.append(child)
    return out


def walk(client: redis.Redis, queue: str, job_id: str, limit: int = MAX_NODES) -> Node:
    """The tree from ``job_id`` down, at most ``limit`` nodes (a node past the bound is
    counted in its parent's ``omitted``). Raises JobNotFound when the root's row is gone."""
    root = Node(check_id(job_id), QueueKeys.of(queue).queue)
    level, count, seen = [root], 1, {(root.queue, root.id)}
    while level:
        pipe = client.pipeline(transaction=False)
        for node in level:
            keys = QueueKeys(node.queue)  # validated when the node was made
            pipe.hmget(keys.job(node.id), ROW_FIELDS)
            pipe.hgetall(keys.flow(node.id))
            pipe.hgetall(keys.flow(node.id) + ":results")
            pipe.hget(keys.packed, node.id)
        replies = pipe.execute()
        below: list[Node] = []
        for i, node in enumerate(level):
            values, statuses, results, packed = replies[4 * i : 4 * i + 4]
            node.row = {f: v for f, v in zip(ROW_FIELDS, values, strict=True) if v is not None}
            if packed is not None:  # waiting packed: its entry's fields, under any row's
                entry = {f: v for f, v in packed_row(packed).items() if f in ROW_FIELDS}
                node.row = {**entry, **node.row}
            if node is root and not node.row:
                raise JobNotFound(
                    f"job {job_id} not found in queue {queue} (a completed job's row is "
                    "deleted unless kept)"
                )
            for child in _children(node, statuses, results):
                if count >= limit:
                    node.omitted += 1
                    continue
                if (child.queue, child.id) in seen and not child.invalid:
                    child.invalid = "already shown above (its records name it twice)"
                seen.add((child.queue, child.id))
                node.children.append(child)
                count += 1
                if not child.invalid:
                    below.append(child)
        level = below
    return root


def label(node: Node, home: str) -> Text:
    """One node's line: id (and queue when not its parent's), name, state, then what its
    row and its parent's count add."""
    state = node.state
    parts: list[object] = [(node.id, "bold")]
    if node.queue != home:
        parts.append(f"@{node.queue}")
    if node.row.get("name") is not None:
        parts.append(f" {node.row['name']}")
    parts += [" ", (state, STYLE.get(state, ""))]
    if node.invalid:
        parts.append(f" ({node.invalid})")
    elif not node.row:
        parts.append(" (row gone: as its parent counted it)" if node.status else " (row gone)")
    elif node.status and node.status != state:
        parts.append(f" (its parent counted it {node.status})")
    for f in ("children_left", "on_failure"):
        if node.row.get(f) is not None:
            parts.append(f"  {f}={node.row[f]}")
    if node.result is not None:
        text = json.dumps(node.result, ensure_ascii=False)
        parts.append(
            f"  result={text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + '...'}"
        )
    if state == JobState.DEAD and node.row.get("last_error"):
        parts.append(f"  last_error: {one_line(node.row['last_error'])}")
    return line(*parts)


def tree(node: Node, home: str, into: Tree | None = None) -> Tree:
    """The Rich tree of ``node`` and its descendants."""
    branch = Tree(label(node, home)) if into is None else into.add(label(node, home))
    for child in node.children:
        tree(child, node.queue, branch)
    if node.omitted:
        branch.add(line((f"... {node.omitted} more not shown", "yellow")))
    return branch


def count(node: Node) -> tuple[int, int]:
    """(nodes shown, children left out by the bound) in ``node``'s tree."""
    shown_n, omitted = 1, node.omitted
    for child in node.children:
        n, o = count(child)
        shown_n, omitted = shown_n + n, omitted + o
    return shown_n, omitted


@click.command()
@click.argument("queue")
@click.argument("job_id", metavar="ID")
@url_option
@json_option
def flow(queue: str, job_id: str, url: str | None, as_json: bool) -> None:
    """Show the flow tree of job ID on QUEUE: each job's state, and its children's."""
    with connect(resolve_url(url)) as client:
        root = walk(client, queue, job_id)
    nodes, omitted = count(root)
    if as_json:
        emit_json({"tree": root.as_dict(), "nodes": nodes, "cut": omitted > 0})
        return
    show(tree(root, root.queue))
    if omitted:
        say((f"cut at {MAX_NODES:,} nodes:", "yellow"), f" {omitted:,} more children (and "
            "what is below them) not shown")  # fmt: skip


def register(group: click.Group) -> None:
    group.add_command(flow)
