"""`emq lanes`, `emq limits`, `emq pause/resume --lane` and the limits in `emq stats`, driven
through click's runner against real servers (docs/lanes.md, docs/cli.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from emq import JobSpec, Queue
from emq.cli.main import cli

from ..support.lanes_check import check_lanes

DAY_MS = 86_400_000  # a rate of 1 a day: the lane's next slot is surely still ahead


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def run_json(*args: str) -> Any:
    code, out = run(*args, "--json")
    assert code == 0, out
    return json.loads(out)


def by_name(listing: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {lane["name"]: lane for lane in listing["lanes"]}


def test_lanes_lists_every_lane_and_the_queue_limits(
    url: str, qname: str, queue: Queue, client: redis.Redis
) -> None:
    queue.set_limits(concurrency=10, lane_rate=(5, 1000))
    queue.set_limits(lane="t1", concurrency=2, rate=(1, DAY_MS), weight=3)
    queue.enqueue_many([JobSpec("j", i, lane="t1") for i in range(3)])
    queue.enqueue_many([JobSpec("j", i, lane="t2") for i in range(2)] + [("j", 0)])
    got = queue.claim(10)
    assert sorted(j.lane or "default" for j in got) == ["default", "t1", "t2", "t2"]

    listing = run_json("lanes", qname, "--url", url)
    assert listing["queue"] == qname
    assert listing["limits"] | {"active": 4} == {
        "concurrency": 10, "rate": None, "lane_concurrency": 0, "lane_rate": [5, 1000],
        "paused": False, "held_until_ms": 0, "limited_until_ms": 0, "active": 4,
    }  # fmt: skip
    lanes = by_name(listing)
    assert list(lanes) == ["default", "t1", "t2"]  # the default lane first, then by name
    t1, t2 = lanes["t1"], lanes["t2"]
    assert (t1["pending"], t1["active"], t1["weight"], t1["concurrency"]) == (2, 1, 3, 2)
    assert t1["rate"] == [1, DAY_MS] and t1["next_in_ms"] > 0  # its one claim a day is spent
    assert t1["next_at_ms"] == listing["now_ms"] + t1["next_in_ms"]
    assert (t2["pending"], t2["active"], t2["rate"], t2["next_in_ms"]) == (0, 2, None, None)

    code, out = run("lanes", qname, "--url", url)
    assert code == 0 and f"{qname} / lanes" in out
    t1_line = next(line for line in out.splitlines() if "│ t1 " in line)
    assert f"1/{DAY_MS}" in t1_line and re.search(r"\d+ ms", t1_line)
    t2_line = next(line for line in out.splitlines() if "│ t2 " in line)
    assert "5/1000*" in t2_line and "now" in t2_line  # the queue's per-lane default rate
    assert "* the queue's per-lane default" in out
    assert f"{qname}: 4 leased, concurrency 10, rate -, lane concurrency -, lane rate 5/1000" in out
    check_lanes(client, qname)


def test_lanes_of_a_queue_with_none(url: str, qname: str) -> None:
    listing = run_json("lanes", qname, "--url", url)
    assert listing["lanes"] == [] and listing["limits"]["concurrency"] == 0
    code, out = run("lanes", qname, "--url", url)
    assert code == 0 and "no lanes with waiting or leased jobs" in out
    assert f"{qname}: 0 leased, concurrency -, rate -" in out


def test_limits_merge_the_flags_given_into_the_queue_limits(
    url: str, qname: str, queue: Queue
) -> None:
    shown = run_json("limits", qname, "--url", url)
    assert shown["lane"] is None and shown["changed"] is False
    assert shown["limits"]["concurrency"] == 0 and shown["limits"]["rate"] is None

    run_json("limits", qname, "--concurrency", "5", "--url", url)
    after = run_json("limits", qname, "--rate", "50/1000", "--url", url)  # concurrency kept
    assert after["changed"] is True
    assert (after["limits"]["concurrency"], after["limits"]["rate"]) == (5, [50, 1000])
    run_json("limits", qname, "--lane-concurrency", "2", "--lane-rate", "10/500", "--url", url)
    limits = queue.limits()
    assert (limits.concurrency, limits.rate) == (5, (50, 1000))
    assert (limits.lane_concurrency, limits.lane_rate) == (2, (10, 500))

    code, out = run("limits", qname, "--url", url)
    assert code == 0
    assert (
        f"{qname}: 0 leased, concurrency 5, rate 50/1000, lane concurrency 2, lane rate 10/500"
        in out
    )

    run_json("limits", qname, "--rate", "0", "--url", url)  # 0 clears one limit only
    limits = queue.limits()
    assert (limits.concurrency, limits.rate, limits.lane_concurrency) == (5, None, 2)
    run_json("limits", qname, "--concurrency", "0", "--lane-rate", "0", "--url", url)
    limits = queue.limits()
    assert (limits.concurrency, limits.rate, limits.lane_concurrency, limits.lane_rate) == (
        0, None, 2, None,
    )  # fmt: skip


def test_limits_of_one_lane_merge_and_keep_its_pause(url: str, qname: str, queue: Queue) -> None:
    queue.enqueue("j", lane="t1")
    run_json("limits", qname, "--lane", "t1", "--weight", "3", "--url", url)
    run_json("limits", qname, "--lane", "t1", "--rate", "7/100", "--url", url)
    queue.pause("t1")
    after = run_json("limits", qname, "--lane", "t1", "--concurrency", "4", "--url", url)
    assert after["lane"] == "t1"
    lane = after["limits"]
    assert (lane["weight"], lane["rate"], lane["concurrency"], lane["paused"]) == (
        3, [7, 100], 4, True,
    )  # fmt: skip
    assert lane["pending"] == 1

    run_json("limits", qname, "--lane", "t1", "--rate", "0", "--url", url)
    (t1,) = [lane for lane in queue.lanes() if lane.name == "t1"]
    assert (t1.weight, t1.concurrency, t1.rate, t1.paused) == (3, 4, None, True)

    queue.set_limits(lane_concurrency=2)
    code, out = run("limits", qname, "--lane", "t1", "--url", url)
    assert code == 0
    assert f"{qname} lane t1: weight 3, concurrency 4, rate -, 1 pending, 0 leased, paused" in out
    code, out = run("limits", qname, "--lane", "fresh", "--url", url)  # no jobs, no settings
    assert "lane fresh: weight 1, concurrency 2 (the queue's per-lane default), rate -" in out
    default = run_json("limits", qname, "--lane", "default", "--weight", "2", "--url", url)
    assert default["lane"] == "default" and default["limits"]["weight"] == 2


def test_pause_and_resume_one_lane(url: str, qname: str, queue: Queue, client: redis.Redis) -> None:
    queue.enqueue_many([JobSpec("j", i, lane="a") for i in range(2)])
    queue.enqueue_many([JobSpec("j", i, lane="b") for i in range(2)])
    paused = run_json("pause", qname, "--lane", "a", "--url", url)
    assert paused == {"queue": qname, "lane": "a", "paused": True, "changed": True}
    code, out = run("pause", qname, "--lane", "a", "--url", url)
    assert code == 0 and f"{qname} lane a: paused (was already paused)" in out
    assert by_name(run_json("lanes", qname, "--url", url))["a"]["paused"] is True
    assert queue.limits().paused is False  # the queue itself runs on
    assert [j.lane for j in queue.claim(10)] == ["b", "b"]

    resumed = run_json("resume", qname, "--lane", "a", "--url", url)
    assert resumed == {"queue": qname, "lane": "a", "paused": False, "changed": True}
    assert [j.lane for j in queue.claim(10)] == ["a", "a"]
    assert run_json("pause", qname, "--url", url)["lane"] is None  # the whole queue, as before
    assert queue.limits().paused is True
    check_lanes(client, qname)


def test_stats_shows_the_limits_when_any_are_set(url: str, qname: str, queue: Queue) -> None:
    queue.enqueue("j")
    code, out = run("stats", qname, "--url", url)
    assert code == 0 and "limits:" not in out
    counts = run_json("stats", qname, "--url", url)
    assert counts["pending"] == 1 and counts["limits"]["concurrency"] == 0  # a key added

    queue.set_limits(concurrency=3, rate=(10, 1000), lane_concurrency=1)
    code, out = run("stats", qname, "--url", url)
    assert f"{qname} limits: concurrency 3, rate 10/1000, lane concurrency 1" in out
    everything = run_json("stats", "--url", url)
    assert everything[qname]["limits"]["rate"] == [10, 1000]
    assert everything[qname]["pending"] == 1
    queue.pause()
    code, out = run("stats", qname, "--url", url)
    assert "lane concurrency 1, paused" in out


@pytest.mark.parametrize(
    "args,needle",
    [
        (["limits", "QUEUE", "--rate", "50"], "--rate must be MAX/PER_MS"),
        (["limits", "QUEUE", "--rate", "0/10"], "--rate max must be at least 1"),
        (["limits", "QUEUE", "--rate", "10/0"], "--rate per_ms must be within"),
        (["limits", "QUEUE", "--lane-rate", "fast"], "--lane-rate must be MAX/PER_MS"),
        (["limits", "QUEUE", "--concurrency", "-1"], "--concurrency must be within"),
        (["limits", "QUEUE", "--lane", "x", "--weight", "0"], "--weight must be within 1..1000"),
        (["limits", "QUEUE", "--weight", "2"], "give --lane with it"),
        (["limits", "QUEUE", "--lane", "x", "--lane-concurrency", "1"], "without --lane"),
        (["limits", "QUEUE", "--lane", "bad lane"], "lane name 'bad lane' is invalid"),
        (["limits", "QUEUE", "--lane", "x" * 5000], "5000 characters"),
        (["pause", "QUEUE", "--lane", "bad/lane"], "lane name"),
        (["resume", "QUEUE", "--lane", ""], "lane name"),
        (["lanes", "bad queue"], "queue name"),
    ],
)
def test_bad_input_is_one_clear_line_and_changes_nothing(
    url: str, qname: str, queue: Queue, args: list[str], needle: str
) -> None:
    queue.set_limits(concurrency=7)
    args = [qname if a == "QUEUE" else a for a in args]
    result = CliRunner().invoke(cli, [*args, "--url", url])
    assert result.exit_code == 2, result.output
    assert needle in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert queue.limits().concurrency == 7 and not queue.limits().paused


def test_a_flag_that_is_refused_writes_none_of_the_others(
    url: str, qname: str, queue: Queue
) -> None:
    queue.set_limits(concurrency=7)
    result = CliRunner().invoke(
        cli, ["limits", qname, "--concurrency", "1", "--rate", "50", "--url", url]
    )
    assert result.exit_code == 2 and "--rate" in result.output
    assert queue.limits().concurrency == 7


def test_the_readme_lanes_example_runs(url: str, qname: str) -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    (code,) = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "lane=" in b]
    code = code.replace("redis://127.0.0.1:6379/0", url).replace('"emails"', repr(qname))
    scope: dict[str, Any] = {}
    exec(compile(code, "README.md", "exec"), scope)
    q: Queue = scope["q"]
    (lane,) = [lane for lane in q.lanes() if lane.name == "tenant-42"]
    assert (lane.weight, lane.pending) == (3, 1)
    assert (q.limits().lane_concurrency, q.limits().lane_rate) == (2, (50, 1000))
    q.close()


def test_enqueue_puts_a_job_in_its_lane_and_refuses_a_bad_lane(
    url: str, qname: str, queue: Queue, client: redis.Redis
) -> None:
    made = run_json("enqueue", qname, "send", '{"to": 1}', "--lane", "tenant-7", "--url", url)
    job = queue.job(made["id"])
    assert job is not None and job.lane == "tenant-7"
    assert [lane.name for lane in queue.lanes()] == ["tenant-7"]
    code, out = run("enqueue", qname, "send", "1", "--lane", "no spaces", "--url", url)
    assert code == 2 and "lane name" in out and "Traceback" not in out
    assert queue.counts()["pending"] == 1
    check_lanes(client, qname)
