"""`emq flow QUEUE ID [--json]` through click's runner on real servers: a two-level tree as
it moves (children completed with their rows gone, dead, active), the JSON shape, refusals,
a child in another queue written by hand, and the node bound."""

from __future__ import annotations

import json
from typing import Any

import redis
from click.testing import CliRunner

from emq import Flow, JobSpec, Queue
from emq.cli.flow import count, walk
from emq.cli.main import cli
from emq.model.keys import QueueKeys

NODE_KEYS = {
    "id", "queue", "name", "state", "row", "status", "children_left", "on_failure",
    "last_error", "result", "invalid", "children", "children_omitted",
}  # fmt: skip


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def tree_json(url: str, queue: str, job_id: str) -> dict[str, Any]:
    code, out = run("flow", queue, job_id, "--url", url, "--json")
    assert code == 0, out
    doc: dict[str, Any] = json.loads(out)
    return doc


def by_id(node: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every node of a JSON tree by id, each checked for the documented keys."""
    assert set(node) == NODE_KEYS, set(node) ^ NODE_KEYS
    out = {node["id"]: node}
    for child in node["children"]:
        out |= by_id(child)
    return out


def test_a_two_level_tree_as_it_moves(url: str, qname: str, queue: Queue) -> None:
    ids = queue.enqueue_flow(
        JobSpec("combine"),
        [
            JobSpec("a"),
            JobSpec("b", on_failure="ignore"),
            Flow(JobSpec("sub"), [JobSpec("c"), JobSpec("d")]),
        ],
    )
    a, b, sub = ids.children
    c, d = sub.children
    leased = {j.id: j for j in queue.claim(10, 60_000)}
    assert set(leased) == {a.id, b.id, c.id, d.id}
    queue.complete_with_result(a.id, leased[a.id].token, {"n": 1}, result_ttl_ms=0)
    assert queue.fail(b.id, leased[b.id].token, "boom", retry=False) == "dead"
    queue.complete_with_result(c.id, leased[c.id].token, 3, result_ttl_ms=0)

    doc = tree_json(url, qname, ids.id)
    assert doc["nodes"] == 6 and doc["cut"] is False
    nodes = by_id(doc["tree"])
    root = doc["tree"]
    assert (root["name"], root["state"], root["status"]) == ("combine", "waiting", None)
    assert root["children_left"] == 1 and [n["id"] for n in root["children"]] == [
        a.id, b.id, sub.id,
    ]  # fmt: skip
    assert nodes[a.id] | {"children": []} == nodes[a.id]
    assert (nodes[a.id]["state"], nodes[a.id]["row"], nodes[a.id]["result"]) == (
        "completed", False, {"n": 1},
    )  # fmt: skip
    assert nodes[b.id]["state"] == "dead" and nodes[b.id]["status"] == "dead"
    assert nodes[b.id]["on_failure"] == "ignore" and nodes[b.id]["last_error"] == "boom"
    assert nodes[sub.id]["state"] == "waiting" and nodes[sub.id]["children_left"] == 1
    assert nodes[sub.id]["on_failure"] == "fail_parent" and nodes[sub.id]["status"] == ""
    assert (nodes[c.id]["state"], nodes[c.id]["result"]) == ("completed", 3)
    assert (nodes[d.id]["state"], nodes[d.id]["status"], nodes[d.id]["row"]) == ("active", "", True)
    assert all(n["queue"] == qname and n["invalid"] is None for n in nodes.values())

    code, out = run("flow", qname, ids.id, "--url", url)
    assert code == 0, out
    lines = out.splitlines()
    assert len(lines) == 6 and lines[0].startswith(f"{ids.id} combine waiting")
    assert "children_left=1" in lines[0]
    text = {i: next(ln for ln in lines if i in ln) for i in nodes}
    assert "completed (row gone: as its parent counted it)" in text[a.id]
    assert 'result={"n": 1}' in text[a.id]
    assert "b dead" in text[b.id] and "on_failure=ignore" in text[b.id]
    assert "last_error: boom" in text[b.id]
    assert "d active" in text[d.id] and text[d.id].index(d.id) > text[sub.id].index(sub.id)

    # d dies: sub fails (fail_parent), and the root with it
    assert queue.fail(d.id, leased[d.id].token, "bad d", retry=False) == "dead"
    nodes = by_id(tree_json(url, qname, ids.id)["tree"])
    assert nodes[sub.id]["state"] == "dead" and nodes[sub.id]["last_error"] == f"child {d.id} dead"
    assert nodes[ids.id]["state"] == "dead"
    assert nodes[ids.id]["last_error"] == f"child {sub.id} dead"
    code, out = run("flow", qname, ids.id, "--url", url)
    assert f"last_error: child {sub.id} dead" in out.splitlines()[0]


def test_unknown_or_invalid_ids_are_one_error_line(url: str, qname: str, queue: Queue) -> None:
    for job_id in (queue.new_id(), "nope"):
        for extra in ([], ["--json"]):
            result = CliRunner().invoke(cli, ["flow", qname, job_id, "--url", url, *extra])
            assert result.exit_code == 2, result.output
            assert result.output.startswith("error: ") and "Traceback" not in result.output
    result = CliRunner().invoke(cli, ["flow", qname, queue.new_id(), "--url", url])
    assert "not found" in result.output
    result = CliRunner().invoke(cli, ["flow", "bad{name}", queue.new_id(), "--url", url])
    assert result.exit_code == 2 and "queue name" in result.output


def test_a_child_in_another_queue_is_followed_into_its_keys(
    url: str, qname: str, queue: Queue, client: redis.Redis
) -> None:
    """The cross-queue records are written by hand: field '<id>@<q2>' in the parent's flow
    HASH, the child's row (and its own flow HASH) under q2's keys."""
    other = f"{qname}-2"
    ids = queue.enqueue_flow(JobSpec("root"), [JobSpec("here")])
    q2 = Queue(client, other)
    far = q2.enqueue("far", None)
    gone, grand = q2.new_id(), q2.new_id()  # completed children, their rows deleted
    loop = ids.id  # a corrupt record naming the root again
    k1, k2 = QueueKeys.of(qname), QueueKeys.of(other)
    client.hset(k2.job(far), mapping={"parent": f"{ids.id}@{qname}", "on_failure": "ignore"})
    client.hset(k1.flow(ids.id), mapping={f"{far}@{other}": "", f"{gone}@{other}": "completed"})
    client.hset(k1.flow(ids.id) + ":results", f"{gone}@{other}", '"done"')
    client.hincrby(k1.job(ids.id), "children_left", 2)
    client.hset(k2.flow(far), mapping={grand: "completed", f"{loop}@{qname}": ""})
    client.hset(k1.flow(ids.id), "bad@no{pe}", "")

    doc = tree_json(url, qname, ids.id)
    nodes = doc["tree"]["children"]
    assert len(nodes) == 4 and nodes[0]["id"] != "bad"
    by_key = {f"{n['id']}@{n['queue']}": n for n in nodes}
    far_n, gone_n = by_key[f"{far}@{other}"], by_key[f"{gone}@{other}"]
    assert (far_n["name"], far_n["state"], far_n["on_failure"]) == ("far", "pending", "ignore")
    assert (gone_n["state"], gone_n["row"], gone_n["result"]) == ("completed", False, "done")
    below = {n["id"]: n for n in far_n["children"]}
    assert below[grand]["queue"] == other and below[grand]["state"] == "completed"
    assert below[loop]["state"] == "invalid" and "already shown" in below[loop]["invalid"]
    assert by_key[f"{ids.children[0].id}@{qname}"]["state"] == "pending"
    bad = by_key["bad@no{pe}"]
    assert bad["state"] == "invalid" and bad["children"] == []

    code, out = run("flow", qname, ids.id, "--url", url)
    assert code == 0, out
    (line,) = [ln for ln in out.splitlines() if f"{far}@{other} far pending" in ln]
    assert "on_failure=ignore" in line
    assert any(f"{gone}@{other} completed" in ln for ln in out.splitlines())
    # read from q2: the child is in its own queue, its parent shown with its queue
    code, out = run("flow", other, far, "--url", url)
    assert code == 0 and out.splitlines()[0].startswith(f"{far} far pending"), out
    assert f"{loop}@{qname} root waiting" in out


def test_the_walk_stops_at_its_bound_and_says_so(
    url: str, qname: str, queue: Queue, client: redis.Redis
) -> None:
    ids = queue.enqueue_flow(JobSpec("p"), [Flow(JobSpec("s"), [JobSpec("x")] * 3)] * 2)
    root = walk(client, qname, ids.id, limit=4)
    assert count(root) == (4, 5)  # the root, both sub-parents, one leaf; 2 + 3 left out
    assert [len(s.children) for s in root.children] == [1, 0]
    assert [s.omitted for s in root.children] == [2, 3]
    assert count(walk(client, qname, ids.id)) == (9, 0)
