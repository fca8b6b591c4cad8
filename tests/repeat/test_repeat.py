"""Repeating jobs through the API, on Valkey and Redis: register, update, list, remove;
idempotent re-registration; ticks never fire before the server clock reaches them; the
tick's job id is the same in Python and Lua; lanes, priority and attempts of the jobs;
catch-up after a downtime; bad input writes nothing; the 4,096-schedule limit and slot reuse.
No timing asserts: a downtime is a start in the past, and every wait polls with a deadline."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import time
from typing import Any

import pytest
import redis

from emq import AsyncQueue, InvalidInput, Queue, Worker, WorkerOptions
from emq.calls import repeats as rep
from emq.errors import InvalidName, InvalidOption
from emq.lua.scripts import SCRIPTS, run
from emq.model.ids import EPOCH_MS, minted_at_ms, repeat_id
from emq.model.keys import QueueKeys

from ..support.lanes_check import check_lanes

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def snapshot(client: redis.Redis, qname: str) -> dict[str, Any]:
    """Every key of the queue with its type and contents (for "nothing was written")."""
    out: dict[str, Any] = {}
    for key in client.scan_iter(match=QueueKeys.of(qname).prefix + "*", count=1000):
        kind = client.type(key)
        value: Any = {
            "hash": lambda k: client.hgetall(k),
            "zset": lambda k: client.zrange(k, 0, -1, withscores=True),
            "stream": lambda k: client.xlen(k),
        }.get(kind, lambda k: client.dump(k))(key)
        out[key] = (kind, value)
    return out


def test_register_update_list_and_remove(queue: Queue, client: redis.Redis) -> None:
    before = server_ms(client)
    r = queue.repeat("report", "build", {"kind": "daily"}, cron="0 3 * * *", tz="Europe/Berlin")
    assert (r.key, r.name, r.payload, r.cron, r.tz, r.every_ms) == (
        "report", "build", {"kind": "daily"}, "0 3 * * *", "Europe/Berlin", None,
    )  # fmt: skip
    assert r.next_ms > before and r.next_ms - before <= 86_400_000 + 3_600_000
    assert (r.fired, r.skipped, r.last_id, r.catch_up) == (0, 0, None, "latest")
    assert r.max_attempts == queue.core.options.max_attempts  # the queue's, fixed now
    tick = queue.repeat("tick", "ping", every_ms=60_000)
    assert tick.next_ms % 60_000 == 0  # anchored at the epoch
    assert [x.key for x in queue.repeats()] == sorted(["report", "tick"], key=lambda k: {
        "report": r.next_ms, "tick": tick.next_ms}[k])  # fmt: skip
    changed = queue.repeat("tick", "ping", every_ms=60_000, priority=5, lane="ops")
    assert (changed.priority, changed.lane, changed.slot) == (5, "ops", tick.slot)
    assert queue.unrepeat("tick") is True
    assert queue.unrepeat("tick") is False
    assert [x.key for x in queue.repeats()] == ["report"]
    assert queue.unrepeat("nothing-here") is False


def test_the_same_spec_again_changes_nothing(queue: Queue, client: redis.Redis) -> None:
    k = queue.core.keys
    first = queue.repeat("r", "job", [1, 2], every_ms=3_600_000, catch_up="all")
    row = client.hgetall(k.repeat("r"))
    again = queue.repeat("r", "job", [1, 2], every_ms=3_600_000, catch_up="all")
    assert again == first
    assert client.hgetall(k.repeat("r")) == row  # not even its version or next tick
    other = queue.repeat("r", "job", [1, 2], every_ms=1_800_000, catch_up="all")
    assert client.hget(k.repeat("r"), "version") != row["version"]
    assert other.every_ms == 1_800_000 and other.slot == first.slot


def test_a_tick_never_fires_before_the_server_clock_reaches_it(
    queue: Queue, client: redis.Redis
) -> None:
    """Fire in a loop: every job's tick is at or before the server time read after the call
    that made it, and a tick handed to the script ahead of the server's clock is refused."""
    queue.repeat("fast", "ping", every_ms=20, catch_up="all")
    made: list[str] = []
    deadline = time.monotonic() + 30  # bounds a hang only
    while time.monotonic() < deadline:
        time.sleep(0.005)
        fired = queue.fire_repeats()
        after = server_ms(client)
        for job_id in fired.jobs:
            assert minted_at_ms(job_id) <= min(fired.now_ms, after)
        made += fired.jobs
        if len(made) >= 5:
            break
    assert len(made) >= 5
    ticks = [minted_at_ms(j) for j in made]
    assert ticks == list(range(ticks[0], ticks[-1] + 1, 20))  # contiguous, each once
    # a tick after the server's now, handed in by a firer whose clock runs ahead: 'early'
    k = queue.core.keys
    row = client.hgetall(k.repeat("fast"))
    nxt = int(row["next"])
    future = max(nxt, server_ms(client) + 3_600_000)
    future -= future % 20
    call = rep.fire_repeats(queue.core, [("fast", row["version"], nxt, future, future + 20, 0)])
    reply = call.decode(run(client, call.script, call.keys, call.args))
    assert reply.answers == {"early": 1} and reply.jobs == []
    assert client.hgetall(k.repeat("fast")) == row


LUA_ID = re.compile(r"local function tick_id.*?\nend\n", re.S)


def test_python_and_lua_build_the_same_tick_ids(client: redis.Redis) -> None:
    """The id function of fire_repeats.lua, run on the server over the whole 41-bit range of
    ticks and every slot edge, equals ids.repeat_id."""
    m = LUA_ID.search(SCRIPTS["fire_repeats"].source)
    assert m is not None
    src = "local EPOCH_MS = 1704067200000\n"
    src += "local B62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'\n"
    src += m[0] + "local out = {}\nfor i = 1, #ARGV, 2 do\n"
    src += "  out[#out + 1] = tick_id(tonumber(ARGV[i]), tonumber(ARGV[i + 1]))\nend\nreturn out"
    rng = random.Random(7)
    last = EPOCH_MS + (1 << 41) - 1
    cases = [(EPOCH_MS, 0), (EPOCH_MS, 4095), (last, 0), (last, 4095), (last - 1, 2047)]
    cases += [(rng.randint(EPOCH_MS, last), rng.randrange(4096)) for _ in range(2_000)]
    args = [x for case in cases for x in case]
    got = client.eval(src, 0, *args)
    assert got == [repeat_id(t, s) for t, s in cases]
    assert all(minted_at_ms(i) == t for i, (t, _) in zip(got, cases, strict=True))


def test_ticks_make_jobs_with_lane_priority_attempts_and_the_schedule_key(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    start = server_ms(client) - 10_000
    r = queue.repeat(
        "lane-job", "send", {"to": "ops"}, every_ms=1_000, lane="tenant-1", priority=-4,
        max_attempts=7, start_at_ms=start, catch_up="all",
    )  # fmt: skip
    fired = queue.fire_repeats()
    assert len(fired.jobs) >= 10
    assert fired.jobs == [repeat_id(start + n * 1_000, r.slot) for n in range(len(fired.jobs))]
    job = queue.job(fired.jobs[0])
    assert job is not None
    assert (job.state, job.lane, job.priority, job.max_attempts, job.payload) == (
        "pending", "tenant-1", -4, 7, {"to": "ops"},
    )  # fmt: skip
    assert job.fields["repeat"] == "lane-job"
    enq = [e for e in queue.events() if e.event == "enqueued"]
    assert [e.job for e in enq] == fired.jobs
    assert all(e.fields["repeat"] == "lane-job" for e in enq)
    claimed = queue.claim(3)
    assert [c.lane for c in claimed] == ["tenant-1"] * 3
    listed = next(x for x in queue.repeats() if x.key == "lane-job")
    assert (listed.fired, listed.last_id) == (len(fired.jobs), fired.jobs[-1])
    check_lanes(client, qname)


def test_catch_up_latest_fires_one_and_counts_the_rest_all_fires_every_missed_tick(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    start = server_ms(client) - 60_000  # "the fleet was down for a minute"
    queue.repeat("one", "j", every_ms=1_000, start_at_ms=start)
    queue.repeat("every", "j", every_ms=1_000, start_at_ms=start, catch_up="all")
    fired = queue.fire_repeats()
    one, every = (next(x for x in queue.repeats() if x.key == key) for key in ("one", "every"))
    assert one.fired == 1 and one.skipped >= 60
    assert one.last_tick_ms == start + one.skipped * 1_000
    assert every.fired >= 61 and every.skipped == 0
    assert len(fired.jobs) == one.fired + every.fired
    assert one.next_ms == one.last_tick_ms + 1_000 and every.next_ms == every.last_tick_ms + 1_000
    skipped = [e for e in queue.events() if e.event == "repeat_skipped"]
    assert [(e.job, e.fields) for e in skipped] == [
        (None, {"repeat": "one", "skipped": str(one.skipped), "tick": str(one.last_tick_ms)})
    ]
    again = queue.fire_repeats()  # only ticks that came due since, each fired once
    assert all(minted_at_ms(j) > every.last_tick_ms for j in again.jobs if j != one.last_id)
    check_lanes(client, qname)


def test_catch_up_all_fires_at_most_a_thousand_ticks_per_call(
    queue: Queue, client: redis.Redis
) -> None:
    start = server_ms(client) - 1_500 * 10
    queue.repeat("many", "j", every_ms=10, start_at_ms=start, catch_up="all")
    first = queue.fire_repeats()
    assert len(first.jobs) == 1_000 and first.next_ms is not None
    assert first.next_ms <= first.now_ms  # still due: the next call goes on at once
    second = queue.fire_repeats()
    ticks = [minted_at_ms(j) for j in first.jobs + second.jobs]
    assert ticks == list(range(start, start + 10 * len(ticks), 10))


BAD: list[tuple[dict[str, Any], type[InvalidInput], str]] = [
    ({"cron": "61 * * * *"}, InvalidOption, "cron"),
    ({"cron": "* * * *"}, InvalidOption, "five fields"),
    ({"cron": "0 0 30 2 *"}, InvalidOption, "cron"),
    ({"cron": "* * * * *", "tz": "Mars/Olympus"}, InvalidOption, "time zone"),
    ({"every_ms": 0}, InvalidOption, "every_ms"),
    ({"every_ms": -5}, InvalidOption, "every_ms"),
    ({"every_ms": 1.5}, InvalidOption, "every_ms"),
    ({"every_ms": 1000, "cron": "* * * * *"}, InvalidOption, "exactly one"),
    ({}, InvalidOption, "exactly one"),
    ({"every_ms": 1000, "catch_up": "some"}, InvalidOption, "catch_up"),
    ({"every_ms": 1000, "start_at_ms": 5}, InvalidOption, "start_at_ms"),
    ({"every_ms": 1000, "lane": "bad lane"}, InvalidInput, "lane"),
    ({"every_ms": 1000, "priority": 2**40}, InvalidOption, "priority"),
    ({"every_ms": 1000, "max_attempts": 0}, InvalidOption, "max_attempts"),
    ({"every_ms": 1000, "payload": {1, 2}}, InvalidInput, "JSON|serial"),
]


@pytest.mark.parametrize(("kw", "exc", "match"), BAD)
def test_bad_input_is_refused_and_writes_nothing(
    queue: Queue, client: redis.Redis, qname: str, kw: dict[str, Any], exc: type, match: str
) -> None:
    queue.repeat("kept", "j", every_ms=60_000)
    before = snapshot(client, qname)
    kw = dict(kw)
    payload = kw.pop("payload", None)
    with pytest.raises(exc, match=match):
        queue.repeat("new", "j", payload, **kw)
    with pytest.raises(exc, match=match):
        queue.repeat("kept", "j", payload, **kw)  # an update is refused the same way
    assert snapshot(client, qname) == before


@pytest.mark.parametrize("key", ["", "has space", "x" * 129, "é", None, 5])
def test_a_bad_schedule_key_is_refused(queue: Queue, client: redis.Redis, key: Any) -> None:
    with pytest.raises(InvalidName, match="schedule key"):
        queue.repeat(key, "j", every_ms=1000)
    with pytest.raises(InvalidName, match="schedule key"):
        queue.unrepeat(key)
    assert not list(client.scan_iter(match=queue.core.keys.prefix + "*"))


@pytest.mark.slow  # seconds: a scale limit
def test_4096_schedules_each_own_slot_the_next_refused_and_a_freed_slot_has_a_floor(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    k = queue.core.keys
    client.script_load(SCRIPTS["set_repeat"].source)  # raw EVALSHA below does not load it
    for i in range(rep.MAX_SCHEDULES):  # raw calls, pipelined: the API's read-back is slow
        if i % 512 == 0:
            pipe = client.pipeline(transaction=False)
        spec = rep.repeat_spec(queue.core, f"s{i}", "j", every_ms=3_600_000)
        call = rep.set_repeat(queue.core, spec, spec.first_tick(server_ms(client), 0))
        sha = SCRIPTS[call.script].sha  # execute_command: a cluster pipeline refuses .evalsha
        pipe.execute_command("EVALSHA", sha, len(call.keys), *call.keys, *call.args)
        if i % 512 == 511:
            pipe.execute()
    slots = client.hgetall(k.repeat_slots)
    assert len(slots) == rep.MAX_SCHEDULES and len(set(slots.values())) == rep.MAX_SCHEDULES
    before = snapshot(client, qname)
    with pytest.raises(InvalidOption, match="4096 repeating schedules"):
        queue.repeat("one-too-many", "j", every_ms=1000)
    assert snapshot(client, qname) == before
    freed = int(client.hget(k.repeat("s7"), "slot") or -1)
    assert queue.unrepeat("s7")
    removed_at = int(client.hget(k.repeat_slots, str(freed))[1:])  # type: ignore[index]
    start = server_ms(client) - 5_000  # ticks before the removal: the old schedule's time
    new = queue.repeat("late", "j", every_ms=1_000, start_at_ms=start, catch_up="all")
    assert new.slot == freed
    assert int(client.hget(k.repeat("late"), "floor") or 0) == removed_at
    fired = queue.fire_repeats()
    assert all(minted_at_ms(j) > removed_at for j in fired.jobs)
    assert fired.answers.get("floor", 0) >= 4  # the ticks at or below the floor: not fired


def test_obliterate_deletes_every_schedule(queue: Queue, client: redis.Redis) -> None:
    queue.repeat("a", "j", every_ms=1000)
    queue.repeat("b", "j", cron="*/5 * * * *")
    queue.unrepeat("b")
    queue.obliterate()
    assert not list(client.scan_iter(match=queue.core.keys.prefix + "*"))


async def test_the_async_twin(aqueue: AsyncQueue, client: redis.Redis) -> None:
    start = server_ms(client) - 3_000
    r = await aqueue.repeat("a", "j", {"x": 1}, every_ms=1_000, start_at_ms=start)
    fired = await aqueue.fire_repeats()
    assert fired.jobs == [repeat_id(minted_at_ms(fired.jobs[0]), r.slot)]
    assert [x.key for x in await aqueue.repeats()] == ["a"]
    assert await aqueue.unrepeat("a") is True
    await aqueue.close()


def test_cli_add_list_remove(url: str, qname: str, client: redis.Redis) -> None:
    from click.testing import CliRunner

    from emq.cli.main import cli

    def emq(*args: str) -> tuple[int, str, str]:
        r = CliRunner().invoke(cli, ["repeat", qname, *args, "--url", url])
        return r.exit_code, r.stdout, r.stderr

    berlin = ["--cron", "30 2 * * *", "--tz", "Europe/Berlin"]
    code, out, _ = emq("add", "nightly", "report", *berlin, "--payload", '{"a": 1}', "--lane",
                       "ops", "--json")  # fmt: skip
    assert code == 0, out
    added = json.loads(out)["repeat"]
    assert (added["key"], added["cron"], added["lane"], added["payload"]) == (
        "nightly", "30 2 * * *", "ops", {"a": 1},
    )  # fmt: skip
    code, out, _ = emq("add", "tick", "ping", "--every-ms", "60000", "--catch-up", "all")
    assert code == 0 and "tick" in out and "every 60000 ms" in out
    code, out, _ = emq("list", "--json")
    assert sorted(r["key"] for r in json.loads(out)["repeats"]) == ["nightly", "tick"]
    code, out, _ = emq("list")
    assert code == 0 and "nightly" in out and "cron 30 2 * * * (Europe/Berlin)" in out
    before = snapshot(client, qname)
    for bad in (["--every-ms", "0"], ["--cron", "61 * * * *"], ["--cron", "* * * * *",
                "--tz", "Nowhere/Else"], []):  # fmt: skip
        code, _, err = emq("add", "bad", "j", *bad)
        assert code == 2 and err.startswith("error:") and "Traceback" not in err, err
    assert snapshot(client, qname) == before
    code, out, _ = emq("remove", "tick", "--json")
    assert (code, json.loads(out)) == (0, {"queue": qname, "key": "tick", "removed": True})
    code, out, err = emq("remove", "tick")
    assert code == 2 and out == "" and err.startswith("error: no repeating schedule 'tick'")


def test_a_schedule_broken_by_hand_is_skipped_and_named_the_others_fire(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    start = server_ms(client) - 5_000
    queue.repeat("good", "j", every_ms=1_000, start_at_ms=start)
    queue.repeat("bad", "j", cron="* * * * *", start_at_ms=start)
    client.hset(QueueKeys.of(qname).repeat("bad"), "tz", "Nowhere/Bogus")  # by hand
    client.zadd(QueueKeys.of(qname).repeats, {"bad": start})  # and due now
    fired = queue.fire_repeats()
    assert fired.broken == ["bad"]
    assert len(fired.jobs) == 1 and next(x for x in queue.repeats() if x.key == "good").fired == 1
    check_lanes(client, qname)


async def test_a_worker_logs_a_broken_schedule_once_and_keeps_firing_the_others(
    queue: Queue, client: redis.Redis, qname: str, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []
    w = Worker(queue, options=WorkerOptions(concurrency=1, stalled_interval_ms=200))

    @w.handler("j")
    async def j(payload: Any) -> None:
        ran.append("j")

    queue.repeat("good", "j", every_ms=100)
    queue.repeat("bad", "j", cron="* * * * *")
    client.hset(QueueKeys.of(qname).repeat("bad"), "cron", "not a cron")
    client.zadd(QueueKeys.of(qname).repeats, {"bad": server_ms(client) - 1})
    with caplog.at_level(logging.ERROR, logger="emq.worker"):
        task = asyncio.create_task(w.run())
        deadline = time.monotonic() + 60
        while len(ran) < 5 and time.monotonic() < deadline and not task.done():
            await asyncio.sleep(0.05)
        w.stop()
        await asyncio.wait_for(task, 60)  # run() returns: no component died
    assert len(ran) >= 5
    named = [r for r in caplog.records if getattr(r, "emq", {}).get("event") == "repeat_broken"]
    assert [r.emq["key"] for r in named] == ["bad"]  # type: ignore[attr-defined]


async def test_the_maintenance_task_sleeps_until_the_next_tick_not_the_next_beat(
    aqueue: AsyncQueue,
) -> None:
    """What lets one worker fire each tick of a 200 ms schedule although its beat runs once
    a second: after a round of firing, the task's sleep is the time to the next tick by the
    server's clock (read from the reply), never a whole beat. No clock is raced here."""
    from emq.worker.repeat_beat import SLACK_S, RepeatBeat

    beat = RepeatBeat([aqueue], logging.getLogger("test"))
    assert beat.wait_s() == 0.0  # nothing known yet: fire at once
    await aqueue.repeat("fast", "tick", every_ms=200)
    await beat.fire(everyone=True)
    assert 0.0 <= beat.wait_s() <= 0.2 + SLACK_S
    await aqueue.unrepeat("fast")
    await aqueue.close()
